//! `[[listeners.<name>.clients]]`: named clients of a WebSocket or
//! `jsonrpc-http` listener (an NDJSON listener has none: its socket's
//! file mode is the boundary),
//! each with its own bearer token and method policy (see
//! [`crate::limits::identity`]).
//!
//! A client's token comes from exactly one of `token` (in the file),
//! `token_file` (a file holding it; surrounding whitespace trimmed) or
//! `token_env` (an environment variable): the secret never has to be in
//! the TOML file. Files and variables are read when the configuration is
//! loaded, so a reload picks up a rotated token. No two credentials of a
//! listener (its `auth_token` and its clients' tokens) may be equal: a
//! token must name one identity.
//!
//! A client's `allow_methods` / `deny_methods` and `allow_topics` /
//! `deny_topics`, when given, replace the listener's list of the same name
//! for that client; a list it leaves out is the listener's.
//!
//! A client's `rate_per_second` / `rate_burst` is one bucket for all of
//! its connections (and `POST`s) on the listener, charged on top of the
//! listener's own limits (see [`crate::limits::rate`]).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::validate::Problems;
use crate::limits::policy::{MethodPolicy, Pattern};
use crate::limits::rate::Rate;

/// The longest client name accepted, in bytes (it is a metric label).
pub const MAX_NAME_BYTES: usize = 64;

/// The most named clients one listener may list.
pub const MAX_CLIENTS: usize = 256;

/// One `[[listeners.<name>.clients]]` entry as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawClient {
    /// The client's name: `[A-Za-z0-9_.-]`, 1 to 64 bytes, unique on the
    /// listener. Required.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The bearer token, in the file. One of `token`, `token_file`,
    /// `token_env` is required.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// A file holding the bearer token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_file: Option<String>,
    /// An environment variable holding the bearer token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_env: Option<String>,
    /// Methods this client may call; default: the listener's list.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_methods: Option<Vec<String>>,
    /// Methods this client may not call; default: the listener's list.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deny_methods: Option<Vec<String>>,
    /// Topic patterns this client may subscribe to; default: the
    /// listener's (`allow_topics`, or its upstreams' topics).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_topics: Option<Vec<String>>,
    /// Topic patterns this client may not subscribe to; default: the
    /// listener's list.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deny_topics: Option<Vec<String>>,
    /// Open connections of this client at once; 0 = no cap of its own (the
    /// listener's caps apply to everyone). Default 0.
    pub max_connections: usize,
    /// Messages per second of this client, all its connections together
    /// (one bucket per client, on top of the listener's limits); 0 = no
    /// rate of its own. Default 0.
    pub rate_per_second: u32,
    /// The burst of `rate_per_second`; 0 = same as the rate. Default 0.
    pub rate_burst: u32,
}

/// A validated named client.
#[derive(Clone, PartialEq, Eq)]
pub struct Client {
    /// Its name: the `client` log field and metric label.
    pub name: Arc<str>,
    /// Its bearer token (never shown: see the `Debug` impl); `None` on a
    /// listener with `[jwt]`: the client is reached by JWTs only.
    pub token: Option<String>,
    /// Which methods it may call.
    pub methods: MethodPolicy,
    /// Topic patterns it may subscribe to; `None`: the listener's.
    pub allow_topics: Option<Vec<String>>,
    /// Topic patterns it may not subscribe to; `None`: the listener's.
    pub deny_topics: Option<Vec<String>>,
    /// Its open connections at once; 0 = no cap of its own.
    pub max_connections: usize,
    /// Its message rate, all its connections together; `None`: no rate of
    /// its own.
    pub rate: Option<Rate>,
}

// === impl Client ===

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("name", &self.name)
            .field("token", &crate::redact::MASK)
            .field("methods", &self.methods)
            .field("allow_topics", &self.allow_topics)
            .field("deny_topics", &self.deny_topics)
            .field("max_connections", &self.max_connections)
            .field("rate", &self.rate)
            .finish()
    }
}

