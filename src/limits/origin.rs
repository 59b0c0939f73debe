//! Browser safety for WebSocket upgrades: Host and Origin allow-lists and
//! an optional bearer token, checked before the upgrade.
//!
//! Origins are compared on parsed (scheme, host, port), never by string
//! prefix or suffix, so `http://localhost.evil.com` and
//! `http://evil-localhost.com` never pass for `http://localhost`. `null`
//! is always refused; a missing Origin (non-browser clients) is allowed.
//! Host checks defend against DNS rebinding: a page on `evil.com` that
//! rebinds its name to 127.0.0.1 still sends `Host: evil.com`.

use std::net::IpAddr;

use http::uri::Authority;
use subtle::ConstantTimeEq;

use super::identity::{Credentials, Identity};

/// Why an upgrade is refused (a closed set: also a metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// `Host` missing or not allowed (DNS rebinding defence).
    Host,
    /// `Origin: null`.
    NullOrigin,
    /// `Origin` not on the allow-list.
    Origin,
    /// No bearer token, or a wrong one.
    Token,
}

/// A parsed origin: scheme, lower-case host, port (default filled in).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    scheme: String,
    host: String,
    port: u16,
}

/// Upgrade checks of one listener.
#[derive(Debug, Clone, Default)]
pub struct UpgradePolicy {
    /// Allowed `Host` names (lower case, without port). Empty and
    /// `loopback_only`: loopback names only. Empty otherwise: any.
    pub hosts: Vec<String>,
    /// Allowed origins. Empty and `loopback_only`: loopback origins only.
    /// Empty otherwise: any origin (except `null`).
    pub origins: Vec<Origin>,
    /// `allowed_origins = ["*"]`: every origin but `null` passes.
    pub any_origin: bool,
    /// The listener is bound to a loopback address: the safe defaults apply.
    pub loopback_only: bool,
    /// Required bearer token, if any (the listener's unnamed client).
    pub token: Option<String>,
    /// Named clients' bearer tokens (`[[listeners.<name>.clients]]`).
    pub clients: Vec<(std::sync::Arc<str>, String)>,
    /// JWT bearer tokens (`[listeners.<name>.jwt]`), if configured.
    pub jwt: Option<std::sync::Arc<super::jwt::Verifier>>,
}

// === impl Refusal ===

impl Refusal {
    /// Stable label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            Refusal::Host => "host",
            Refusal::NullOrigin => "null_origin",
            Refusal::Origin => "origin",
            Refusal::Token => "token",
        }
    }

    /// HTTP status to answer with.
    pub const fn status(self) -> u16 {
        match self {
            Refusal::Token => 401,
            _ => 403,
        }
    }

    /// Short reason for the response body.
    pub const fn reason(self) -> &'static str {
        match self {
            Refusal::Host => "forbidden: Host not allowed",
            Refusal::NullOrigin => "forbidden: Origin null is not allowed",
            Refusal::Origin => "forbidden: Origin not allowed",
            Refusal::Token => "unauthorized: missing or invalid token",
        }
    }
}

// === impl Origin ===

impl Origin {
    /// Parses `scheme://host[:port]` (no path, query or user info).
    pub fn parse(text: &str) -> Option<Origin> {
        let (scheme, rest) = text.split_once("://")?;
        let scheme = scheme.to_ascii_lowercase();
        let default_port = match scheme.as_str() {
            "http" | "ws" => 80,
            "https" | "wss" => 443,
            _ => return None,
        };
        if rest.is_empty() || rest.contains(['/', '?', '#', '@']) {
            return None;
        }
        let (host, port) = split_host_port(rest)?;
        Some(Origin {
            scheme,
            host,
            port: port.unwrap_or(default_port),
        })
    }

    /// True for `localhost`, `127.0.0.0/8` and `[::1]`.
    pub fn is_loopback(&self) -> bool {
        is_loopback_host(&self.host)
    }
}

// === impl UpgradePolicy ===

impl UpgradePolicy {
    /// Checks an upgrade's `Host`, `Origin`, and token (from the
    /// `Authorization: Bearer` header or a `token` query parameter). The
    /// headers come as raw bytes: one that is present but not a readable
    /// ASCII value is refused, never taken for absent.
    pub fn check(
        &self,
        host: Option<&[u8]>,
        origin: Option<&[u8]>,
        authorization: Option<&[u8]>,
        query: Option<&str>,
    ) -> Result<(), Refusal> {
        self.admit(host, origin, authorization, query).map(drop)
    }

    /// [`UpgradePolicy::check`], returning the identity the token names.
    pub fn admit(
        &self,
        host: Option<&[u8]>,
        origin: Option<&[u8]>,
        authorization: Option<&[u8]>,
        query: Option<&str>,
    ) -> Result<Identity, Refusal> {
        self.check_host(host)?;
        self.check_origin(origin)?;
        self.check_token(authorization, query)
    }

    fn check_host(&self, host: Option<&[u8]>) -> Result<(), Refusal> {
        let name = match host {
            // A Host that cannot be read or parsed is refused whatever the
            // allow-list: it could not be judged.
            Some(raw) => {
                let (name, _) = ascii(raw).and_then(split_host_port).ok_or(Refusal::Host)?;
                Some(name)
            }
            None => None,
        };
        if self.hosts.is_empty() && !self.loopback_only {
            return Ok(());
        }
        let name = name.ok_or(Refusal::Host)?;
        let allowed = if self.hosts.is_empty() {
            is_loopback_host(&name)
        } else {
            self.hosts.iter().any(|h| h.eq_ignore_ascii_case(&name))
        };
        allowed.then_some(()).ok_or(Refusal::Host)
    }

