//! Per-listener method policy: which methods a listener's clients may
//! call (`allow_methods` / `deny_methods`).
//!
//! A method is refused when a deny pattern matches it, or when there is an
//! allow list and no allow pattern matches it: deny wins, and an empty
//! allow list allows everything. The router checks the policy before it
//! routes anything (requests, notifications and batch items alike), so a
//! refused call never reaches an upstream. switchyard's own methods
//! (`rpc.*`, holon-rpc's `rpc.heartbeat`, the JSON-RPC `ping`
//! notification while `answer_ping_notification` is on) are answered by
//! switchyard itself and are not subject to it.
//!
//! Patterns are deliberately small globs, matched on the whole method name
//! and case-sensitively: `*` matches any run of characters, **dots
//! included** (`thoughts.*` matches `thoughts.list` and
//! `thoughts.v2.list`; `*.delete*` matches `a.b.delete_all`). Every other
//! character is literal. The other glob syntaxes (`?`, `[…]`, `{…}`, `\`)
//! are refused when the configuration is loaded rather than taken
//! literally, so that a pattern never means less than its author thought.
//! A general glob crate would add path semantics (separators, `**`) that
//! method names do not have.
//!
//! Pure: no I/O, no locks.

use std::fmt;

/// Longest pattern accepted, in bytes: patterns are written by hand, and
/// the bound keeps matching cheap (at worst pattern × method length).
pub const MAX_PATTERN_BYTES: usize = 256;

/// Most patterns in one `allow_methods` or `deny_methods` list: each call
/// is checked against every pattern of both lists.
pub const MAX_PATTERNS: usize = 256;

/// One listener's method policy. The default allows every method.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MethodPolicy {
    allow: Vec<Pattern>,
    deny: Vec<Pattern>,
}

/// A method pattern: literal characters and `*` (any run of characters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern(String);

/// Why a pattern was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    /// The empty pattern matches nothing a client can call.
    #[error("must not be empty")]
    Empty,
    /// Longer than [`MAX_PATTERN_BYTES`].
    #[error("longer than {MAX_PATTERN_BYTES} bytes")]
    TooLong,
    /// Glob syntax other than `*`.
    #[error("{0:?} is not supported: only `*` (any run of characters, dots included) is special")]
    Unsupported(char),
    /// A control character, which no method name should contain.
    #[error("contains a control character")]
    Control,
}

// === impl MethodPolicy ===

impl MethodPolicy {
    /// A policy from its two lists.
    pub fn new(allow: Vec<Pattern>, deny: Vec<Pattern>) -> Self {
        MethodPolicy { allow, deny }
    }

    /// True when every method is allowed (both lists empty): the router
    /// skips the check.
    pub fn is_open(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty()
    }

    /// Whether a client may call `method`: no deny pattern matches it, and
    /// the allow list is empty or one of its patterns matches it.
    pub fn permits(&self, method: &str) -> bool {
        if self.deny.iter().any(|p| p.matches(method)) {
            return false;
        }
        self.allow.is_empty() || self.allow.iter().any(|p| p.matches(method))
    }
}

// === impl Pattern ===

impl Pattern {
    /// Checks a pattern as written in the configuration.
    pub fn parse(text: &str) -> Result<Self, PatternError> {
        if text.is_empty() {
            return Err(PatternError::Empty);
        }
        if text.len() > MAX_PATTERN_BYTES {
            return Err(PatternError::TooLong);
        }
        if let Some(c) = text
            .chars()
            .find(|c| matches!(c, '?' | '[' | ']' | '{' | '}' | '\\'))
        {
            return Err(PatternError::Unsupported(c));
        }
        if text.chars().any(char::is_control) {
            return Err(PatternError::Control);
        }
        Ok(Pattern(text.to_owned()))
    }

