//! The counters, gauges and histograms telemetry keeps for `/metrics`, as `prometheus-client`
//! values registered in the server's registry (see [`crate::exposition`] for the conventions).
//!
//! Label sets are fixed and small, so cardinality is bounded by construction; every labelled
//! series is created at start, so it shows at zero before anything happened.

use crate::event::{Event, PostmasterForward};
use crate::exposition::{self, observe_ms, Counter, Gauge, Histogram, Registry};
use crate::rate::Kind;
use herald_types::RcptOutcome;
use herald_types::{DaneNote, FilterVerdict, GuardTrip, MtaStsNote, NoticeKind, NoticeLimit};

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
/// rspamd answers a clean post in milliseconds; its own `task_timeout` is 8 s.
const CONTENT_FILTER_BOUNDS: &[f64] = &[0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// Levels that stages keep current; read at scrape time.
pub struct Gauges {
    /// Recipients waiting in destination queues (ready or waiting for a retry).
    pub queued_recipients: Gauge,
    /// Copies handed to a connection and not yet answered.
    pub inflight_copies: Gauge,
    pub connections_open: Gauge,
    /// Destinations (MX host sets) with queued work.
    pub destinations_active: Gauge,
    /// Posts being fanned out or waiting for retries.
    pub posts_active: Gauge,
    /// Hosts (MX name and address) marked down and not yet back.
    pub hosts_down: Gauge,
    /// Copies queued in the fast lane (first attempts).
    pub lane_fast: Gauge,
    /// Copies queued in the slow lane (retries), ready or waiting.
    pub lane_slow: Gauge,
    /// Open connections of the slow lane.
    pub slow_connections: Gauge,
    /// Copies handed to a connection whose outcome is not yet durable in the journal: what a
    /// `kill -9` now could send twice. Never above `unjournaled_copies_bound`.
    pub unjournaled_copies: Gauge,
    /// The bound on `unjournaled_copies`: connections × copies per batch (each worker waits for
    /// its batch's group commit before taking more).
    pub unjournaled_copies_bound: Gauge,
    /// Inbound SMTP listeners in stress mode (0 = none; SMTP and submissions each count).
    pub inbound_stress: Gauge,
    /// Bytes of spliced copies in memory now (taken from the scheduler's copy budget before a
    /// batch is spliced, given back when it is sent).
    pub copy_bytes_in_flight: Gauge,
    /// The most `copy_bytes_in_flight` has been since start.
    pub copy_bytes_in_flight_peak: Gauge,
    /// The copy budget (`scheduler.max_copy_bytes`).
    pub copy_bytes_budget: Gauge,
    /// Copies parked in the deferred queue (waiting for a retry time, a down host, or room at
    /// their destination), outside the in-memory queue `scheduler.max_queued_copies` bounds.
    pub deferred_copies: Gauge,
    /// Of `deferred_copies`, those that may be tried now and wait for room in their
    /// destination's share of the in-memory queue (a slow destination's backlog).
    pub deferred_copies_for_room: Gauge,
    /// The most ready copies one destination holds in memory (each is bounded by its share).
    pub destination_ready_max: Gauge,
    /// Bytes of the deferred queue's files on disk.
    pub deferred_bytes: Gauge,
    /// Posts with parked copies, and how many of them are held in memory (the others have
    /// their rendered bytes on disk until a copy is tried).
    pub deferred_posts: Gauge,
    pub deferred_posts_in_memory: Gauge,
    /// Copies of posts being fanned out that are not queued yet (estimated from the list's
    /// member count when the fan-out starts).
    pub expansion_pending: Gauge,
    /// Accepted copies that may be tried now and are not done: the in-memory queue, copies
    /// waiting for room at their destination, copies on connections and `expansion_pending`;
    /// copies parked for a retry time or a down host are not counted. Intake refuses list
    /// posts above `[intake] max_unfinished_copies`.
    pub unfinished_copies: Gauge,
    /// 1 while intake refuses list posts with `452 4.3.1` because `unfinished_copies` passed
    /// `[intake] max_unfinished_copies`; 0 otherwise.
    pub intake_backpressure: Gauge,
}

impl Gauges {
    fn new(registry: &mut Registry) -> Gauges {
        let g = Gauges {
            queued_recipients: Gauge::default(),
            inflight_copies: Gauge::default(),
            connections_open: Gauge::default(),
            destinations_active: Gauge::default(),
            posts_active: Gauge::default(),
            hosts_down: Gauge::default(),
            lane_fast: Gauge::default(),
            lane_slow: Gauge::default(),
            slow_connections: Gauge::default(),
            unjournaled_copies: Gauge::default(),
            unjournaled_copies_bound: Gauge::default(),
            inbound_stress: Gauge::default(),
            copy_bytes_in_flight: Gauge::default(),
            copy_bytes_in_flight_peak: Gauge::default(),
            copy_bytes_budget: Gauge::default(),
            deferred_copies: Gauge::default(),
            deferred_copies_for_room: Gauge::default(),
            destination_ready_max: Gauge::default(),
            deferred_bytes: Gauge::default(),
            deferred_posts: Gauge::default(),
            deferred_posts_in_memory: Gauge::default(),
            expansion_pending: Gauge::default(),
            unfinished_copies: Gauge::default(),
            intake_backpressure: Gauge::default(),
        };
        for (name, help, gauge) in [
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
                "herald_copy_bytes_in_flight",
                "Bytes of spliced copies in memory (within scheduler.max_copy_bytes).",
                &g.copy_bytes_in_flight,
            ),
            (
                "herald_copy_bytes_in_flight_peak",
                "Most bytes of spliced copies ever in memory at once.",
                &g.copy_bytes_in_flight_peak,
            ),
            (
                "herald_copy_bytes_budget",
                "Bytes of spliced copies allowed in memory at once (scheduler.max_copy_bytes).",
                &g.copy_bytes_budget,
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
                "herald_deferred_copies",
                "Copies parked in the deferred queue (retry time, down host, or waiting for room at their destination), outside the in-memory queue.",
                &g.deferred_copies,
            ),
            (
                "herald_deferred_copies_for_room",
                "Of the deferred copies, those waiting for room in their destination's share of the in-memory queue.",
                &g.deferred_copies_for_room,
            ),
            (
                "herald_destination_ready_copies_max",
                "The most ready copies one destination holds in memory.",
                &g.destination_ready_max,
            ),
            (
                "herald_deferred_queue_bytes",
                "Bytes of the deferred queue's files on disk.",
                &g.deferred_bytes,
            ),
            (
                "herald_deferred_posts",
                "Posts with copies parked in the deferred queue.",
                &g.deferred_posts,
            ),
            (
                "herald_deferred_posts_in_memory",
                "Posts with parked copies whose rendered bytes are in memory (the rest wait on disk).",
                &g.deferred_posts_in_memory,
            ),
            (
                "herald_expansion_pending_copies",
                "Copies of posts being fanned out not yet queued (estimated).",
                &g.expansion_pending,
            ),
            (
                "herald_unfinished_copies",
                "Accepted copies that may be tried now and are not done (copies parked for a retry time or a down host excluded).",
                &g.unfinished_copies,
            ),
            (
                "herald_intake_backpressure",
                "1 while list posts are refused with 452 4.3.1 (unfinished copies over intake.max_unfinished_copies).",
                &g.intake_backpressure,
            ),
            (
                "herald_inbound_stress",
                "Inbound SMTP listeners in stress mode (idle sessions get the short command timeout); 0 = none.",
                &g.inbound_stress,
            ),
        ] {
            exposition::register(registry, name, help, gauge.clone());
        }
        g
    }
}

