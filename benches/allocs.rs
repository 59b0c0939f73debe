//! Heap allocations per request on the gateway's common paths: a count,
//! not a timing.
//!
//! In one process, each on its own OS thread and tokio runtime:
//!
//! - the reference NDJSON daemon (`switchyard::daemon::Daemon`), the
//!   reference JSON-RPC or holon-rpc WebSocket daemon, or a second
//!   switchyard's Sideband listener in front of the NDJSON daemon, on a
//!   one-worker multi-thread runtime;
//! - the gateway (`app::bind(..).spawn()`) with the DEFAULT configuration
//!   (one listener, one upstream, one route), on a current-thread runtime
//!   on thread G, so that everything the gateway does runs on G;
//! - the client, one connection with `WINDOW` requests in flight, on the
//!   main thread: tokio-tungstenite for the WebSocket listeners, lines
//!   over a Unix socket for the NDJSON listener.
//!
//! Allocations are counted per thread (`allocation-counter`, a counting
//! wrapper of the system allocator installed as the global allocator of
//! this bench): only those made on thread G while it runs the measured
//! requests, so the client's and the daemon's allocations are not in the
//! count and nothing is subtracted. Counts do not depend on the allocator
//! (the binary uses mimalloc; this bench counts calls into the system
//! allocator). A `realloc` counts as one allocation of the new size.
//!
//! Nine cases:
//!
//! - **in place**: the defaults; the upstream has room (pool 2, 4,096
//!   pending per connection), so every call is written at once;
//! - **waiting**: the defaults plus `pool_size = 1` and `max_pending = 1`:
//!   one call at a time may be pending at the upstream, so with 32 in
//!   flight nearly every call parks in the upstream's queue first;
//! - **holon-rpc, in place**: the defaults with a holon-rpc listener
//!   (subprotocol `holon-rpc`, string ids);
//! - **Sideband JSON, in place**: the defaults with a Sideband listener
//!   and JSON (v1) envelopes;
//! - **NDJSON → JSON-RPC WebSocket, in place**: the defaults with an
//!   NDJSON listener (the client writes lines to its Unix socket) and the
//!   reference JSON-RPC WebSocket daemon as the upstream;
//! - **NDJSON → holon-rpc WebSocket, in place**: the same with the
//!   reference holon-rpc WebSocket daemon;
//! - **NDJSON → Sideband, in place**: the same with a Sideband upstream:
//!   a second switchyard gateway (a Sideband listener routed to the
//!   NDJSON daemon) on the daemon's thread. The two negotiate CBOR
//!   envelopes (both offer it by default), so each request's params are
//!   transcoded to CBOR and each result back to JSON;
//! - **Sideband CBOR, in place**: the defaults with a Sideband listener;
//!   the client negotiates CBOR envelopes, so each request's params are
//!   transcoded to JSON for the daemon and each result back to CBOR;
//! - **minimal gateway (reference)**: not switchyard but floor M
//!   (`benches/minimal/gateway.rs`, the minimal multiplexing gateway the
//!   performance targets are set against) on thread G, with the in-place case's client and daemon:
//!   what a straightforward correct design costs, counted the same way.
//!
//! Each case: a warm-up of `WARMUP` requests on the same connection (not
//! counted: connection setup, first-use growth of buffers and tables),
//! then `REQUESTS` requests of `PARAMS_BYTES` of params counted. Alive
//! tasks of the gateway's runtime (tokio's runtime metrics) are read
//! before the measured requests and sampled while they run.
//!
//! `ALLOCS_REQUESTS=N` changes the number of measured requests;
//! `ALLOCS_CASES=holon,CBOR` runs only the cases whose name begins with one
//! of the comma-separated words (for a profiler that should see one path).
//! `ALLOCS_TELEMETRY=logs` installs the subscriber `switchyard run` installs
//! with the default `[log]` (info lines on stderr); `ALLOCS_TELEMETRY=otel`
//! adds span export (`[tracing] enabled`, every trace sampled, to a port
//! where nothing listens: the spans are made and recorded on thread G, the
//! failing export runs on the exporter's own thread). Unset, no subscriber
//! is installed (spans and debug lines then cost what `tracing` does
//! without one).

