//! The policy keys a listener and each of its clients both carry, checked
//! the same way for both ([`super::protection`], [`super::clients`]): method
//! patterns, topic patterns and rates.

use std::num::NonZeroU32;

use super::problems::Problems;
use crate::limits::policy::{Pattern, MAX_PATTERNS};
use crate::limits::rate::Rate;

/// A method pattern list, reporting every bad pattern by its index.
pub(super) fn patterns(key: &str, field: &str, raw: &[String], p: &mut Problems) -> Vec<Pattern> {
    if raw.len() > MAX_PATTERNS {
        p.at(
            key,
            field,
            format!("at most {MAX_PATTERNS} patterns (got {})", raw.len()),
        );
    }
    raw.iter()
        .enumerate()
        .filter_map(|(i, text)| match Pattern::parse(text) {
            Ok(pattern) => Some(pattern),
            Err(e) => {
                p.at(key, &format!("{field}[{i}]"), format!("{text:?}: {e}"));
                None
            }
        })
        .collect()
}

/// Checks a topic pattern list (`allow_topics`, `deny_topics`): valid
/// NATS-style patterns, at most [`MAX_PATTERNS`].
pub(super) fn topic_patterns(key: &str, field: &str, raw: &[String], p: &mut Problems) {
    if raw.len() > MAX_PATTERNS {
        p.at(
            key,
            field,
            format!("at most {MAX_PATTERNS} patterns (got {})", raw.len()),
        );
    }
    for (i, text) in raw.iter().enumerate() {
        if let Err(e) = crate::pubsub::topic::validate_pattern(text) {
            p.at(key, &format!("{field}[{i}]"), format!("{text:?}: {e}"));
        }
    }
}

/// A rate, or `None` when off (0); a zero burst means "same as the rate".
pub(super) fn rate(per_second: u32, burst: u32) -> Option<Rate> {
    let per_second = NonZeroU32::new(per_second)?;
    Some(Rate {
        per_second,
        burst: NonZeroU32::new(burst).unwrap_or(per_second),
    })
}
