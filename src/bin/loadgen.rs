//! `loadgen`: end-to-end load generator for switchyard.
//!
//! Runs each scenario (`latency`, `throughput`, `large`, `fixed-rate`,
//! `idle`, `fan-in`, `fanout`, `persist`) against fresh instances of its targets: floor A (the
//! reference daemon over NDJSON, no gateway), floor B (a bare in-process
//! WebSocket echo), floor B2 (the same echo in a process of its own), floor C (a byte relay process in front of the daemon:
//! the cost of one more process hop, see `relay`) and five switchyard gateways: the JSON-RPC, holon-rpc,
//! Sideband JSON and Sideband CBOR WebSocket listeners in front of the
//! NDJSON daemon, and an NDJSON listener in front of the JSON-RPC WebSocket
//! daemon (`idle` and `fan-in` run the JSON-RPC gateway only; `fanout`
//! subscribes N JSON-RPC clients to a pub/sub feed of the NDJSON daemon; `persist`
//! stores that feed in a persistent topic, per store backend, with 10 acknowledging
//! persistent subscribers and a backlog resumed). Every reply
//! is checked (id and nonce); the report is a Markdown table per scenario
//! plus a pass/fail line per target of the performance issue. See
//! `benches/README.md`.
//!
//! Exit status: 0 when every run completed with no mismatched and no lost
//! reply; 1 otherwise; 2 for bad arguments; with `--strict`, 3 when a
//! performance target was missed.
//!
//! Layout: `target` starts what is measured (processes via `procs`, the
//! echo in `echo`), `conn` and `wire` speak to it, `drive`, `idle`,
//! `fanout` and `persist` apply the load (the last two read the daemon feed
//! of `feed`), `scenario` defines the runs, `measure` performs one and reads
//! the processes' CPU and memory, `report` prints it all. They live
//! in `src/bin/loadgen/` (a binary crate root has no module directory of its
//! own, hence the `#[path]` attributes).

#[path = "loadgen/conn.rs"]
mod conn;
#[path = "loadgen/drive.rs"]
mod drive;
#[path = "loadgen/echo.rs"]
mod echo;
#[path = "loadgen/fanout.rs"]
mod fanout;
#[path = "loadgen/feed.rs"]
mod feed;
#[path = "loadgen/idle.rs"]
mod idle;
#[path = "loadgen/measure.rs"]
mod measure;
#[path = "loadgen/persist.rs"]
mod persist;
#[path = "loadgen/procs.rs"]
mod procs;
#[path = "loadgen/relay.rs"]
mod relay;
#[path = "loadgen/report.rs"]
mod report;
#[path = "loadgen/scenario.rs"]
mod scenario;
#[path = "loadgen/soak.rs"]
mod soak;
#[path = "loadgen/target.rs"]
mod target;
#[path = "loadgen/wire.rs"]
mod wire;

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

use self::measure::ScenarioResult;
use self::report::Status;
use self::scenario::Options;
use self::target::StartOpts;

/// Measured time per run by default, after a warm-up of a fifth of it (at
/// most 1 s). 3 s keeps the whole default run (about 30 traffic runs plus
/// idle) under 3 minutes on a 2-core machine.
const DEFAULT_DURATION_MS: u64 = 3000;
/// Measured time per run in `--smoke` mode: enough for thousands of
/// verified replies per run, short enough for `cargo test`.
const SMOKE_DURATION_MS: u64 = 150;
/// Idle connections in `--smoke` mode.
const SMOKE_IDLE_CONNS: usize = 50;