#[path = "minimal/gateway.rs"]
mod minimal;

use std::collections::HashSet;
use std::error::Error;
use std::sync::mpsc as std_mpsc;
use std::thread;

use allocation_counter::AllocationInfo;
use futures_util::{SinkExt, StreamExt};
use switchyard::daemon::ws::{WsDaemon, WsDialect};
use switchyard::daemon::{Daemon, DaemonOptions};
use switchyard::dialect::sideband::Encoding;
use tokio::net::TcpStream;
use tokio::runtime::{Builder, Handle, Runtime};
use tokio::sync::oneshot;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::header::{HeaderValue, SEC_WEBSOCKET_PROTOCOL};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use tokio_util::codec::{Framed, LinesCodec};

type Res<T> = Result<T, Box<dyn Error + Send + Sync>>;
type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Requests counted per case (unless `ALLOCS_REQUESTS` says otherwise).
const REQUESTS: usize = 20_000;
/// Requests before counting starts, on the same connection.
const WARMUP: usize = 2_000;
/// Requests the client keeps in flight.
const WINDOW: usize = 32;
/// Size of each request's params, as JSON text.
const PARAMS_BYTES: usize = 256;

/// One measured configuration.
struct Case {
    name: &'static str,
    /// The client's (and the listener's) wire.
    wire: Wire,
    /// The gateway's upstream.
    peer: Peer,
    /// TOML lines added to the default upstream table.
    upstream_extra: &'static str,
    /// Floor M (`benches/minimal/gateway.rs`) on thread G instead of
    /// switchyard: the reference for the in-place case (same client, same
    /// daemon; `upstream_extra` unused).
    minimal: bool,
}

/// What the gateway forwards to.
#[derive(Clone, Copy)]
enum Peer {
    /// The reference NDJSON daemon.
    Ndjson,
    /// The reference WebSocket daemon speaking this dialect.
    Ws(WsDialect),
    /// A second switchyard's Sideband listener routed to the reference
    /// NDJSON daemon (both on the daemon's thread): a real Sideband peer.
    Sideband,
}

/// What the client speaks.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Wire {
    JsonRpc,
    Holon,
    SidebandJson,
    SidebandCbor,
    /// NDJSON lines over the Unix socket of an `ndjson` listener.
    Ndjson,
}

impl Wire {
    /// The Sideband envelope encoding, for a Sideband client.
    fn sideband(self) -> Option<Encoding> {
        match self {
            Wire::SidebandJson => Some(Encoding::Json),
            Wire::SidebandCbor => Some(Encoding::Cbor),
            Wire::JsonRpc | Wire::Holon | Wire::Ndjson => None,
        }
    }
}

const CASES: [Case; 9] = [
    Case {
        name: "in place (defaults)",
        wire: Wire::JsonRpc,
        peer: Peer::Ndjson,
        upstream_extra: "",
        minimal: false,
    },
    Case {
        name: "waiting (pool_size 1, max_pending 1)",
        wire: Wire::JsonRpc,
        peer: Peer::Ndjson,
        upstream_extra: "pool_size = 1\nmax_pending = 1\n",
        minimal: false,
    },
    Case {
        name: "holon-rpc, in place (defaults)",
        wire: Wire::Holon,
        peer: Peer::Ndjson,
        upstream_extra: "",
        minimal: false,
    },
    Case {
        name: "Sideband JSON, in place (defaults)",
        wire: Wire::SidebandJson,
        peer: Peer::Ndjson,
        upstream_extra: "",
        minimal: false,
    },
    Case {
        name: "Sideband CBOR, in place (defaults)",
        wire: Wire::SidebandCbor,
        peer: Peer::Ndjson,
        upstream_extra: "",
        minimal: false,
    },
    Case {
        name: "NDJSON → JSON-RPC WebSocket, in place (defaults)",
        wire: Wire::Ndjson,
        peer: Peer::Ws(WsDialect::JsonRpc),
        upstream_extra: "",
        minimal: false,
    },
    Case {
        name: "NDJSON → holon-rpc WebSocket, in place (defaults)",
        wire: Wire::Ndjson,
        peer: Peer::Ws(WsDialect::Holon),
        upstream_extra: "",
        minimal: false,
    },
    Case {
        name: "NDJSON → Sideband, in place (defaults)",
        wire: Wire::Ndjson,
        peer: Peer::Sideband,
        upstream_extra: "",
        minimal: false,
    },
    Case {
        name: "minimal gateway (reference): JSON-RPC WebSocket → NDJSON",
        wire: Wire::JsonRpc,
        peer: Peer::Ndjson,
        upstream_extra: "",
        minimal: true,
    },
];

