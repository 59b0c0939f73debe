//! `[pubsub] backend` and `[pubsub.nats]`: which broker carries plain
//! topics, and the NATS core backbone's settings.

use std::path::PathBuf;

use super::problems::Problems;
use super::raw::{RawPubsubNats, DEFAULT_SUBJECT_PREFIX};
use crate::pubsub::nats::{Auth, Settings, Tls};

/// The largest `max_payload_bytes` accepted (NATS' own hard limit).
const MAX_PAYLOAD: usize = 64 << 20;

/// Validates the backend choice and, for `"nats"`, its table: `None` for
/// the in-process broker.
pub(super) fn backbone(backend: &str, raw: &RawPubsubNats, p: &mut Problems) -> Option<Settings> {
    let key = "pubsub";
    let nats = match backend {
        "" | "local" => false,
        "nats" => true,
        other => {
            p.choice(key, "backend", other, &[("local", false), ("nats", true)]);
            false
        }
    };
    if !nats {
        if *raw != RawPubsubNats::default() && matches!(backend, "" | "local") {
            p.push(
                "pubsub.nats",
                "only used by backend \"nats\" (backend is \"local\")",
            );
        }
        return None;
    }
    Some(settings(raw, p))
}

fn settings(raw: &RawPubsubNats, p: &mut Problems) -> Settings {
    let key = "pubsub.nats";
    if raw.urls.is_empty() {
        p.at(key, "urls", "required for backend \"nats\"");
    }
    for url in &raw.urls {
        if !(url.starts_with("nats://") || url.starts_with("tls://")) {
            let shown = crate::redact::url(url);
            p.at(
                key,
                "urls",
                format!("expected a nats:// URL (got {shown:?})"),
            );
        }
    }
    let tls = Tls {
        ca_file: path(&raw.tls_ca_file),
        client: match (path(&raw.tls_cert_file), path(&raw.tls_key_file)) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            _ => {
                p.at(key, "tls_cert_file", "and tls_key_file go together");
                None
            }
        },
        required: raw.tls_required,
    };
    let prefix = &raw.subject_prefix;
    let prefix_ok = prefix
        .strip_suffix('.')
        .is_some_and(|p| crate::pubsub::topic::validate_topic(p).is_ok());
    if !prefix_ok {
        let msg = format!(
            "{prefix:?} is not a subject prefix: tokens without wildcards, ending with '.' \
             (e.g. {DEFAULT_SUBJECT_PREFIX:?})"
        );
        p.at(key, "subject_prefix", msg);
    }
    if raw.max_payload_bytes == 0 || raw.max_payload_bytes > MAX_PAYLOAD {
        let msg = format!("must be between 1 and {MAX_PAYLOAD}");
        p.at(key, "max_payload_bytes", msg);
    }
    p.nonzero(key, "pending_messages", raw.pending_messages);
    p.nonzero(key, "publish_queue", raw.publish_queue);
    Settings {
        urls: raw.urls.clone(),
        auth: auth(raw, p),
        tls,
        subject_prefix: prefix.clone(),
        publish_upstream_events: raw.publish_upstream_events,
        max_payload_bytes: raw.max_payload_bytes.max(1),
        pending_messages: raw.pending_messages.max(1),
        publish_queue: raw.publish_queue.max(1),
    }
}

/// One way to authenticate at most: user and password together, a token,
/// or a `.creds` file.
fn auth(raw: &RawPubsubNats, p: &mut Problems) -> Auth {
    let key = "pubsub.nats";
    let user = !raw.user.is_empty() || !raw.password.is_empty();
    let ways = [user, !raw.token.is_empty(), !raw.creds_file.is_empty()];
    if ways.iter().filter(|w| **w).count() > 1 {
        p.push(
            key,
            "set one of user/password, token or creds_file, not several",
        );
    }
    if user && (raw.user.is_empty() || raw.password.is_empty()) {
        p.at(key, "user", "and password go together");
    }
    if user {
        Auth::UserPassword {
            user: raw.user.clone(),
            password: raw.password.clone(),
        }
    } else if !raw.token.is_empty() {
        Auth::Token(raw.token.clone())
    } else if let Some(file) = path(&raw.creds_file) {
        Auth::CredsFile(file)
    } else {
        Auth::None
    }
}