/// Everything `/metrics` shows that telemetry itself counts.
pub struct Metrics {
    pub posts_accepted: Counter,
    pub posts_recovered: Counter,
    pub posts_completed: Counter,
    pub copies_delivered: Counter,
    pub copies_deferred: Counter,
    pub copies_failed: Counter,
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
    mta_sts: [Counter; 3],
    /// Attempts with DANE on, by [`DaneNote`] (in `DaneNote::ALL` order).
    dane: [Counter; 4],
    /// Copies spliced for an attempt, by what they got: DKIM signature added / failed, ARC
    /// set added / failed (see [`Metrics::count_copy_auth`]).
    copy_auth: [Counter; 4],
    /// Copies of signed posts spliced and signed, by where: the signing pool or inline on the
    /// delivery worker (see [`Metrics::count_signed_copies`]).
    signed_copies: [Counter; 2],
    /// Postmaster messages stored, by what became of them (in `PostmasterForward::WORDS` order).
    postmaster: [Counter; 5],
    /// Inbound peers refused or cut off, by [`InboundRefusal`] (in `InboundRefusal::ALL` order).
    inbound_refusals: [Counter; 7],
    /// List posts stopped by a loop / auto-reply / rate guard, by [`GuardTrip`].
    list_guard: [Counter; GuardTrip::WORDS.len()],
    /// Notices dropped by a `[notice_limits]` limit, by kind × limit.
    notices_dropped: [Counter; NoticeKind::ALL.len() * NoticeLimit::ALL.len()],
    /// Held-post notices not sent because the held post was machine mail (backscatter).
    held_notices_suppressed: Counter,
    /// Feedback-loop complaints acted on, by list address. Lists are
    /// created by administrators, so the label's values are bounded by the directory.
    complaints: prometheus_client::metrics::family::Family<exposition::OneLabel, Counter>,
    /// Complaint reports that named no member Herald could verify (garbage, forged, a copy
    /// of a list since deleted): kept as unrecognized bounces for an administrator.
    complaints_unmatched: Counter,
    /// List posts checked by the content filter, by [`FilterVerdict`].
    content_filter: [Counter; FilterVerdict::ALL.len()],
    /// Time of one content-filter check (rspamd's answer, or the wait until the timeout).
    content_filter_latency: Histogram,
    /// The IMAP archive server's sessions and commands.
    pub imap: crate::imap::ImapMetrics,
    /// Descriptor headroom: the open-file limit, HTTP connections and refusals, local
    /// shortages on outbound connections.
    pub descriptors: crate::descriptors::DescriptorMetrics,
}