/// What one case measured.
struct Row {
    name: &'static str,
    requests: usize,
    info: AllocationInfo,
    tasks_before: usize,
    tasks_min: usize,
    tasks_max: usize,
}

fn main() -> Res<()> {
    let requests = match std::env::var("ALLOCS_REQUESTS") {
        Ok(n) => n.parse()?,
        Err(_) => REQUESTS,
    };
    let _telemetry = telemetry()?;
    let only = std::env::var("ALLOCS_CASES").unwrap_or_default();
    let chosen = |case: &Case| {
        only.is_empty()
            || only
                .split(',')
                .any(|word| case.name.starts_with(word.trim()))
    };
    let mut rows = Vec::new();
    for case in CASES.iter().filter(|case| chosen(case)) {
        rows.push(run_case(case, requests)?);
    }
    print_table(&rows);
    Ok(())
}

/// The tracing subscriber `ALLOCS_TELEMETRY` asks for (see the module
/// docs); kept until the end of the run.
fn telemetry() -> Res<Option<switchyard::telemetry::Telemetry>> {
    use switchyard::config::{LogConfig, LogFormat, TracingConfig};
    let log = LogConfig {
        format: LogFormat::Text,
        level: "info".into(),
    };
    let tracing = match std::env::var("ALLOCS_TELEMETRY")
        .unwrap_or_default()
        .as_str()
    {
        "" => return Ok(None),
        "logs" => TracingConfig::default(),
        "otel" => TracingConfig {
            enabled: true,
            // Port 9 (discard): nothing listens there on the bench's host.
            endpoint: "http://127.0.0.1:9/v1/traces".into(),
            ..TracingConfig::default()
        },
        other => return Err(format!("ALLOCS_TELEMETRY={other}: expected logs or otel").into()),
    };
    Ok(Some(switchyard::telemetry::init(&log, &tracing)))
}

/// The gateway's thread: what the client needs from it.
struct Gateway {
    /// A WebSocket listener's URL (empty for an NDJSON listener).
    url: String,
    /// The gateway runtime's handle, for its metrics.
    handle: Handle,
    /// Warm-up over: count from now on.
    start: oneshot::Sender<()>,
    /// Measured requests all answered: stop counting.
    stop: oneshot::Sender<()>,
    /// The count, once stopped.
    counted: std_mpsc::Receiver<AllocationInfo>,
    /// The client's connection is closed: shut down.
    closed: oneshot::Sender<()>,
    thread: thread::JoinHandle<()>,
}

