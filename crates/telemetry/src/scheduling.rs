//! What the scheduler decides, as data: host state changes, lane moves, throttling and
//! greylisting deferrals, expiries. These feed the delivery log (one line each), `/metrics`
//! (counters below and gauges in [`crate::Gauges`]). The bounce stage learns of an expired copy
//! from the scheduler's `FailedCopy` (cause `Expired`, never scored), not from these events.
//!
//! Bounds: label values are fixed enum words, except the per-destination concurrency table,
//! which holds at most [`MAX_DESTINATION_ROWS`] rows chosen by the scheduler.

use crate::exposition::{self, Counter, Registry};
use herald_types::{DeferralKind, HostStateKind, LaneKind, MemberId, PostId, Reply};
use std::fmt::Write as _;
use std::sync::Mutex;

/// Rows of `herald_destination_connections` shown at most (bounded label cardinality).
pub const MAX_DESTINATION_ROWS: usize = 20;

/// Something the scheduler decided.
#[derive(Debug, Clone)]
pub enum SchedulerEvent {
    /// A host (MX name and address) changed state.
    HostState {
        host: String,
        addr: String,
        state: HostStateKind,
        consecutive_failures: u32,
        /// Until the next probe, when down.
        down_for_secs: Option<u64>,
        reason: String,
    },
    /// `copies` copies of a destination moved to another lane.
    LaneMove {
        destination: String,
        to: LaneKind,
        copies: u64,
        reason: DeferralKind,
    },
    /// `copies` copies were deferred for `kind`, to be retried after `retry_in_secs`.
    Deferred {
        destination: String,
        kind: DeferralKind,
        copies: u64,
        retry_in_secs: u64,
    },
    /// A destination's shaping budget changed after throttling (down) or success (up).
    Shaped {
        budget: String,
        connections: u32,
        per_minute: Option<u32>,
        throttled: bool,
    },
    /// A copy was not delivered within its list's maximum age and is given up. Not a bounce:
    /// nobody said the mailbox is bad, so the member's bounce score does not move.
    Expired {
        post: PostId,
        member: MemberId,
        rcpt: String,
        tries: u32,
        age_secs: u64,
        last_reply: Option<Reply>,
    },
}

/// Counters fed by [`SchedulerEvent`]s.
pub struct SchedulerMetrics {
    /// In `DeferralKind::ALL` order.
    deferrals: [Counter; 4],
    lane_moves: Counter,
    hosts_marked_down: Counter,
    hosts_back_up: Counter,
    throttle_events: Counter,
    expired: Counter,
    /// (destination, connections, connection limit) rows, refreshed by the scheduler.
    destinations: Mutex<Vec<(String, i64, i64)>>,
}

