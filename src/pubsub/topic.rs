//! Topic syntax (jsonrpc-ws.md §7.1, NATS style): validation of the
//! patterns clients subscribe to and of the concrete topics switchyard
//! publishes, and the single-pattern matcher the feed-interest watches use.
//!
//! A topic is tokens separated by `.`; every token is non-empty and the
//! whole topic is at most [`MAX_TOPIC_BYTES`] UTF-8 bytes. In a pattern,
//! `*` stands for exactly one token and `>` for one or more trailing
//! tokens; both are whole tokens only, and `>` only as the last one. A
//! published topic contains no wildcards.

/// The longest topic or pattern, in UTF-8 bytes (§7.1).
pub const MAX_TOPIC_BYTES: usize = 256;

/// The token that matches exactly one token.
pub const ONE: &str = "*";

/// The token that matches one or more trailing tokens.
pub const REST: &str = ">";

/// Why a topic or pattern is invalid. The `Display` text is the detail a
/// client gets in the -32602 error's `data`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopicError {
    /// The empty string.
    #[error("topic must not be empty")]
    Empty,
    /// Longer than [`MAX_TOPIC_BYTES`].
    #[error("topic is {0} bytes long, at most {MAX_TOPIC_BYTES} are allowed")]
    TooLong(usize),
    /// Two dots in a row, or a dot at either end.
    #[error("topic token {0} is empty (tokens are separated by single dots)")]
    EmptyToken(usize),
    /// `*` or `>` inside a token, as in `ord*`.
    #[error(
        "topic token {0} mixes a wildcard with other characters ('*' and '>' must be whole tokens)"
    )]
    PartialWildcard(usize),
    /// `>` before the last token.
    #[error("'>' is only allowed as the last token")]
    RestNotLast,
    /// A wildcard in a concrete (published) topic.
    #[error("a published topic must not contain wildcards")]
    Wildcard,
}

/// Checks a subscription pattern (wildcards allowed) against §7.1.
pub fn validate_pattern(pattern: &str) -> Result<(), TopicError> {
    validate(pattern, true)
}

/// Checks a concrete topic (no wildcards) against §7.1.
pub fn validate_topic(topic: &str) -> Result<(), TopicError> {
    validate(topic, false)
}

/// Does the (valid) `pattern` match the (valid, concrete) `topic`? The
/// reference the trie in [`super::index`] is tested against; costs one
/// pass over both strings.
pub fn matches(pattern: &str, topic: &str) -> bool {
    let mut topic_tokens = topic.split('.');
    for token in pattern.split('.') {
        if token == REST {
            // `>` needs at least one token left: `orders.>` is not `orders`.
            return topic_tokens.next().is_some();
        }
        match topic_tokens.next() {
            Some(t) if token == ONE || token == t => {}
            _ => return false,
        }
    }
    topic_tokens.next().is_none()
}

fn validate(text: &str, wildcards: bool) -> Result<(), TopicError> {
    if text.is_empty() {
        return Err(TopicError::Empty);
    }
    if text.len() > MAX_TOPIC_BYTES {
        return Err(TopicError::TooLong(text.len()));
    }
    let count = text.split('.').count();
    for (i, token) in text.split('.').enumerate() {
        let position = i + 1;
        if token.is_empty() {
            return Err(TopicError::EmptyToken(position));
        }
        let whole = token == ONE || token == REST;
        if !whole && token.contains(['*', '>']) {
            return Err(TopicError::PartialWildcard(position));
        }
        if whole && !wildcards {
            return Err(TopicError::Wildcard);
        }
        if token == REST && position != count {
            return Err(TopicError::RestNotLast);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_patterns() {
        for p in [
            "chat",
            "chat.messages",
            "*",
            ">",
            "a.*.>",
            "a.*.c",
            "*.*",
            "events.>",
        ] {
            assert_eq!(validate_pattern(p), Ok(()), "{p}");
        }
        // Exactly at the limit, counted in bytes (é is two).
        let at_limit = format!("{}.{}", "é".repeat(100), "x".repeat(55));
        assert_eq!(at_limit.len(), 256);
        assert_eq!(validate_pattern(&at_limit), Ok(()));
    }

    #[test]
    fn invalid_patterns() {
        assert_eq!(validate_pattern(""), Err(TopicError::Empty));
        assert_eq!(validate_pattern("a..b"), Err(TopicError::EmptyToken(2)));
        assert_eq!(validate_pattern(".a"), Err(TopicError::EmptyToken(1)));
        assert_eq!(validate_pattern("a."), Err(TopicError::EmptyToken(2)));
        assert_eq!(validate_pattern("."), Err(TopicError::EmptyToken(1)));
        assert_eq!(
            validate_pattern("ord*"),
            Err(TopicError::PartialWildcard(1))
        );
        assert_eq!(
            validate_pattern("a.>b"),
            Err(TopicError::PartialWildcard(2))
        );
        assert_eq!(
            validate_pattern("a.**"),
            Err(TopicError::PartialWildcard(2))
        );
        assert_eq!(validate_pattern(">.a"), Err(TopicError::RestNotLast));
        assert_eq!(validate_pattern("a.>.>"), Err(TopicError::RestNotLast));
        let long = format!("{}.{}", "é".repeat(100), "x".repeat(56));
        assert_eq!(validate_pattern(&long), Err(TopicError::TooLong(257)));
    }

    #[test]
    fn published_topics_have_no_wildcards() {
        assert_eq!(validate_topic("orders.eu.created"), Ok(()));
        assert_eq!(validate_topic("orders.*"), Err(TopicError::Wildcard));
        assert_eq!(validate_topic(">"), Err(TopicError::Wildcard));
        assert_eq!(validate_topic("ord*"), Err(TopicError::PartialWildcard(1)));
        assert_eq!(validate_topic(""), Err(TopicError::Empty));
        assert_eq!(validate_topic("a..b"), Err(TopicError::EmptyToken(2)));
    }

    #[test]
    fn details_are_clear() {
        assert_eq!(
            TopicError::PartialWildcard(1).to_string(),
            "topic token 1 mixes a wildcard with other characters ('*' and '>' must be whole tokens)"
        );
        assert_eq!(
            TopicError::TooLong(300).to_string(),
            "topic is 300 bytes long, at most 256 are allowed"
        );
    }

    #[test]
    fn matching_rules() {
        assert!(matches("chat.messages", "chat.messages"));
        assert!(!matches("chat.messages", "chat"));
        assert!(!matches("chat", "chat.messages"));
        assert!(matches("events.*", "events.user"));
        assert!(!matches("events.*", "events.user.login"));
        assert!(!matches("events.*", "events"));
        assert!(matches("events.>", "events.user"));
        assert!(matches("events.>", "events.user.login"));
        assert!(!matches("orders.>", "orders"));
        assert!(matches(">", "a"));
        assert!(matches(">", "a.b.c"));
        assert!(matches("a.*.>", "a.b.c"));
        assert!(!matches("a.*.>", "a.b"));
        assert!(matches("*.*", "x.y"));
        assert!(!matches("*.*", "x"));
    }
}
