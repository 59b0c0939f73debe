#![allow(clippy::unwrap_used)]

use std::collections::HashSet;
use std::time::Duration;

use prometheus::core::Collector;
use prometheus::{Encoder, HistogramOpts, IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder};

use super::*;

const THREADS: usize = 8;
const PER_THREAD: u64 = 100_000;
/// Byte sizes cycled through by the threads: on a bound, between bounds,
/// above the highest.
const SIZES: [u64; 5] = [0, 64, 65, 1000, 5000];
const BOUNDS: [f64; 3] = [64.0, 256.0, 1024.0];

fn text(registry: &Registry) -> String {
    let mut out = Vec::new();
    TextEncoder::new()
        .encode(&registry.gather(), &mut out)
        .unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn eight_threads_fold_to_exact_totals() {
    let counters = CounterVec::new("t_total", "t", ["l"]).unwrap();
    let gauges = GaugeVec::new("t_gauge", "t", ["l"]).unwrap();
    let sizes = HistogramVec::new(("t_bytes", "t"), Unit::Bytes, &BOUNDS, ["l"]).unwrap();
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let (c, g, h) = (
                counters.with_label_values(&["a"]),
                gauges.with_label_values(&["a"]),
                sizes.with_label_values(&["a"]),
            );
            scope.spawn(move || {
                for i in 0..PER_THREAD {
                    // Thirds: a shard of this thread's own, another one,
                    // then shard 0, which all eight share. The first two
                    // reach every shard between them.
                    match i * 3 / PER_THREAD {
                        0 => pin_shard(2 * t),
                        1 => pin_shard(2 * t + 1),
                        _ => pin_shard(0),
                    }
                    c.inc();
                    g.add(2);
                    g.dec();
                    h.observe(SIZES[(i as usize + t) % SIZES.len()]);
                }
            });
        }
    });
    let c = counters.with_label_values(&["a"]);
    assert_eq!(c.shards_used(), SHARDS);
    let total = THREADS as u64 * PER_THREAD;
    assert_eq!(c.get(), total);
    assert_eq!(gauges.with_label_values(&["a"]).get(), total as i64);

    // Through the collector, as a scrape sees them.
    let family = &counters.collect()[0];
    assert_eq!(
        family.get_metric()[0].get_counter().get_value(),
        total as f64
    );
    let family = &sizes.collect()[0];
    let h = family.get_metric()[0].get_histogram();
    let per_size = total / SIZES.len() as u64;
    assert_eq!(h.get_sample_count(), total);
    assert_eq!(
        h.get_sample_sum(),
        (per_size * SIZES.iter().sum::<u64>()) as f64
    );
    let cumulative: Vec<u64> = h
        .get_bucket()
        .iter()
        .map(|b| b.cumulative_count())
        .collect();
    // ≤ 64: 0 and 64; ≤ 256: + 65; ≤ 1024: + 1000; 5000 only in +Inf.
    assert_eq!(cumulative, [2 * per_size, 3 * per_size, 4 * per_size]);
    let bounds: Vec<f64> = h.get_bucket().iter().map(|b| b.upper_bound()).collect();
    assert_eq!(bounds, BOUNDS);
}

#[test]
fn every_shard_is_folded() {
    let c = Counter::new();
    let g = Gauge::new();
    let h = HistogramVec::new(("e_bytes", "e"), Unit::Bytes, &BOUNDS, ["l"]).unwrap();
    let h = h.with_label_values(&["a"]);
    std::thread::scope(|scope| {
        for s in 0..SHARDS {
            let (c, g, h) = (&c, &g, &h);
            scope.spawn(move || {
                pin_shard(s);
                // A weight per shard: a shard missing from the fold is a
                // missing bit.
                c.inc_by(1 << s);
                g.add(1 << s);
                h.observe(1 << s);
            });
        }
    });
    let all = (1u64 << SHARDS) - 1;
    assert_eq!(c.get(), all);
    assert_eq!(g.get(), all as i64);
    let snap = h.snapshot();
    assert_eq!(snap.sum, u128::from(all));
    assert_eq!(snap.count(), SHARDS as u64);
    // 1..=64: 7 shards; 128, 256: 2; 512, 1024: 2; above: the rest.
    assert_eq!(snap.counts, [7, 2, 2, SHARDS as u64 - 11]);
}

