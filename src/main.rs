//! The `switchyard` binary: CLI → config → bind → run.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{ArgGroup, Parser, Subcommand, ValueEnum};

use switchyard::client::watch::{Ended, Speak, WatchError};
use switchyard::config::raw::CLIENT_TOKEN_ENV;
use switchyard::config::{Config, EXIT_CONFIG};
use switchyard::daemon::ws::WsDialect;
use switchyard::daemon::DaemonOptions;
use switchyard::shutdown::Lifecycle;
use switchyard::{app, client, demo, shutdown, telemetry};

/// switchyard: a sidecar RPC gateway.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the gateway.
    Run {
        /// TOML configuration file (SWITCHYARD_* environment variables override it).
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// Validate a configuration and print the effective result.
    Check {
        /// TOML configuration file.
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// Run the gateway with the bundled reference daemon: nothing to set up.
    Demo {
        /// Address of the demo's WebSocket listeners (a free port is used if taken; 0: any).
        #[arg(long, default_value = demo::DEFAULT_LISTEN)]
        listen: SocketAddr,
        /// Address of the admin listener: status page, metrics, playground (same fallback).
        #[arg(long, default_value = demo::DEFAULT_ADMIN)]
        admin: SocketAddr,
        /// Directory for the Unix sockets [default: a fresh temporary one].
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Call a method on a switchyard listener (ws://…, wss://…, http://… or unix://…) and print the reply.
    ///
    /// Exit status: 0 for a result, 3 for an error reply (printed all the
    /// same), 1 when no reply came (connection, timeout), 2 for bad arguments.
    Call {
        /// ws://host:port/path, wss://host:port/path, http://host:port/path (jsonrpc-http), or unix:///path/to.sock
        url: String,
        /// Method name.
        method: String,
        /// Params as JSON (an array or an object).
        params: Option<String>,
        /// Speak holon-rpc instead of JSON-RPC 2.0 (WebSocket only).
        #[arg(long)]
        holon: bool,
        /// Speak Sideband (SBP frames, JSON envelopes) instead (WebSocket only).
        #[arg(long, conflicts_with = "holon")]
        sideband: bool,
        /// wss:// only: trust only the CA certificates in this PEM file
        /// [default: the system's root certificates].
        #[arg(long)]
        ca_file: Option<PathBuf>,
        /// Bearer token for the listener's `auth_token`, sent as `Authorization:
        /// Bearer` on the WebSocket upgrade [default: $SWITCHYARD_TOKEN].
        #[arg(long)]
        token: Option<String>,
        /// Seconds to wait for the reply.
        #[arg(long, default_value_t = 10)]
        timeout: u64,
    },
    /// Subscribe to topics on a switchyard listener and print one JSON line per
    /// event until interrupted (Ctrl-C, SIGTERM) or the server closes.
    ///
    /// Each line is the event's params: {"topic":…,"data":…}, or with
    /// --persistent {"subscription_id","topic","sequence_id","timestamp","data"},
    /// each delivery acknowledged once printed. Exit status: 0 when interrupted
    /// or stdout is closed, 1 when the connection fails or the server closes
    /// it, 3 when the subscription is refused (the error reply on stderr), 2
    /// for bad arguments.
    Watch {
        /// ws://host:port/path, wss://…, or unix:///path/to.sock (JSON-RPC only)
        url: String,
        /// Topics (NATS-style patterns: `*` one token, `>` the rest); exactly
        /// one with --persistent.
        #[arg(required = true)]
        topics: Vec<String>,
        /// A persistent subscription with this id (resumed if it exists):
        /// what is not acknowledged comes again on the next watch.
        #[arg(long, value_name = "ID")]
        persistent: Option<String>,
        /// Speak holon-rpc instead of JSON-RPC 2.0 (WebSocket only).
        #[arg(long)]
        holon: bool,
        /// Speak Sideband (SBP frames, JSON envelopes) instead (WebSocket only).
        #[arg(long, conflicts_with = "holon")]
        sideband: bool,
        /// Bearer token, as for `call` [default: $SWITCHYARD_TOKEN].
        #[arg(long)]
        token: Option<String>,
        /// wss:// only: trust only the CA certificates in this PEM file
        /// [default: the system's root certificates].
        #[arg(long)]
        ca_file: Option<PathBuf>,
        /// Seconds to wait for the connection and the subscription's answer.
        #[arg(long, default_value_t = 10)]
        timeout: u64,
    },
    /// Ask a running gateway to reload its configuration (POST /reload on its admin listener).
    Reload {
        /// The admin listener, http://host:port
        #[arg(long)]
        admin: String,
        /// The gateway's `[admin] reload_token` [default: $SWITCHYARD_ADMIN__RELOAD_TOKEN,
        /// the variable that also sets it on the gateway].
        #[arg(long)]
        token: Option<String>,
        /// Seconds to wait for the verdict.
        #[arg(long, default_value_t = 30)]
        timeout: u64,
    },
    /// Run a reference daemon alone: NDJSON on a Unix socket, or WebSocket.
    #[command(group(ArgGroup::new("listen").required(true).args(["socket", "ws_listen", "stdio"])))]
    Daemon {
        /// Socket path of the NDJSON daemon.
        #[arg(long)]
        socket: Option<PathBuf>,
        /// Serve the reference WebSocket daemon on this IP:port instead (path /rpc).
        #[arg(long)]
        ws_listen: Option<SocketAddr>,
        /// The WebSocket daemon's dialect, named as in the configuration
        /// [default: jsonrpc-ws].
        #[arg(long, value_enum, conflicts_with = "socket")]
        ws_dialect: Option<WsDialectArg>,
        /// Mimic the HumanLayer daemon's quirks (NDJSON daemon only).
        #[arg(long, conflicts_with = "ws_listen")]
        hld_quirks: bool,
        /// Serve NDJSON on stdin/stdout (one connection; a `command`
        /// upstream) instead of a socket.
        #[arg(long)]
        stdio: bool,
    },
}

/// `--ws-dialect` values: the configuration's dialect names, and the short
/// names earlier versions took.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum WsDialectArg {
    /// JSON-RPC 2.0 over WebSocket.
    #[value(name = "jsonrpc-ws", alias = "jsonrpc")]
    Jsonrpc,
    /// holon-rpc.
    #[value(name = "holon-rpc", alias = "holon")]
    Holon,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // `run` reads its config first: it sizes the runtime.
    let (job, workers) = match cli.command {
        Command::Run { config } => match load(config.clone()) {
            Ok(cfg) => {
                let workers = cfg.gateway.worker_threads;
                (Job::Gateway(Box::new(cfg), config), workers)
            }
            Err(code) => return code,
        },
        other => (Job::Other(other), None),
    };
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = workers {
        builder.worker_threads(n.get());
    }
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("switchyard: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        match job {
            Job::Gateway(cfg, file) => gateway(*cfg, file).await,
            Job::Other(command) => run(command).await,
        }
    })
}