/// End-to-end load generator for switchyard.
#[derive(Debug, Parser)]
#[command(about)]
struct Cli {
    /// Measured time per target per scenario, in ms [default: 3000; 150 with --smoke].
    #[arg(long)]
    duration_ms: Option<u64>,
    /// Scenarios to run: all, or a comma-separated list of latency,
    /// throughput, large, fixed-rate, idle, fan-in, fanout, persist.
    #[arg(long, value_delimiter = ',', default_value = "all")]
    scenario: Vec<String>,
    /// Tiny loads and durations, 50 idle connections: a quick correctness run.
    #[arg(long)]
    smoke: bool,
    /// Print the results as one JSON document instead of Markdown.
    #[arg(long)]
    json: bool,
    /// The switchyard binary (runs both the gateway and the daemon)
    /// [default: `switchyard` next to this executable].
    #[arg(long)]
    switchyard: Option<PathBuf>,
    /// switchyard's upstream connections to the daemon (1-4); fan-in always uses 1.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=4))]
    pool_size: u16,
    /// switchyard's runtime worker threads (`[gateway] worker_threads`);
    /// 0 is one per core, switchyard's own default.
    #[arg(long, default_value_t = 0)]
    gateway_workers: usize,
    /// Run the gateways with nothing but listener, upstream and route:
    /// every other setting at switchyard's shipped defaults (fan-in still
    /// sets pool_size 1).
    #[arg(long, conflicts_with_all = ["pool_size", "gateway_workers"])]
    default_config: bool,
    /// WebSocket connections held open in the idle scenario [default: 10000; 50 with --smoke].
    #[arg(long)]
    idle_connections: Option<usize>,
    /// Exit with status 3 when a performance target is missed.
    #[arg(long)]
    strict: bool,
    /// Instead of the scenarios: a soak of this long (`90s`, `30m`, `1h`;
    /// a bare number is seconds) with mixed traffic in all four client
    /// dialects through one switchyard; exits non-zero on any misrouted or
    /// lost request, or RSS growth.
    #[arg(
        long,
        value_parser = parse_duration,
        value_name = "DURATION",
        conflicts_with_all = ["json", "scenario", "strict"]
    )]
    soak: Option<Duration>,
    /// With --soak: kill and restart the daemon every 20 s (5 s with
    /// --smoke), stall readers, reconnect in loops, drop connections with
    /// requests in flight, inject garbage and oversize messages.
    #[arg(long, requires = "soak")]
    chaos: bool,
    /// With --chaos: only these ingredients (comma-separated), to tell
    /// which one does what [default: all of them].
    #[arg(long, requires = "chaos", value_delimiter = ',', value_name = "PARTS")]
    chaos_only: Vec<soak::Part>,
    /// Internal: run as floor C, a byte relay listening on this socket
    /// (loadgen starts itself this way).
    #[arg(long, hide = true, requires = "relay_to")]
    relay_listen: Option<PathBuf>,
    /// Internal: the daemon socket floor C relays to.
    #[arg(long, hide = true, requires = "relay_listen")]
    relay_to: Option<PathBuf>,
    /// Internal: run as floor B2, a WebSocket echo listening on this
    /// loopback address (loadgen starts itself this way).
    #[arg(long, hide = true)]
    echo_listen: Option<std::net::SocketAddr>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("loadgen: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let (Some(listen), Some(to)) = (cli.relay_listen.clone(), cli.relay_to.clone()) {
        return match runtime.block_on(relay::serve(listen, to)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("loadgen relay: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    if let Some(addr) = cli.echo_listen {
        return match runtime.block_on(echo::serve(addr)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("loadgen echo: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    let code = runtime.block_on(async {
        tokio::select! {
            code = run(cli) => code,
            // Dropping `run` drops every live target, which kills its processes.
            _ = tokio::signal::ctrl_c() => {
                eprintln!("loadgen: interrupted");
                ExitCode::from(130)
            }
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    code
}

async fn run(cli: Cli) -> ExitCode {
    let (opts, start) = match setup(&cli) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("loadgen: {e:#}");
            return ExitCode::from(2);
        }
    };
    let plan = match scenario::plan(&cli.scenario, &opts) {
        Ok(plan) => plan,
        Err(e) => {
            eprintln!("loadgen: {e:#}");
            return ExitCode::from(2);
        }
    };
    if let Some(duration) = cli.soak {
        let settings = soak::Settings {
            duration,
            chaos: cli.chaos,
            parts: soak::Parts::of(&cli.chaos_only),
            smoke: cli.smoke,
        };
        return match soak::run(settings, &start, &config_line(&start)).await {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::FAILURE,
            Err(e) => {
                eprintln!("loadgen soak: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    if !cli.json {
        print_header(&opts, &start);
    }
    let mut results = Vec::new();
    for sc in &plan {
        let result = measure::run(sc, &start, &opts).await;
        if !cli.json {
            emit(&report::table(&result));
        }
        results.push(result);
    }
    finish(&results, &cli, &start)
}

/// Options from the command line; locates switchyard; raises the fd limit.
fn setup(cli: &Cli) -> anyhow::Result<(Options, StartOpts)> {
    let default_ms = if cli.smoke {
        SMOKE_DURATION_MS
    } else {
        DEFAULT_DURATION_MS
    };
    let idle_default = if cli.smoke { SMOKE_IDLE_CONNS } else { 10_000 };
    let opts = Options {
        duration: Duration::from_millis(cli.duration_ms.unwrap_or(default_ms).max(1)),
        smoke: cli.smoke,
        pool_size: (!cli.default_config).then_some(usize::from(cli.pool_size)),
        idle_conns: cap_idle(cli.idle_connections.unwrap_or(idle_default)),
    };
    let start = StartOpts {
        switchyard: procs::locate_switchyard(cli.switchyard.clone())?,
        pool_size: opts.pool_size,
        gateway_workers: cli.gateway_workers,
        default_config: cli.default_config,
    };
    Ok((opts, start))
}

/// Raises the open-file limit and caps the idle connections to fit it:
/// loadgen and switchyard each need one descriptor per connection.
fn cap_idle(wanted: usize) -> usize {
    let Some(limit) = procs::raise_fd_limit() else {
        eprintln!("loadgen: cannot read the open-file limit; idle uses {wanted} connections");
        return wanted;
    };
    let room = usize::try_from(limit.soft.saturating_sub(procs::FD_MARGIN)).unwrap_or(usize::MAX);
    if wanted > room {
        eprintln!(
            "loadgen: the open-file limit is {} (hard {}): idle capped at {room} connections \
             instead of {wanted}; raise it with `ulimit -n` to measure more",
            limit.soft, limit.hard
        );
        return room;
    }
    wanted
}

fn print_header(opts: &Options, start: &StartOpts) {
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let age = procs::age(&start.switchyard)
        .map_or_else(String::new, |a| format!(" (built {} s ago)", a.as_secs()));
    let heading = if start.default_config {
        "## switchyard loadgen: DEFAULT configuration"
    } else {
        "## switchyard loadgen: tuned configuration"
    };
    emit(&format!(
        "{heading}\n\nconfiguration: {}\n\n{} ms per run (plus warm-up), idle N {}, {cores} cores, \
         switchyard binary {}{age}{}\n",
        config_line(start),
        opts.duration.as_millis(),
        opts.idle_conns,
        start.switchyard.display(),
        if opts.smoke { ", SMOKE" } else { "" },
    ));
}

/// Which gateway configuration the runs use, in one line.
fn config_line(start: &StartOpts) -> String {
    if start.default_config {
        return String::from(
            "default (--default-config): only listener, upstream and route keys; every other \
             setting at switchyard's shipped defaults (fan-in alone sets pool_size 1)",
        );
    }
    format!(
        "tuned: pool_size {}, gateway workers {}, listener max_in_flight and outbox_capacity \
         4,096, upstream max_in_flight_per_connection, max_pending and max_queued 65,536, \
         backoff 20-200 ms, log level warn (pass --default-config for the shipped defaults)",
        start
            .pool_size
            .map_or_else(|| "default".to_owned(), |p| p.to_string()),
        match start.gateway_workers {
            0 => "one per core".to_owned(),
            n => n.to_string(),
        },
    )
}

/// Prints the verdicts and the correctness summary; picks the exit status.
fn finish(results: &[ScenarioResult], cli: &Cli, start: &StartOpts) -> ExitCode {
    let verdicts = report::verdicts(results, cli.smoke);
    let (checked, mismatched, lost, failed) = report::correctness(results);
    if cli.json {
        let doc = serde_json::json!({
            "configuration": config_line(start),
            "scenarios": results,
            "verdicts": verdicts,
            "replies_checked": checked,
            "mismatched": mismatched,
            "lost": lost,
            "failed_runs": failed,
        });
        emit(&doc.to_string());
    } else {
        emit(&report::verdict_lines(&verdicts));
        emit(&format!(
            "correctness: {checked} replies checked, {mismatched} mismatched, {lost} lost, \
             {failed} failed runs\n"
        ));
    }
    if mismatched > 0 || lost > 0 || failed > 0 {
        return ExitCode::FAILURE;
    }
    if cli.strict && verdicts.iter().any(|v| v.status == Status::Fail) {
        return ExitCode::from(3);
    }
    ExitCode::SUCCESS
}

/// Writes a block to stdout right away (runs are long; show progress).
fn emit(text: &str) {
    let mut out = std::io::stdout().lock();
    // stdout closed (e.g. piped into `head`): nothing left to report to.
    let _ = writeln!(out, "{text}");
    // Same: a closed stdout has no reader to flush to.
    let _ = out.flush();
}

/// `90s`, `30m`, `1h`, `500ms`, or a bare number of seconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (num, unit) = text.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{text:?}: expected a number and a unit (90s, 30m, 1h)"))?;
    let d = match unit {
        "" | "s" => Duration::from_secs(n),
        "ms" => Duration::from_millis(n),
        "m" => Duration::from_secs(n.saturating_mul(60)),
        "h" => Duration::from_secs(n.saturating_mul(3600)),
        _ => {
            return Err(format!(
                "{text:?}: unknown unit {unit:?} (use ms, s, m or h)"
            ))
        }
    };
    if d.is_zero() {
        return Err(String::from("the duration must be above zero"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("20"), Ok(Duration::from_secs(20)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        for bad in ["", "m", "10x", "0s", "-5s", "1.5m"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }
}
