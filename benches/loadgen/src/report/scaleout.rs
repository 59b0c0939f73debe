//! The scaleout scenario's table: the same subscribers through the
//! in-process broker and over one and two instances on a NATS backbone,
//! with each instance's CPU per delivered event (its CPU in the window over
//! the events its own subscribers received) and the nats-server's per
//! published event (it forwards one copy per instance, not per
//! subscriber). No
//! verdict: the issue asks for the figures, and what they predict for N
//! instances on N machines is reasoned in docs/scale-out.md.

use super::super::fanout::InstanceUse;
use super::super::measure::ScenarioResult;
use super::{dash, opt, row};

/// The scaleout table.
pub(crate) fn table(sc: &ScenarioResult, out: &mut String) {
    out.push_str(
        "| target | instances | subscribers | per instance | published ev/s | delivered ev/s \
         | p50 µs | p99 µs | p99.9 µs | max µs | errors | mismatched | lost | closed | late \
         | instance CPU s | instance CPU µs/event | switchyard CPU µs/event | nats CPU s \
         | nats CPU µs/published event | daemon CPU s | loadgen CPU s | other CPU s |\n",
    );
    out.push_str(&"|---".repeat(23));
    out.push_str("|\n");
    for r in &sc.runs {
        let f = r.fanout.unwrap_or_default();
        let spread = r.spread.clone().unwrap_or_default();
        let [p50, _, p99, p999, max] = r.latency_us;
        let delivered = f.delivered as f64;
        let published = f.published_per_s * r.window_secs;
        let per_event =
            |cpu: Option<f64>, events: f64| cpu.filter(|_| events > 0.0).map(|s| s * 1e6 / events);
        let total_cpu = spread
            .instances
            .iter()
            .map(|i| i.cpu_s)
            .sum::<Option<f64>>();
        let each = |cell: &dyn Fn(&InstanceUse) -> String| {
            if spread.instances.is_empty() {
                return dash();
            }
            spread
                .instances
                .iter()
                .map(cell)
                .collect::<Vec<_>>()
                .join(" / ")
        };
        let cells = [
            r.label.clone(),
            spread.instances.len().to_string(),
            format!("{}/{}", f.subscribed, f.requested),
            each(&|i| i.subscribers.to_string()),
            format!("{:.0}", f.published_per_s),
            format!("{:.0}", f.delivered_per_s),
            format!("{p50:.1}"),
            format!("{p99:.1}"),
            format!("{p999:.1}"),
            format!("{max:.1}"),
            r.errors.to_string(),
            r.mismatches.to_string(),
            r.lost.to_string(),
            f.closed.to_string(),
            f.late.to_string(),
            each(&|i| opt(i.cpu_s, 2)),
            each(&|i| opt(per_event(i.cpu_s, i.delivered as f64), 2)),
            opt(per_event(total_cpu, delivered), 2),
            opt(spread.backbone_cpu_s, 2),
            opt(per_event(spread.backbone_cpu_s, published), 2),
            opt(r.daemon_cpu_s, 2),
            opt(r.loadgen_cpu_s, 2),
            opt(r.other_cpu_s, 2),
        ];
        row(out, &cells);
    }
}