impl Metrics {
    /// Creates every metric and registers it in `registry`.
    pub fn new(registry: &mut Registry) -> Metrics {
        let counter = |registry: &mut Registry, name: &str, help: &str| {
            let c = Counter::default();
            exposition::register(registry, name, help, c.clone());
            c
        };
        let posts_accepted = counter(
            registry,
            "herald_posts_accepted_total",
            "Posts accepted and spooled.",
        );
        let posts_recovered = counter(
            registry,
            "herald_posts_recovered_total",
            "Unfinished posts recovered from the spool at start.",
        );
        let posts_completed = counter(
            registry,
            "herald_posts_completed_total",
            "Posts whose every recipient has a final outcome.",
        );
        let [copies_delivered, copies_deferred, copies_failed] = exposition::counter_family(
            registry,
            "herald_copies_total",
            "Delivery attempt outcomes per recipient copy.",
            [
                [("outcome", "delivered")],
                [("outcome", "deferred")],
                [("outcome", "failed")],
            ],
        );
        let mta_sts = exposition::counter_family(
            registry,
            "herald_mta_sts_attempts_total",
            "Delivery attempts under a recipient domain's MTA-STS policy (testing-failed: enforcement would have refused it).",
            MtaStsNote::ALL.map(|n| [("policy", n.word())]),
        );
        let dane = exposition::counter_family(
            registry,
            "herald_dane_attempts_total",
            "Delivery attempts with DANE on, by what DANE concluded (failed: deferred, never sent in plaintext).",
            DaneNote::ALL.map(|n| [("result", n.word())]),
        );
        let copy_auth = exposition::counter_family(
            registry,
            "herald_copy_auth_total",
            "Copies spliced for delivery attempts, by DKIM signature and ARC set added or failed (failed: sent without it).",
            [
                [("step", "dkim"), ("result", "added")],
                [("step", "dkim"), ("result", "failed")],
                [("step", "arc"), ("result", "added")],
                [("step", "arc"), ("result", "failed")],
            ],
        );
        let signed_copies = exposition::counter_family(
            registry,
            "herald_signed_copies_total",
            "Copies of DKIM-signed posts spliced and signed, by where: the signing pool (delivery.signing_threads) or inline on the delivery worker.",
            [[("where", "pool")], [("where", "inline")]],
        );
        let postmaster = exposition::counter_family(
            registry,
            "herald_postmaster_messages_total",
            "Messages to postmaster stored, by what became of them (forwarded to the operators or kept only, and why).",
            PostmasterForward::WORDS.map(|w| [("forward", w)]),
        );
        let inbound_refusals = exposition::counter_family(
            registry,
            "herald_inbound_refusals_total",
            "Inbound SMTP/LMTP peers refused or cut off by a listener bound: per-client or per-network session limit (421 4.7.0), command, stress or DATA deadline (421 4.4.2), buffer budget (452 4.3.1), idle session shed for a newcomer (421 4.7.0).",
            InboundRefusal::ALL.map(|r| [("reason", r.word())]),
        );
        let list_guard = exposition::counter_family(
            registry,
            "herald_list_guard_trips_total",
            "List posts stopped before fan-out (held or refused per the list's guard_action), by guard: Auto-Submitted, Precedence bulk/junk/list, our own copy coming back, auto-reply, max_posts_per_hour, unauthenticated From (require_aligned_from).",
            GuardTrip::WORDS.map(|w| [("guard", w)]),
        );
        let notices_dropped = exposition::counter_family(
            registry,
            "herald_notices_dropped_total",
            "Mail Herald sends on others' behalf (confirmations, held-post, request-reply, rejection, bounce-disabled notices) dropped by a [notice_limits] limit, by kind and limit: per recipient, per client, per list, global, counting table full.",
            std::array::from_fn(|i| {
                let (k, l) = (i / NoticeLimit::ALL.len(), i % NoticeLimit::ALL.len());
                [
                    ("kind", NoticeKind::ALL[k].word()),
                    ("limit", NoticeLimit::ALL[l].word()),
                ]
            }),
        );
        let held_notices_suppressed = counter(
            registry,
            "herald_held_notices_suppressed_total",
            "Held-post notices not sent because the held post was automatic, bulk or looping mail (answering it would be backscatter).",
        );
        let complaints =
            prometheus_client::metrics::family::Family::<exposition::OneLabel, Counter>::default();
        exposition::register(
            registry,
            "herald_complaints_total",
            "Feedback-loop (ARF) complaints that unsubscribed or disabled a member, by list.",
            complaints.clone(),
        );
        let complaints_unmatched = counter(
            registry,
            "herald_complaints_unmatched_total",
            "Feedback-loop reports that named no member Herald could verify (kept for an administrator as unrecognized bounces).",
        );
        let content_filter = exposition::counter_family(
            registry,
            "herald_content_filter_total",
            "List posts checked by the content filter (rspamd), by what Herald did: accept, hold, reject (550 5.7.1), failed (no usable answer: held).",
            FilterVerdict::ALL.map(|v| [("action", v.word())]),
        );
        let content_filter_latency = Histogram::new(CONTENT_FILTER_BOUNDS.iter().copied());
        exposition::register(
            registry,
            "herald_content_filter_seconds",
            "Time of one content-filter check of a list post (until rspamd's answer or the timeout).",
            content_filter_latency.clone(),
        );
        let delivery_latency = Histogram::new(DELIVERY_BOUNDS.iter().copied());
        exposition::register(
            registry,
            "herald_delivery_latency_seconds",
            "Time from a post's acceptance to the delivery of a copy.",
            delivery_latency.clone(),
        );
        let transaction_latency = Histogram::new(TRANSACTION_BOUNDS.iter().copied());
        exposition::register(
            registry,
            "herald_smtp_transaction_seconds",
            "Time of one outbound SMTP transaction (MAIL to final reply).",
            transaction_latency.clone(),
        );
        Metrics {
            posts_accepted,
            posts_recovered,
            posts_completed,
            copies_delivered,
            copies_deferred,
            copies_failed,
            delivery_latency,
            transaction_latency,
            classes: crate::classes::ClassLatency::new(registry),
            gauges: Gauges::new(registry),
            scheduling: crate::scheduling::SchedulerMetrics::new(registry),
            rates: Default::default(),
            mta_sts,
            dane,
            copy_auth,
            signed_copies,
            postmaster,
            inbound_refusals,
            list_guard,
            notices_dropped,
            held_notices_suppressed,
            complaints,
            complaints_unmatched,
            content_filter,
            content_filter_latency,
            imap: crate::imap::ImapMetrics::new(registry),
            descriptors: crate::descriptors::DescriptorMetrics::new(registry),
        }
    }