fn run_case(case: &Case, requests: usize) -> Res<Row> {
    let dir = tempfile::tempdir()?;
    let socket = dir.path().join("daemon.sock");
    let daemon_rt = Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let listener_socket = dir.path().join("gateway.sock");
    let ndjson_upstream = format!("dialect = \"ndjson\"\nsocket = \"{}\"", socket.display());
    let (daemon, upstream) = match case.peer {
        Peer::Ws(ws) => {
            let any = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
            let daemon = daemon_rt.block_on(WsDaemon::start(any, ws))?;
            let dialect = match ws {
                WsDialect::JsonRpc => "jsonrpc-ws",
                WsDialect::Holon => "holon-rpc",
            };
            let upstream = format!("dialect = \"{dialect}\"\nurl = \"{}\"", daemon.url());
            (Upstream::Ws(daemon), upstream)
        }
        Peer::Ndjson => {
            let daemon = daemon_rt.block_on(Daemon::start(&socket, DaemonOptions::default()))?;
            (Upstream::Ndjson(daemon), ndjson_upstream)
        }
        Peer::Sideband => daemon_rt.block_on(async {
            let daemon = Daemon::start(&socket, DaemonOptions::default()).await?;
            let toml = format!(
                "[listeners.inner]\n{}\n\n[upstreams.daemon]\n{ndjson_upstream}\n\n\
                 [[routes]]\nlistener = \"inner\"\nupstream = \"daemon\"\n",
                ws_listener("sideband")
            );
            let cfg = switchyard::config::Config::from_toml(&toml)?;
            let bound = switchyard::app::bind(cfg).await?;
            let url = bound
                .ws_url("inner")
                .ok_or("the inner gateway has no URL")?;
            let upstream = format!("dialect = \"sideband\"\nurl = \"{url}\"");
            Res::Ok((
                Upstream::Sideband(daemon, Box::new(bound.spawn())),
                upstream,
            ))
        })?,
    };
    let listener = match case.wire {
        Wire::JsonRpc => ws_listener("jsonrpc-ws"),
        Wire::Holon => ws_listener("holon-rpc"),
        Wire::SidebandJson | Wire::SidebandCbor => ws_listener("sideband"),
        Wire::Ndjson => format!(
            "dialect = \"ndjson\"\nsocket = \"{}\"",
            listener_socket.display()
        ),
    };
    let toml = format!(
        "[listeners.public]\n{listener}\n\n\
         [upstreams.daemon]\n{upstream}\n{}\n\
         [[routes]]\nlistener = \"public\"\nupstream = \"daemon\"\n",
        case.upstream_extra
    );
    let gw = if case.minimal {
        start_minimal(socket.clone())?
    } else {
        start_gateway(toml)?
    };

    let client_rt = Builder::new_current_thread().enable_all().build()?;
    let row = client_rt.block_on(async {
        let mut conn = if case.wire == Wire::Ndjson {
            let stream = tokio::net::UnixStream::connect(&listener_socket).await?;
            Conn::Lines(Framed::new(stream, LinesCodec::new()))
        } else {
            let mut request = gw.url.as_str().into_client_request()?;
            if case.wire == Wire::Holon {
                let protocol = HeaderValue::from_static("holon-rpc");
                request
                    .headers_mut()
                    .insert(SEC_WEBSOCKET_PROTOCOL, protocol);
            }
            let (mut ws, _) = tokio_tungstenite::connect_async(request).await?;
            if let Some(encoding) = case.wire.sideband() {
                sideband::handshake(&mut ws, encoding).await?;
            }
            Conn::Ws(Box::new(ws))
        };
        let mut next_id = 0u64;
        drive(case.wire, &mut conn, &mut next_id, WARMUP, &gw.handle).await?;
        let tasks_before = gw.handle.metrics().num_alive_tasks();
        send_signal(gw.start)?;
        let (tasks_min, tasks_max) =
            drive(case.wire, &mut conn, &mut next_id, requests, &gw.handle).await?;
        send_signal(gw.stop)?;
        let info = gw.counted.recv()?;
        conn.close().await?;
        Res::Ok(Row {
            name: case.name,
            requests,
            info,
            tasks_before,
            tasks_min,
            tasks_max,
        })
    })?;
    send_signal(gw.closed)?;
    gw.thread
        .join()
        .map_err(|_| "the gateway thread panicked")?;
    match daemon {
        Upstream::Ndjson(d) => daemon_rt.block_on(d.stop()),
        Upstream::Ws(d) => daemon_rt.block_on(d.stop()),
        Upstream::Sideband(d, inner) => daemon_rt.block_on(async {
            inner.shutdown().await;
            d.stop().await;
        }),
    }
    Ok(row)
}

/// The reference daemon a case runs.
enum Upstream {
    Ndjson(Daemon),
    Ws(WsDaemon),
    /// The NDJSON daemon and the switchyard in front of it.
    Sideband(Daemon, Box<switchyard::app::Running>),
}

