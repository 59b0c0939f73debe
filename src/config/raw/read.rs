//! Reading a configuration that has mistakes, so that all of them are
//! reported in one run.
//!
//! serde stops at the first error of a struct: two misspelt keys in one
//! listener would show only the first, and a semantic problem elsewhere
//! none at all until the keys are fixed. So the merged document is read as
//! a generic [`Value`] and deserialized again and again: each error is
//! recorded, the key it names is taken out, and the next pass finds the
//! next one. What is left deserializes into a [`RawConfig`] that
//! validation can still check, minus the keys already reported.

use figment::error::Kind;
use figment::value::{Dict, Value};
use figment::Figment;

use super::RawConfig;
use crate::config::problems::{closest, ConfigError};

/// Arrays of tables: a mistake takes out its element, not the array.
const TABLE_ARRAYS: [&str; 2] = ["routes", "persistent_topics"];

/// At most this many load errors are collected (each pass finds one); a
/// file with more gets the first ones listed.
const MAX_LOAD_ERRORS: usize = 1000;

/// A configuration read despite its mistakes.
#[derive(Debug)]
pub(crate) struct Read {
    /// What deserialized once the refused keys were taken out.
    pub(crate) raw: RawConfig,
    /// One message per unknown key or wrongly typed value.
    pub(crate) problems: Vec<String>,
    /// The keys taken out, as `listeners.a.dialect` or `routes[0]`:
    /// validation's complaints about them (now missing) would be noise.
    pub(crate) refused: Vec<String>,
}

/// Reads `figment`, collecting every load error.
///
/// # Errors
///
/// [`ConfigError::Load`] when the document itself cannot be read (missing
/// file, TOML syntax) or a mistake cannot be taken out.
pub(crate) fn read(figment: &Figment) -> Result<Read, ConfigError> {
    let mut value = figment.find_value("")?;
    let mut problems = Vec::new();
    let mut refused = Vec::new();
    while problems.len() < MAX_LOAD_ERRORS {
        let error = match value.deserialize::<RawConfig>() {
            Ok(raw) => {
                return Ok(Read {
                    raw,
                    problems,
                    refused,
                })
            }
            Err(e) => e,
        };
        let path = removable(&value, &error.path);
        let key = render_key(&value, &path);
        problems.push(message(figment, &value, &error));
        if path.is_empty() || !take_out(&mut value, &path) {
            break;
        }
        refused.push(key);
    }
    Err(ConfigError::Load(problems))
}

/// The key to take out for an error at `path`: the key itself, except
/// inside an array, where the whole array goes (its element would only
/// fail again), unless the array is one of [`TABLE_ARRAYS`], whose
/// elements are tables.
fn removable(value: &Value, path: &[String]) -> Vec<String> {
    let mut at = value;
    for (i, key) in path.iter().enumerate() {
        at = match at {
            Value::Dict(_, dict) => match dict.get(key) {
                Some(v) => v,
                None => return path[..=i].to_vec(),
            },
            Value::Array(_, items) if i == 1 && TABLE_ARRAYS.contains(&path[0].as_str()) => {
                match key.parse::<usize>().ok().and_then(|n| items.get(n)) {
                    Some(v) => v,
                    None => return path[..i].to_vec(),
                }
            }
            _ => return path[..i].to_vec(),
        };
    }
    path.to_vec()
}

/// Takes the key at `path` out of `value`; an element of a table array
/// becomes an empty table so that the later ones keep their index.
fn take_out(value: &mut Value, path: &[String]) -> bool {
    let Some((last, parents)) = path.split_last() else {
        return false;
    };
    let mut at = value;
    for key in parents {
        let next = match at {
            Value::Dict(_, dict) => dict.get_mut(key),
            Value::Array(_, items) => key.parse::<usize>().ok().and_then(|i| items.get_mut(i)),
            _ => None,
        };
        let Some(next) = next else {
            return false;
        };
        at = next;
    }
    match at {
        Value::Dict(_, dict) => dict.remove(last).is_some(),
        Value::Array(tag, items) => match last.parse::<usize>().ok().and_then(|i| items.get_mut(i))
        {
            Some(item) => {
                *item = Value::Dict(*tag, Dict::new());
                true
            }
            None => false,
        },
        _ => false,
    }
}

/// `path` as written in problem messages: `listeners.a.dialect`,
/// `routes[0].via`.
fn render_key(value: &Value, path: &[String]) -> String {
    let mut out = String::new();
    let mut at = Some(value);
    for key in path {
        match at {
            Some(Value::Array(_, items)) => {
                out.push_str(&format!("[{key}]"));
                at = key.parse::<usize>().ok().and_then(|i| items.get(i));
            }
            other => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
                at = match other {
                    Some(Value::Dict(_, dict)) => dict.get(key),
                    _ => None,
                };
            }
        }
    }
    out
}

/// `key: what is wrong (where it was set)`.
fn message(figment: &Figment, value: &Value, error: &figment::Error) -> String {
    let key = render_key(value, &error.path);
    // The source of the nearest enclosing key that has one (array
    // elements and names containing '.' cannot be looked up).
    let source = (0..=error.path.len()).rev().find_map(|n| {
        let dotted = error.path[..n].join(".");
        let md = figment.find_metadata(&dotted)?;
        Some(match &md.source {
            Some(source) => format!(" ({} {source})", md.name),
            None => format!(" ({})", md.name),
        })
    });
    let source = source.unwrap_or_default();
    let kind = kind_text(error);
    if key.is_empty() {
        format!("{kind}{source}")
    } else {
        format!("{key}: {kind}{source}")
    }
}

/// What is wrong, with a "did you mean" for a misspelt key, and without
/// the value when the key holds a secret (a token given the wrong type
/// must not be printed).
fn kind_text(error: &figment::Error) -> String {
    let secret = error
        .path
        .last()
        .is_some_and(|key| crate::redact::is_secret_key(key));
    match &error.kind {
        Kind::InvalidType(_, expected) | Kind::InvalidValue(_, expected) if secret => {
            format!("invalid value (not shown: the key holds a secret), expected {expected}")
        }
        Kind::UnknownField(field, expected) => match closest(field, expected.iter().copied()) {
            Some(near) => format!("{}; did you mean {near:?}?", error.kind),
            None => error.kind.to_string(),
        },
        kind => kind.to_string(),
    }
}