    fn check_origin(&self, origin: Option<&[u8]>) -> Result<(), Refusal> {
        let Some(raw) = origin else { return Ok(()) };
        let text = ascii(raw).ok_or(Refusal::Origin)?.trim();
        if text == "null" {
            return Err(Refusal::NullOrigin);
        }
        let parsed = Origin::parse(text).ok_or(Refusal::Origin)?;
        let allowed = if self.any_origin {
            true
        } else if !self.origins.is_empty() {
            self.origins.contains(&parsed)
        } else {
            !self.loopback_only || parsed.is_loopback()
        };
        allowed.then_some(()).ok_or(Refusal::Origin)
    }

    fn check_token(
        &self,
        authorization: Option<&[u8]>,
        query: Option<&str>,
    ) -> Result<Identity, Refusal> {
        // No credential configured: nothing to read or compare (and no
        // copy of the credentials made per request).
        if self.token.is_none() && self.clients.is_empty() && self.jwt.is_none() {
            return Ok(Identity::default());
        }
        let credentials = Credentials {
            unnamed: self.token.clone(),
            named: self.clients.clone(),
        };
        if credentials.open() && self.jwt.is_none() {
            return Ok(Identity::default());
        }
        let bearer = authorization.and_then(ascii).and_then(bearer_token);
        // Query values are form-encoded (`%2B`, `+` for a space), as
        // `URLSearchParams` writes them; the first `token` counts.
        let from_query = || {
            form_urlencoded::parse(query?.as_bytes())
                .find(|(k, _)| k == "token")
                .map(|(_, v)| v)
        };
        let given = match bearer {
            Some(b) => std::borrow::Cow::Borrowed(b),
            None => from_query().ok_or(Refusal::Token)?,
        };
        // Constant-time: the comparison does not leak how much matched.
        let fixed = (!credentials.open())
            .then(|| credentials.identify(Some(&given)))
            .flatten();
        match (fixed, &self.jwt) {
            (Some(who), _) => Ok(who),
            (None, Some(jwt)) => jwt.identify(&given).ok_or(Refusal::Token),
            (None, None) => Err(Refusal::Token),
        }
    }
}

/// The admin listener's Host check (DNS-rebinding defence): a `Host` that
/// is an IP address or a loopback name passes (a rebinding page cannot
/// make a browser send one: the browser sends the page's own name), and
/// so does one of the `names` (lower case, without port). A missing or
/// unreadable `Host` is refused.
pub fn admin_host(host: Option<&[u8]>, names: &[String]) -> Result<(), Refusal> {
    let (name, _) = host
        .and_then(ascii)
        .and_then(split_host_port)
        .ok_or(Refusal::Host)?;
    let bare = name.trim_start_matches('[').trim_end_matches(']');
    let allowed = is_loopback_host(&name)
        || bare.parse::<IpAddr>().is_ok()
        || names.iter().any(|n| n.eq_ignore_ascii_case(&name));
    allowed.then_some(()).ok_or(Refusal::Host)
}

/// The header value as text, if it is visible ASCII (with spaces and tabs).
fn ascii(raw: &[u8]) -> Option<&str> {
    raw.iter()
        .all(|b| b.is_ascii_graphic() || *b == b' ' || *b == b'\t')
        .then(|| std::str::from_utf8(raw).ok())
        .flatten()
}

/// The token of an `Authorization: Bearer <token>` header value, if it is
/// one (the admin listener's `POST /reload` reads it too).
pub(crate) fn bearer(raw: &[u8]) -> Option<&str> {
    ascii(raw).and_then(bearer_token)
}

/// True when `given` is `expected`, compared in constant time (it does not
/// leak how much matched).
pub(crate) fn same_token(given: &str, expected: &str) -> bool {
    given.len() == expected.len() && bool::from(given.as_bytes().ct_eq(expected.as_bytes()))
}

/// The credentials of `Authorization: Bearer <token>`; the scheme is
/// case-insensitive (RFC 9110 §11.1).
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once([' ', '\t'])?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Splits `host[:port]` / `[v6][:port]` with `http`'s authority parser,
/// lower-casing the host. User info and an empty port, which the parser
/// takes but a `Host` or an origin never carries, are refused, and so is a
/// host of other characters than a DNS name's or an IPv6 literal's.
fn split_host_port(text: &str) -> Option<(String, Option<u16>)> {
    let authority: Authority = text.parse().ok()?;
    if text.contains('@') || text.ends_with(':') {
        return None;
    }
    let host = authority.host();
    let name_chars = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_');
    let v6_chars = |b: u8| b.is_ascii_hexdigit() || matches!(b, b':' | b'.');
    let valid = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => !v6.is_empty() && v6.bytes().all(v6_chars),
        None => !host.is_empty() && host.bytes().all(name_chars),
    };
    if !valid {
        return None;
    }
    // Without user info, anything after the host is `:port`, which must be
    // a port number (the parser keeps an unreadable one, and reports none).
    let port = match text.len() > host.len() {
        true => Some(authority.port_u16()?),
        false => None,
    };
    Some((host.to_ascii_lowercase(), port))
}

fn is_loopback_host(host: &str) -> bool {
    if host == "localhost" {
        return true;
    }
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests;
