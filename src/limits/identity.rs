//! Who a connection is: the [`Identity`] its credential names on its
//! listener, and the per-client connection counts ([`ClientConns`]).
//!
//! A listener has an unnamed client (its `auth_token`, or anyone when it
//! has neither a token nor named clients) and any number of named clients
//! (`[[listeners.<name>.clients]]`), each with its own bearer token. The
//! token of an upgrade is compared with every configured credential in
//! constant time, all of them every time (no early exit), so neither the
//! time taken nor which comparison stopped tells a caller how much of a
//! token matched, or which client's it was close to.
//!
//! A listener with named clients and no `auth_token` has no unnamed
//! client: a connection must present one of the clients' tokens.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use subtle::ConstantTimeEq;
use tokio_util::sync::CancellationToken;

/// The identity of one connection on its listener. Two identities are
/// the same when they name the same client, whatever their credentials'
/// expiry.
#[derive(Debug, Clone, Default)]
pub struct Identity {
    /// `None`: the listener's unnamed client.
    client: Option<Arc<str>>,
    /// When the credential expires (a JWT's `exp` plus the leeway): the
    /// connection is closed then. `None`: it does not expire.
    expires: Option<std::time::SystemTime>,
}

impl PartialEq for Identity {
    fn eq(&self, other: &Self) -> bool {
        self.client == other.client
    }
}

impl Eq for Identity {}

impl std::hash::Hash for Identity {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.client.hash(state);
    }
}

/// A listener's credentials: its own token (the unnamed client) and its
/// named clients' tokens.
#[derive(Clone, Default)]
pub struct Credentials {
    /// The listener's `auth_token`.
    pub unnamed: Option<String>,
    /// Each named client and its token.
    pub named: Vec<(Arc<str>, String)>,
}

/// Open connections per named client (an entry per client with an open
/// connection, with the token that revokes them), kept across reloads like
/// the listener's own counts.
#[derive(Debug, Clone, Default)]
pub struct ClientConns(Arc<Mutex<HashMap<Arc<str>, Open>>>);

/// A named client's open connections and the token that revokes them.
type Open = (usize, CancellationToken);

/// A named client is at its own connection cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtCap;

/// One named client's connection; dropping it frees its place.
#[derive(Debug)]
pub struct ClientPermit {
    name: Arc<str>,
    counts: ClientConns,
    /// Cancelled when a reload removes (or changes) the client's
    /// credential: the connection must close.
    revoked: CancellationToken,
}

// === impl Identity ===

impl Identity {
    /// The named client `name`.
    pub fn named(name: Arc<str>) -> Self {
        Identity {
            client: Some(name),
            expires: None,
        }
    }

    /// The same identity, its credential expiring at `at`.
    pub fn expiring(self, at: std::time::SystemTime) -> Self {
        Identity {
            expires: Some(at),
            ..self
        }
    }

    /// When the credential expires, if it does.
    pub fn expires(&self) -> Option<std::time::SystemTime> {
        self.expires
    }

    /// The client's name; `None` for the unnamed client.
    pub fn client(&self) -> Option<&str> {
        self.client.as_deref()
    }

    /// The client's name as a log field and metric label: `""` for the
    /// unnamed client.
    pub fn label(&self) -> &str {
        self.client.as_deref().unwrap_or("")
    }
}

// === impl Credentials ===

impl Credentials {
    /// True when an upgrade needs no credential (no token, no clients).
    pub fn open(&self) -> bool {
        self.unnamed.is_none() && self.named.is_empty()
    }

    /// The identity whose credential `given` is, if any. Every credential
    /// is compared, in constant time.
    pub fn identify(&self, given: Option<&str>) -> Option<Identity> {
        if self.open() {
            return Some(Identity::default());
        }
        let given = given?;
        let mut found: Option<Identity> = None;
        if let Some(token) = &self.unnamed {
            if same(given, token) {
                found = Some(Identity::default());
            }
        }
        for (name, token) in &self.named {
            if same(given, token) {
                found = Some(Identity::named(name.clone()));
            }
        }
        found
    }
}

