//! Secrets hidden wherever configuration values are shown: `switchyard
//! check`, configuration problems (also those a reload logs and returns),
//! the status page and log lines.
//!
//! A secret value is shown as [`MASK`]. A URL keeps its scheme, host, port
//! and path, so that an operator can still tell which server it names, but
//! its user info and the values of secret-looking query parameters
//! (`token`, `password`, `api_key`, …) become [`MASK`]. This module is the
//! only place that decides what is secret; it imports nothing from the
//! crate.

use std::borrow::Cow;

/// What a hidden secret is shown as.
pub const MASK: &str = "***";

/// Parts of a query parameter's name that make its value a secret
/// (compared in lower case).
const SECRET_PARAMS: [&str; 10] = [
    "token", "secret", "pass", "pwd", "auth", "key", "sig", "cred", "session", "jwt",
];

/// Configuration keys whose values are secrets or may hold one (URLs
/// with credentials).
const SECRET_KEYS: [&str; 6] = [
    "auth_token",
    "reload_token",
    "nats_url",
    "url",
    "endpoint",
    // A named client's (`[[listeners.<name>.clients]]`).
    "token",
];

/// True when the configuration key `key` (its last part) holds a secret
/// or may hold one: its value is never shown as written.
pub fn is_secret_key(key: &str) -> bool {
    SECRET_KEYS.contains(&key)
}

/// A secret as shown: [`MASK`], or empty when it is not set (so that "not
/// set" stays visible).
pub fn secret(value: &str) -> &'static str {
    if value.is_empty() {
        ""
    } else {
        MASK
    }
}

/// `text` with the credentials of the URL it holds hidden: user info
/// (name and password) and the values of secret-looking query parameters.
/// A comma-separated list (NATS server lists) is redacted item by item.
/// Text that does not parse as a URL but could hold credentials (an `@`
/// or a `?`) is hidden whole; other text is returned unchanged.
pub fn url(text: &str) -> Cow<'_, str> {
    if text.contains(',') {
        let items: Vec<Cow<'_, str>> = text.split(',').map(one_url).collect();
        if items.iter().all(|i| matches!(i, Cow::Borrowed(_))) {
            return Cow::Borrowed(text);
        }
        return Cow::Owned(items.join(","));
    }
    one_url(text)
}

/// True when a query parameter (or similar) named `name` holds a secret.
pub fn is_secret_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    SECRET_PARAMS.iter().any(|part| lower.contains(part))
}

fn one_url(text: &str) -> Cow<'_, str> {
    let Ok(mut parsed) = url::Url::parse(text.trim()) else {
        return match text.contains(['@', '?']) {
            true => Cow::Borrowed(MASK),
            false => Cow::Borrowed(text),
        };
    };
    let mut changed = false;
    if !parsed.username().is_empty() || parsed.password().is_some() {
        let had_password = parsed.password().is_some();
        // Both fail only for URLs without a host, which carry no user info.
        let _ = parsed.set_username(MASK);
        if had_password {
            let _ = parsed.set_password(Some(MASK));
        }
        changed = true;
    }
    let secret_query = parsed.query_pairs().any(|(k, _)| is_secret_name(&k));
    if secret_query {
        let pairs: Vec<(String, String)> = parsed
            .query_pairs()
            .map(|(k, v)| {
                let v = if is_secret_name(&k) { MASK.into() } else { v };
                (k.into_owned(), v.into_owned())
            })
            .collect();
        parsed.query_pairs_mut().clear().extend_pairs(pairs);
        changed = true;
    }
    match changed {
        true => Cow::Owned(parsed.to_string()),
        false => Cow::Borrowed(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_info_and_secret_parameters_are_hidden() {
        assert_eq!(
            url("ws://alice:pw@host:8080/rpc?token=abc&x=1"),
            "ws://***:***@host:8080/rpc?token=***&x=1"
        );
        assert_eq!(
            url("nats://tok@127.0.0.1:4222"),
            "nats://***@127.0.0.1:4222"
        );
        assert_eq!(
            url("wss://h/rpc?API_KEY=1&sig=2&page=3"),
            "wss://h/rpc?API_KEY=***&sig=***&page=3"
        );
        assert_eq!(
            url("nats://a:b@h1:4222,nats://h2:4222"),
            "nats://***:***@h1:4222,nats://h2:4222"
        );
    }

    #[test]
    fn urls_without_credentials_are_unchanged() {
        for plain in [
            "ws://127.0.0.1:9",
            "http://h/v1/traces?x=1",
            "not a url",
            "",
        ] {
            assert!(
                matches!(url(plain), Cow::Borrowed(t) if t == plain),
                "{plain}"
            );
        }
        assert_eq!(url("bad url with @ in it"), MASK);
        assert_eq!(secret(""), "");
        assert_eq!(secret("x"), MASK);
    }
}
