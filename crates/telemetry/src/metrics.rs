//! Counters, gauges and histograms in Prometheus text exposition format (version 0.0.4).
//!
//! Hand-rolled on atomics rather than the `metrics` crate: that crate wants a process-global
//! recorder, and Herald runs several servers in one process in its tests; a struct per server
//! keeps state out of statics (STYLE.md rule 9). Label sets are fixed and small, so cardinality
//! is bounded by construction.

use crate::event::{Event, PostmasterForward};
pub use crate::exposition::{write_counter, write_gauge, Histogram};
use crate::rate::Kind;
use herald_types::RcptOutcome;
use herald_types::{DaneNote, MtaStsNote};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

/// Why an inbound peer was refused or cut off by a listener bound (the `reason` label of
/// `herald_inbound_refusals_total`). Telemetry does not import `inbound`; the server maps
/// inbound's refusal kinds onto these with an exhaustive match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InboundRefusal {
    /// `max_sessions_per_client` reached (421 4.7.0 at connect).
    PerClientLimit,
    /// No complete command line by its deadline (421 4.4.2).
    CommandTimeout,
    /// DATA idle too long or past its deadline (421 4.4.2, message dropped).
    DataTimeout,
    /// The global buffer budget was spent (452 4.3.1).
    BufferBudget,
    /// `max_sessions_per_network` reached: one /24 or /48 (421 4.7.0 at connect).
    PerNetworkLimit,
    /// Idle with no MAIL yet when every session slot was taken: shed to admit a newcomer
    /// (421 4.7.0). This is the counter of shed sessions.
    Shed,
    /// Under stress, no command line within the short stress timeout (421 4.4.2).
    StressTimeout,
}

impl InboundRefusal {
    pub const ALL: [InboundRefusal; 7] = [
        InboundRefusal::PerClientLimit,
        InboundRefusal::CommandTimeout,
        InboundRefusal::DataTimeout,
        InboundRefusal::BufferBudget,
        InboundRefusal::PerNetworkLimit,
        InboundRefusal::Shed,
        InboundRefusal::StressTimeout,
    ];

    pub fn word(self) -> &'static str {
        match self {
            InboundRefusal::PerClientLimit => "per_client_limit",
            InboundRefusal::CommandTimeout => "command_timeout",
            InboundRefusal::DataTimeout => "data_timeout",
            InboundRefusal::BufferBudget => "buffer_budget",
            InboundRefusal::PerNetworkLimit => "per_network_limit",
            InboundRefusal::Shed => "shed",
            InboundRefusal::StressTimeout => "stress_timeout",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

const DELIVERY_BOUNDS: &[f64] = &[
    0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0, 3600.0, 86400.0,
];
const TRANSACTION_BOUNDS: &[f64] = &[0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 120.0];

/// Levels that stages keep current; read at scrape time.
#[derive(Default)]
pub struct Gauges {
    /// Recipients waiting in destination queues (ready or waiting for a retry).
    pub queued_recipients: AtomicI64,
    /// Copies handed to a connection and not yet answered.
    pub inflight_copies: AtomicI64,
    pub connections_open: AtomicI64,
    /// Destinations (MX host sets) with queued work.
    pub destinations_active: AtomicI64,
    /// Posts being fanned out or waiting for retries.
    pub posts_active: AtomicI64,
    /// Hosts (MX name and address) marked down and not yet back.
    pub hosts_down: AtomicI64,
    /// Copies queued in the fast lane (first attempts).
    pub lane_fast: AtomicI64,
    /// Copies queued in the slow lane (retries), ready or waiting.
    pub lane_slow: AtomicI64,
    /// Open connections of the slow lane.
    pub slow_connections: AtomicI64,
    /// Copies handed to a connection whose outcome is not yet durable in the journal: what a
    /// `kill -9` now could send twice. Never above `unjournaled_copies_bound`.
    pub unjournaled_copies: AtomicI64,
    /// The bound on `unjournaled_copies`: connections × copies per batch (each worker waits for
    /// its batch's group commit before taking more).
    pub unjournaled_copies_bound: AtomicI64,
    /// Inbound SMTP listeners in stress mode (0 = none; SMTP and submissions each count).
    pub inbound_stress: AtomicI64,
}

/// Everything `/metrics` shows that telemetry itself counts.
pub struct Metrics {
    pub posts_accepted: AtomicU64,
    pub posts_recovered: AtomicU64,
    pub posts_completed: AtomicU64,
    pub copies_delivered: AtomicU64,
    pub copies_deferred: AtomicU64,
    pub copies_failed: AtomicU64,
    pub delivery_latency: Histogram,
    pub transaction_latency: Histogram,
    pub gauges: Gauges,
    /// Scheduling decisions: deferrals by reason, lane moves, host state changes, expiries.
    pub scheduling: crate::scheduling::SchedulerMetrics,
    /// Outcomes per second (realstat, dashboard).
    pub rates: crate::rate::RateRing,
    /// SMTP transaction time per destination class.
    pub classes: crate::classes::ClassLatency,
    /// Attempts under an MTA-STS policy, by [`MtaStsNote`] (in `MtaStsNote::ALL` order).
    pub mta_sts: [AtomicU64; 3],
    /// Attempts with DANE on, by [`DaneNote`] (in `DaneNote::ALL` order).
    pub dane: [AtomicU64; 4],
    /// Copies spliced for an attempt, by what they got: DKIM signature added / failed, ARC
    /// set added / failed (see [`Metrics::count_copy_auth`]).
    pub copy_auth: [AtomicU64; 4],
    /// Postmaster messages stored, by what became of them (in `PostmasterForward::WORDS` order).
    pub postmaster: [AtomicU64; 5],
    /// Inbound peers refused or cut off, by [`InboundRefusal`] (in `InboundRefusal::ALL` order).
    pub inbound_refusals: [AtomicU64; 7],
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            posts_accepted: AtomicU64::new(0),
            posts_recovered: AtomicU64::new(0),
            posts_completed: AtomicU64::new(0),
            copies_delivered: AtomicU64::new(0),
            copies_deferred: AtomicU64::new(0),
            copies_failed: AtomicU64::new(0),
            delivery_latency: Histogram::new(DELIVERY_BOUNDS),
            transaction_latency: Histogram::new(TRANSACTION_BOUNDS),
            gauges: Gauges::default(),
            scheduling: crate::scheduling::SchedulerMetrics::default(),
            rates: Default::default(),
            classes: Default::default(),
            mta_sts: Default::default(),
            dane: Default::default(),
            copy_auth: Default::default(),
            postmaster: Default::default(),
            inbound_refusals: Default::default(),
        }
    }
}

