//! An upstream's target as log lines show it: the socket path, or the URL
//! with its credentials replaced by `REDACTED` (the userinfo, and the
//! values of query parameters whose name looks like a secret).

use std::borrow::Cow;

use crate::config::UpstreamTarget;

/// What replaces a credential.
const REDACTED: &str = "REDACTED";

/// Query parameter names (lowercase) whose values are hidden when the
/// name contains one of them.
const SECRET_PARAMS: [&str; 8] = [
    "token",
    "key",
    "secret",
    "pass",
    "auth",
    "sig",
    "credential",
    "session",
];

/// The socket path, or the URL with credentials redacted.
pub(crate) fn endpoint(target: &UpstreamTarget) -> Cow<'_, str> {
    match target {
        UpstreamTarget::Unix(path) => path.to_string_lossy(),
        UpstreamTarget::Ws(url) => redacted_url(url),
    }
}

/// `url` as written when it carries no credential; else re-serialized
/// with every credential replaced. A URL that does not parse is shown
/// without its userinfo and query, which may hold credentials.
fn redacted_url(text: &str) -> Cow<'_, str> {
    let Ok(mut url) = url::Url::parse(text) else {
        return Cow::Owned(crudely_redacted(text));
    };
    let mut changed = false;
    if !url.username().is_empty() || url.password().is_some() {
        // Fails only for URLs that cannot have credentials (not ws://).
        changed |= url.set_password(None).is_ok() && url.set_username(REDACTED).is_ok();
    }
    let secret = |name: &str| {
        let name = name.to_ascii_lowercase();
        SECRET_PARAMS.iter().any(|s| name.contains(s))
    };
    if url.query_pairs().any(|(name, _)| secret(&name)) {
        let pairs: Vec<(String, String)> = url
            .query_pairs()
            .map(|(name, value)| {
                let value = if secret(&name) {
                    REDACTED.to_owned()
                } else {
                    value.into_owned()
                };
                (name.into_owned(), value)
            })
            .collect();
        url.query_pairs_mut().clear().extend_pairs(pairs);
        changed = true;
    }
    if changed {
        Cow::Owned(url.into())
    } else {
        Cow::Borrowed(text)
    }
}

/// A URL that did not parse: the scheme, host and path only.
fn crudely_redacted(text: &str) -> String {
    let (scheme, rest) = text.split_once("://").unwrap_or(("", text));
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let rest = match rest.split_once('/') {
        Some((authority, path)) => {
            let host = authority.rsplit('@').next().unwrap_or_default();
            format!("{host}/{path}")
        }
        None => rest.rsplit('@').next().unwrap_or_default().to_owned(),
    };
    format!("{scheme}://{rest}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws(url: &str) -> String {
        endpoint(&UpstreamTarget::Ws(url.to_owned())).into_owned()
    }

    #[test]
    fn a_url_without_credentials_is_shown_as_written() {
        for url in [
            "ws://127.0.0.1:9000/rpc",
            "wss://h.example/rpc?room=7",
            "wss://h:443",
        ] {
            assert_eq!(ws(url), url);
        }
        let path = UpstreamTarget::Unix("/run/hld/daemon.sock".into());
        assert_eq!(endpoint(&path), "/run/hld/daemon.sock");
    }

    #[test]
    fn userinfo_and_secret_query_values_are_redacted() {
        assert_eq!(
            ws("wss://alice:s3cret@h.example/rpc"),
            "wss://REDACTED@h.example/rpc"
        );
        assert_eq!(
            ws("wss://tok3n@h.example/rpc"),
            "wss://REDACTED@h.example/rpc"
        );
        assert_eq!(
            ws("ws://h:9/rpc?room=7&access_token=abc&API_KEY=x&sig=y"),
            "ws://h:9/rpc?room=7&access_token=REDACTED&API_KEY=REDACTED&sig=REDACTED"
        );
        let shown = ws("ws://u:p@h:9/?token=t0k");
        assert!(!shown.contains("t0k") && !shown.contains("u:p"), "{shown}");
    }

    #[test]
    fn an_unparsable_url_loses_its_userinfo_and_query() {
        let shown = ws("ws://u:pw@[bad/rpc?token=t0k");
        assert!(!shown.contains("pw") && !shown.contains("t0k"), "{shown}");
        assert!(shown.starts_with("ws://"), "{shown}");
    }
}
