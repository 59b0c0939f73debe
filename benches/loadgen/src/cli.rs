//! loadgen's command line: its flags, their defaults, and the run
//! options and target start options they turn into.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use super::procs;
use super::scenario::Options;
use super::soak;
use super::target::StartOpts;

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
pub(crate) struct Cli {
    /// Measured time per target per scenario, in ms [default: 3000; 150 with --smoke].
    #[arg(long)]
    pub(crate) duration_ms: Option<u64>,
    /// Scenarios to run: all, or a comma-separated list of latency,
    /// throughput, large, fixed-rate, idle, fan-in, fanout, scaleout,
    /// persist, http.
    #[arg(long, value_delimiter = ',', default_value = "all")]
    pub(crate) scenario: Vec<String>,
    /// Tiny loads and durations, 50 idle connections: a quick correctness run.
    #[arg(long)]
    pub(crate) smoke: bool,
    /// Print the results as one JSON document instead of Markdown.
    #[arg(long)]
    pub(crate) json: bool,
    /// The switchyard binary (runs both the gateway and the daemon)
    /// [default: `switchyard` next to this executable].
    #[arg(long)]
    pub(crate) switchyard: Option<PathBuf>,
    /// switchyard's upstream connections to the daemon (1-4); fan-in always uses 1.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=4))]
    pub(crate) pool_size: u16,
    /// switchyard's runtime worker threads (`[gateway] worker_threads`);
    /// 0 is one per core, switchyard's own default.
    #[arg(long, default_value_t = 0)]
    pub(crate) gateway_workers: usize,
    /// Run the gateways with nothing but listener, upstream and route:
    /// every other setting at switchyard's shipped defaults (fan-in still
    /// sets pool_size 1).
    #[arg(long, conflicts_with_all = ["pool_size", "gateway_workers"])]
    pub(crate) default_config: bool,
    /// WebSocket connections held open in the idle scenario [default: 10000; 50 with --smoke].
    #[arg(long)]
    pub(crate) idle_connections: Option<usize>,
    /// Exit with status 3 when a performance target is missed.
    #[arg(long)]
    pub(crate) strict: bool,
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
    pub(crate) soak: Option<Duration>,
    /// With --soak: kill and restart the daemon every 20 s (5 s with
    /// --smoke), stall readers, reconnect in loops, drop connections with
    /// requests in flight, inject garbage and oversize messages.
    #[arg(long, requires = "soak")]
    pub(crate) chaos: bool,
    /// With --chaos: only these ingredients (comma-separated), to tell
    /// which one does what [default: all of them].
    #[arg(long, requires = "chaos", value_delimiter = ',', value_name = "PARTS")]
    pub(crate) chaos_only: Vec<soak::Part>,
    /// Internal: run as floor C, a byte relay listening on this socket
    /// (loadgen starts itself this way).
    #[arg(long, hide = true, requires = "relay_to")]
    pub(crate) relay_listen: Option<PathBuf>,
    /// Internal: the daemon socket floor C relays to.
    #[arg(long, hide = true, requires = "relay_listen")]
    pub(crate) relay_to: Option<PathBuf>,
    /// Internal: run as floor M, the minimal multiplexing gateway,
    /// listening for WebSocket clients on this loopback address (loadgen
    /// starts itself this way).
    #[arg(long, hide = true, requires = "minimal_to")]
    pub(crate) minimal_listen: Option<std::net::SocketAddr>,
    /// Internal: the daemon socket floor M forwards to.
    #[arg(long, hide = true, requires = "minimal_listen")]
    pub(crate) minimal_to: Option<PathBuf>,
    /// Internal: run as floor B2, a WebSocket echo listening on this
    /// loopback address (loadgen starts itself this way).
    #[arg(long, hide = true)]
    pub(crate) echo_listen: Option<std::net::SocketAddr>,
    /// Internal: run as floor H, a bare hyper HTTP echo listening on this
    /// loopback address (loadgen starts itself this way).
    #[arg(long, hide = true)]
    pub(crate) http_echo_listen: Option<std::net::SocketAddr>,
}

/// Options from the command line; locates switchyard; raises the fd limit.
pub(crate) fn setup(cli: &Cli) -> anyhow::Result<(Options, StartOpts)> {
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