#[test]
fn sharded_text_matches_plain_prometheus() {
    let (sharded, plain) = (Registry::new(), Registry::new());
    let labels = ["side", "direction"];
    let c = CounterVec::new("x_messages_total", "Messages", labels).unwrap();
    let h = HistogramVec::new(("x_size_bytes", "Sizes"), Unit::Bytes, &BOUNDS, labels).unwrap();
    let g = GaugeVec::new("x_in_flight", "In flight", labels).unwrap();
    sharded.register(Box::new(c.clone())).unwrap();
    sharded.register(Box::new(h.clone())).unwrap();
    sharded.register(Box::new(g.clone())).unwrap();
    let pc = IntCounterVec::new(Opts::new("x_messages_total", "Messages"), &labels).unwrap();
    let opts = HistogramOpts::new("x_size_bytes", "Sizes").buckets(BOUNDS.to_vec());
    let ph = prometheus::HistogramVec::new(opts, &labels).unwrap();
    let pg = IntGaugeVec::new(Opts::new("x_in_flight", "In flight"), &labels).unwrap();
    plain.register(Box::new(pc.clone())).unwrap();
    plain.register(Box::new(ph.clone())).unwrap();
    plain.register(Box::new(pg.clone())).unwrap();
    for (i, size) in SIZES.iter().cycle().take(1000).enumerate() {
        let l = if i % 3 == 0 {
            ["client", "in"]
        } else {
            ["upstream", "out"]
        };
        c.with_label_values(&l).inc();
        pc.with_label_values(&l).inc();
        h.with_label_values(&l).observe(*size);
        ph.with_label_values(&l).observe(*size as f64);
        g.with_label_values(&l).add(3 - i as i64 % 7);
        pg.with_label_values(&l).add(3 - i as i64 % 7);
    }
    // A series touched but never counted prints zeros in both.
    c.with_label_values(&["internal", "in"]);
    pc.with_label_values(&["internal", "in"]);
    assert_eq!(text(&sharded), text(&plain));
    assert!(
        text(&sharded).contains("x_size_bytes_bucket{direction=\"in\",side=\"client\",le=\"64\"}")
    );
}

#[test]
fn durations_export_seconds_like_plain_prometheus() {
    const LATENCY: [f64; 4] = [0.0001, 0.001, 0.25, 10.0];
    let (sharded, plain) = (Registry::new(), Registry::new());
    let h = HistogramVec::new(("d_seconds", "D"), Unit::Seconds, &LATENCY, ["u"]).unwrap();
    sharded.register(Box::new(h.clone())).unwrap();
    let opts = HistogramOpts::new("d_seconds", "D").buckets(LATENCY.to_vec());
    let ph = prometheus::HistogramVec::new(opts, &["u"]).unwrap();
    plain.register(Box::new(ph.clone())).unwrap();
    let durations = [
        Duration::from_micros(50),
        Duration::from_micros(100), // on a bound: counted in it
        Duration::from_nanos(100_001),
        Duration::from_millis(3),
        Duration::from_secs(40),
    ];
    for d in durations.iter().cycle().take(500) {
        h.with_label_values(&["a"]).observe_duration(*d);
        ph.with_label_values(&["a"]).observe(d.as_secs_f64());
    }
    let parse = |r: &Registry| {
        let lines = text(r)
            .lines()
            .map(|l| Ok(l.to_owned()))
            .collect::<Vec<_>>();
        prometheus_parse::Scrape::parse(lines.into_iter()).unwrap()
    };
    let (ours, theirs) = (parse(&sharded), parse(&plain));
    assert_eq!(ours.docs, theirs.docs);
    assert_eq!(ours.samples.len(), theirs.samples.len());
    for (a, b) in ours.samples.iter().zip(&theirs.samples) {
        assert_eq!((&a.metric, &a.labels), (&b.metric, &b.labels));
        match (&a.value, &b.value) {
            (prometheus_parse::Value::Histogram(x), prometheus_parse::Value::Histogram(y)) => {
                assert_eq!(x, y)
            }
            (prometheus_parse::Value::Untyped(x), prometheus_parse::Value::Untyped(y)) => {
                assert!((x - y).abs() <= 1e-9 * y.abs(), "{} {x} vs {y}", a.metric)
            }
            (x, y) => assert_eq!(format!("{x:?}"), format!("{y:?}")),
        }
    }
    let snap = h.with_label_values(&["a"]).snapshot();
    assert_eq!(snap.counts, [200, 100, 100, 0, 100]);
    let ns: u128 = durations.iter().map(Duration::as_nanos).sum();
    assert_eq!(snap.sum, ns * 100);
}

