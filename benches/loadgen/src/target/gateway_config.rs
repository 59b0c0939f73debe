//! The switchyard configuration a gateway target runs with: its listeners
//! (each on a free loopback port, or a socket in the run's dir for
//! NDJSON), the upstream they are routed to, and the TOML generated from
//! them, tuned or at switchyard's shipped defaults.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use switchyard::dialect::Dialect;

use super::super::conn::Endpoint;
use super::StartOpts;

/// The path switchyard's WebSocket listeners serve.
const LISTENER_PATH: &str = "/rpc";

/// One listener of a generated configuration.
#[derive(Debug, Clone)]
pub(crate) struct ListenerSpec {
    /// `[listeners.<name>]`.
    pub(crate) name: &'static str,
    /// Its dialect.
    pub(crate) dialect: Dialect,
    /// The keys that say where it listens (`address` and `path`, or `socket`).
    pub(crate) location: String,
    /// Sideband only: whether it offers CBOR envelopes (`None`: the default).
    pub(crate) sideband_cbor: Option<bool>,
}

/// What switchyard forwards to.
#[derive(Debug, Clone)]
pub(crate) enum Upstream {
    /// The NDJSON daemon's Unix socket.
    Ndjson(PathBuf),
    /// The WebSocket daemon's `ws://…/rpc` URL.
    JsonRpcWs(String),
}

/// The configuration of `launch::switchyard_with_feed`, and where clients
/// connect: the default configuration plus `feed`.
pub(super) fn feed_gateway_toml(
    opts: &StartOpts,
    socket: &Path,
    feed: &str,
    dir: &Path,
) -> anyhow::Result<(String, Endpoint)> {
    let (spec, endpoint) = listener_spec("bench", Dialect::JsonRpc, dir)?;
    let defaults = StartOpts {
        pool_size: None,
        gateway_workers: 0,
        default_config: true,
        ..opts.clone()
    };
    let mut toml = gateway_toml(&[spec], &Upstream::Ndjson(socket.to_owned()), &defaults);
    toml.push('\n');
    toml.push_str(feed);
    Ok((toml, endpoint))
}

/// The scaleout target's `[pubsub]` tables: NATS core at `url` as the
/// backbone of plain topics, every other backbone key at its default;
/// `publishes` false on every instance but the one whose feed publishes
/// (as docs/scale-out.md tells a deployment to do).
pub(super) fn backbone_toml(url: &str, publishes: bool) -> String {
    let mut out = format!("[pubsub]\nbackend = \"nats\"\n\n[pubsub.nats]\nurls = [\"{url}\"]\n");
    if !publishes {
        out.push_str("publish_upstream_events = false\n");
    }
    out
}

/// A listener named `name` of `dialect`: a free loopback port for the
/// WebSocket dialects and `jsonrpc-http`, `DIR/<name>.sock` for NDJSON;
/// and where clients connect to it.
pub(crate) fn listener_spec(
    name: &'static str,
    dialect: Dialect,
    dir: &Path,
) -> anyhow::Result<(ListenerSpec, Endpoint)> {
    let (location, endpoint) = if dialect.on_tcp() {
        let addr = free_port().context("picking a free port")?;
        let location = format!("address = \"{addr}\"\npath = \"{LISTENER_PATH}\"");
        let endpoint = if dialect.is_http() {
            http_endpoint(addr, LISTENER_PATH)
        } else {
            ws_endpoint(addr, LISTENER_PATH)
        };
        (location, endpoint)
    } else {
        let socket = dir.join(format!("{name}.sock"));
        let location = format!("socket = \"{}\"", socket.display());
        (location, Endpoint::Unix(socket))
    };
    let spec = ListenerSpec {
        name,
        dialect,
        location,
        sideband_cbor: None,
    };
    Ok((spec, endpoint))
}

