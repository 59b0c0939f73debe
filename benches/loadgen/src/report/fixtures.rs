//! What the verdicts' tests share: scenario results built by hand, the
//! rows' labels, and the statuses of the verdicts of one target.

use super::super::measure::{RunResult, ScenarioResult};
use super::verdict::{Status, Verdict};

pub(super) const C: &str = "C: byte relay";
pub(super) const JSON: &str = "switchyard jsonrpc-ws → ndjson";
pub(super) const CBOR: &str = "switchyard sideband cbor → ndjson";

pub(super) fn scenario(name: &'static str, runs: Vec<RunResult>) -> ScenarioResult {
    ScenarioResult {
        name,
        about: String::new(),
        runs,
    }
}

/// The status of each verdict whose target starts with `target`.
pub(super) fn statuses(verdicts: &[Verdict], target: &str) -> Vec<Status> {
    verdicts
        .iter()
        .filter(|v| v.target.starts_with(target))
        .map(|v| v.status)
        .collect()
}