    /// Counts one content-filter check and its time (the enqueue path; an atomic add and a
    /// histogram observation).
    pub fn count_content_filter(&self, verdict: FilterVerdict, elapsed_ms: u64) {
        self.content_filter[verdict.index()].inc();
        observe_ms(&self.content_filter_latency, elapsed_ms);
    }

    pub fn content_filter_checks(&self, verdict: FilterVerdict) -> u64 {
        self.content_filter[verdict.index()].get()
    }

    /// Counts one complaint acted on for `list` (the bounce stage; rare, so the family's lock
    /// is no cost).
    pub fn count_complaint(&self, list: &str) {
        self.complaints
            .get_or_create(&[("list", list.to_string())])
            .inc();
    }

    pub fn complaints(&self, list: &str) -> u64 {
        self.complaints
            .get_or_create(&[("list", list.to_string())])
            .get()
    }

    /// Counts one complaint report that could not be mapped to a member.
    pub fn count_complaint_unmatched(&self) {
        self.complaints_unmatched.inc();
    }

    pub fn complaints_unmatched(&self) -> u64 {
        self.complaints_unmatched.get()
    }

    /// Registers the values that are only read at scrape time (the per-destination table).
    pub fn register_snapshot(&self, registry: &mut Registry) {
        self.scheduling.register_snapshot(registry);
    }

