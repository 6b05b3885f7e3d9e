//! Backpressure senders can see: when the work accepted and not yet done passes
//! `[intake] max_unfinished_copies`, list posts are refused at RCPT with `452 4.3.1` (the
//! sender keeps the message and retries later), rather than answered `250` into a spool that
//! is not draining.
//!
//! What is counted: `herald_unfinished_copies`, which the scheduler publishes every tick —
//! copies in its in-memory queue or waiting on disk for room at their destination, copies on
//! connections, and copies of posts still being fanned out (estimated from their list's size).
//! Copies parked in the deferred queue for a retry time or a down host are not counted: a
//! backlog of dead destinations must never make Herald refuse mail that live members would get
//! in seconds.
//!
//! Refusing starts above the bound and stops once the count is back under 90 % of it, so the
//! answer does not flap with every tick. The start and the end are logged (warn / info), and
//! while refusing, one line a minute with the refusals since. `herald_intake_backpressure` is
//! 1 while refusing (for `/metrics` and a readiness probe). Bounces, requests and postmaster
//! mail are still accepted: they make the work smaller, not bigger.

use herald_telemetry::exposition::Gauge;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

/// How often, at most, a line says refusals go on.
const LOG_EVERY_MS: u64 = 60_000;

/// The intake's view of the unfinished work, against its bound.
pub struct IntakePressure {
    /// `[intake] max_unfinished_copies`; 0: never refuse.
    bound: u64,
    refusing: AtomicBool,
    /// Refusals since the last log line.
    refused: AtomicU64,
    last_log_ms: AtomicU64,
}

impl IntakePressure {
    pub fn new(bound: u64) -> IntakePressure {
        IntakePressure {
            bound,
            refusing: AtomicBool::new(false),
            refused: AtomicU64::new(0),
            last_log_ms: AtomicU64::new(0),
        }
    }

    /// True when a list post must be refused now, given `unfinished` copies. Keeps `flag`
    /// (the `herald_intake_backpressure` gauge) and the log up to date.
    pub fn refuse(&self, unfinished: i64, flag: &Gauge, now_ms: u64) -> bool {
        if self.bound == 0 {
            return false;
        }
        let unfinished = u64::try_from(unfinished).unwrap_or(0);
        let was = self.refusing.load(Relaxed);
        let now = if was {
            unfinished > self.bound / 10 * 9
        } else {
            unfinished > self.bound
        };
        if now != was && self.refusing.swap(now, Relaxed) == was {
            flag.set(i64::from(now));
            if now {
                tracing::warn!(unfinished, bound = self.bound, "intake refuses list posts (452 4.3.1): more copies wait for delivery than intake.max_unfinished_copies");
                self.last_log_ms.store(now_ms, Relaxed);
            } else {
                let refused = self.refused.swap(0, Relaxed);
                tracing::info!(
                    unfinished,
                    bound = self.bound,
                    refused,
                    "intake accepts list posts again: the backlog drained"
                );
            }
        }
        if now {
            self.refused.fetch_add(1, Relaxed);
            let last = self.last_log_ms.load(Relaxed);
            if now_ms.saturating_sub(last) >= LOG_EVERY_MS
                && self
                    .last_log_ms
                    .compare_exchange(last, now_ms, Relaxed, Relaxed)
                    .is_ok()
            {
                let refused = self.refused.swap(0, Relaxed);
                tracing::warn!(
                    unfinished,
                    bound = self.bound,
                    refused,
                    "intake still refuses list posts (452 4.3.1)"
                );
            }
        }
        now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusing_starts_above_the_bound_and_stops_below_nine_tenths_of_it() {
        let flag = Gauge::default();
        let p = IntakePressure::new(1000);
        assert!(!p.refuse(1000, &flag, 0));
        assert_eq!(flag.get(), 0);
        assert!(p.refuse(1001, &flag, 1));
        assert_eq!(flag.get(), 1);
        assert!(p.refuse(950, &flag, 2), "still above 90 %");
        assert!(!p.refuse(900, &flag, 3));
        assert_eq!(flag.get(), 0);
        assert!(!p.refuse(990, &flag, 4), "back under the bound");
    }

    #[test]
    fn a_bound_of_zero_never_refuses() {
        let flag = Gauge::default();
        let p = IntakePressure::new(0);
        assert!(!p.refuse(i64::MAX, &flag, 0));
        assert_eq!(flag.get(), 0);
    }
}
