//! [`Envelope`]: the members of one holon envelope, read from its text in
//! one pass without a map: the six keys it may carry, borrowed as slices of
//! the text, and the unknown key to name in an error, if any.
//!
//! The pass is the JSON-RPC dialect's validating scan
//! ([`crate::dialect::jsonrpc::scan`]) when the text is an object of those
//! keys only, each once, none with an escape in its name: then a map would
//! read the same members. Any other text (an unknown or repeated key, an
//! escaped name, or no JSON object at all) is read by serde_json as a map,
//! which keeps a repeated key's last value and names the unknown key.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::dialect::jsonrpc::scan::{self, Members};

/// One holon envelope's members. A key given twice keeps its last value,
/// as a JSON object read into a map does.
#[derive(Debug, Default)]
pub(super) struct Envelope<'a> {
    /// The six keys, as slices of the text (`unknown` of it unused).
    pub members: Members<'a>,
    /// The first unknown key in alphabetical order (the one an error
    /// names); its value is checked as JSON and passed over.
    pub unknown: Option<String>,
}

impl<'a> Envelope<'a> {
    /// The envelope `text` holds; `None` when it is no JSON object.
    pub(super) fn read(text: &'a str) -> Option<Self> {
        match scan::object(text) {
            Ok(members) if !members.unknown => Some(Envelope {
                members,
                unknown: None,
            }),
            _ => serde_json::from_str(text).ok(),
        }
    }
}

impl<'de> Deserialize<'de> for Envelope<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(EnvelopeVisitor)
    }
}

struct EnvelopeVisitor;

impl<'de> Visitor<'de> for EnvelopeVisitor {
    type Value = Envelope<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut env = Envelope::default();
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            let m = &mut env.members;
            let slot = match key.as_ref() {
                "jsonrpc" => &mut m.jsonrpc,
                "id" => &mut m.id,
                "method" => &mut m.method,
                "params" => &mut m.params,
                "result" => &mut m.result,
                "error" => &mut m.error,
                other => {
                    map.next_value::<IgnoredAny>()?;
                    if env.unknown.as_deref().is_none_or(|first| other < first) {
                        env.unknown = Some(other.to_owned());
                    }
                    continue;
                }
            };
            *slot = Some(map.next_value::<&'de RawValue>()?.get());
        }
        Ok(env)
    }
}

/// An object key, borrowed from the text unless it holds escapes.
#[derive(Deserialize)]
struct Key<'a>(#[serde(borrow)] Cow<'a, str>);

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::collections::BTreeMap;

    use proptest::prelude::*;
    use serde_json::value::RawValue;

    use super::Envelope;

    const KEYS: [&str; 6] = ["jsonrpc", "id", "method", "params", "result", "error"];

    fn object() -> impl Strategy<Value = String> {
        let key = prop::sample::select(vec![
            "jsonrpc",
            "id",
            "method",
            "params",
            "result",
            "error",
            "extra",
            "zeta",
            "a",
            "\\u0069d",
            "m\\u0065thod",
            "ID",
        ]);
        let value = prop::sample::select(vec!["1", "\"x\"", "{}", "[1,{\"a\":null}]", "null"]);
        prop::collection::vec((key, value), 0..8).prop_map(|members| {
            let members: Vec<String> = members
                .iter()
                .map(|(k, v)| format!("\"{k}\":{v}"))
                .collect();
            format!("{{{}}}", members.join(","))
        })
    }

    proptest! {
        /// The same members as reading the object into a map: the last
        /// value of a repeated key, escaped keys unescaped, and the first
        /// unknown key in alphabetical order.
        #[test]
        fn an_envelope_reads_as_a_map_of_its_members(text in object()) {
            let map: BTreeMap<String, &RawValue> = serde_json::from_str(&text).unwrap();
            let unknown = map.keys().find(|k| !KEYS.contains(&k.as_str()));
            // Read as serde_json's map, and as `read` reads it (the scan
            // when it can): the same members either way.
            let by_map: Envelope<'_> = serde_json::from_str(&text).unwrap();
            let read = Envelope::read(&text).unwrap();
            for env in [by_map, read] {
                let m = env.members;
                let fields = [m.jsonrpc, m.id, m.method, m.params, m.result, m.error];
                for (key, field) in KEYS.iter().zip(fields) {
                    prop_assert_eq!(field, map.get(*key).map(|v| v.get()), "{}", key);
                }
                prop_assert_eq!(env.unknown.as_ref(), unknown);
            }
        }
    }

    #[test]
    fn only_an_object_is_an_envelope() {
        for text in ["[]", "1", "\"id\"", "null", "{\"id\":}", "{\"id\":\"1\"} x"] {
            assert!(
                serde_json::from_str::<Envelope<'_>>(text).is_err(),
                "{text}"
            );
            assert!(Envelope::read(text).is_none(), "{text}");
        }
    }
}
