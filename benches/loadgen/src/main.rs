//! `loadgen`: end-to-end load generator for switchyard.
//!
//! Runs each scenario (`latency`, `throughput`, `large`, `fixed-rate`,
//! `idle`, `fan-in`, `fanout`, `scaleout`, `persist`, `http`) against fresh instances of its targets: floor A (the
//! reference daemon over NDJSON, no gateway), floor B (a bare in-process
//! WebSocket echo), floor B2 (the same echo in a process of its own), floor C (a byte relay process in front of the daemon:
//! the cost of one more process hop, see `relay`), floor M (a minimal multiplexing gateway process in front of the
//! daemon, `benches/minimal/gateway.rs`: what a straightforward correct design costs) and five switchyard gateways: the JSON-RPC, holon-rpc,
//! Sideband JSON and Sideband CBOR WebSocket listeners in front of the
//! NDJSON daemon, and an NDJSON listener in front of the JSON-RPC WebSocket
//! daemon (`idle` and `fan-in` run the JSON-RPC gateway only; `fanout`
//! subscribes N JSON-RPC clients to a pub/sub feed of the NDJSON daemon; `scaleout`
//! the same 1,000 subscribers through the in-process broker and over one and two
//! instances on a NATS core backbone; `persist`
//! stores that feed in a persistent topic, per store backend, with 10 acknowledging
//! persistent subscribers and a backlog resumed; `http` POSTs JSON-RPC to
//! switchyard's `jsonrpc-http` listener over HTTP/1.1 and HTTP/2 beside
//! floor H, a bare hyper echo process). Every reply
//! is checked (id and nonce); the report is a Markdown table per scenario
//! plus a pass/fail line per target of the performance issue. See
//! `benches/README.md`.
//!
//! Exit status: 0 when every run completed with no mismatched and no lost
//! reply; 1 otherwise; 2 for bad arguments; with `--strict`, 3 when a
//! performance target was missed.
//!
//! Layout: `cli` reads the command line, `target` starts what is measured
//! (processes via `procs`, the echo in `echo`, floor H in `http_echo`),
//! `conn`, `http` and `wire` speak to it (a message received is a
//! `received::Received`), `drive`, `idle`,
//! `fanout` and `persist` apply the load (the last two read the daemon feed
//! of `feed`), `scenario` defines the runs, `measure` performs one (the
//! measurement window and the processes' CPU over it come from `cpu`, which
//! every kind of run shares) and reads memory, `report` prints it all. A
//! file imports only files below it: no circle of imports. It is a package
//! of its own (`benches/loadgen`, a member of switchyard's workspace), so
//! the product crate carries none of its dependencies.

mod cli;
mod conn;
mod cpu;
mod drive;
mod echo;
mod fanout;
mod feed;
mod http;
mod http_echo;
mod idle;
mod measure;
#[path = "../../minimal/gateway.rs"]
mod minimal;
mod persist;
mod procs;
mod received;
mod relay;
mod report;
mod scenario;
mod soak;
mod target;
mod wire;

use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

use self::cli::{setup, Cli};
use self::measure::ScenarioResult;
use self::report::Status;
use self::scenario::Options;
use self::target::StartOpts;

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
    if let (Some(addr), Some(to)) = (cli.minimal_listen, cli.minimal_to.clone()) {
        let serve = async move {
            let listener = tokio::net::TcpListener::bind(addr).await?;
            minimal::serve(listener, to).await
        };
        return match runtime.block_on(serve) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("loadgen minimal gateway: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    if let Some(addr) = cli.http_echo_listen {
        return match runtime.block_on(http_echo::serve(addr)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("loadgen HTTP echo: {e:#}");
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
