//! `[pubsub.nats]` as written, before validation: the NATS core backbone
//! of plain topics (`[pubsub] backend = "nats"`).

use serde::{Deserialize, Serialize};

/// Default `pubsub.nats.subject_prefix`: apart from JetStream's
/// `switchyard.persist.` subjects, so a client's `>` never reaches them.
pub const DEFAULT_SUBJECT_PREFIX: &str = "switchyard.topics.";

/// `[pubsub.nats]`: where the backbone connects and how it behaves. Used
/// only with `backend = "nats"`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawPubsubNats {
    /// Server URLs (`nats://` or `tls://`), tried in turn; the client
    /// learns the rest of a cluster from the server. Required with the
    /// backend. Default: none.
    pub urls: Vec<String>,
    /// User name (with `password`). Default `""`: none.
    pub user: String,
    /// Password (with `user`); never shown. Default `""`.
    pub password: String,
    /// Token authentication; never shown. Default `""`.
    pub token: String,
    /// A `.creds` file (JWT and nkey seed, decentralized auth). Default
    /// `""`: none.
    pub creds_file: String,
    /// PEM file of the CA certificates that vouch for the server's
    /// certificate (implies TLS). Default `""`: the system's roots.
    pub tls_ca_file: String,
    /// Client certificate (PEM), with `tls_key_file`, for mutual TLS.
    /// Default `""`.
    pub tls_cert_file: String,
    /// Client private key (PEM), with `tls_cert_file`. Default `""`.
    pub tls_key_file: String,
    /// Refuse a server that does not offer TLS. Default `false`.
    pub tls_required: bool,
    /// Prepended to a topic to make its subject (`orders.eu` →
    /// `switchyard.topics.orders.eu`); ends with `.`. Default
    /// `"switchyard.topics."`.
    pub subject_prefix: String,
    /// Publish this instance's upstream events (feeds, upstream
    /// notifications) to NATS; set `false` on every instance but one
    /// when several front the same service. Default `true`.
    pub publish_upstream_events: bool,
    /// Largest event data accepted from NATS or published to it; larger
    /// ones are dropped, counted. Default `1048576` (NATS' own default
    /// `max_payload`).
    pub max_payload_bytes: usize,
    /// Messages the NATS client holds for one subscription before it
    /// drops (slow consumer, counted). Default `8192`.
    pub pending_messages: usize,
    /// Local events waiting to be written to NATS; past it they are
    /// dropped, counted. Default `8192`.
    pub publish_queue: usize,
}

// === impl RawPubsubNats ===

impl Default for RawPubsubNats {
    fn default() -> Self {
        Self {
            urls: Vec::new(),
            user: String::new(),
            password: String::new(),
            token: String::new(),
            creds_file: String::new(),
            tls_ca_file: String::new(),
            tls_cert_file: String::new(),
            tls_key_file: String::new(),
            tls_required: false,
            subject_prefix: DEFAULT_SUBJECT_PREFIX.to_owned(),
            publish_upstream_events: true,
            max_payload_bytes: 1 << 20,
            pending_messages: 8192,
            publish_queue: 8192,
        }
    }
}

impl RawPubsubNats {
    /// The same with its secrets masked and its URLs' credentials hidden.
    pub fn redacted(&self) -> Self {
        use crate::redact;
        let mut shown = self.clone();
        shown.urls = shown
            .urls
            .iter()
            .map(|u| redact::url(u).into_owned())
            .collect();
        shown.password = redact::secret(&shown.password).to_owned();
        shown.token = redact::secret(&shown.token).to_owned();
        shown
    }
}
