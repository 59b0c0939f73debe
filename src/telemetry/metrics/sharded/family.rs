//! Labelled families of sharded series, and the `Collector` that folds
//! them into Prometheus families on every scrape.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use parking_lot::Mutex;
use prometheus::core::{Collector, Desc};
use prometheus::proto::{self, MetricFamily, MetricType};

use super::counter::Slab;
use super::histogram::Buckets;
use super::{Counter, Gauge, Histogram, Unit};

/// Sharded counters with `N` labels.
pub type CounterVec<const N: usize> = Family<Counter, N>;
/// Sharded gauges with `N` labels.
pub type GaugeVec<const N: usize> = Family<Gauge, N>;
/// Sharded histograms with `N` labels.
pub type HistogramVec<const N: usize> = Family<Histogram, N>;

/// A metric family: one series per label set, created on first use. The
/// label count is part of the type, so a call with the wrong number of
/// values does not compile.
pub struct Family<S: Series, const N: usize> {
    inner: Arc<Inner<S, N>>,
}

/// The series types a [`Family`] holds (sealed: implemented here only).
#[allow(unreachable_pub)]
pub trait Series: Clone + Send + Sync + 'static + sealed::Sealed {}

mod sealed {
    use prometheus::proto::{self, MetricType};

    /// What a family needs of its series.
    pub trait Sealed: Sized {
        /// The Prometheus type of the family.
        const TYPE: MetricType;
        /// A new series, from the family's allocator.
        fn make(maker: &mut super::Maker) -> Self;
        /// Writes the folded value into `metric`.
        fn fill(&self, metric: &mut proto::Metric);
    }
}

/// What new series of a family are made from.
#[derive(Debug)]
pub struct Maker {
    /// Cells of counters and gauges.
    slab: Slab,
    /// Bounds of histograms (none for counters and gauges).
    buckets: Arc<Buckets>,
}

struct Inner<S, const N: usize> {
    desc: Desc,
    /// Label indices in name order: exported label pairs are sorted by
    /// name, as `prometheus` sorts them.
    order: [usize; N],
    series: Mutex<Children<S, N>>,
}

struct Children<S, const N: usize> {
    maker: Maker,
    /// By the label values joined into one key.
    by_labels: HashMap<String, ([String; N], S)>,
}

// === impl Family ===

impl<const N: usize> Family<Counter, N> {
    /// A counter family named `name` (with its `_total` suffix).
    pub fn new(name: &str, help: &str, labels: [&str; N]) -> Result<Self, prometheus::Error> {
        Family::with_maker(name, help, labels, Unit::Bytes, &[])
    }
}

impl<const N: usize> Family<Gauge, N> {
    /// A gauge family.
    pub fn new(name: &str, help: &str, labels: [&str; N]) -> Result<Self, prometheus::Error> {
        Family::with_maker(name, help, labels, Unit::Bytes, &[])
    }
}

impl<const N: usize> Family<Histogram, N> {
    /// A histogram family recorded in `unit`, with upper `bounds` in
    /// exported units (seconds or bytes), ascending, each a whole number
    /// of recorded units; `+Inf` is implied.
    pub fn new(
        (name, help): (&str, &str),
        unit: Unit,
        bounds: &[f64],
        labels: [&str; N],
    ) -> Result<Self, prometheus::Error> {
        Family::with_maker(name, help, labels, unit, bounds)
    }
}

impl<S: Series, const N: usize> Family<S, N> {
    fn with_maker(
        name: &str,
        help: &str,
        labels: [&str; N],
        unit: Unit,
        bounds: &[f64],
    ) -> Result<Self, prometheus::Error> {
        let names = labels.iter().map(|&l| l.to_owned()).collect();
        let desc = Desc::new(name.to_owned(), help.to_owned(), names, HashMap::new())?;
        let mut order: [usize; N] = std::array::from_fn(|i| i);
        order.sort_by_key(|&i| labels[i]);
        let maker = Maker {
            slab: Slab::default(),
            buckets: Arc::new(Buckets::new(unit, bounds)?),
        };
        let series = Mutex::new(Children {
            maker,
            by_labels: HashMap::new(),
        });
        Ok(Family {
            inner: Arc::new(Inner {
                desc,
                order,
                series,
            }),
        })
    }

