//! The serde mirror of the configuration file, before validation.
//!
//! [`RawConfig`] is what figment produces from built-in defaults ← TOML file ←
//! `SWITCHYARD_*` environment. It holds plain strings and integers with the
//! unit in the key name (`_ms`, `_bytes`), and is deliberately permissive about
//! *values*: enumerations and addresses stay strings here, so that
//! [`validate`](super::validate::validate) can report every bad value at once
//! instead of stopping at the first one serde meets. It is strict about *keys*
//! (`deny_unknown_fields`), because a misspelt key silently falling back to its
//! default is the worst kind of configuration bug; [`read`] reports every
//! unknown key and wrongly typed value, not only the first.
//!
//! Nothing here checks semantics or touches the network.

use std::collections::BTreeMap;
use std::path::Path;

use figment::providers::{Format, Serialized, Toml};
use figment::Figment;
use serde::{Deserialize, Serialize};

use super::problems::ConfigError;

mod env;
mod listener;
mod pubsub;
mod read;
mod upstream;

pub use env::{ignored_env_vars, CLIENT_TOKEN_ENV, ENV_PREFIX, ENV_SEPARATOR};
pub use listener::RawListener;
pub use pubsub::{RawPubsubNats, DEFAULT_SUBJECT_PREFIX};
pub use upstream::RawUpstream;

pub(crate) use read::Read;

/// Default `tracing.endpoint`: an OpenTelemetry Collector on this host.
pub const DEFAULT_OTLP_ENDPOINT: &str = "http://127.0.0.1:4318/v1/traces";

/// Default `tracing.service_name`.
pub const DEFAULT_SERVICE_NAME: &str = "switchyard";

/// The whole configuration file, as written.
// Not `Eq`: `tracing.sampling_ratio` is a float.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawConfig {
    /// `[gateway]`: process-wide settings (all keys have defaults).
    pub gateway: RawGateway,
    /// `[log]`: logging output (all keys have defaults).
    pub log: RawLog,
    /// `[listeners.<name>]`, in name order. Default: none (at least one is
    /// required by validation).
    pub listeners: BTreeMap<String, RawListener>,
    /// `[upstreams.<name>]`, in name order. Default: none.
    pub upstreams: BTreeMap<String, RawUpstream>,
    /// `[[routes]]`: which upstream serves which listener's methods.
    /// Default: none.
    pub routes: Vec<RawRoute>,
    /// `[admin]`: the admin listener (metrics, probes, status page).
    pub admin: RawAdmin,
    /// `[tracing]`: span export over OTLP (all keys have defaults; off).
    pub tracing: RawTracing,
    /// `[persistence]`: the store of persistent subscriptions (all keys
    /// have defaults: in memory).
    pub persistence: RawPersistence,
    /// `[[persistent_topics]]`: the topics stored for persistent
    /// subscriptions, and what each keeps. Default: none (every
    /// `rpc.subscribe.persistent` is then -32602).
    pub persistent_topics: Vec<RawPersistentTopic>,
    /// `[pubsub]`: what clients' topic subscriptions may hold (all keys
    /// have defaults).
    pub pubsub: RawPubsub,
}

/// `[pubsub]`: the bounds on clients' `rpc.subscribe` patterns. A pattern
/// accounts for `2 × bytes + 128 × tokens + 256` bytes of index.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawPubsub {
    /// Patterns one connection may hold. Default `1000`.
    pub max_subscriptions: usize,
    /// Tokens one pattern may have, wildcards included. Default `16`.
    pub max_pattern_tokens: usize,
    /// Bytes of index one connection's patterns may account for. Default
    /// `1048576` (1 MiB).
    pub index_bytes_per_connection: usize,
    /// Bytes of index the connections of one client address may account
    /// for. Default `67108864` (64 MiB).
    pub index_bytes_per_ip: usize,
    /// Bytes of index all connections may account for. Default
    /// `268435456` (256 MiB).
    pub index_bytes_total: usize,
    /// `"local"` (this process's broker only) or `"nats"` (NATS core as
    /// the backbone, `[pubsub.nats]`). Default `"local"`.
    pub backend: String,
    /// `[pubsub.nats]`: the backbone's server, credentials, TLS and
    /// subject prefix (all keys have defaults but `urls`).
    pub nats: RawPubsubNats,
}

/// `[persistence]`: where persistent subscriptions are stored.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawPersistence {
    /// `"memory"` (this process only), `"embedded"` (a database under
    /// `path`, survives restarts) or `"nats"` (JetStream at `nats_url`,
    /// shared by several instances). Default `""`: `"embedded"` when
    /// `path` is set, else `"memory"`.
    pub backend: String,
    /// `embedded`: the data directory (created if missing). Default `""`.
    pub path: String,
    /// `nats`: the server URL, e.g. `"nats://127.0.0.1:4222"`. Default `""`.
    pub nats_url: String,
    /// Messages one subscription may have sent and unacknowledged (more
    /// precisely: sequences above its acknowledged floor). Default `1024`.
    pub window: usize,
    /// Durable subscriptions one client (identity) may have, held or
    /// detached. Default `1000`.
    pub max_subscriptions_per_client: usize,
    /// Subscriptions one connection may hold at once. Default `1000`.
    pub max_subscriptions_per_connection: usize,
    /// Subscriptions of one topic held at once (each stored message is
    /// one frame per held subscription). Default `1000`.
    pub max_subscriptions_per_topic: usize,
}

