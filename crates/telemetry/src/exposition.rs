//! The Prometheus text exposition's building blocks: a cumulative histogram with fixed bounds
//! on atomics, and the writers of one counter or gauge with its HELP and TYPE lines.
//!
//! A leaf of its own (not part of `metrics`) because `classes`, `contention`, `scheduling` and
//! the API's spool gauges all use them, and `metrics` renders those modules: with these inside
//! `metrics` the modules would import each other in a circle.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A cumulative histogram with fixed upper bounds in seconds.
pub struct Histogram {
    bounds: &'static [f64],
    buckets: Vec<AtomicU64>,
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Histogram {
    pub fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            buckets: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_micros: AtomicU64::new(0),
        }
    }

    pub fn observe_ms(&self, ms: u64) {
        let secs = ms as f64 / 1000.0;
        if let Some(i) = self.bounds.iter().position(|&b| secs <= b) {
            self.buckets[i].fetch_add(1, Relaxed);
        }
        self.count.fetch_add(1, Relaxed);
        self.sum_micros.fetch_add(ms.saturating_mul(1000), Relaxed);
    }

    pub fn observe_micros(&self, micros: u64) {
        let secs = micros as f64 / 1e6;
        if let Some(i) = self.bounds.iter().position(|&b| secs <= b) {
            self.buckets[i].fetch_add(1, Relaxed);
        }
        self.count.fetch_add(1, Relaxed);
        self.sum_micros.fetch_add(micros, Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.count.load(Relaxed)
    }

    pub fn sum_micros(&self) -> u64 {
        self.sum_micros.load(Relaxed)
    }

    pub(crate) fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        self.render_series(out, name, &[]);
    }

    /// Writes this histogram's series (no HELP/TYPE lines) with extra labels, so several
    /// labelled histograms can share one metric name. Label values must be trusted, fixed text.
    pub fn render_series(&self, out: &mut String, name: &str, labels: &[(&str, &str)]) {
        let mut extra = String::new();
        for (k, v) in labels {
            let _ = write!(extra, "{k}=\"{v}\",");
        }
        let mut cumulative = 0;
        for (b, n) in self.bounds.iter().zip(&self.buckets) {
            cumulative += n.load(Relaxed);
            let _ = writeln!(out, "{name}_bucket{{{extra}le=\"{b}\"}} {cumulative}");
        }
        let count = self.count.load(Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{extra}le=\"+Inf\"}} {count}");
        let sum = self.sum_micros.load(Relaxed) as f64 / 1e6;
        let plain = extra.trim_end_matches(',');
        let braces = if plain.is_empty() {
            String::new()
        } else {
            format!("{{{plain}}}")
        };
        let _ = writeln!(
            out,
            "{name}_sum{braces} {sum}\n{name}_count{braces} {count}"
        );
    }
}

/// Writes one counter with optional labels (label values must be trusted, fixed strings).
pub fn write_counter(out: &mut String, name: &str, help: &str, labels: &[(&str, &str)], v: u64) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
    let _ = writeln!(out, "{name}{} {v}", label_text(labels));
}

/// Writes one gauge.
pub fn write_gauge(out: &mut String, name: &str, help: &str, v: i64) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
}

fn label_text(labels: &[(&str, &str)]) -> String {
    if labels.is_empty() {
        return String::new();
    }
    let inner: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    format!("{{{}}}", inner.join(","))
}
