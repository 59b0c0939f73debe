//! What every section of the configuration shares: the error that reports a
//! configuration unusable ([`ConfigError`]), the collector of problem
//! messages each check pushes to ([`Problems`]), and the small checks many
//! tables use (names, dialects, Unix socket paths, "did you mean" hints).
//! It imports none of the sections; [`super::validate`] assembles them.

use std::fmt::Display;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use crate::dialect::Dialect;

/// Longest Unix socket path: `sun_path` is 108 bytes including the NUL.
const MAX_SOCKET_PATH_BYTES: usize = 107;

/// Why a configuration could not be used. Each variant holds one message per
/// problem, and `Display` prints them one per line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The configuration could not be read or deserialized: missing file,
    /// TOML syntax, unknown key, wrongly typed value.
    #[error("{}", .0.join("\n"))]
    Load(Vec<String>),
    /// The configuration was read but its values are inconsistent or out of
    /// range.
    #[error("{}", .0.join("\n"))]
    Invalid(Vec<String>),
}

/// Collects problem messages, each prefixed with the key path it is about.
#[derive(Debug, Default)]
pub(super) struct Problems(Vec<String>);

/// A required `socket` key: `~` expanded and checked against `sun_path`.
pub(super) fn socket_path(key: &str, socket: Option<&str>, p: &mut Problems) -> Option<PathBuf> {
    let Some(text) = socket else {
        p.at(key, "socket", "required for dialect ndjson");
        return None;
    };
    let path = match text.strip_prefix('~') {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => match std::env::var_os("HOME") {
            Some(mut home) => {
                home.push(rest);
                PathBuf::from(home)
            }
            None => {
                p.at(key, "socket", "starts with ~ but $HOME is not set");
                return None;
            }
        },
        _ => PathBuf::from(text),
    };
    let len = path.as_os_str().len();
    if text.is_empty() {
        p.at(key, "socket", "must not be empty");
    } else if len > MAX_SOCKET_PATH_BYTES {
        let max = MAX_SOCKET_PATH_BYTES;
        let msg = format!("{len} bytes after ~ expansion; at most {max} fit in sun_path");
        p.at(key, "socket", msg);
    } else {
        return Some(path);
    }
    None
}

pub(super) fn dialect(key: &str, name: Option<&str>, p: &mut Problems) -> Option<Dialect> {
    match name.map(str::parse::<Dialect>) {
        None => p.at(key, "dialect", "required"),
        Some(Err(e)) => p.at(key, "dialect", e),
        Some(Ok(d)) => return Some(d),
    }
    None
}

/// Names appear in logs, metric labels and env variable names.
pub(super) fn check_name(key: &str, name: &str, p: &mut Problems) {
    let ok = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    if name.is_empty() || !name.chars().all(ok) {
        p.push(key, "name must be ASCII letters, digits, '-' or '_'");
    }
}

/// The candidate closest to `word` if it is close enough to be a likely
/// misspelling, for "did you mean" hints (Jaro-Winkler similarity, as
/// clap uses for subcommands).
pub(super) fn closest<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    /// Below this similarity a suggestion is more confusing than none.
    const LIKELY: f64 = 0.8;
    let lower = word.to_ascii_lowercase();
    candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(&lower, &c.to_ascii_lowercase()), c))
        .filter(|(score, _)| *score >= LIKELY)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

// === impl ConfigError ===

impl ConfigError {
    /// A load error with a single message (e.g. an unreadable file).
    pub fn load(message: impl Into<String>) -> Self {
        Self::Load(vec![message.into()])
    }

    /// Every problem, one message each.
    pub fn problems(&self) -> &[String] {
        match self {
            Self::Load(problems) | Self::Invalid(problems) => problems,
        }
    }
}

impl From<figment::Error> for ConfigError {
    /// Lists every error figment collected, not just the first.
    fn from(error: figment::Error) -> Self {
        Self::Load(error.into_iter().map(|e| e.to_string()).collect())
    }
}

// === impl Problems ===

impl Problems {
    pub(super) fn push(&mut self, key: impl Display, message: impl Display) {
        self.0.push(format!("{key}: {message}"));
    }

    pub(super) fn at(&mut self, key: &str, field: &str, message: impl Display) {
        self.0.push(format!("{key}.{field}: {message}"));
    }

    /// One of a closed set of names.
    pub(super) fn choice<T: Copy>(
        &mut self,
        key: &str,
        field: &str,
        v: &str,
        of: &[(&str, T)],
    ) -> Option<T> {
        let found = of.iter().find(|(name, _)| *name == v).map(|(_, t)| *t);
        if found.is_none() {
            let names: Vec<String> = of.iter().map(|(name, _)| format!("{name:?}")).collect();
            let mut msg = format!(
                "unknown value {v:?} (expected one of: {})",
                names.join(", ")
            );
            if let Some(near) = closest(v, of.iter().map(|(name, _)| *name)) {
                msg.push_str(&format!("; did you mean {near:?}?"));
            }
            self.at(key, field, msg);
        }
        found
    }

    pub(super) fn nonzero(&mut self, key: &str, field: &str, value: usize) -> Option<NonZeroUsize> {
        let nz = NonZeroUsize::new(value);
        if nz.is_none() {
            self.at(key, field, "must be greater than 0");
        }
        nz
    }

    pub(super) fn millis(&mut self, key: &str, field: &str, value: u64) -> Duration {
        if value == 0 {
            self.at(key, field, "must be greater than 0");
        }
        Duration::from_millis(value)
    }

    /// A problem with `field` when `bad`.
    pub(super) fn at_if(&mut self, key: &str, field: &str, bad: bool, message: impl Display) {
        if bad {
            self.at(key, field, message);
        }
    }

    /// Problems found so far.
    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    /// Every message collected, in the order found.
    pub(super) fn into_messages(self) -> Vec<String> {
        self.0
    }

    pub(super) fn not_allowed(&mut self, key: &str, field: &str, set: bool, d: Dialect) {
        if set {
            self.at(key, field, format!("not allowed for dialect {d}"));
        }
    }
}
