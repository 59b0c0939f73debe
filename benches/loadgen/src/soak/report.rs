//! The soak's Markdown report and its pass/fail decision.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use super::stats::{rss_after, Counts, Row, Shared};
use super::Settings;

/// RSS is flat when max/min after the warm-up is at most this.
const MAX_RSS_RATIO: f64 = 1.3;
/// Warm-up share of the run (clamped to 3 s … 2 min): RSS samples before
/// it are shown but not judged.
const WARM_UP_SHARE: f64 = 0.1;

/// Everything the report shows.
#[derive(Debug)]
pub(crate) struct Outcome<'a> {
    pub(crate) settings: Settings,
    pub(crate) elapsed: Duration,
    pub(crate) rows: &'a [Arc<Row>],
    pub(crate) shared: &'a Shared,
    pub(crate) restarts: u64,
    /// (seconds since start, VmRSS KiB), one a second.
    pub(crate) samples: &'a [(f64, u64)],
    /// Why switchyard exited during the run, if it did.
    pub(crate) died: Option<String>,
    /// Why restarting the daemon failed, if it did.
    pub(crate) chaos_failure: Option<String>,
    /// Clients that did not finish within their grace period.
    pub(crate) unfinished: usize,
}

/// The heading printed when traffic starts.
pub(crate) fn heading(s: Settings, config_line: &str) -> String {
    format!(
        "## switchyard soak: {} s, chaos {}{}\n\nconfiguration: {config_line}\n",
        s.duration.as_secs(),
        if s.chaos {
            format!("ON ({})", s.parts.names())
        } else {
            "off".to_owned()
        },
        if s.smoke { ", SMOKE sizes" } else { "" },
    )
}

/// One progress line.
pub(crate) fn progress(at: Duration, rows: &[Arc<Row>], rss: Option<&(f64, u64)>) -> String {
    let t = Counts::total(rows);
    format!(
        "t={}s requests {} replies {} error replies {} cut {} lost {} misrouted {} in flight {} \
         RSS {}",
        at.as_secs(),
        t.requests,
        t.replies,
        t.error_replies,
        t.cut,
        t.lost,
        t.misrouted,
        t.open(),
        rss.map_or_else(|| "?".to_owned(), |(_, k)| format!("{:.1} MiB", mib(*k))),
    )
}

/// Prints the report; returns whether the soak passed.
pub(crate) fn print(o: &Outcome<'_>) -> bool {
    let mut out = String::from("### soak: traffic by client\n\n");
    out.push_str(
        "| client | connections | requests | replies | error replies | cut | lost | misrouted \
         | garbage sent |\n",
    );
    out.push_str(&"|---".repeat(9));
    out.push_str("|\n");
    for r in o.rows {
        row(&mut out, &r.label, &r.counts());
    }
    let total = Counts::total(o.rows);
    row(&mut out, "**total**", &total);

    let (injected, errors): (Vec<_>, Vec<_>) = o
        .shared
        .kinds()
        .into_iter()
        .partition(|(k, _)| k.starts_with("injected: "));
    out.push_str("\n### soak: errors by kind\n\n");
    if errors.is_empty() {
        out.push_str("- none\n");
    }
    for (kind, n) in &errors {
        let _ = writeln!(out, "- {kind}: {n}");
    }
    if o.settings.chaos {
        let _ = writeln!(
            out,
            "\n### soak: chaos\n\n- daemon killed and restarted: {} times",
            o.restarts
        );
        for (kind, n) in &injected {
            let _ = writeln!(out, "- {kind}: {n}");
        }
    }
    let samples = o.shared.samples();
    if !samples.is_empty() {
        out.push_str("\n### soak: misrouted samples\n\n");
        for s in samples {
            let _ = writeln!(out, "- `{s}`");
        }
    }

    let rss_ok = rss_section(o, &mut out);
    out.push_str("\n### soak: verdict\n\n");
    let mut ok = true;
    let mut check = |name: &str, pass: bool, detail: String| {
        ok &= pass;
        let _ = writeln!(
            out,
            "- {} {name}: {detail}",
            if pass { "PASS" } else { "FAIL" }
        );
    };
    check(
        "misrouted",
        total.misrouted == 0,
        total.misrouted.to_string(),
    );
    check("lost", total.lost == 0, total.lost.to_string());
    check(
        "switchyard ran throughout",
        o.died.is_none(),
        o.died.clone().unwrap_or_else(|| "yes".to_owned()),
    );
    if o.settings.chaos {
        check(
            "daemon restarts",
            o.chaos_failure.is_none(),
            o.chaos_failure
                .clone()
                .unwrap_or_else(|| format!("{} done", o.restarts)),
        );
    }
    check(
        "clients finished",
        o.unfinished == 0,
        format!("{} unfinished", o.unfinished),
    );
    check(
        "traffic",
        total.replies > 0,
        format!("{} verified replies", total.replies),
    );
    match rss_ok {
        Some(flat) if !o.settings.smoke => {
            check("RSS flat", flat, "max/min <= 1.3 after warm-up".to_owned());
        }
        Some(_) => out.push_str("- NOT JUDGED (smoke) RSS flat\n"),
        None => check("RSS flat", false, "no samples".to_owned()),
    }
    let _ = writeln!(
        out,
        "\nsoak: {} after {:.0} s: {} requests, {} replies, {} error replies, {} cut, {} lost, \
         {} misrouted",
        if ok { "PASS" } else { "FAIL" },
        o.elapsed.as_secs_f64(),
        total.requests,
        total.replies,
        total.error_replies,
        total.cut,
        total.lost,
        total.misrouted
    );
    crate::emit(&out);
    ok
}

/// The RSS lines; `Some(flat)` when there were samples after the warm-up.
fn rss_section(o: &Outcome<'_>, out: &mut String) -> Option<bool> {
    let secs = o.settings.duration.as_secs_f64();
    let warm_up = (secs * WARM_UP_SHARE).clamp(3.0, 120.0);
    let all = rss_after(o.samples, 0.0);
    let judged = rss_after(o.samples, warm_up);
    out.push_str("\n### soak: switchyard RSS (sampled every second)\n\n");
    if let Some((lo, hi, n)) = all {
        let _ = writeln!(
            out,
            "- whole run: min {:.1} MiB, max {:.1} MiB ({n} samples)",
            mib(lo),
            mib(hi)
        );
    }
    if o.samples.len() >= 2 {
        // Growth and one-off spikes look alike in min/max: show the course.
        let last = o.samples.len() - 1;
        let course: Vec<String> = (0..=10)
            .map(|i| o.samples[last * i / 10])
            .map(|(t, kib)| format!("{t:.0} s {:.1}", mib(kib)))
            .collect();
        let _ = writeln!(out, "- course (MiB): {}", course.join(", "));
    }
    let (lo, hi, n) = judged?;
    let ratio = hi as f64 / lo.max(1) as f64;
    let flat = ratio <= MAX_RSS_RATIO;
    let _ = writeln!(
        out,
        "- after the {warm_up:.0} s warm-up: min {:.1} MiB, max {:.1} MiB ({n} samples): \
         max/min {ratio:.2} (flat: <= {MAX_RSS_RATIO})",
        mib(lo),
        mib(hi)
    );
    Some(flat)
}

fn row(out: &mut String, label: &str, c: &Counts) {
    let _ = writeln!(
        out,
        "| {label} | {} | {} | {} | {} | {} | {} | {} | {} |",
        c.connections,
        c.requests,
        c.replies,
        c.error_replies,
        c.cut,
        c.lost,
        c.misrouted,
        c.garbage
    );
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}
