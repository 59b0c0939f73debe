//! The soak's counters: one [`Row`] per client kind and dialect, errors by
//! kind, samples of misrouted messages, and switchyard's RSS over time.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

/// Distinct error kinds kept; later new kinds are counted under "other".
const MAX_KINDS: usize = 64;
/// Misrouted messages kept for the report.
const MAX_SAMPLES: usize = 5;
/// Bytes of a misrouted message kept.
const SAMPLE_BYTES: usize = 200;
/// RSS samples kept (one a second: a day).
pub(crate) const MAX_RSS_SAMPLES: usize = 86_400;

/// Counts shared by the rows: errors by kind and misrouted samples.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    kinds: Mutex<BTreeMap<String, u64>>,
    samples: Mutex<Vec<String>>,
}

/// The counts of one client kind on one dialect.
#[derive(Debug)]
pub(crate) struct Row {
    /// `jsonrpc-ws steady`, …
    pub(crate) label: String,
    /// Connections opened.
    pub(crate) connections: AtomicU64,
    /// Requests sent.
    pub(crate) requests: AtomicU64,
    /// Verified replies.
    pub(crate) replies: AtomicU64,
    /// Error replies for a pending request.
    pub(crate) error_replies: AtomicU64,
    /// Pending when their connection closed (by the gateway, or dropped on
    /// purpose).
    pub(crate) cut: AtomicU64,
    /// Neither reply nor connection loss within the grace period.
    pub(crate) lost: AtomicU64,
    /// Replies with an id or nonce of no pending request.
    pub(crate) misrouted: AtomicU64,
    /// Garbage and oversize messages sent.
    pub(crate) garbage: AtomicU64,
    shared: Arc<Shared>,
}

/// A snapshot of a row, or of the sum of rows.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub(crate) struct Counts {
    pub(crate) connections: u64,
    pub(crate) requests: u64,
    pub(crate) replies: u64,
    pub(crate) error_replies: u64,
    pub(crate) cut: u64,
    pub(crate) lost: u64,
    pub(crate) misrouted: u64,
    pub(crate) garbage: u64,
}

// === impl Shared ===

impl Shared {
    /// Errors by kind, sorted by kind.
    pub(crate) fn kinds(&self) -> Vec<(String, u64)> {
        self.kinds
            .lock()
            .iter()
            .map(|(k, n)| (k.clone(), *n))
            .collect()
    }

    /// The misrouted messages kept.
    pub(crate) fn samples(&self) -> Vec<String> {
        self.samples.lock().clone()
    }
}

// === impl Row ===

impl Row {
    /// An empty row.
    pub(crate) fn new(label: String, shared: Arc<Shared>) -> Self {
        let zero = || AtomicU64::new(0);
        Row {
            label,
            connections: zero(),
            requests: zero(),
            replies: zero(),
            error_replies: zero(),
            cut: zero(),
            lost: zero(),
            misrouted: zero(),
            garbage: zero(),
            shared,
        }
    }

    /// Adds `n` to one of this row's counters.
    pub(crate) fn add(&self, counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts one error of `kind`.
    pub(crate) fn kind(&self, kind: &str) {
        let mut kinds = self.shared.kinds.lock();
        if let Some(n) = kinds.get_mut(kind) {
            *n += 1;
        } else if kinds.len() < MAX_KINDS {
            kinds.insert(kind.to_owned(), 1);
        } else {
            *kinds.entry(String::from("other")).or_insert(0) += 1;
        }
    }

    /// Keeps the start of a misrouted message for the report.
    pub(crate) fn sample_misrouted(&self, bytes: &[u8]) {
        let mut samples = self.shared.samples.lock();
        if samples.len() < MAX_SAMPLES {
            let head = &bytes[..bytes.len().min(SAMPLE_BYTES)];
            samples.push(format!("{}: {}", self.label, String::from_utf8_lossy(head)));
        }
    }

    /// The counters now.
    pub(crate) fn counts(&self) -> Counts {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Counts {
            connections: get(&self.connections),
            requests: get(&self.requests),
            replies: get(&self.replies),
            error_replies: get(&self.error_replies),
            cut: get(&self.cut),
            lost: get(&self.lost),
            misrouted: get(&self.misrouted),
            garbage: get(&self.garbage),
        }
    }
}

// === impl Counts ===

impl Counts {
    /// The sum of `rows`.
    pub(crate) fn total<'a>(rows: impl IntoIterator<Item = &'a Arc<Row>>) -> Counts {
        rows.into_iter()
            .map(|r| r.counts())
            .fold(Counts::default(), |a, b| Counts {
                connections: a.connections + b.connections,
                requests: a.requests + b.requests,
                replies: a.replies + b.replies,
                error_replies: a.error_replies + b.error_replies,
                cut: a.cut + b.cut,
                lost: a.lost + b.lost,
                misrouted: a.misrouted + b.misrouted,
                garbage: a.garbage + b.garbage,
            })
    }

    /// Requests not yet settled (in flight).
    pub(crate) fn open(&self) -> u64 {
        self.requests
            .saturating_sub(self.replies + self.error_replies + self.cut + self.lost)
    }
}

/// RSS flatness after the warm-up: (min KiB, max KiB, samples) of the
/// samples taken at or after `warm_up_secs`.
pub(crate) fn rss_after(samples: &[(f64, u64)], warm_up_secs: f64) -> Option<(u64, u64, usize)> {
    let after: Vec<u64> = samples
        .iter()
        .filter(|(t, _)| *t >= warm_up_secs)
        .map(|(_, kib)| *kib)
        .collect();
    Some((*after.iter().min()?, *after.iter().max()?, after.len()))
}