/// A WebSocket listener's lines of configuration.
fn ws_listener(dialect: &str) -> String {
    format!("dialect = \"{dialect}\"\naddress = \"127.0.0.1:0\"\npath = \"/rpc\"")
}

/// The client's connection: a WebSocket, or NDJSON lines over a Unix
/// socket (each line a text message). The WebSocket is boxed: with TLS
/// support its stream type is large (one allocation per connection).
enum Conn {
    Ws(Box<Ws>),
    Lines(Framed<tokio::net::UnixStream, LinesCodec>),
}

impl Conn {
    async fn feed(&mut self, msg: Message) -> Res<()> {
        match (self, msg) {
            (Conn::Ws(ws), msg) => ws.feed(msg).await?,
            (Conn::Lines(lines), Message::Text(text)) => lines.feed(text.as_str()).await?,
            (Conn::Lines(_), _) => return Err("NDJSON carries text only".into()),
        }
        Ok(())
    }

    async fn flush(&mut self) -> Res<()> {
        match self {
            Conn::Ws(ws) => ws.flush().await?,
            Conn::Lines(lines) => SinkExt::<&str>::flush(lines).await?,
        }
        Ok(())
    }

    async fn next(&mut self) -> Res<Message> {
        let closed = "the gateway closed the connection";
        Ok(match self {
            Conn::Ws(ws) => ws.next().await.ok_or(closed)??,
            Conn::Lines(lines) => Message::Text(lines.next().await.ok_or(closed)??.into()),
        })
    }

    /// Closes the connection and waits for the gateway's side to end.
    async fn close(self) -> Res<()> {
        match self {
            Conn::Ws(mut ws) => {
                (*ws).close(None).await?;
                // The gateway's close frame (or the end of the stream).
                while let Some(Ok(_)) = ws.next().await {}
            }
            Conn::Lines(lines) => drop(lines),
        }
        Ok(())
    }
}

fn send_signal(tx: oneshot::Sender<()>) -> Res<()> {
    tx.send(())
        .map_err(|()| "the gateway thread is gone".into())
}

/// Starts the gateway on a thread of its own, counting its allocations
/// between the `start` and `stop` signals.
fn start_gateway(toml: String) -> Res<Gateway> {
    let cfg = switchyard::config::Config::from_toml(&toml).map_err(|e| format!("{e}\n{toml}"))?;
    on_thread_g(move |rt| {
        let running = rt.block_on(async {
            let bound = switchyard::app::bind(cfg).await?;
            // An NDJSON listener has no URL: its client dials the socket.
            let url = bound.ws_url("public").unwrap_or_default();
            Res::Ok((url, bound.spawn()))
        })?;
        let (url, running) = running;
        Ok((url, move |rt: &Runtime| rt.block_on(running.shutdown())))
    })
}

/// Starts floor M, the minimal multiplexing gateway, on thread G in front
/// of the NDJSON daemon at `daemon`, counted as [`start_gateway`] counts
/// switchyard: the same signals, the same `measured_requests` span.
fn start_minimal(daemon: std::path::PathBuf) -> Res<Gateway> {
    on_thread_g(move |rt| {
        let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
        let addr = listener.local_addr()?;
        rt.spawn(async move {
            if let Err(e) = minimal::serve(listener, daemon).await {
                eprintln!("the minimal gateway stopped: {e}");
            }
        });
        // Dropping the runtime ends every task and closes its sockets.
        Ok((format!("ws://{addr}/rpc"), |_: &Runtime| ()))
    })
}