/// `[[persistent_topics]]`: one pattern of persistent topics.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawPersistentTopic {
    /// A topic pattern (NATS style, `*` and `>` allowed); every concrete
    /// topic it matches is stored. The first matching entry decides a
    /// topic's retention. Required; no default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
    /// Messages older than this are evicted. Default: no limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_age_seconds: Option<u64>,
    /// At most this many messages per topic, the oldest evicted first.
    /// Default: no limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_count: Option<u64>,
    /// At most this many bytes of data per topic, the oldest evicted
    /// first. Default: no limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<u64>,
    /// An unacknowledged message is sent again on the same connection
    /// after this long. Default `60000`.
    pub ack_timeout_ms: u64,
}

/// `[tracing]`: span export (OpenTelemetry, OTLP).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawTracing {
    /// Export spans. Default `false`.
    pub enabled: bool,
    /// `http://` URL the spans are POSTed to. Default
    /// `"http://127.0.0.1:4318/v1/traces"`.
    pub endpoint: String,
    /// `"http/protobuf"` (the only one supported). Default `"http/protobuf"`.
    pub protocol: String,
    /// Share of new traces exported, `0.0` to `1.0`; a sampled `traceparent`
    /// is always followed. Default `1.0`.
    pub sampling_ratio: f64,
    /// Record client request ids on spans (`rpc.jsonrpc.request_id`).
    /// Default `false`: ids are client data.
    pub record_ids: bool,
    /// `service.name` of the exported spans. Default `"switchyard"`.
    pub service_name: String,
}

/// `[admin]`: the admin listener.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawAdmin {
    /// `IP:port` serving `/metrics`, `/livez`, `/readyz` and the status page
    /// (port 0 picks a free port). Default `""`: no admin listener, so two
    /// gateways (or test runs) on one host never fight over a fixed port;
    /// deployments set it, e.g. `"127.0.0.1:9090"`.
    pub address: String,
    /// Bearer token that `POST /reload` must send (`Authorization: Bearer
    /// <token>`). Default `""`: the endpoint refuses every request (SIGHUP
    /// and `switchyard reload` still work, the latter only with a token).
    pub reload_token: String,
    /// Host names the admin listener answers to, besides IP addresses and
    /// loopback names (`localhost`), which it always accepts: a request
    /// with any other `Host` is refused with `403`, so that a web page
    /// cannot read it through DNS rebinding. List the names scrapers and
    /// people use, e.g. `["switchyard"]` when Prometheus scrapes
    /// `switchyard:9090`. Default `[]`.
    pub allowed_hosts: Vec<String>,
}

/// `[gateway]`: process-wide settings.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawGateway {
    /// Time in-flight requests get to finish after SIGTERM/SIGINT before they
    /// are answered with `unavailable`. Default `5000`.
    pub shutdown_grace_ms: u64,
    /// Runtime worker threads. `0` = one per CPU core. A sidecar sharing a
    /// small machine with its daemon does best with `1` (no cross-thread
    /// wake-ups). Default `0`.
    pub worker_threads: usize,
}

/// `[log]`: logging output.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawLog {
    /// `"text"` or `"json"`. Default `"text"`.
    pub format: String,
    /// A tracing `EnvFilter` directive such as `"info"` or
    /// `"switchyard=debug,info"`. Default `"info"`.
    pub level: String,
}

/// `[[routes]]`: send a listener's methods to an upstream.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawRoute {
    /// Name of a `[listeners.<name>]`. Required; no default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listener: Option<String>,
    /// Name of an `[upstreams.<name>]`. Required; no default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
    /// Methods starting with this prefix go to `upstream` (longest prefix
    /// wins). Absent (the default): this is the listener's default route.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method_prefix: Option<String>,
}

// === impl RawConfig ===

impl RawConfig {
    /// Merges defaults ← `file` (if given; a missing file is an error) ←
    /// `SWITCHYARD_*` environment (only names with `__`, nested keys split
    /// on it, lower-cased but for listener and upstream names, which match
    /// the file's case-insensitively).
    /// Unknown keys and wrongly typed values are load errors, all reported.
    pub fn load(file: Option<&Path>) -> Result<Self, ConfigError> {
        strict(Self::read(file)?)
    }

