//! JWT bearer tokens (`[listeners.<name>.jwt]`): a signed token names a
//! client through one of its claims, checked with the `jsonwebtoken`
//! crate against public keys read from a PEM file or a JWKS file.
//!
//! What is checked: the signature (only with an algorithm of the
//! configured allow-list; `none` cannot be configured and a token whose
//! header says `none` does not parse), `exp` (required) and `nbf` (when
//! present) with the configured leeway (a token is refused from the
//! instant `exp` + leeway, the instant an open connection of it closes),
//! `iss` and `aud` when configured
//! (then required in the token). The claim `client_claim` (default `sub`)
//! names the client: a named client of the listener gets its policy; any
//! other value is refused, or gets the listener's own policy (its unnamed
//! client) with `unknown_client = "listener"`.
//!
//! A token is never logged or shown; a refusal says only `token`.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, DecodingKey, Validation};

use super::identity::Identity;

/// Verifies a listener's JWTs and maps them to identities.
#[derive(Clone)]
pub struct Verifier {
    /// The public keys, each with its `kid` when it came from a JWKS.
    pub keys: Vec<(Option<String>, DecodingKey)>,
    /// Algorithms, leeway, issuer and audience.
    pub validation: Validation,
    /// The claim naming the client.
    pub claim: String,
    /// The listener's named clients a token may name.
    pub clients: Vec<Arc<str>>,
    /// A valid token naming no configured client gets the listener's
    /// own policy (`unknown_client = "listener"`) instead of a refusal.
    pub unknown_is_listener: bool,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier")
            .field("keys", &self.keys.len())
            .field("algorithms", &self.validation.algorithms)
            .field("claim", &self.claim)
            .field("clients", &self.clients)
            .finish()
    }
}

impl Verifier {
    /// The identity `token` names, with the time its credential expires
    /// (`exp` plus the leeway); `None` for any token that does not verify.
    pub fn identify(&self, token: &str) -> Option<Identity> {
        let header = jsonwebtoken::decode_header(token).ok()?;
        if !self.validation.algorithms.contains(&header.alg) {
            return None;
        }
        let claims = self
            .keys
            .iter()
            .filter(|(kid, _)| match (&header.kid, kid) {
                (Some(want), Some(have)) => want == have,
                _ => true,
            })
            .find_map(|(_, key)| {
                jsonwebtoken::decode::<serde_json::Map<String, serde_json::Value>>(
                    token,
                    key,
                    &self.validation,
                )
                .ok()
            })?
            .claims;
        let exp = claims.get("exp")?.as_u64()?;
        let expires = UNIX_EPOCH
            .checked_add(Duration::from_secs(
                exp.saturating_add(self.validation.leeway),
            ))
            .unwrap_or(SystemTime::UNIX_EPOCH);
        // jsonwebtoken compares whole seconds and still accepts a token
        // during its `exp` second; from `exp` (plus the leeway) on, it is
        // refused here, the instant an open connection of it is closed.
        if SystemTime::now() >= expires {
            return None;
        }
        let name = claims.get(&self.claim)?.as_str()?;
        let who = match self.clients.iter().find(|c| &***c == name) {
            Some(client) => Identity::named(client.clone()),
            None if self.unknown_is_listener => Identity::default(),
            None => return None,
        };
        Some(who.expiring(expires))
    }
}

/// The algorithm `name` names, if it is an asymmetric one (the keys are
/// public keys: an HMAC algorithm would take a public key for a shared
/// secret).
pub fn algorithm(name: &str) -> Option<Algorithm> {
    let alg: Algorithm = name.parse().ok()?;
    (!matches!(alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512)).then_some(alg)
}