/// Thread G: a current-thread runtime on which `serve` starts a server
/// (its URL, and what ends it); the warm-up is served uncounted, then
/// `measured_requests` runs between the `start` and `stop` signals and
/// its allocations are counted.
fn on_thread_g<S, E>(serve: S) -> Res<Gateway>
where
    S: FnOnce(&Runtime) -> Res<(String, E)> + Send + 'static,
    E: FnOnce(&Runtime),
{
    let (start, start_rx) = oneshot::channel();
    let (stop, stop_rx) = oneshot::channel::<()>();
    let (closed, closed_rx) = oneshot::channel::<()>();
    let (counted_tx, counted) = std_mpsc::channel();
    let (ready_tx, ready_rx) = std_mpsc::channel::<Res<(String, Handle)>>();
    let thread = thread::Builder::new()
        .name("gateway".into())
        .spawn(move || {
            let rt = match Builder::new_current_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = ready_tx.send(Err(e.into()));
                    return;
                }
            };
            let end = match serve(&rt) {
                Ok((url, end)) => {
                    // The client waits for this before it connects.
                    let _ = ready_tx.send(Ok((url, rt.handle().clone())));
                    end
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            // Warm-up: served, not counted.
            let _ = rt.block_on(start_rx);
            let info = allocation_counter::measure(|| measured_requests(&rt, stop_rx));
            // The client waits for the count: ignore its going away.
            let _ = counted_tx.send(info);
            let _ = rt.block_on(closed_rx);
            end(&rt);
        })?;
    let (url, handle) = ready_rx.recv()??;
    Ok(Gateway {
        url,
        handle,
        start,
        stop,
        counted,
        closed,
        thread,
    })
}

/// Runs the gateway's runtime until the client has had every measured
/// reply. Never inlined: `scripts/instructions.sh` has callgrind count
/// only what runs inside this function (`--toggle-collect`), that is
/// thread G's work for the measured requests.
#[inline(never)]
fn measured_requests(rt: &Runtime, stop: oneshot::Receiver<()>) {
    let _ = rt.block_on(stop);
}