/// Validates a listener's clients. `listener_token` is its `auth_token`,
/// `allow` / `deny` its method lists, `ws` whether it is a WebSocket
/// listener (only those carry a credential), `jwt` whether it takes JWTs
/// (then a client's own token is optional).
pub(super) fn clients(
    key: &str,
    raw: &[RawClient],
    listener_token: Option<&str>,
    (allow, deny): (&[Pattern], &[Pattern]),
    (ws, jwt): (bool, bool),
    p: &mut Problems,
) -> Vec<Client> {
    if raw.is_empty() {
        return Vec::new();
    }
    if !ws {
        p.at(
            key,
            "clients",
            "only WebSocket and jsonrpc-http listeners have clients (a Unix socket's access control is its file mode)",
        );
    }
    if raw.len() > MAX_CLIENTS {
        p.at(key, "clients", format!("at most {MAX_CLIENTS} clients"));
    }
    let mut out: Vec<Client> = Vec::with_capacity(raw.len());
    for (i, c) in raw.iter().enumerate() {
        let at = format!("{key}.clients[{i}]");
        let name = name(&at, c.name.as_deref(), &out, p);
        let no_source = c.token.is_none() && c.token_file.is_none() && c.token_env.is_none();
        let token = if jwt && no_source {
            Some(None)
        } else {
            token(&at, c, p).map(Some)
        };
        if let Some(Some(t)) = &token {
            let twin = listener_token == Some(t.as_str())
                || out.iter().any(|o| o.token.as_deref() == Some(t.as_str()));
            if twin {
                // Never the token itself: only that it is not unique.
                p.at(
                    &at,
                    "token",
                    "the same as another credential of this listener (each token must name one client)",
                );
            }
        }
        let allow = match &c.allow_methods {
            Some(list) => super::protection::patterns(&at, "allow_methods", list, p),
            None => allow.to_vec(),
        };
        let deny = match &c.deny_methods {
            Some(list) => super::protection::patterns(&at, "deny_methods", list, p),
            None => deny.to_vec(),
        };
        for (field, list) in [
            ("allow_topics", &c.allow_topics),
            ("deny_topics", &c.deny_topics),
        ] {
            if let Some(list) = list {
                super::protection::topic_patterns(&at, field, list, p);
            }
        }
        if let (Some(name), Some(token)) = (name, token) {
            out.push(Client {
                name: Arc::from(name),
                token,
                methods: MethodPolicy::new(allow, deny),
                allow_topics: c.allow_topics.clone(),
                deny_topics: c.deny_topics.clone(),
                max_connections: c.max_connections,
                rate: super::protection::rate(c.rate_per_second, c.rate_burst),
            });
        }
    }
    out
}

fn name(at: &str, name: Option<&str>, seen: &[Client], p: &mut Problems) -> Option<String> {
    let Some(name) = name else {
        p.at(at, "name", "required");
        return None;
    };
    let valid = !name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if !valid {
        p.at(
            at,
            "name",
            format!("{name:?}: 1 to {MAX_NAME_BYTES} bytes of A-Z a-z 0-9 _ - ."),
        );
        return None;
    }
    if seen.iter().any(|c| &*c.name == name) {
        p.at(at, "name", format!("{name:?} is listed twice"));
        return None;
    }
    Some(name.to_owned())
}

/// The client's token from its one source, trimmed when read from a file.
fn token(at: &str, c: &RawClient, p: &mut Problems) -> Option<String> {
    let sources = [&c.token, &c.token_file, &c.token_env]
        .iter()
        .filter(|s| s.is_some())
        .count();
    if sources != 1 {
        p.at(
            at,
            "token",
            "exactly one of token, token_file, token_env is required",
        );
        return None;
    }
    let token = if let Some(t) = &c.token {
        t.clone()
    } else if let Some(path) = &c.token_file {
        match std::fs::read_to_string(path) {
            Ok(text) => text.trim().to_owned(),
            Err(e) => {
                p.at(at, "token_file", format!("{path:?}: {e}"));
                return None;
            }
        }
    } else {
        let var = c.token_env.as_deref().unwrap_or_default();
        match std::env::var(var) {
            Ok(text) => text,
            Err(e) => {
                p.at(at, "token_env", format!("{var:?}: {e}"));
                return None;
            }
        }
    };
    if token.is_empty() {
        p.at(at, "token", "must not be empty");
        return None;
    }
    Some(token)
}