impl SchedulerMetrics {
    /// Creates the counters and registers them in `registry`.
    pub(crate) fn new(registry: &mut Registry) -> SchedulerMetrics {
        let deferrals = exposition::counter_family(
            registry,
            "herald_deferrals_total",
            "Deferred copies by reason.",
            DeferralKind::ALL.map(|k| [("reason", k.word())]),
        );
        let mut counter = |name: &str, help: &str| {
            let c = Counter::default();
            exposition::register(registry, name, help, c.clone());
            c
        };
        SchedulerMetrics {
            deferrals,
            lane_moves: counter(
                "herald_lane_moves_total",
                "Copies moved from the fast to the slow lane.",
            ),
            hosts_marked_down: counter(
                "herald_hosts_marked_down_total",
                "Times a host was marked down.",
            ),
            hosts_back_up: counter(
                "herald_hosts_back_up_total",
                "Times a down host answered a probe.",
            ),
            throttle_events: counter(
                "herald_throttle_events_total",
                "Times a destination budget was cut after throttling.",
            ),
            expired: counter(
                "herald_copies_expired_total",
                "Copies given up after the list's maximum age (not scored as bounces).",
            ),
            destinations: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn observe(&self, e: &SchedulerEvent) {
        match e {
            SchedulerEvent::HostState { state, .. } => {
                let c = match state {
                    HostStateKind::Down => &self.hosts_marked_down,
                    HostStateKind::Up => &self.hosts_back_up,
                    HostStateKind::Probing => return,
                };
                c.inc();
            }
            SchedulerEvent::LaneMove { copies, .. } => {
                self.lane_moves.inc_by(*copies);
            }
            SchedulerEvent::Deferred { kind, copies, .. } => {
                self.deferrals[kind.index()].inc_by(*copies);
            }
            SchedulerEvent::Shaped { throttled, .. } => {
                if *throttled {
                    self.throttle_events.inc();
                }
            }
            SchedulerEvent::Expired { .. } => {
                self.expired.inc();
            }
        }
    }

    /// Deferred copies of one kind so far.
    pub fn deferrals(&self, kind: DeferralKind) -> u64 {
        self.deferrals[kind.index()].get()
    }

    /// Copies given up after their list's maximum age.
    pub fn expired(&self) -> u64 {
        self.expired.get()
    }

    /// Times a shaping budget was cut after throttling.
    pub fn throttle_events(&self) -> u64 {
        self.throttle_events.get()
    }

    /// Replaces the per-destination concurrency rows (at most [`MAX_DESTINATION_ROWS`] kept).
    pub fn set_destinations(&self, mut rows: Vec<(String, i64, i64)>) {
        rows.truncate(MAX_DESTINATION_ROWS);
        *self.destinations.lock().unwrap_or_else(|p| p.into_inner()) = rows;
    }

    /// Registers the per-destination table as it is now (a scrape-time view: the scheduler
    /// replaces the rows wholesale, so they are not kept as live series).
    pub(crate) fn register_snapshot(&self, registry: &mut Registry) {
        let rows = self
            .destinations
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let label = |d: &str| [("destination", escape_label(d))];
        exposition::gauge_rows(
            registry,
            "herald_destination_connections",
            "Open connections of the destinations with the most queued copies.",
            rows.iter().map(|r| (label(&r.0), r.1)),
        );
        exposition::gauge_rows(
            registry,
            "herald_destination_connection_limit",
            "Current (AIMD) connection limit of those destinations.",
            rows.iter().map(|r| (label(&r.0), r.2)),
        );
    }
}

/// Escapes a label value (MX names come from DNS: hostile input; the exposition library writes
/// label values as they are).
fn escape_label(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars().take(200) {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// The delivery log text of an event (after the timestamp).
pub(crate) fn format(e: &SchedulerEvent, line: &mut String) {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect()
    };
    let _ = match e {
        SchedulerEvent::HostState { host, addr, state, consecutive_failures, down_for_secs, reason } => write!(
            line,
            "host {}[{}]: state={state:?}, failures={consecutive_failures}, down_for={}, reason=({})",
            clean(host),
            clean(addr),
            down_for_secs.map_or("-".to_string(), |s| format!("{s}s")),
            clean(reason)
        ),
        SchedulerEvent::LaneMove { destination, to, copies, reason } => write!(
            line,
            "destination {}: lane_move to={to:?}, copies={copies}, reason={}",
            clean(destination),
            reason.word()
        ),
        SchedulerEvent::Deferred { destination, kind, copies, retry_in_secs } => write!(
            line,
            "destination {}: deferred kind={}, copies={copies}, retry_in={retry_in_secs}s",
            clean(destination),
            kind.word()
        ),
        SchedulerEvent::Shaped { budget, connections, per_minute, throttled } => write!(
            line,
            "budget {}: {} connections={connections}, per_minute={}",
            clean(budget),
            if *throttled { "throttled" } else { "restored" },
            per_minute.map_or("-".to_string(), |m| m.to_string())
        ),
        SchedulerEvent::Expired { post, rcpt, tries, age_secs, last_reply, .. } => write!(
            line,
            "{post}: to=<{}>, tries={tries}, age={age_secs}s, status=expired ({})",
            clean(rcpt),
            last_reply.as_ref().map_or(String::new(), |r| clean(&r.to_string()))
        ),
    };
}