    /// Counts one inbound refusal (called from the listeners' sessions; one atomic add).
    pub fn count_inbound_refusal(&self, why: InboundRefusal) {
        self.inbound_refusals[why.index()].inc();
    }

    /// Counts one list post a guard stopped (called from the enqueue path; one atomic add).
    pub fn count_list_guard(&self, trip: GuardTrip) {
        self.list_guard[trip.index()].inc();
    }

    pub fn list_guard_trips(&self, trip: GuardTrip) -> u64 {
        self.list_guard[trip.index()].get()
    }

    /// Counts one notice dropped by a `[notice_limits]` limit (one atomic add).
    pub fn count_notice_dropped(&self, kind: NoticeKind, limit: NoticeLimit) {
        self.notices_dropped[kind.index() * NoticeLimit::ALL.len() + limit.index()].inc();
    }

    pub fn notices_dropped(&self, kind: NoticeKind, limit: NoticeLimit) -> u64 {
        self.notices_dropped[kind.index() * NoticeLimit::ALL.len() + limit.index()].get()
    }

    /// Counts one held-post notice not sent because the post was machine mail.
    pub fn count_held_notice_suppressed(&self) {
        self.held_notices_suppressed.inc();
    }

    pub fn held_notices_suppressed(&self) -> u64 {
        self.held_notices_suppressed.get()
    }

    pub fn inbound_refusals(&self, why: InboundRefusal) -> u64 {
        self.inbound_refusals[why.index()].get()
    }

    /// Counts `n` copies of signed posts spliced and signed in the signing pool (`pooled`) or
    /// inline on the delivery worker.
    pub fn count_signed_copies(&self, pooled: bool, n: u64) {
        self.signed_copies[usize::from(!pooled)].inc_by(n);
    }

    /// Copies of signed posts signed in the pool (`pooled`) or inline so far.
    pub fn signed_copies(&self, pooled: bool) -> u64 {
        self.signed_copies[usize::from(!pooled)].get()
    }