impl Metrics {
    /// Counts one inbound refusal (called from the listeners' sessions; one atomic add).
    pub fn count_inbound_refusal(&self, why: InboundRefusal) {
        self.inbound_refusals[why.index()].fetch_add(1, Relaxed);
    }

    pub fn inbound_refusals(&self, why: InboundRefusal) -> u64 {
        self.inbound_refusals[why.index()].load(Relaxed)
    }

    /// Counts one spliced copy's authentication: `Some(true)` added, `Some(false)` wanted but
    /// failed (the copy went out without it), `None` not configured.
    pub fn count_copy_auth(&self, dkim: Option<bool>, arc: Option<bool>) {
        for (step, offset) in [(dkim, 0), (arc, 2)] {
            if let Some(added) = step {
                self.copy_auth[offset + usize::from(!added)].fetch_add(1, Relaxed);
            }
        }
    }

    pub(crate) fn observe(&self, event: &Event) {
        match event {
            Event::PostAccepted { recovered, .. } => {
                let c = if *recovered {
                    &self.posts_recovered
                } else {
                    &self.posts_accepted
                };
                c.fetch_add(1, Relaxed);
            }
            Event::PostCompleted { .. } => {
                self.posts_completed.fetch_add(1, Relaxed);
            }
            Event::PostExpanded { .. } => {}
            Event::Postmaster(p) => {
                self.postmaster[p.forward.index()].fetch_add(1, Relaxed);
            }
            Event::Scheduler(e) => self.scheduling.observe(e),
            Event::Attempt(a) => {
                self.transaction_latency.observe_ms(a.xdelay_ms);
                if let Some(note) = a.mta_sts {
                    self.mta_sts[note.index()].fetch_add(1, Relaxed);
                }
                if let Some(note) = a.dane {
                    self.dane[note.index()].fetch_add(1, Relaxed);
                }
                self.classes.observe(&a.relay, a.xdelay_ms);
                let now = herald_types::unix_ms_now();
                let kind = match &a.outcome {
                    RcptOutcome::Delivered(_) => {
                        self.copies_delivered.fetch_add(1, Relaxed);
                        let delay = now.saturating_sub(a.accepted_at_ms);
                        self.delivery_latency.observe_ms(delay);
                        Kind::Delivered
                    }
                    RcptOutcome::Deferred(_) => {
                        self.copies_deferred.fetch_add(1, Relaxed);
                        Kind::Deferred
                    }
                    RcptOutcome::Failed(_) => {
                        self.copies_failed.fetch_add(1, Relaxed);
                        Kind::Failed
                    }
                };
                self.rates.add(now, kind);
            }
        }
    }

