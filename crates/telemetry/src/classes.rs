//! SMTP transaction latency per destination class, with a bounded label set: the first
//! [`MAX_CLASSES`] distinct providers seen (an MX host's last two DNS labels, e.g. `gmail.com` for
//! `alt1.gmail-smtp-in.l.google.com` gives `google.com`) get a series each; every later provider
//! shares `other`. Big providers appear early in any real fan-out, so they get their own series.
//!
//! Lock-free on the hot path: class names are claimed once in `OnceLock` slots and never change,
//! and each slot keeps its own handle on its series of the histogram family.
//!
//! SECURITY: the MX names come from DNS (untrusted). A class name is kept only if it is plain
//! `[a-z0-9.-]`, so it can go into a Prometheus label and JSON unescaped.

use crate::exposition::{self, Histogram, HistogramFamily, OneLabel, Registry, Timing};
use serde::Serialize;
use std::sync::OnceLock;

/// Providers with their own series; the rest are `other`.
pub const MAX_CLASSES: usize = 16;

const BOUNDS: &[f64] = &[0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 120.0];

pub struct ClassLatency {
    /// A claimed class's name and its series.
    slots: [OnceLock<(Box<str>, Timing)>; MAX_CLASSES],
    other: Timing,
    family: HistogramFamily<OneLabel>,
}

fn class_histogram() -> Histogram {
    Histogram::new(BOUNDS.iter().copied())
}

fn label(class: &str) -> OneLabel {
    [("class", class.to_string())]
}

/// Mean latency of one class, for the "slowest hosts" panel.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ClassView {
    pub class: String,
    pub transactions: u64,
    pub mean_ms: f64,
}

/// `mx.example.com[127.1.0.5]:25` → `example.com`; `None` when no connection was made.
pub fn class_of(relay: &str) -> Option<&str> {
    let host = relay.split('[').next()?.trim_end_matches('.');
    if host.is_empty() || host == "none" {
        return None;
    }
    let mut dots = host.rmatch_indices('.');
    let start = match (dots.next(), dots.next()) {
        (Some(_), Some((i, _))) => i + 1,
        _ => 0,
    };
    let class = &host[start..];
    let clean = class
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-');
    (clean && class.len() <= 64).then_some(class)
}

impl ClassLatency {
    /// Creates the family (with its `other` series) and registers it in `registry`.
    pub(crate) fn new(registry: &mut Registry) -> ClassLatency {
        let family = HistogramFamily::new_with_constructor(class_histogram as fn() -> Histogram);
        let other = Timing::new(family.get_or_create_owned(&label("other")));
        exposition::register(
            registry,
            "herald_smtp_reply_seconds",
            "Outbound SMTP transaction time by destination class (provider).",
            family.clone(),
        );
        ClassLatency {
            slots: std::array::from_fn(|_| OnceLock::new()),
            other,
            family,
        }
    }

    fn timing(&self, class: &str) -> &Timing {
        for slot in &self.slots {
            match slot.get() {
                Some((name, h)) if &**name == class => return h,
                Some(_) => continue,
                None => {
                    // Claim the free slot; if another thread won it, it may hold our class.
                    let (name, h) = slot.get_or_init(|| {
                        (
                            class.into(),
                            Timing::new(self.family.get_or_create_owned(&label(class))),
                        )
                    });
                    if &**name == class {
                        return h;
                    }
                }
            }
        }
        &self.other
    }

    pub fn observe(&self, relay: &str, xdelay_ms: u64) {
        if let Some(class) = class_of(relay) {
            self.timing(class).observe_ms(xdelay_ms);
        }
    }

    fn named(&self) -> impl Iterator<Item = (&str, &Timing)> {
        self.slots
            .iter()
            .filter_map(|s| s.get().map(|(n, h)| (&**n, h)))
            .chain(std::iter::once(("other", &self.other)))
    }

    /// Classes by mean latency, slowest first.
    pub fn slowest(&self) -> Vec<ClassView> {
        let mut v: Vec<ClassView> = self
            .named()
            .filter(|(_, h)| h.count() > 0)
            .map(|(n, h)| ClassView {
                class: n.to_string(),
                transactions: h.count(),
                mean_ms: h.sum_micros() as f64 / 1000.0 / h.count() as f64,
            })
            .collect();
        v.sort_by(|a, b| b.mean_ms.total_cmp(&a.mean_ms));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_bounded_and_clean() {
        assert_eq!(class_of("mx.d1.test[127.1.0.5]:25"), Some("d1.test"));
        assert_eq!(class_of("localhost[127.0.0.1]:25"), Some("localhost"));
        assert_eq!(class_of("none"), None);
        assert_eq!(class_of("mx.EVIL\"{}.test[1.2.3.4]:25"), None);
        let mut registry = Registry::default();
        let c = ClassLatency::new(&mut registry);
        for i in 0..40 {
            c.observe(&format!("mx.p{i}.test[127.0.0.1]:25"), 5);
        }
        c.observe("mx.p0.test[127.0.0.1]:25", 100);
        let v = c.slowest();
        assert_eq!(v.len(), MAX_CLASSES + 1);
        assert_eq!(v[0].class, "p0.test");
        assert_eq!(
            v.iter()
                .find(|x| x.class == "other")
                .map(|x| x.transactions),
            Some(24)
        );
        let mut out = String::new();
        exposition::encode(&mut out, &[&registry]);
        assert!(out.contains("herald_smtp_reply_seconds_count{class=\"other\"} 24\n"));
    }
}