/// A WebSocket endpoint on a loopback address.
pub(super) fn ws_endpoint(addr: SocketAddr, path: &str) -> Endpoint {
    Endpoint::Ws {
        addr,
        url: format!("ws://{addr}{path}"),
    }
}

/// An HTTP endpoint on a loopback address: what is POSTed to.
pub(super) fn http_endpoint(addr: SocketAddr, path: &str) -> Endpoint {
    Endpoint::Http {
        addr,
        url: format!("http://{addr}{path}"),
    }
}

/// A port that was free a moment ago (bound to 127.0.0.1:0, then closed).
pub(super) fn free_port() -> std::io::Result<SocketAddr> {
    std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()
}

/// The configuration: `listeners`, each routed to `upstream`.
///
/// Tuned (the default): admission limits raised far above any scenario so
/// that only the data path is measured, the pool size and worker threads
/// from the command line, quick reconnects, warnings only in the log.
/// `--default-config`: nothing but where each listener and the upstream
/// are, and the routes; every other key is left to switchyard's shipped
/// defaults (except a pool size a scenario needs, fan-in's 1).
pub(super) fn gateway_toml(
    listeners: &[ListenerSpec],
    upstream: &Upstream,
    opts: &StartOpts,
) -> String {
    let mut out = String::new();
    if !opts.default_config {
        out.push_str(&format!(
            "[gateway]\nshutdown_grace_ms = 100\nworker_threads = {}\n\n[log]\nlevel = \"warn\"\n\n",
            opts.gateway_workers
        ));
    }
    for l in listeners {
        out.push_str(&format!(
            "[listeners.{}]\ndialect = \"{}\"\n{}\n",
            l.name,
            l.dialect.as_str(),
            l.location
        ));
        if !opts.default_config {
            out.push_str("max_in_flight = 4096\noutbox_capacity = 4096\n");
        }
        // A feature switch, not a tuning key: which envelopes the listener offers.
        if let Some(cbor) = l.sideband_cbor.filter(|_| !opts.default_config) {
            out.push_str(&format!("sideband_cbor = {cbor}\n"));
        }
        out.push('\n');
    }
    out.push_str("[upstreams.daemon]\n");
    out.push_str(&match upstream {
        Upstream::Ndjson(socket) => format!(
            "dialect = \"{}\"\nsocket = \"{}\"\n",
            Dialect::Ndjson,
            socket.display()
        ),
        Upstream::JsonRpcWs(url) => {
            format!("dialect = \"{}\"\nurl = \"{url}\"\n", Dialect::JsonRpc)
        }
    });
    if let Some(pool) = opts.pool_size {
        out.push_str(&format!("pool_size = {pool}\n"));
    }
    if !opts.default_config {
        out.push_str(
            "max_in_flight_per_connection = 65536\nmax_pending = 65536\nmax_queued = 65536\n\
             backoff_initial_ms = 20\nbackoff_max_ms = 200\n",
        );
    }
    for l in listeners {
        out.push_str(&format!(
            "\n[[routes]]\nlistener = \"{}\"\nupstream = \"daemon\"\n",
            l.name
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(default_config: bool, pool_size: Option<usize>) -> StartOpts {
        StartOpts {
            switchyard: PathBuf::from("switchyard"),
            pool_size,
            gateway_workers: 1,
            default_config,
        }
    }

    /// Every dialect as a listener, in front of the NDJSON daemon.
    fn toml(opts: &StartOpts, dir: &Path) -> String {
        let names = ["a", "b", "c", "d", "e"];
        let dialects = [
            Dialect::JsonRpc,
            Dialect::Holon,
            Dialect::Sideband,
            Dialect::Ndjson,
            Dialect::JsonRpcHttp,
        ];
        let listeners: Vec<ListenerSpec> = names
            .into_iter()
            .zip(dialects)
            .map(|(name, d)| {
                let (spec, _) = listener_spec(name, d, dir).expect("listener");
                ListenerSpec {
                    sideband_cbor: (d == Dialect::Sideband).then_some(false),
                    ..spec
                }
            })
            .collect();
        gateway_toml(&listeners, &Upstream::Ndjson(dir.join("daemon.sock")), opts)
    }

    #[test]
    fn both_configurations_are_valid() {
        let dir = tempfile::tempdir().expect("dir");
        for o in [opts(false, Some(2)), opts(true, None), opts(true, Some(1))] {
            let text = toml(&o, dir.path());
            if let Err(e) = switchyard::config::Config::from_toml(&text) {
                panic!("{e}\n{text}");
            }
        }
    }

    #[test]
    fn default_configuration_has_only_where_and_routes() {
        let dir = tempfile::tempdir().expect("dir");
        let allowed = [
            "dialect", "address", "path", "socket", "listener", "upstream",
        ];
        for (o, extra) in [
            (opts(true, None), None),
            (opts(true, Some(1)), Some("pool_size")),
        ] {
            let text = toml(&o, dir.path());
            for line in text.lines().filter(|l| l.contains('=')) {
                let key = line.split('=').next().unwrap_or_default().trim();
                assert!(
                    allowed.contains(&key) || Some(key) == extra,
                    "tuning key {key:?} in the default configuration:\n{text}"
                );
            }
            assert!(
                !text.contains("[gateway]") && !text.contains("[log]"),
                "{text}"
            );
        }
        // The tuned one does set them.
        let tuned = toml(&opts(false, Some(2)), dir.path());
        assert!(tuned.contains("max_pending = 65536") && tuned.contains("pool_size = 2"));
        assert!(tuned.contains("sideband_cbor = false"));
    }

    #[test]
    fn the_fanout_configuration_is_the_default_one_plus_the_feed() {
        let dir = tempfile::tempdir().expect("dir");
        let feed = crate::feed::feed_toml();
        // Tuned options on the command line do not apply to fanout.
        let (text, _) = feed_gateway_toml(
            &opts(false, Some(2)),
            &dir.path().join("daemon.sock"),
            &feed,
            dir.path(),
        )
        .expect("toml");
        let allowed = [
            "dialect", "address", "path", "socket", "listener", "upstream", "method", "params",
            "topic",
        ];
        for line in text.lines().filter(|l| l.contains('=')) {
            let key = line.split('=').next().unwrap_or_default().trim();
            assert!(allowed.contains(&key), "key {key:?} in:\n{text}");
        }
        assert!(text.ends_with(&feed), "{text}");
        if let Err(e) = switchyard::config::Config::from_toml(&text) {
            panic!("{e}\n{text}");
        }
    }

    #[test]
    fn the_scaleout_configuration_is_the_fanout_one_plus_the_backbone() {
        let dir = tempfile::tempdir().expect("dir");
        let feed = crate::feed::feed_toml();
        for publishes in [true, false] {
            let (mut text, _) = feed_gateway_toml(
                &opts(true, None),
                &dir.path().join("daemon.sock"),
                &feed,
                dir.path(),
            )
            .expect("toml");
            text.push('\n');
            text.push_str(&backbone_toml("nats://127.0.0.1:4222", publishes));
            let cfg = switchyard::config::Config::from_toml(&text)
                .unwrap_or_else(|e| panic!("{e}\n{text}"));
            let nats = cfg.pubsub_nats.expect("the nats backbone");
            assert_eq!(nats.publish_upstream_events, publishes, "{text}");
            assert_eq!(
                text.contains("publish_upstream_events = false"),
                !publishes,
                "{text}"
            );
            let allowed = [
                "dialect",
                "address",
                "path",
                "socket",
                "listener",
                "upstream",
                "method",
                "params",
                "topic",
                "backend",
                "urls",
                "publish_upstream_events",
            ];
            for line in text.lines().filter(|l| l.contains('=')) {
                let key = line.split('=').next().unwrap_or_default().trim();
                assert!(allowed.contains(&key), "key {key:?} in:\n{text}");
            }
        }
    }
}