    /// Whether the whole of `method` matches. Byte-wise, which is exact on
    /// UTF-8: `*` is ASCII, and literal runs only match at the same
    /// character boundaries.
    pub fn matches(&self, method: &str) -> bool {
        glob(self.0.as_bytes(), method.as_bytes())
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Wildcard matching with one backtrack point: on a mismatch after a `*`,
/// that `*` takes one more character. Later stars supersede earlier ones,
/// which is safe because a star can absorb anything the earlier one would
/// have. O(pattern × text) at worst, linear in the usual case.
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    // (position of the last star in pattern, text position it resumes at)
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(&c) if c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    star = Some((sp, st + 1));
                    p = sp + 1;
                    t = st + 1;
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pat(text: &str) -> Pattern {
        Pattern::parse(text).expect("valid pattern")
    }

    #[test]
    fn star_matches_any_run_dots_included() {
        let p = pat("thoughts.*");
        assert!(p.matches("thoughts.list"));
        assert!(p.matches("thoughts.v2.list"));
        assert!(p.matches("thoughts."));
        assert!(!p.matches("thoughts"));
        assert!(!p.matches("Thoughts.list"), "case-sensitive");
        assert!(!p.matches("my.thoughts.list"), "anchored at the start");

        let p = pat("*.delete*");
        assert!(p.matches("a.delete"));
        assert!(p.matches("a.b.delete_all"));
        assert!(p.matches(".delete"));
        assert!(!p.matches("delete"));
        assert!(!p.matches("a.undelete"));
    }

    #[test]
    fn literal_patterns_match_whole_names_only() {
        let p = pat("echo");
        assert!(p.matches("echo"));
        assert!(!p.matches("echo2"));
        assert!(!p.matches("becho"));
        assert!(!p.matches(""));
    }

    #[test]
    fn several_stars_backtrack() {
        assert!(pat("*").matches(""));
        assert!(pat("*").matches("anything.at.all"));
        assert!(pat("a*b*c").matches("aXbYbZc"));
        assert!(pat("a*b*c").matches("abc"));
        assert!(!pat("a*b*c").matches("aXbYbZ"));
        assert!(pat("**x").matches("yyx"));
        assert!(pat("*ab").matches("aab"));
        assert!(pat("é*ü").matches("éxyzü"));
        assert!(!pat("é*ü").matches("éxyzu"));
    }

    #[test]
    fn deny_wins_and_an_empty_allow_list_allows_all() {
        let open = MethodPolicy::default();
        assert!(open.is_open());
        assert!(open.permits("anything"));

        let policy = MethodPolicy::new(vec![pat("get*"), pat("health")], vec![pat("getSecret*")]);
        assert!(!policy.is_open());
        assert!(policy.permits("getConversation"));
        assert!(policy.permits("health"));
        assert!(!policy.permits("getSecretKey"), "deny wins over allow");
        assert!(!policy.permits("launchSession"), "not on the allow list");

        let deny_only = MethodPolicy::new(Vec::new(), vec![pat("*.delete*")]);
        assert!(deny_only.permits("thoughts.list"));
        assert!(!deny_only.permits("thoughts.delete"));
    }

    #[test]
    fn unsupported_patterns_are_refused() {
        assert_eq!(Pattern::parse(""), Err(PatternError::Empty));
        assert_eq!(Pattern::parse("get?"), Err(PatternError::Unsupported('?')));
        assert_eq!(Pattern::parse("x[0]"), Err(PatternError::Unsupported('[')));
        assert_eq!(Pattern::parse("{a,b}"), Err(PatternError::Unsupported('{')));
        assert_eq!(Pattern::parse("a\\*"), Err(PatternError::Unsupported('\\')));
        assert_eq!(Pattern::parse("a\nb"), Err(PatternError::Control));
        let long = "a".repeat(MAX_PATTERN_BYTES + 1);
        assert_eq!(Pattern::parse(&long), Err(PatternError::TooLong));
        assert!(Pattern::parse(&long[1..]).is_ok());
    }
}