    /// The series of one label set, created (at zero) on first use. Takes
    /// a lock: resolve once and keep the handle on hot paths.
    pub fn with_label_values(&self, values: &[&str; N]) -> S {
        let key = key(values);
        let mut children = self.inner.series.lock();
        let Children { maker, by_labels } = &mut *children;
        by_labels
            .entry(key)
            .or_insert_with(|| (values.map(str::to_owned), S::make(maker)))
            .1
            .clone()
    }

    /// The family's name.
    pub fn name(&self) -> &str {
        &self.inner.desc.fq_name
    }
}

impl<S: Series, const N: usize> Clone for Family<S, N> {
    fn clone(&self) -> Self {
        Family {
            inner: self.inner.clone(),
        }
    }
}

impl<S: Series, const N: usize> fmt::Debug for Family<S, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Family")
            .field("name", &self.inner.desc.fq_name)
            .finish_non_exhaustive()
    }
}

impl<S: Series, const N: usize> Collector for Family<S, N> {
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.inner.desc]
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let inner = &*self.inner;
        let children = inner.series.lock();
        let metrics = children
            .by_labels
            .values()
            .map(|(values, series)| {
                let pairs = inner
                    .order
                    .iter()
                    .map(|&i| {
                        let mut pair = proto::LabelPair::default();
                        pair.set_name(inner.desc.variable_labels[i].clone());
                        pair.set_value(values[i].clone());
                        pair
                    })
                    .collect();
                let mut metric = proto::Metric::from_label(pairs);
                series.fill(&mut metric);
                metric
            })
            .collect();
        let mut family = MetricFamily::default();
        family.set_name(inner.desc.fq_name.clone());
        family.set_help(inner.desc.help.clone());
        family.set_field_type(S::TYPE);
        family.set_metric(metrics);
        vec![family]
    }
}

/// The map key of a label set: each value with its length, so that no two
/// label sets share a key.
fn key<const N: usize>(values: &[&str; N]) -> String {
    let mut key = String::with_capacity(values.iter().map(|v| v.len() + 4).sum());
    for v in values {
        key.push_str(&v.len().to_string());
        key.push(':');
        key.push_str(v);
    }
    key
}

// === impl Series ===

impl Series for Counter {}
impl Series for Gauge {}
impl Series for Histogram {}

impl sealed::Sealed for Counter {
    const TYPE: MetricType = MetricType::COUNTER;

    fn make(maker: &mut Maker) -> Self {
        Counter::from_slab(&mut maker.slab)
    }

    // Counters are exported as floats, like `prometheus::IntCounter`'s.
    #[allow(clippy::cast_precision_loss)]
    fn fill(&self, metric: &mut proto::Metric) {
        let mut c = proto::Counter::default();
        c.set_value(self.get() as f64);
        metric.set_counter(c);
    }
}

impl sealed::Sealed for Gauge {
    const TYPE: MetricType = MetricType::GAUGE;

    fn make(maker: &mut Maker) -> Self {
        Gauge::from_slab(&mut maker.slab)
    }

    #[allow(clippy::cast_precision_loss)]
    fn fill(&self, metric: &mut proto::Metric) {
        let mut g = proto::Gauge::default();
        g.set_value(self.get() as f64);
        metric.set_gauge(g);
    }
}

impl sealed::Sealed for Histogram {
    const TYPE: MetricType = MetricType::HISTOGRAM;

    fn make(maker: &mut Maker) -> Self {
        Histogram::with_buckets(&maker.buckets)
    }

    fn fill(&self, metric: &mut proto::Metric) {
        metric.set_histogram(self.proto());
    }
}