    /// Merges defaults ← the TOML document `text`; the environment is not
    /// consulted (tests, the embedded demo).
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        strict(Self::read_toml(text)?)
    }

    /// Like [`load`](Self::load), but what deserializes is returned along
    /// with the load errors, so that validation can report its problems
    /// in the same run.
    pub(crate) fn read(file: Option<&Path>) -> Result<Read, ConfigError> {
        let mut figment = Figment::from(Serialized::defaults(Self::default()));
        if let Some(path) = file {
            // Checked up front: figment would report a bare I/O error.
            if let Err(e) = std::fs::metadata(path) {
                return Err(ConfigError::load(format!(
                    "{}: cannot read configuration file: {e}",
                    path.display()
                )));
            }
            figment = figment.merge(Toml::file_exact(path));
        }
        let env = env::environment(&figment);
        read::read(&figment.merge(env))
    }

    /// Like [`from_toml`](Self::from_toml), keeping what deserializes.
    pub(crate) fn read_toml(text: &str) -> Result<Read, ConfigError> {
        read::read(&Figment::from(Serialized::defaults(Self::default())).merge(Toml::string(text)))
    }

    /// Renders the effective configuration as TOML for `switchyard check`:
    /// defaults filled in, each upstream's profile applied and every secret
    /// hidden ([`redacted`](Self::redacted)).
    pub fn to_toml_string(&self) -> String {
        let mut effective = self.redacted();
        for upstream in effective.upstreams.values_mut() {
            *upstream = upstream.with_profile_defaults();
        }
        toml::to_string(&effective).expect(
            "RawConfig holds only strings, integers, bools, arrays and string-keyed tables, which TOML can represent; qed",
        )
    }

    /// The same configuration with every secret shown as
    /// [`redact::MASK`](crate::redact::MASK): listener `auth_token`s and
    /// named clients' `token`s,
    /// `[admin] reload_token`, upstream `env` and `headers` values, and
    /// the credentials in URLs (upstream `url`,
    /// `[persistence] nats_url`, `[tracing] endpoint`), and `[pubsub.nats]`'s
    /// `password`, `token` and `urls`.
    pub fn redacted(&self) -> RawConfig {
        use crate::redact;
        let mut shown = self.clone();
        for listener in shown.listeners.values_mut() {
            if let Some(token) = &mut listener.auth_token {
                *token = redact::MASK.to_owned();
            }
            for client in &mut listener.clients {
                if let Some(token) = &mut client.token {
                    *token = redact::MASK.to_owned();
                }
            }
        }
        for upstream in shown.upstreams.values_mut() {
            if let Some(url) = &mut upstream.url {
                *url = redact::url(url).into_owned();
            }
            // A process's environment is where API keys are passed.
            for value in upstream.env.values_mut() {
                *value = redact::secret(value).to_owned();
            }
            // An HTTP upstream's headers carry its credentials.
            for value in upstream.headers.values_mut() {
                *value = redact::secret(value).to_owned();
            }
        }
        shown.admin.reload_token = redact::secret(&shown.admin.reload_token).to_owned();
        shown.persistence.nats_url = redact::url(&shown.persistence.nats_url).into_owned();
        shown.tracing.endpoint = redact::url(&shown.tracing.endpoint).into_owned();
        shown.pubsub.nats = shown.pubsub.nats.redacted();
        shown
    }
}

/// The configuration only if it read without a single load error.
fn strict(read: Read) -> Result<RawConfig, ConfigError> {
    if read.problems.is_empty() {
        Ok(read.raw)
    } else {
        Err(ConfigError::Load(read.problems))
    }
}

// === impl RawGateway ===

impl Default for RawGateway {
    fn default() -> Self {
        Self {
            shutdown_grace_ms: 5_000,
            worker_threads: 0,
        }
    }
}

// === impl RawLog ===

impl Default for RawLog {
    fn default() -> Self {
        Self {
            format: "text".to_owned(),
            level: "info".to_owned(),
        }
    }
}

// === impl RawPubsub ===

impl Default for RawPubsub {
    fn default() -> Self {
        let limits = crate::pubsub::Limits::default();
        Self {
            max_subscriptions: limits.max_subscriptions,
            max_pattern_tokens: limits.max_pattern_tokens,
            index_bytes_per_connection: limits.index_bytes_per_connection,
            index_bytes_per_ip: limits.index_bytes_per_ip,
            index_bytes_total: limits.index_bytes_total,
            backend: "local".to_owned(),
            nats: RawPubsubNats::default(),
        }
    }
}

// === impl RawPersistence ===

impl Default for RawPersistence {
    fn default() -> Self {
        Self {
            backend: String::new(),
            path: String::new(),
            nats_url: String::new(),
            window: crate::persist::DEFAULT_WINDOW,
            max_subscriptions_per_client: crate::persist::owner::DEFAULT_PER_OWNER,
            max_subscriptions_per_connection: crate::persist::owner::DEFAULT_PER_CONNECTION,
            max_subscriptions_per_topic: crate::persist::owner::DEFAULT_PER_TOPIC,
        }
    }
}

// === impl RawPersistentTopic ===

impl Default for RawPersistentTopic {
    fn default() -> Self {
        Self {
            topic: None,
            max_age_seconds: None,
            max_count: None,
            max_bytes: None,
            ack_timeout_ms: 60_000,
        }
    }
}

// === impl RawTracing ===

impl Default for RawTracing {
    fn default() -> Self {
        Self {
            enabled: false,
            endpoint: DEFAULT_OTLP_ENDPOINT.to_owned(),
            protocol: "http/protobuf".to_owned(),
            sampling_ratio: 1.0,
            record_ids: false,
            service_name: DEFAULT_SERVICE_NAME.to_owned(),
        }
    }
}
