//! Labelled families of sharded series, and the `Collector` that folds
//! them into Prometheus families on every scrape.

use std::collections::HashMap;
use std::fmt;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use parking_lot::RwLock;
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
    series: RwLock<Children<S, N>>,
}

struct Children<S, const N: usize> {
    maker: Maker,
    /// By a hash of the label values; a lookup allocates nothing.
    by_hash: HashMap<u64, Vec<([String; N], S)>>,
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
        let series = RwLock::new(Children {
            maker,
            by_hash: HashMap::new(),
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
    /// a lock (shared once the series exists): resolve once and keep the
    /// handle on hot paths.
    pub fn with_label_values(&self, values: &[&str; N]) -> S {
        let mut hasher = DefaultHasher::new();
        values.hash(&mut hasher);
        let hash = hasher.finish();
        if let Some(found) = self.inner.series.read().find(hash, values) {
            return found;
        }
        let mut children = self.inner.series.write();
        if let Some(found) = children.find(hash, values) {
            return found;
        }
        let Children { maker, by_hash } = &mut *children;
        let series = S::make(maker);
        let entry = (values.map(str::to_owned), series.clone());
        by_hash.entry(hash).or_default().push(entry);
        series
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
        let children = inner.series.read();
        let metrics = children
            .by_hash
            .values()
            .flatten()
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

// === impl Children ===

impl<S: Series, const N: usize> Children<S, N> {
    fn find(&self, hash: u64, values: &[&str; N]) -> Option<S> {
        let same = |(labels, _): &&([String; N], S)| labels.iter().zip(values).all(|(l, v)| l == v);
        let found = self.by_hash.get(&hash)?.iter().find(same);
        found.map(|(_, series)| series.clone())
    }
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