/// What `main` runs once the runtime is up.
enum Job {
    /// `switchyard run`, its config loaded from this file (reloads read
    /// it again).
    Gateway(Box<Config>, Option<PathBuf>),
    /// Every other command.
    Other(Command),
}

/// `switchyard run`: serve until a shutdown signal; reload on SIGHUP.
async fn gateway(cfg: Config, file: Option<PathBuf>) -> ExitCode {
    // Kept until exit: its shutdown sends the spans still queued.
    let telemetry = telemetry::init(&cfg.log, &cfg.tracing);
    for warning in warnings(&cfg) {
        tracing::warn!("{warning}");
    }
    // Before anything is served: from now on SIGHUP reloads.
    let mut hangups = shutdown::Hangups::new();
    let bound = match app::bind(cfg).await {
        Ok(b) => b,
        Err(e) => {
            eprintln!("switchyard: {e}");
            return ExitCode::FAILURE;
        }
    };
    let running = bound.reload_from(file).spawn();
    tracing::info!("switchyard is running");
    shutdown::tell_manager(Lifecycle::Ready);
    let stop = shutdown::signal();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            () = hangups.recv() => {
                tracing::info!("SIGHUP received");
                shutdown::tell_manager(Lifecycle::Reloading);
                // The outcome is logged and counted by the reload itself.
                let _ = running.reload().await;
                shutdown::tell_manager(Lifecycle::Ready);
            }
        }
    }
    shutdown::tell_manager(Lifecycle::Stopping);
    running.shutdown().await;
    telemetry.shutdown().await;
    ExitCode::SUCCESS
}

