//! Child processes and what `/proc` says about them.
//!
//! Every child runs under a [`ChildGuard`], which kills and reaps it on drop,
//! so no exit path of the load generator (error, panic, Ctrl-C) leaves a
//! daemon or gateway behind. CPU time and memory are read from
//! `/proc/<pid>/stat` and `/proc/<pid>/status` (Linux only). The open-file
//! limit is raised with the `prlimit` tool, because this crate uses neither
//! `libc` nor `unsafe`.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{bail, Context};

/// Open files kept free for everything that is not an idle connection
/// (listeners, upstream links, stdio, the runtime).
pub(crate) const FD_MARGIN: u64 = 512;

/// A child process that is killed and reaped when the guard is dropped.
#[derive(Debug)]
pub(crate) struct ChildGuard {
    name: &'static str,
    child: Child,
    /// Where the child's stderr goes; shown when it fails to start.
    log: PathBuf,
}

/// The open-file limit after trying to raise it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FdLimit {
    /// Soft limit in effect now (children inherit it).
    pub(crate) soft: u64,
    /// Hard limit.
    pub(crate) hard: u64,
}

// === impl ChildGuard ===

impl ChildGuard {
    /// Spawns `cmd` with stdout discarded and stderr in `log`, and without
    /// any inherited `SWITCHYARD_*` variable (which would override the
    /// generated configuration).
    pub(crate) fn spawn(name: &'static str, mut cmd: Command, log: &Path) -> anyhow::Result<Self> {
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("SWITCHYARD_") {
                cmd.env_remove(key);
            }
        }
        let err = File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .with_context(|| format!("starting {name}: {cmd:?}"))?;
        Ok(ChildGuard {
            name,
            child,
            log: log.to_owned(),
        })
    }

    /// What the child is, for messages ("daemon", "relay", …).
    pub(crate) fn name(&self) -> &'static str {
        self.name
    }

    /// The process id.
    pub(crate) fn id(&self) -> u32 {
        self.child.id()
    }

    /// Fails if the child has already exited, with the tail of its stderr.
    pub(crate) fn check_alive(&mut self) -> anyhow::Result<()> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => bail!("{} exited early ({status}){}", self.name, self.log_tail()),
            Err(e) => bail!("{}: cannot check its status: {e}", self.name),
        }
    }

    /// The last lines of the child's stderr, for error messages.
    pub(crate) fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().rev().take(10).collect();
        if lines.is_empty() {
            return String::new();
        }
        let tail: Vec<&str> = lines.into_iter().rev().collect();
        format!("; its stderr ends with:\n{}", tail.join("\n"))
    }

    fn kill(&mut self) -> io::Result<ExitStatus> {
        if let Some(status) = self.child.try_wait()? {
            return Ok(status);
        }
        self.child.kill()?;
        self.child.wait()
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Err(e) = self.kill() {
            eprintln!(
                "loadgen: could not stop {} (pid {}): {e}",
                self.name,
                self.id()
            );
        }
    }
}

// === /proc readers ===

/// User + system CPU time of a process so far.
pub(crate) fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces: fields are counted after its ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    // After ')': state is field 3 of the full line; utime is 14, stime 15.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    let ticks = utime + stime;
    Some(Duration::from_secs_f64(ticks as f64 / clock_ticks() as f64))
}

/// What a process has done so far besides its CPU time: its CPU time in
/// the kernel and its threads' context switches, voluntary or not
/// (`/proc/PID/task/*/status`). Beside the CPU time they tell where a
/// process's time per request goes besides instructions. (Its system
/// calls are not counted: `/proc/PID/io` counts file reads and writes,
/// not the `recv` and `send` Rust's sockets use.)
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Activity {
    pub(crate) kernel: Duration,
    pub(crate) switches: u64,
}

/// [`Activity`] of `pid` so far.
pub(crate) fn activity(pid: u32) -> Option<Activity> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let stime: u64 = rest.split_whitespace().nth(12)?.parse().ok()?;
    let mut switches = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
        // A thread that ended since the listing is left out.
        let Ok(status) = std::fs::read_to_string(task.path().join("status")) else {
            continue;
        };
        for key in ["voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:"] {
            switches += field(&status, key).unwrap_or(0);
        }
    }
    Some(Activity {
        kernel: Duration::from_secs_f64(stime as f64 / clock_ticks() as f64),
        switches,
    })
}