#[test]
fn a_label_set_is_one_series() {
    let c = CounterVec::new("s_total", "s", ["a", "b"]).unwrap();
    c.with_label_values(&["x", "y"]).inc();
    c.with_label_values(&["x", "y"]).inc_by(2);
    // Same joined text, different split: another series.
    c.with_label_values(&["xy", ""]).inc();
    assert_eq!(c.with_label_values(&["x", "y"]).get(), 3);
    assert_eq!(c.with_label_values(&["xy", ""]).get(), 1);
    // More series than a block holds get cells of their own.
    let names: Vec<String> = (0..40).map(|i| i.to_string()).collect();
    for (i, n) in names.iter().enumerate() {
        c.with_label_values(&[n, "z"]).inc_by(i as u64);
    }
    for (i, n) in names.iter().enumerate() {
        assert_eq!(c.with_label_values(&[n, "z"]).get(), i as u64);
    }
    assert_eq!(c.collect()[0].get_metric().len(), 42);
}

#[test]
fn gauges_go_both_ways() {
    let g = Gauge::new();
    g.inc();
    g.sub(5);
    g.add(2);
    assert_eq!(g.get(), -2);
    g.dec();
    g.add(3);
    assert_eq!(g.get(), 0);
}

#[test]
fn histogram_sums_carry_past_64_bits() {
    let h = HistogramVec::new(("c_bytes", "c"), Unit::Bytes, &[1.0], ["l"]).unwrap();
    let h = h.with_label_values(&["a"]);
    h.observe(u64::MAX);
    h.observe(u64::MAX);
    h.observe(2);
    let snap = h.snapshot();
    assert_eq!(snap.sum, 2 * u128::from(u64::MAX) + 2);
    assert_eq!(snap.counts, [0, 3]);
}

#[test]
fn bad_buckets_are_refused() {
    let make = |unit, bounds: &[f64]| HistogramVec::new(("b", "b"), unit, bounds, ["l"]);
    assert!(make(Unit::Bytes, &[1.0, 1.0]).is_err());
    assert!(make(Unit::Bytes, &[2.0, 1.0]).is_err());
    assert!(make(Unit::Bytes, &[1.5]).is_err());
    assert!(make(Unit::Bytes, &[f64::INFINITY]).is_err());
    assert!(make(Unit::Seconds, &[1e-10]).is_err());
    assert!(make(Unit::Seconds, &[0.0001, 30.0]).is_ok());
}

#[test]
fn threads_take_shards_in_turn() {
    let picked: HashSet<usize> = (0..4)
        .map(|_| std::thread::spawn(shard).join().unwrap())
        .collect();
    assert!(picked.len() >= 2, "{picked:?}");
    assert!(picked.iter().all(|&s| s < SHARDS));
}

/// Bound sets the bucket search must get right: the gateway's latency and
/// size buckets, bounds on both sides of powers of two, several bounds of
/// one bit length, and one at `u64::MAX`.
fn bound_sets() -> Vec<(Unit, Vec<f64>)> {
    vec![
        (
            Unit::Seconds,
            vec![
                0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                1.0, 2.5, 5.0, 10.0, 30.0,
            ],
        ),
        (
            Unit::Bytes,
            vec![
                64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
                16777216.0,
            ],
        ),
        (
            Unit::Bytes,
            vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 7.0, 8.0, 9.0],
        ),
        (Unit::Bytes, vec![127.0, 128.0, 129.0, 255.0, 256.0, 1e19]),
        (Unit::Bytes, vec![]),
    ]
}