/// Constant time for equal lengths; validation keeps every credential
/// distinct, so at most one matches.
fn same(given: &str, expected: &str) -> bool {
    given.len() == expected.len() && bool::from(given.as_bytes().ct_eq(expected.as_bytes()))
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.named.iter().map(|(n, _)| &**n).collect();
        f.debug_struct("Credentials")
            .field(
                "unnamed",
                &self.unnamed.as_ref().map(|_| crate::redact::MASK),
            )
            .field("named", &names)
            .finish()
    }
}

// === impl ClientConns ===

impl ClientConns {
    /// A place for a connection of `who`, unless it is a named client
    /// already at `cap` connections (0 = no cap). The unnamed client is
    /// not counted here (the listener's caps apply to everyone).
    pub fn admit(&self, who: &Identity, cap: usize) -> Result<Option<ClientPermit>, AtCap> {
        let Some(name) = &who.client else {
            return Ok(None);
        };
        let mut counts = self.0.lock();
        let (n, revoked) = counts.entry(name.clone()).or_default();
        if cap > 0 && *n >= cap {
            if *n == 0 {
                counts.remove(name);
            }
            return Err(AtCap);
        }
        *n += 1;
        Ok(Some(ClientPermit {
            name: name.clone(),
            counts: self.clone(),
            revoked: revoked.clone(),
        }))
    }

    /// Open connections of named client `name`.
    pub fn open(&self, name: &str) -> usize {
        self.0.lock().get(name).map_or(0, |(n, _)| *n)
    }

    /// Revokes every open connection of named client `name` (its
    /// credential was removed or changed); later ones start afresh.
    pub fn revoke(&self, name: &str) {
        if let Some((_, revoked)) = self.0.lock().remove(name) {
            revoked.cancel();
        }
    }
}

impl ClientPermit {
    /// Cancelled when the client's credential is revoked by a reload.
    pub fn revoked(&self) -> &CancellationToken {
        &self.revoked
    }
}

impl Drop for ClientPermit {
    fn drop(&mut self) {
        let mut counts = self.counts.0.lock();
        // Revoked: its entry was removed then; one there now counts later
        // connections.
        if self.revoked.is_cancelled() {
            return;
        }
        if let Some((n, _)) = counts.get_mut(&self.name) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.remove(&self.name);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creds() -> Credentials {
        Credentials {
            unnamed: Some("listener-token".into()),
            named: vec![
                (Arc::from("reader"), "reader-token".into()),
                (Arc::from("operator"), "operator-token".into()),
            ],
        }
    }

    #[test]
    fn a_token_names_its_client_and_nothing_else_passes() {
        let c = creds();
        assert_eq!(
            c.identify(Some("listener-token")),
            Some(Identity::default())
        );
        assert_eq!(
            c.identify(Some("reader-token"))
                .as_ref()
                .and_then(Identity::client),
            Some("reader")
        );
        assert_eq!(
            c.identify(Some("operator-token"))
                .as_ref()
                .and_then(Identity::client),
            Some("operator")
        );
        for wrong in [None, Some(""), Some("reader-toke"), Some("reader-tokenx")] {
            assert_eq!(c.identify(wrong), None, "{wrong:?}");
        }
        // Named clients without a listener token: no unnamed client.
        let named_only = Credentials {
            unnamed: None,
            ..creds()
        };
        assert_eq!(named_only.identify(None), None);
        assert_eq!(named_only.identify(Some("listener-token")), None);
        // Nothing configured: everyone is the unnamed client.
        assert_eq!(
            Credentials::default().identify(None),
            Some(Identity::default())
        );
    }

    #[test]
    fn secrets_stay_out_of_debug() {
        let shown = format!("{:?}", creds());
        assert!(!shown.contains("token"), "{shown}");
        assert!(shown.contains("reader"), "{shown}");
    }

    #[test]
    fn a_client_cap_counts_open_connections() {
        let conns = ClientConns::default();
        let reader = Identity::named(Arc::from("reader"));
        let first = conns.admit(&reader, 2).unwrap_or_default();
        let second = conns.admit(&reader, 2).unwrap_or_default();
        assert!(conns.admit(&reader, 2).is_err());
        assert_eq!(conns.open("reader"), 2);
        drop(first);
        assert_eq!(conns.open("reader"), 1);
        assert!(conns.admit(&reader, 2).is_ok());
        drop(second);
        assert!(matches!(conns.admit(&Identity::default(), 1), Ok(None)));
    }
}