fn path(text: &str) -> Option<PathBuf> {
    (!text.is_empty()).then(|| PathBuf::from(text))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // in tests a panic is the failure report
mod tests {
    use crate::config::Config;
    use crate::pubsub::nats::Auth;

    const LISTENER: &str = "[listeners.l]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:0\"\n";

    fn load(pubsub: &str) -> Result<Config, Vec<String>> {
        Config::from_toml(&format!("{LISTENER}\n{pubsub}")).map_err(|e| e.problems().to_vec())
    }

    #[test]
    fn local_by_default_and_nats_when_asked() {
        assert_eq!(load("").unwrap().pubsub_nats, None);
        let cfg = load(
            "[pubsub]\nbackend = \"nats\"\n[pubsub.nats]\nurls = [\"nats://a:4222\", \"tls://b:4222\"]\ntoken = \"t0k\"\n",
        )
        .unwrap();
        let nats = cfg.pubsub_nats.unwrap();
        assert_eq!(nats.urls.len(), 2);
        assert_eq!(nats.auth, Auth::Token("t0k".into()));
        assert_eq!(nats.subject_prefix, "switchyard.topics.");
        assert!(nats.publish_upstream_events);
    }

    #[test]
    fn every_problem_is_reported_and_no_secret_shown() {
        let problems = load(
            "[pubsub]\nbackend = \"nats\"\n[pubsub.nats]\nurls = [\"http://u:hunter2@h\"]\n\
             user = \"u\"\ntoken = \"s3cret\"\nsubject_prefix = \"a.*.\"\ntls_cert_file = \"c.pem\"\n\
             max_payload_bytes = 0\npending_messages = 0\n",
        )
        .unwrap_err();
        let all = problems.join("\n");
        for part in [
            "pubsub.nats.urls: expected a nats:// URL",
            "set one of user/password, token or creds_file",
            "pubsub.nats.user: and password go together",
            "pubsub.nats.subject_prefix",
            "pubsub.nats.tls_cert_file: and tls_key_file go together",
            "pubsub.nats.max_payload_bytes",
            "pubsub.nats.pending_messages",
        ] {
            assert!(all.contains(part), "{part} missing in:\n{all}");
        }
        assert!(!all.contains("hunter2") && !all.contains("s3cret"), "{all}");
        let required = load("[pubsub]\nbackend = \"nats\"\n").unwrap_err();
        assert_eq!(
            required,
            ["pubsub.nats.urls: required for backend \"nats\""]
        );
        let unused = load("[pubsub.nats]\nurls = [\"nats://a:4222\"]\n").unwrap_err();
        assert_eq!(
            unused,
            ["pubsub.nats: only used by backend \"nats\" (backend is \"local\")"]
        );
        let typo = load("[pubsub]\nbackend = \"natz\"\n").unwrap_err();
        assert!(typo[0].contains("did you mean \"nats\""), "{typo:?}");
    }

    #[test]
    fn check_output_masks_credentials() {
        let raw = crate::config::raw::RawConfig::from_toml(&format!(
            "{LISTENER}\n[pubsub]\nbackend = \"nats\"\n[pubsub.nats]\n\
             urls = [\"nats://u:pw1@h:4222\"]\nuser = \"u\"\npassword = \"pw2\"\n"
        ))
        .unwrap();
        let shown = raw.to_toml_string();
        assert!(!shown.contains("pw1") && !shown.contains("pw2"), "{shown}");
        assert!(shown.contains("nats://***:***@h:4222"), "{shown}");
    }
}