/// The number after `key` on its own line of a `/proc` file.
fn field(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix(key))?
        .trim()
        .parse()
        .ok()
}

/// CPU time all processes on the machine have used so far (busy time of
/// every core, from `/proc/stat`): with the per-process times it shows how
/// much of the machine something else was using during a run.
pub(crate) fn machine_busy() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let cpu = stat.lines().next()?.strip_prefix("cpu ")?;
    let ticks: Vec<u64> = cpu
        .split_whitespace()
        .map(|t| t.parse().unwrap_or(0))
        .collect();
    // user nice system idle iowait irq softirq steal: all but idle and iowait.
    let busy: u64 = ticks
        .iter()
        .take(8)
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, t)| t)
        .sum();
    Some(Duration::from_secs_f64(busy as f64 / clock_ticks() as f64))
}

/// A `Vm*` line of `/proc/<pid>/status`, in KiB (`VmRSS`, `VmHWM`).
pub(crate) fn vm_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| {
        l.strip_prefix(field)
            .is_some_and(|rest| rest.starts_with(':'))
    })?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Clock ticks per second (`getconf CLK_TCK`; 100 on every common Linux).
fn clock_ticks() -> u64 {
    static TICKS: OnceLock<u64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .filter(|&t| t > 0)
            .unwrap_or(100)
    })
}

// === open-file limit ===

/// Raises this process's soft open-file limit to the hard limit (children
/// spawned afterwards inherit it) and reports the limit in effect.
pub(crate) fn raise_fd_limit() -> Option<FdLimit> {
    let before = read_fd_limit()?;
    if before.soft >= before.hard {
        return Some(before);
    }
    let pid = std::process::id().to_string();
    let arg = format!("--nofile={}:{}", before.hard, before.hard);
    let raised = Command::new("prlimit")
        .args(["--pid", &pid, &arg])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !raised.is_ok_and(|s| s.success()) {
        eprintln!(
            "loadgen: cannot raise the open-file limit from {} to {} (`prlimit` missing or refused); \
             run `ulimit -n {}` first for the full idle scenario",
            before.soft, before.hard, before.hard
        );
    }
    read_fd_limit()
}

/// `Max open files` from `/proc/self/limits`.
fn read_fd_limit() -> Option<FdLimit> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let mut nums = line["Max open files".len()..].split_whitespace();
    let soft = parse_limit(nums.next()?)?;
    let hard = parse_limit(nums.next()?)?;
    Some(FdLimit { soft, hard })
}

fn parse_limit(s: &str) -> Option<u64> {
    if s == "unlimited" {
        Some(u64::MAX)
    } else {
        s.parse().ok()
    }
}

// === binaries ===

/// The `switchyard` binary: `explicit`, else next to this executable.
pub(crate) fn locate_switchyard(explicit: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(path) = explicit {
        if !path.is_file() {
            bail!("--switchyard {}: no such file", path.display());
        }
        return Ok(path);
    }
    let me = std::env::current_exe().context("cannot find the loadgen executable")?;
    let dir = me
        .parent()
        .context("the loadgen executable has no parent dir")?;
    let path = dir.join("switchyard");
    if !path.is_file() {
        bail!(
            "no switchyard binary at {}; build it first (`cargo build --release --bins`) \
             or pass --switchyard PATH",
            path.display()
        );
    }
    Ok(path)
}

/// How long ago a file was last modified (to spot a stale binary).
pub(crate) fn age(path: &Path) -> Option<Duration> {
    let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok()?;
    modified.elapsed().ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::{activity, field};

    #[test]
    fn a_field_is_the_number_on_its_line() {
        let status = "Name:\tx\nvoluntary_ctxt_switches:\t7\nnonvoluntary_ctxt_switches:\t3\n";
        assert_eq!(field(status, "voluntary_ctxt_switches:"), Some(7));
        assert_eq!(field(status, "nonvoluntary_ctxt_switches:"), Some(3));
        assert_eq!(field(status, "Threads:"), None);
    }

    /// Each sleep of this thread is a voluntary context switch.
    #[test]
    fn sleeps_count_as_context_switches() {
        let me = std::process::id();
        let before = activity(me).unwrap();
        for _ in 0..10 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let after = activity(me).unwrap();
        assert!(
            after.switches >= before.switches + 10,
            "{before:?} → {after:?}"
        );
        assert!(after.kernel >= before.kernel);
    }
}
