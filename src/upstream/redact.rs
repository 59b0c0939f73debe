//! An upstream's target as log lines show it: the socket path, or the URL
//! with its credentials hidden by [`crate::redact`] (the userinfo, and the
//! values of query parameters whose name looks like a secret).

use std::borrow::Cow;

use crate::config::UpstreamTarget;

/// The socket path, or the URL with credentials hidden.
pub(crate) fn endpoint(target: &UpstreamTarget) -> Cow<'_, str> {
    match target {
        UpstreamTarget::Unix(path) => path.to_string_lossy(),
        UpstreamTarget::Ws(url) => crate::redact::url(url),
        UpstreamTarget::Http(h) => crate::redact::url(&h.url),
        // The program only: its arguments may carry a secret.
        UpstreamTarget::Process(spec) => Cow::Owned(process_endpoint(spec)),
    }
}

/// A process upstream as shown: `command:<program>`, never its arguments
/// or environment (either may carry a secret).
pub(crate) fn process_endpoint(spec: &crate::config::ProcessSpec) -> String {
    let program = spec.argv.first().map_or("", String::as_str);
    format!("command:{program}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Arguments and environment may carry secrets: only the program shows.
    #[test]
    fn a_process_is_shown_by_its_program_only() {
        let spec = crate::config::ProcessSpec {
            argv: vec!["/usr/bin/tool".into(), "--token=s3cret".into()],
            env: [("KEY".to_owned(), "s3cret".to_owned())].into(),
            cwd: None,
        };
        let target = UpstreamTarget::Process(spec);
        assert_eq!(endpoint(&target), "command:/usr/bin/tool");
    }

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
    fn userinfo_and_secret_query_values_are_hidden() {
        assert_eq!(
            ws("wss://alice:s3cret@h.example/rpc"),
            "wss://***:***@h.example/rpc"
        );
        assert_eq!(ws("wss://tok3n@h.example/rpc"), "wss://***@h.example/rpc");
        assert_eq!(
            ws("ws://h:9/rpc?room=7&access_token=abc&API_KEY=x&sig=y"),
            "ws://h:9/rpc?room=7&access_token=***&API_KEY=***&sig=***"
        );
        let shown = ws("ws://u:p@[bad/rpc?token=t0k");
        assert!(!shown.contains("t0k") && !shown.contains("u:p"), "{shown}");
    }
}