    /// Counts one spliced copy's authentication: `Some(true)` added, `Some(false)` wanted but
    /// failed (the copy went out without it), `None` not configured.
    pub fn count_copy_auth(&self, dkim: Option<bool>, arc: Option<bool>) {
        for (step, offset) in [(dkim, 0), (arc, 2)] {
            if let Some(added) = step {
                self.copy_auth[offset + usize::from(!added)].inc();
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
                c.inc();
            }
            Event::PostCompleted { .. } => {
                self.posts_completed.inc();
            }
            Event::PostExpanded { .. } => {}
            Event::Postmaster(p) => {
                self.postmaster[p.forward.index()].inc();
            }
            Event::Scheduler(e) => self.scheduling.observe(e),
            Event::Attempt(a) => {
                observe_ms(&self.transaction_latency, a.xdelay_ms);
                if let Some(note) = a.mta_sts {
                    self.mta_sts[note.index()].inc();
                }
                if let Some(note) = a.dane {
                    self.dane[note.index()].inc();
                }
                self.classes.observe(&a.relay, a.xdelay_ms);
                let now = herald_types::unix_ms_now();
                let kind = match &a.outcome {
                    RcptOutcome::Delivered(_) => {
                        self.copies_delivered.inc();
                        let delay = now.saturating_sub(a.accepted_at_ms);
                        observe_ms(&self.delivery_latency, delay);
                        Kind::Delivered
                    }
                    RcptOutcome::Deferred(_) => {
                        self.copies_deferred.inc();
                        Kind::Deferred
                    }
                    RcptOutcome::Failed(_) => {
                        self.copies_failed.inc();
                        Kind::Failed
                    }
                };
                self.rates.add(now, kind);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exposition(registry: &Registry, m: &Metrics) -> String {
        let mut snapshot = Registry::default();
        m.register_snapshot(&mut snapshot);
        let mut out = String::new();
        exposition::encode(&mut out, &[registry, &snapshot]);
        out
    }

    #[test]
    fn renders_valid_exposition_text() {
        let mut registry = Registry::default();
        let m = Metrics::new(&mut registry);
        m.copies_delivered.inc_by(3);
        observe_ms(&m.transaction_latency, 3);
        m.gauges.connections_open.set(5);
        let out = exposition(&registry, &m);
        assert!(out.contains("herald_copies_total{outcome=\"delivered\"} 3\n"));
        assert!(out.contains("herald_smtp_transaction_seconds_bucket{le=\"0.005\"} 1\n"));
        assert!(out.contains("herald_smtp_transaction_seconds_count 1\n"));
        assert!(out.contains("herald_connections_open 5\n"));
        assert!(out.contains("herald_mta_sts_attempts_total{policy=\"testing-failed\"} 0\n"));
        assert!(out.contains("herald_dane_attempts_total{result=\"verified\"} 0\n"));
        m.count_inbound_refusal(InboundRefusal::Shed);
        m.gauges.inbound_stress.set(1);
        let out = exposition(&registry, &m);
        assert!(out.contains("herald_inbound_refusals_total{reason=\"shed\"} 1\n"));
        assert!(out.contains("herald_inbound_refusals_total{reason=\"per_network_limit\"} 0\n"));
        assert!(out.contains("herald_inbound_refusals_total{reason=\"per_client_limit\"} 0\n"));
        assert!(out.contains("herald_inbound_stress 1\n"));
        m.count_signed_copies(true, 3);
        let out = exposition(&registry, &m);
        assert!(out.contains("herald_signed_copies_total{where=\"pool\"} 3\n"));
        assert!(out.contains("herald_signed_copies_total{where=\"inline\"} 0\n"));
        assert_eq!(m.signed_copies(true), 3);
        m.count_copy_auth(Some(true), Some(false));
        m.count_copy_auth(Some(true), None);
        m.count_copy_auth(None, None);
        let out = exposition(&registry, &m);
        assert!(out.contains("herald_copy_auth_total{step=\"dkim\",result=\"added\"} 2\n"));
        assert!(out.contains("herald_copy_auth_total{step=\"arc\",result=\"failed\"} 1\n"));
        assert!(out.contains("herald_copy_auth_total{step=\"arc\",result=\"added\"} 0\n"));
        assert!(out.ends_with("# EOF\n"));
        for line in out.lines().filter(|l| !l.starts_with('#')) {
            let (name, value) = line.rsplit_once(' ').expect("name value");
            assert!(value.parse::<f64>().is_ok(), "bad value in {line}");
            assert!(name.starts_with("herald_"), "bad name in {line}");
        }
    }
}