async fn run(command: Command) -> ExitCode {
    match command {
        // `main` loads it first (to size the runtime); kept for completeness.
        Command::Run { config } => match load(config.clone()) {
            Ok(cfg) => gateway(cfg, config).await,
            Err(code) => code,
        },
        Command::Reload {
            admin,
            token,
            timeout,
        } => {
            let token = token.or_else(|| std::env::var("SWITCHYARD_ADMIN__RELOAD_TOKEN").ok());
            reload(&admin, token.as_deref(), Duration::from_secs(timeout)).await
        }
        Command::Check { config } => check(config),
        Command::Demo { listen, admin, dir } => {
            report(demo::run(demo::DemoOptions { listen, admin, dir }).await)
        }
        Command::Call {
            url,
            method,
            params,
            holon,
            sideband,
            ca_file,
            token,
            timeout,
        } => {
            let timeout = Duration::from_secs(timeout);
            let token = client_token(token);
            let (params, token) = (params.as_deref(), token.as_deref());
            let ca = ca_file.as_deref();
            let reply = if holon {
                client::call_holon(&url, &method, params, token, ca, timeout).await
            } else if sideband {
                client::call_sideband(&url, &method, params, token, ca, timeout).await
            } else {
                client::call(&url, &method, params, token, ca, timeout).await
            };
            match reply {
                Ok(text) if client::is_error_reply(&text) => match print(&text) {
                    ExitCode::SUCCESS => ExitCode::from(client::EXIT_ERROR_REPLY),
                    failed => failed,
                },
                Ok(text) => print(&text),
                Err(e) => {
                    eprintln!("switchyard call: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Watch {
            url,
            topics,
            persistent,
            holon,
            sideband,
            token,
            ca_file,
            timeout,
        } => {
            let speak = match (holon, sideband) {
                (true, _) => Speak::Holon,
                (_, true) => Speak::Sideband,
                _ => Speak::JsonRpc,
            };
            let w = client::watch::Watch {
                url,
                topics,
                persistent,
                speak,
                token: client_token(token),
                ca_file,
                timeout: Duration::from_secs(timeout),
            };
            watch(&w).await
        }
        Command::Daemon {
            socket,
            ws_listen,
            ws_dialect,
            hld_quirks,
            stdio,
        } => {
            let ran = match (ws_listen, socket) {
                _ if stdio => {
                    let opts = DaemonOptions { hld_quirks };
                    switchyard::daemon::serve_stdio(opts).await
                }
                (Some(addr), _) => {
                    let dialect = match ws_dialect {
                        None | Some(WsDialectArg::Jsonrpc) => WsDialect::JsonRpc,
                        Some(WsDialectArg::Holon) => WsDialect::Holon,
                    };
                    switchyard::daemon::ws::run_until_signal(addr, dialect).await
                }
                (None, Some(socket)) => {
                    let opts = DaemonOptions { hld_quirks };
                    switchyard::daemon::run_until_signal(&socket, opts).await
                }
                // The `listen` group requires one of them; clap enforces it.
                (None, None) => Err(std::io::Error::other("--socket or --ws-listen is required")),
            };
            report(ran.map_err(Into::into))
        }
    }
}

/// The bearer token of `call` and `watch`: `--token`, else
/// `$SWITCHYARD_TOKEN` (which the gateway's configuration ignores).
fn client_token(given: Option<String>) -> Option<String> {
    given.or_else(|| {
        std::env::var(CLIENT_TOKEN_ENV)
            .ok()
            .filter(|t| !t.is_empty())
    })
}

/// `switchyard watch`: see its help for the exit status.
async fn watch(w: &client::watch::Watch) -> ExitCode {
    let mut out = |line: &str| switchyard::stdout::line(line);
    match client::watch::watch(w, shutdown::signal(), &mut out).await {
        Ok(Ended::Stopped | Ended::OutputClosed) => ExitCode::SUCCESS,
        Ok(Ended::ServerClosed(why)) => {
            let why = if why.is_empty() {
                String::new()
            } else {
                format!(" ({why})")
            };
            eprintln!("switchyard watch: the server closed the connection{why}");
            ExitCode::FAILURE
        }
        Err(e @ WatchError::Refused(_)) => {
            eprintln!("switchyard watch: {e}");
            ExitCode::from(client::EXIT_ERROR_REPLY)
        }
        Err(e @ WatchError::Usage(_)) => {
            eprintln!("switchyard watch: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("switchyard watch: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `switchyard reload`: prints the new generation, or every problem that
/// rejected the reload (then exits with 64, as for an invalid config).
async fn reload(admin: &str, token: Option<&str>, timeout: Duration) -> ExitCode {
    match client::reload::reload(admin, token, timeout).await {
        Ok(client::reload::Reloaded::Ok(generation)) => {
            print(&format!("reloaded: configuration generation {generation}"))
        }
        Ok(client::reload::Reloaded::Rejected(problems)) => {
            eprintln!("switchyard reload: rejected; the running configuration is unchanged:");
            for p in &problems {
                eprintln!("  - {p}");
            }
            ExitCode::from(EXIT_CONFIG as u8)
        }
        Err(e) => {
            eprintln!("switchyard reload: {e}");
            ExitCode::FAILURE
        }
    }
}

fn load(config: Option<PathBuf>) -> Result<Config, ExitCode> {
    Config::load(config.as_deref()).map_err(|e| invalid(config.is_none(), &e))
}

fn check(config: Option<PathBuf>) -> ExitCode {
    match Config::check(config.as_deref()) {
        Ok((cfg, raw)) => {
            for warning in warnings(&cfg) {
                eprintln!("switchyard: warning: {warning}");
            }
            print(&raw.to_toml_string())
        }
        Err(e) => invalid(config.is_none(), &e),
    }
}

/// Reports an invalid configuration (exit 64); without `--config`, says
/// so and how to start, since a missing file is the likely cause.
fn invalid(no_file: bool, e: &switchyard::config::ConfigError) -> ExitCode {
    if let Some(ignored) = ignored_env_warning() {
        eprintln!("switchyard: warning: {ignored}");
    }
    eprintln!("switchyard: invalid configuration:\n{e}");
    if no_file {
        eprintln!(
            "switchyard: no --config FILE was given, so only built-in defaults and \
             SWITCHYARD_* variables were read.\n  \
             switchyard run --config switchyard.toml   (every key: config/switchyard.example.toml)\n  \
             switchyard demo                           (try it with nothing to set up)"
        );
    }
    ExitCode::from(EXIT_CONFIG as u8)
}

/// The warnings about a valid configuration: the environment variables
/// left out, then [`Config::warnings`].
fn warnings(cfg: &Config) -> Vec<String> {
    ignored_env_warning()
        .into_iter()
        .chain(cfg.warnings())
        .collect()
}

/// One warning naming every `SWITCHYARD_*` variable that is not
/// configuration (no `__`), if any; names only, values may be secrets.
fn ignored_env_warning() -> Option<String> {
    let ignored = switchyard::config::raw::ignored_env_vars();
    (!ignored.is_empty()).then(|| {
        format!(
            "ignoring {}: only SWITCHYARD_* variables with a \"__\" separator are \
             configuration (e.g. SWITCHYARD_ADMIN__ADDRESS)",
            ignored.join(", ")
        )
    })
}

/// Prints a command's result; a closed stdout is a clean end, not a panic.
fn print(text: &str) -> ExitCode {
    match switchyard::stdout::line(text) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if switchyard::stdout::is_closed(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("switchyard: cannot write to stdout: {e}");
            ExitCode::FAILURE
        }
    }
}

fn report(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("switchyard: {e:#}");
            ExitCode::FAILURE
        }
    }
}