    /// Appends this registry's metrics to `out` in Prometheus text format.
    pub fn render(&self, out: &mut String) {
        let c = |out: &mut String, name: &str, help: &str, v: &AtomicU64| {
            write_counter(out, name, help, &[], v.load(Relaxed));
        };
        c(
            out,
            "herald_posts_accepted_total",
            "Posts accepted and spooled.",
            &self.posts_accepted,
        );
        c(
            out,
            "herald_posts_recovered_total",
            "Unfinished posts recovered from the spool at start.",
            &self.posts_recovered,
        );
        c(
            out,
            "herald_posts_completed_total",
            "Posts whose every recipient has a final outcome.",
            &self.posts_completed,
        );
        let name = "herald_copies_total";
        let _ = writeln!(
            out,
            "# HELP {name} Delivery attempt outcomes per recipient copy.\n# TYPE {name} counter"
        );
        for (label, v) in [
            ("delivered", &self.copies_delivered),
            ("deferred", &self.copies_deferred),
            ("failed", &self.copies_failed),
        ] {
            let _ = writeln!(out, "{name}{{outcome=\"{label}\"}} {}", v.load(Relaxed));
        }
        let name = "herald_mta_sts_attempts_total";
        let _ = writeln!(
            out,
            "# HELP {name} Delivery attempts under a recipient domain's MTA-STS policy (testing-failed: enforcement would have refused it).\n# TYPE {name} counter"
        );
        for (note, v) in MtaStsNote::ALL.iter().zip(&self.mta_sts) {
            let _ = writeln!(
                out,
                "{name}{{policy=\"{}\"}} {}",
                note.word(),
                v.load(Relaxed)
            );
        }
        let name = "herald_dane_attempts_total";
        let _ = writeln!(
            out,
            "# HELP {name} Delivery attempts with DANE on, by what DANE concluded (failed: deferred, never sent in plaintext).\n# TYPE {name} counter"
        );
        for (note, v) in DaneNote::ALL.iter().zip(&self.dane) {
            let _ = writeln!(
                out,
                "{name}{{result=\"{}\"}} {}",
                note.word(),
                v.load(Relaxed)
            );
        }
        let name = "herald_copy_auth_total";
        let _ = writeln!(
            out,
            "# HELP {name} Copies spliced for delivery attempts, by DKIM signature and ARC set added or failed (failed: sent without it).\n# TYPE {name} counter"
        );
        for (i, (step, result)) in [
            ("dkim", "added"),
            ("dkim", "failed"),
            ("arc", "added"),
            ("arc", "failed"),
        ]
        .iter()
        .enumerate()
        {
            let _ = writeln!(
                out,
                "{name}{{step=\"{step}\",result=\"{result}\"}} {}",
                self.copy_auth[i].load(Relaxed)
            );
        }
        let name = "herald_postmaster_messages_total";
        let _ = writeln!(
            out,
            "# HELP {name} Messages to postmaster stored, by what became of them (forwarded to the operators or kept only, and why).\n# TYPE {name} counter"
        );
        for (word, v) in PostmasterForward::WORDS.iter().zip(&self.postmaster) {
            let _ = writeln!(out, "{name}{{forward=\"{word}\"}} {}", v.load(Relaxed));
        }
        let name = "herald_inbound_refusals_total";
        let _ = writeln!(
            out,
            "# HELP {name} Inbound SMTP/LMTP peers refused or cut off by a listener bound: per-client or per-network session limit (421 4.7.0), command, stress or DATA deadline (421 4.4.2), buffer budget (452 4.3.1), idle session shed for a newcomer (421 4.7.0).\n# TYPE {name} counter"
        );
        for why in InboundRefusal::ALL {
            let _ = writeln!(
                out,
                "{name}{{reason=\"{}\"}} {}",
                why.word(),
                self.inbound_refusals(why)
            );
        }
        self.delivery_latency.render(
            out,
            "herald_delivery_latency_seconds",
            "Time from a post's acceptance to the delivery of a copy.",
        );
        self.transaction_latency.render(
            out,
            "herald_smtp_transaction_seconds",
            "Time of one outbound SMTP transaction (MAIL to final reply).",
        );
        self.classes.render(out);
        let g = &self.gauges;
        for (name, help, v) in [
            (
                "herald_queue_recipients",
                "Recipients waiting in destination queues.",
                &g.queued_recipients,
            ),
            (
                "herald_inflight_copies",
                "Copies written to a connection and not yet answered.",
                &g.inflight_copies,
            ),
            (
                "herald_connections_open",
                "Open outbound SMTP connections.",
                &g.connections_open,
            ),
            (
                "herald_unjournaled_copies",
                "Copies handed to a connection whose outcome is not yet durable (duplicates a crash now could cause).",
                &g.unjournaled_copies,
            ),
            (
                "herald_unjournaled_copies_bound",
                "Most copies ever unjournaled at once: max_connections x max_copies_per_batch.",
                &g.unjournaled_copies_bound,
            ),
            (
                "herald_destinations_active",
                "Destinations with queued work.",
                &g.destinations_active,
            ),
            (
                "herald_posts_active",
                "Posts being fanned out or retried.",
                &g.posts_active,
            ),
            (
                "herald_hosts_down",
                "Hosts (MX name and address) marked down.",
                &g.hosts_down,
            ),
            (
                "herald_lane_fast_recipients",
                "Copies queued for a first attempt.",
                &g.lane_fast,
            ),
            (
                "herald_lane_slow_recipients",
                "Copies queued for a retry (slow lane).",
                &g.lane_slow,
            ),
            (
                "herald_slow_lane_connections",
                "Open connections of the slow lane.",
                &g.slow_connections,
            ),
            (
                "herald_inbound_stress",
                "Inbound SMTP listeners in stress mode (idle sessions get the short command timeout); 0 = none.",
                &g.inbound_stress,
            ),
        ] {
            write_gauge(out, name, help, v.load(Relaxed));
        }
        self.scheduling.render(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_valid_exposition_text() {
        let m = Metrics::default();
        m.copies_delivered.fetch_add(3, Relaxed);
        m.transaction_latency.observe_ms(3);
        m.gauges.connections_open.store(5, Relaxed);
        let mut out = String::new();
        m.render(&mut out);
        assert!(out.contains("herald_copies_total{outcome=\"delivered\"} 3\n"));
        assert!(out.contains("herald_smtp_transaction_seconds_bucket{le=\"0.005\"} 1\n"));
        assert!(out.contains("herald_smtp_transaction_seconds_count 1\n"));
        assert!(out.contains("herald_connections_open 5\n"));
        assert!(out.contains("herald_mta_sts_attempts_total{policy=\"testing-failed\"} 0\n"));
        assert!(out.contains("herald_dane_attempts_total{result=\"verified\"} 0\n"));
        m.count_inbound_refusal(InboundRefusal::Shed);
        m.gauges.inbound_stress.store(1, Relaxed);
        let mut out = String::new();
        m.render(&mut out);
        assert!(out.contains("herald_inbound_refusals_total{reason=\"shed\"} 1\n"));
        assert!(out.contains("herald_inbound_refusals_total{reason=\"per_network_limit\"} 0\n"));
        assert!(out.contains("herald_inbound_refusals_total{reason=\"per_client_limit\"} 0\n"));
        assert!(out.contains("herald_inbound_stress 1\n"));
        m.count_copy_auth(Some(true), Some(false));
        m.count_copy_auth(Some(true), None);
        m.count_copy_auth(None, None);
        let mut out = String::new();
        m.render(&mut out);
        assert!(out.contains("herald_copy_auth_total{step=\"dkim\",result=\"added\"} 2\n"));
        assert!(out.contains("herald_copy_auth_total{step=\"arc\",result=\"failed\"} 1\n"));
        assert!(out.contains("herald_copy_auth_total{step=\"arc\",result=\"added\"} 0\n"));
        for line in out.lines().filter(|l| !l.starts_with('#')) {
            let (name, value) = line.rsplit_once(' ').expect("name value");
            assert!(value.parse::<f64>().is_ok(), "bad value in {line}");
            assert!(name.starts_with("herald_"), "bad name in {line}");
        }
    }
}
