//! The one bridge to `prometheus-client`, which writes `/metrics` (OpenMetrics 1.0 text).
//!
//! Each component of telemetry owns its metrics as values (counters, gauges, histograms are
//! `Arc`s inside, so a clone is a handle on the same series) and registers them in the
//! [`Registry`] of its `Telemetry`: a registry per server, never a process-global recorder,
//! because tests run several servers in one process (the reason the `metrics` crate was not
//! used). Values that only exist at scrape time (spool statistics, channel depths, lock
//! counters kept as plain atomics on hot paths) go into a fresh registry built per scrape.
//!
//! The helpers here keep three library conventions in one place:
//! - counters are registered without `_total` and the library appends it to the sample, so a
//!   series is still written and grepped as `herald_…_total`;
//! - the library appends a full stop to HELP texts, so ours are written with one and it is
//!   removed before registration;
//! - a family's fixed label values are created up front, so every series shows (at zero) from
//!   the first scrape, and the hot path updates an owned handle: no lock, no label hashing.
//!
//! A leaf (imports nothing of telemetry): `classes`, `contention`, `scheduling` and `metrics`
//! all use it.

use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Metric;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

pub use prometheus_client::metrics::counter::Counter;
pub use prometheus_client::metrics::gauge::Gauge;
pub use prometheus_client::metrics::histogram::Histogram;
pub use prometheus_client::registry::Registry;

/// The content type of what [`encode`] writes.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A counter of seconds (or other fractions), e.g. time spent waiting for a lock.
pub type SecondsCounter = Counter<f64, std::sync::atomic::AtomicU64>;

/// Labels with fixed names and values (`[("outcome", "delivered")]`).
pub type FixedLabels<const N: usize> = [(&'static str, &'static str); N];

/// One label whose value is learned at run time (a destination class, an MX name).
pub type OneLabel = [(&'static str, String); 1];

/// A histogram family whose buckets are given by a plain function.
pub type HistogramFamily<S> = Family<S, Histogram, fn() -> Histogram>;

/// Writes every registry in `registries`, then the `# EOF` line that ends an exposition.
pub fn encode(out: &mut String, registries: &[&Registry]) {
    for registry in registries {
        // Writing into a String cannot fail; the library's error type is fmt::Error.
        let _ = encode_registry(out, registry);
    }
    let _ = encode_eof(out);
}

/// Registers `metric` as `name` with its HELP text (written with its final full stop).
pub fn register(registry: &mut Registry, name: &str, help: &str, metric: impl Metric) {
    let name = match metric.metric_type() {
        MetricType::Counter => name.strip_suffix("_total").unwrap_or(name),
        _ => name,
    };
    registry.register(name, help.strip_suffix('.').unwrap_or(help), metric);
}

/// A counter family with one series per row of `labels`; returns the series' handles in the
/// same order, for updates without the family's lock.
pub fn counter_family<const L: usize, const N: usize>(
    registry: &mut Registry,
    name: &str,
    help: &str,
    labels: [FixedLabels<L>; N],
) -> [Counter; N] {
    let family = Family::<FixedLabels<L>, Counter>::default();
    let handles = labels.map(|l| family.get_or_create_owned(&l));
    register(registry, name, help, family);
    handles
}

/// A family with one series per row of `rows`, each given its value by `set` (scrape-time
/// views: gauges `set`, counters `inc_by` from zero).
pub fn rows<S, M, V>(
    registry: &mut Registry,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (S, V)>,
    set: impl Fn(&M, V),
) where
    S: Clone + std::hash::Hash + Eq,
    M: Default,
    Family<S, M>: Metric,
{
    let family = Family::<S, M>::default();
    for (labels, value) in rows {
        set(&family.get_or_create(&labels), value);
    }
    register(registry, name, help, family);
}

/// Gauges, one per row (the per-destination table, channel depths).
pub fn gauge_rows(
    registry: &mut Registry,
    name: &str,
    help: &str,
    gauges: impl IntoIterator<Item = (OneLabel, i64)>,
) {
    rows(registry, name, help, gauges, |g: &Gauge, v| {
        g.set(v);
    });
}

/// A counter holding `value` (scrape-time views of counts kept elsewhere, e.g. the spool's).
pub fn counter_at(registry: &mut Registry, name: &str, help: &str, value: u64) {
    let counter = Counter::<u64>::default();
    counter.inc_by(value);
    register(registry, name, help, counter);
}

/// A gauge holding `value` (scrape-time views).
pub fn gauge_at(registry: &mut Registry, name: &str, help: &str, value: i64) {
    let gauge = Gauge::<i64>::default();
    gauge.set(value);
    register(registry, name, help, gauge);
}

/// Observes a duration given in milliseconds (histograms are in seconds).
pub fn observe_ms(histogram: &Histogram, ms: u64) {
    histogram.observe(ms as f64 / 1e3);
}

/// One series of a time histogram whose count and sum Herald also reads (the API's means per
/// class and per stage): the library keeps those readers for its own tests, so they are counted
/// here a second time, two relaxed atomic adds.
pub struct Timing {
    histogram: Histogram,
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Timing {
    pub fn new(histogram: Histogram) -> Timing {
        Timing {
            histogram,
            count: AtomicU64::new(0),
            sum_micros: AtomicU64::new(0),
        }
    }

    pub fn observe_micros(&self, micros: u64) {
        self.histogram.observe(micros as f64 / 1e6);
        self.count.fetch_add(1, Relaxed);
        self.sum_micros.fetch_add(micros, Relaxed);
    }

    pub fn observe_ms(&self, ms: u64) {
        self.observe_micros(ms.saturating_mul(1000));
    }

    pub fn count(&self) -> u64 {
        self.count.load(Relaxed)
    }

    pub fn sum_micros(&self) -> u64 {
        self.sum_micros.load(Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_keep_their_total_name_and_help_its_one_full_stop() {
        let mut registry = Registry::default();
        let [delivered, failed] = counter_family(
            &mut registry,
            "herald_copies_total",
            "Outcomes.",
            [[("outcome", "delivered")], [("outcome", "failed")]],
        );
        delivered.inc_by(3);
        failed.inc();
        gauge_at(&mut registry, "herald_level", "A level.", -2);
        rows(
            &mut registry,
            "herald_wait_seconds_total",
            "Waits.",
            [([("lock", "a")], 0.25)],
            |c: &SecondsCounter, v| {
                c.inc_by(v);
            },
        );
        let mut out = String::new();
        encode(&mut out, &[&registry]);
        // A family's series come in the order of its hash map: compare as a set of lines.
        let mut got: Vec<&str> = out.lines().collect();
        got.sort_unstable();
        let mut want = vec![
            "# HELP herald_copies Outcomes.",
            "# TYPE herald_copies counter",
            "herald_copies_total{outcome=\"delivered\"} 3",
            "herald_copies_total{outcome=\"failed\"} 1",
            "# HELP herald_level A level.",
            "# TYPE herald_level gauge",
            "herald_level -2",
            "# HELP herald_wait_seconds Waits.",
            "# TYPE herald_wait_seconds counter",
            "herald_wait_seconds_total{lock=\"a\"} 0.25",
            "# EOF",
        ];
        want.sort_unstable();
        assert_eq!(got, want);
        assert!(out.ends_with("# EOF\n"));
    }
}