#[test]
fn the_bucket_search_agrees_with_a_binary_search_at_every_edge() {
    for (unit, bounds) in bound_sets() {
        let b = histogram::Buckets::new(unit, &bounds).unwrap();
        let mut values = vec![0, 1, u64::MAX - 1, u64::MAX];
        for k in 0..64 {
            let p = 1u64 << k;
            values.extend([p - 1, p, p + 1]);
        }
        for &limit in b.limits() {
            values.extend([limit.saturating_sub(1), limit, limit.saturating_add(1)]);
        }
        for v in values {
            let want = b.limits().partition_point(|&limit| limit < v);
            assert_eq!(b.bucket(v), want, "{v} in {bounds:?}");
        }
    }
}

proptest::proptest! {
    #[test]
    fn the_bucket_search_agrees_with_a_binary_search(v: u64, shift in 0u32..64) {
        // Values of every bit length, not only the long ones.
        let v = v >> shift;
        for (unit, bounds) in bound_sets() {
            let b = histogram::Buckets::new(unit, &bounds).unwrap();
            let want = b.limits().partition_point(|&limit| limit < v);
            proptest::prop_assert_eq!(b.bucket(v), want);
        }
    }
}

#[test]
fn a_local_histogram_shows_its_counts_from_its_publish_on_once() {
    let many: Vec<f64> = (1..=20).map(f64::from).collect();
    let values = [0, 1, 3, 64, 65, 1000, 5000, u64::MAX - 2, 7];
    for bounds in [&BOUNDS[..], &many[..]] {
        let family = HistogramVec::new(("t_bytes", "t"), Unit::Bytes, bounds, ["l"]).unwrap();
        let (direct, series) = (
            family.with_label_values(&["direct"]),
            family.with_label_values(&["local"]),
        );
        let mut local = series.local();
        for v in values {
            direct.observe(v);
            local.observe(v);
        }
        if bounds.len() < LOCAL_BUCKETS {
            // Held but for the sum's overflow, which published the seven
            // before it and then went straight into the series; the last
            // one is held.
            assert_eq!(series.get_sample_count(), 8, "{bounds:?}");
        }
        local.publish();
        assert_eq!(series.snapshot(), direct.snapshot(), "{bounds:?}");
        local.publish();
        assert_eq!(series.snapshot(), direct.snapshot(), "twice: {bounds:?}");
        local.observe(9);
        direct.observe(9);
        drop(local);
        assert_eq!(series.snapshot(), direct.snapshot(), "dropped: {bounds:?}");
    }
}

/// A family with more buckets than one line holds (two lines per shard):
/// every bucket, in every shard, counts in its own cell, and none of
/// them in the sum's.
#[test]
fn buckets_past_the_first_line_count_in_every_shard() {
    let bounds: Vec<f64> = (0..20).map(|i| f64::from(1u32 << i)).collect();
    let h = HistogramVec::new(("w_bytes", "w"), Unit::Bytes, &bounds, ["l"]).unwrap();
    let h = h.with_label_values(&["a"]);
    // One value per bucket, the last above the highest bound.
    let values: Vec<u64> = (0..=20).map(|i| 1u64 << i).collect();
    std::thread::scope(|scope| {
        for s in 0..SHARDS {
            let (h, values) = (&h, &values);
            scope.spawn(move || {
                pin_shard(s);
                for (i, &v) in values.iter().enumerate() {
                    // Bucket i takes i + 1 observations per shard.
                    for _ in 0..=i {
                        h.observe(v);
                    }
                }
            });
        }
    });
    let snap = h.snapshot();
    let want: Vec<u64> = (1..=21).map(|n| n * SHARDS as u64).collect();
    assert_eq!(snap.counts, want);
    let per_shard: u128 = values
        .iter()
        .enumerate()
        .map(|(i, &v)| u128::from(v) * (i as u128 + 1))
        .sum();
    assert_eq!(snap.sum, per_shard * SHARDS as u128);
}
