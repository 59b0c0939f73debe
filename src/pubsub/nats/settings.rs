//! The backbone's validated settings (`[pubsub] backend = "nats"` and
//! `[pubsub.nats]`), checked by `config` and read here when connecting.

use std::fmt;
use std::path::PathBuf;

/// What the NATS core backbone connects to and how it behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Server URLs, tried in turn (at least one).
    pub urls: Vec<String>,
    /// How the client authenticates.
    pub auth: Auth,
    /// TLS towards the server.
    pub tls: Tls,
    /// Prepended to a topic to make its subject; ends with `.`.
    pub subject_prefix: String,
    /// Publish this instance's upstream events to NATS (and keep its feeds
    /// open: who listens on other instances is not known here).
    pub publish_upstream_events: bool,
    /// Largest event data accepted from NATS or published to it.
    pub max_payload_bytes: usize,
    /// Messages the client holds per subscription before dropping them.
    pub pending_messages: usize,
    /// Local events waiting to be written to NATS.
    pub publish_queue: usize,
}

/// How the client authenticates. `Debug` never shows a secret.
#[derive(Clone, PartialEq, Eq)]
pub enum Auth {
    /// No credentials (or the ones in a URL's user info).
    None,
    /// User name and password.
    UserPassword {
        /// The user name.
        user: String,
        /// The password.
        password: String,
    },
    /// A token.
    Token(String),
    /// A `.creds` file (JWT and nkey seed).
    CredsFile(PathBuf),
}

/// TLS towards the server.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tls {
    /// CA certificates (PEM) that vouch for the server; none: the
    /// system's roots.
    pub ca_file: Option<PathBuf>,
    /// Client certificate and key (PEM) for mutual TLS.
    pub client: Option<(PathBuf, PathBuf)>,
    /// Refuse a server that does not offer TLS.
    pub required: bool,
}

// === impl Auth ===

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Auth::None => f.write_str("None"),
            Auth::UserPassword { user, .. } => f
                .debug_struct("UserPassword")
                .field("user", user)
                .field("password", &crate::redact::MASK)
                .finish(),
            Auth::Token(_) => f.debug_tuple("Token").field(&crate::redact::MASK).finish(),
            Auth::CredsFile(path) => f.debug_tuple("CredsFile").field(path).finish(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_secrets() {
        let auth = Auth::UserPassword {
            user: "sy".into(),
            password: "hunter2".into(),
        };
        let shown = format!("{auth:?} {:?}", Auth::Token("s3cret".into()));
        assert!(
            !shown.contains("hunter2") && !shown.contains("s3cret"),
            "{shown}"
        );
        assert!(shown.contains("sy"), "{shown}");
    }
}
