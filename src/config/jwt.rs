//! `[listeners.<name>.jwt]`: JWT bearer tokens on a WebSocket or
//! jsonrpc-http listener (see [`crate::limits::jwt`]).
//!
//! The public keys come from exactly one of `key_file` (one PEM public
//! key: RSA, EC or Ed25519) or `jwks_file` (a JSON Web Key Set; a token's
//! `kid` picks its key). Both are read when the configuration is loaded,
//! so a reload picks up rotated keys. `algorithms` is required: the
//! asymmetric algorithms accepted (`RS256` … `PS512`, `ES256`, `ES384`,
//! `EdDSA`); `none` and the HMAC ones are configuration problems.

use std::collections::HashSet;
use std::sync::Arc;

use jsonwebtoken::{DecodingKey, Validation};
use serde::{Deserialize, Serialize};

use super::problems::Problems;
use crate::limits::jwt::{algorithm, Verifier};

/// The default `leeway_secs`: clock skew allowed on `exp` and `nbf`.
pub const DEFAULT_LEEWAY_SECS: u64 = 30;

/// The largest `leeway_secs` accepted.
pub const MAX_LEEWAY_SECS: u64 = 300;

/// `[listeners.<name>.jwt]` as written.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawJwt {
    /// A PEM file with one public key (RSA, EC or Ed25519).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_file: Option<String>,
    /// A JWKS file (`{"keys": [...]}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jwks_file: Option<String>,
    /// Accepted algorithms. Required.
    pub algorithms: Vec<String>,
    /// Required `iss`, if set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// Required `aud` (one of the token's audiences), if set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audience: Option<String>,
    /// Seconds of clock skew allowed on `exp` and `nbf`. Default 30.
    pub leeway_secs: u64,
    /// The claim naming the client. Default `sub`.
    pub client_claim: String,
    /// A valid token whose claim names no client of the listener:
    /// `"refuse"` (default) or `"listener"` (the listener's own policy).
    pub unknown_client: String,
}

impl Default for RawJwt {
    fn default() -> Self {
        RawJwt {
            key_file: None,
            jwks_file: None,
            algorithms: Vec::new(),
            issuer: None,
            audience: None,
            leeway_secs: DEFAULT_LEEWAY_SECS,
            client_claim: "sub".to_owned(),
            unknown_client: "refuse".to_owned(),
        }
    }
}

/// Validates a listener's `jwt` table; `clients` are its named clients.
pub(super) fn jwt(
    key: &str,
    raw: &RawJwt,
    clients: Vec<Arc<str>>,
    p: &mut Problems,
) -> Option<Arc<Verifier>> {
    let at = format!("{key}.jwt");
    let mut algorithms = Vec::new();
    for name in &raw.algorithms {
        match algorithm(name) {
            Some(a) => algorithms.push(a),
            None => p.at(
                &at,
                "algorithms",
                format!("{name:?}: not an accepted algorithm (RS*, PS*, ES256, ES384, EdDSA)"),
            ),
        }
    }
    if raw.algorithms.is_empty() {
        p.at(&at, "algorithms", "required (at least one algorithm)");
    }
    if raw.leeway_secs > MAX_LEEWAY_SECS {
        p.at(&at, "leeway_secs", format!("at most {MAX_LEEWAY_SECS}"));
    }
    if raw.client_claim.is_empty() {
        p.at(&at, "client_claim", "must not be empty");
    }
    let unknown_is_listener = match raw.unknown_client.as_str() {
        "refuse" => false,
        "listener" => true,
        other => {
            p.at(
                &at,
                "unknown_client",
                format!("{other:?}: \"refuse\" or \"listener\""),
            );
            false
        }
    };
    let keys = keys(&at, raw, p)?;
    let first = *algorithms.first()?;
    let mut validation = Validation::new(first);
    validation.algorithms = algorithms;
    validation.leeway = raw.leeway_secs;
    validation.validate_nbf = true;
    let mut required: HashSet<String> = HashSet::from(["exp".to_owned()]);
    if let Some(iss) = &raw.issuer {
        validation.set_issuer(&[iss]);
        required.insert("iss".to_owned());
    }
    match &raw.audience {
        Some(aud) => {
            validation.set_audience(&[aud]);
            required.insert("aud".to_owned());
        }
        None => validation.validate_aud = false,
    }
    validation.required_spec_claims = required;
    Some(Arc::new(Verifier {
        keys,
        validation,
        claim: raw.client_claim.clone(),
        clients,
        unknown_is_listener,
    }))
}

/// The keys of `key_file` or `jwks_file`.
fn keys(at: &str, raw: &RawJwt, p: &mut Problems) -> Option<Vec<(Option<String>, DecodingKey)>> {
    let (field, path) = match (&raw.key_file, &raw.jwks_file) {
        (Some(path), None) => ("key_file", path),
        (None, Some(path)) => ("jwks_file", path),
        _ => {
            p.at(
                at,
                "key_file",
                "exactly one of key_file, jwks_file is required",
            );
            return None;
        }
    };
    let text = match std::fs::read(path) {
        Ok(text) => text,
        Err(e) => {
            p.at(at, field, format!("{path:?}: {e}"));
            return None;
        }
    };
    if field == "key_file" {
        let key = DecodingKey::from_rsa_pem(&text)
            .or_else(|_| DecodingKey::from_ec_pem(&text))
            .or_else(|_| DecodingKey::from_ed_pem(&text));
        return match key {
            Ok(key) => Some(vec![(None, key)]),
            Err(e) => {
                p.at(at, field, format!("{path:?}: not a PEM public key ({e})"));
                None
            }
        };
    }
    let set: jsonwebtoken::jwk::JwkSet = match serde_json::from_slice(&text) {
        Ok(set) => set,
        Err(e) => {
            p.at(at, field, format!("{path:?}: not a JWKS ({e})"));
            return None;
        }
    };
    let mut keys = Vec::with_capacity(set.keys.len());
    for (i, jwk) in set.keys.iter().enumerate() {
        match DecodingKey::from_jwk(jwk) {
            Ok(key) => keys.push((jwk.common.key_id.clone(), key)),
            Err(e) => p.at(at, field, format!("{path:?}: key {i}: {e}")),
        }
    }
    if keys.is_empty() {
        p.at(at, field, format!("{path:?}: no usable key"));
        return None;
    }
    Some(keys)
}
