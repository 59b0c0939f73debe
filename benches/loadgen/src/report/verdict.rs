//! One verdict: a target, how it fared and the measured detail, and the
//! Markdown list of them (the judging is in `verdicts`, `gateway_cost`
//! and `fanout`).

use std::fmt::Write as _;

/// How a target fared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub(crate) enum Status {
    /// Met.
    Pass,
    /// Missed.
    Fail,
    /// Its scenario did not run.
    Skip,
    /// Smoke runs are too small to judge performance.
    NotJudged,
    /// Floor C judged by the same rule: not a target, the bound that any
    /// extra process between client and daemon meets on this machine.
    Reference,
}

/// One line of the verdict list.
#[derive(Debug, serde::Serialize)]
pub(crate) struct Verdict {
    /// The target, as the issue states it.
    pub(crate) target: String,
    /// The outcome.
    pub(crate) status: Status,
    /// Measured values and the margin.
    pub(crate) detail: String,
}

/// The verdict of a target whose scenario did not run.
pub(super) fn skip(target: &str) -> Verdict {
    Verdict {
        target: target.to_owned(),
        status: Status::Skip,
        detail: String::from("scenario not run"),
    }
}

/// The verdict list as Markdown lines.
pub(crate) fn verdict_lines(verdicts: &[Verdict]) -> String {
    let mut out = String::from("### targets\n\n");
    for v in verdicts {
        let status = match v.status {
            Status::Pass => "PASS",
            Status::Fail => "FAIL",
            Status::Skip => "SKIP",
            Status::NotJudged => "NOT JUDGED (smoke)",
            Status::Reference => "REF",
        };
        // Writing to a String cannot fail.
        let _ = writeln!(out, "- {status} {}: {}", v.target, v.detail);
    }
    out
}