/// Sends `n` echo requests with `WINDOW` in flight and checks every reply
/// (a result echoing its request's params, to a pending id). Returns the
/// fewest and most alive tasks of the gateway's runtime seen meanwhile.
async fn drive(
    wire: Wire,
    conn: &mut Conn,
    next_id: &mut u64,
    n: usize,
    gw: &Handle,
) -> Res<(usize, usize)> {
    let pad = "x".repeat(PARAMS_BYTES - r#"{"pad":""}"#.len());
    let mut pending = HashSet::new();
    let (mut sent, mut answered) = (0, 0);
    let (mut tasks_min, mut tasks_max) = (usize::MAX, 0);
    while answered < n {
        while sent < n && pending.len() < WINDOW {
            *next_id += 1;
            let request = match wire {
                Wire::JsonRpc | Wire::Ndjson => Message::Text(
                    format!(
                        r#"{{"jsonrpc":"2.0","method":"echo","params":{{"pad":"{pad}"}},"id":{next_id}}}"#
                    )
                    .into(),
                ),
                Wire::Holon => Message::Text(
                    format!(
                        r#"{{"jsonrpc":"2.0","id":"{next_id}","method":"echo","params":{{"pad":"{pad}"}}}}"#
                    )
                    .into(),
                ),
                Wire::SidebandJson | Wire::SidebandCbor => {
                    let encoding = wire.sideband().ok_or("a Sideband wire")?;
                    Message::Binary(sideband::request(*next_id, &pad, encoding)?.into())
                }
            };
            conn.feed(request).await?;
            pending.insert(*next_id);
            sent += 1;
        }
        conn.flush().await?;
        let frame = conn.next().await?;
        let (id, result) = match frame {
            Message::Text(text) if wire.sideband().is_none() => {
                let reply: serde_json::Value = serde_json::from_str(&text)?;
                // holon-rpc ids are strings; a frame without one (a
                // heartbeat) is not a reply.
                let id = match &reply["id"] {
                    serde_json::Value::String(s) => s.parse().ok(),
                    id => id.as_u64(),
                };
                let Some(id) = id else {
                    continue;
                };
                (id, reply["result"].clone())
            }
            Message::Binary(bytes) => match wire.sideband() {
                Some(encoding) => sideband::reply(&bytes, encoding)?,
                None => continue,
            },
            _ => continue,
        };
        if !pending.remove(&id) || result["pad"] != pad.as_str() {
            return Err(format!("unexpected reply to {id}: {result}").into());
        }
        answered += 1;
        if answered % 64 == 0 {
            let alive = gw.metrics().num_alive_tasks();
            tasks_min = tasks_min.min(alive);
            tasks_max = tasks_max.max(alive);
        }
    }
    Ok((tasks_min, tasks_max))
}

/// The Sideband client: frames with CBOR envelopes (sideband.md §2, §7).
mod sideband {
    use futures_util::{SinkExt, StreamExt};
    use switchyard::dialect::sideband::{
        cbor_to_json, decode, decode_envelope, encode, encode_envelope, random_id, random_peer_id,
        Body, Control, Encoding, Frame, Handshake, Subject,
    };
    use switchyard::envelope::{Message, Outcome, Payload, WireId};
    use tokio_tungstenite::tungstenite::Message as WsMessage;

    use super::{Res, Ws};

    /// Sends our handshake, offering CBOR or not, and checks that the
    /// gateway's agrees on `encoding`.
    pub(super) async fn handshake(ws: &mut Ws, encoding: Encoding) -> Res<()> {
        let local = Handshake::local(random_peer_id(), encoding == Encoding::Cbor);
        let hello = Frame::control(random_id(), Control::Handshake(local.to_bytes()));
        ws.send(WsMessage::Binary(encode(&hello).into())).await?;
        loop {
            let WsMessage::Binary(bytes) = ws.next().await.ok_or("closed in the handshake")??
            else {
                continue;
            };
            let Body::Control(Control::Handshake(data)) = decode(&bytes)?.body else {
                return Err("the first frame is not a handshake".into());
            };
            let remote = Handshake::parse(&data)?;
            if Encoding::negotiate(&local, &remote) != encoding {
                return Err(format!("{encoding:?} envelopes were not negotiated").into());
            }
            return Ok(());
        }
    }

    /// Request `id`: an `r` envelope in `encoding` whose cid carries the id.
    pub(super) fn request(id: u64, pad: &str, encoding: Encoding) -> Res<Vec<u8>> {
        let params = serde_json::value::to_raw_value(&serde_json::json!({ "pad": pad }))?;
        let msg = Message::Request {
            id: WireId::Cid(cid(id)),
            method: "echo".into(),
            params: Some(Payload::Json(params.into())),
        };
        let data = encode_envelope(&msg, encoding)?;
        Ok(encode(&Frame::message(random_id(), Subject::Rpc, data)))
    }

    /// A reply's request id and its result, as JSON.
    pub(super) fn reply(bytes: &[u8], encoding: Encoding) -> Res<(u64, serde_json::Value)> {
        let Body::Message { data, .. } = decode(bytes)?.body else {
            return Err("not a Message frame".into());
        };
        match decode_envelope(&data, encoding)? {
            Message::Response {
                id: WireId::Cid(cid),
                result: Outcome::Value(result),
            } => {
                let id = u64::from_le_bytes(cid[..8].try_into()?);
                let value = match result {
                    Payload::Cbor(cbor) => serde_json::from_str(cbor_to_json(&cbor)?.get())?,
                    Payload::Json(json) => serde_json::from_str(json.get())?,
                };
                Ok((id, value))
            }
            other => Err(format!("unexpected reply: {other:?}").into()),
        }
    }

    fn cid(id: u64) -> [u8; 16] {
        let mut cid = [0; 16];
        cid[..8].copy_from_slice(&id.to_le_bytes());
        cid
    }
}

fn print_table(rows: &[Row]) {
    println!(
        "allocations on the gateway's thread per request: 1 client connection, \
         {WINDOW} in flight, {PARAMS_BYTES} B params, after {WARMUP} warm-up requests\n"
    );
    println!(
        "| path | requests | allocations / request | bytes / request | \
         still allocated at the end | alive tasks before | alive tasks during (min–max) |"
    );
    println!("|---|---|---|---|---|---|---|");
    for r in rows {
        let n = r.requests as f64;
        println!(
            "| {} | {} | {:.2} | {:.0} | {} ({} B) | {} | {}–{} |",
            r.name,
            r.requests,
            r.info.count_total as f64 / n,
            r.info.bytes_total as f64 / n,
            r.info.count_current,
            r.info.bytes_current,
            r.tasks_before,
            r.tasks_min,
            r.tasks_max,
        );
    }
}
