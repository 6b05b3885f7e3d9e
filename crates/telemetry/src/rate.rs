//! Attempt outcomes per wall-clock second over the last [`RING_SECS`] seconds: the data behind
//! the realstat view of `herald top` and the dashboard's live rate chart (15-second windows are
//! sums of 15 slots). Lock-free: a slot is claimed for its second with a compare-and-swap.
//!
//! Limits: fixed memory (RING_SECS slots). A slot reused at the same instant by two threads may
//! lose a count at the boundary; these numbers are for eyes, the statistics store is exact.

use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Seconds of history kept.
pub const RING_SECS: usize = 900;

#[derive(Default)]
struct Slot {
    sec: AtomicU64,
    counts: [AtomicU64; 3],
}

/// Counts per second.
pub struct RateRing {
    slots: Vec<Slot>,
}

impl Default for RateRing {
    fn default() -> Self {
        RateRing {
            slots: (0..RING_SECS).map(|_| Slot::default()).collect(),
        }
    }
}

/// What one attempt ended as, for counting.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    Delivered = 0,
    Deferred = 1,
    Failed = 2,
}

/// One second (or window) of counts.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Default)]
pub struct RatePoint {
    /// Unix seconds at the start of the period.
    pub sec: u64,
    pub delivered: u64,
    pub deferred: u64,
    pub failed: u64,
}

impl RateRing {
    pub fn add(&self, now_ms: u64, kind: Kind) {
        let sec = now_ms / 1000;
        let slot = &self.slots[(sec % RING_SECS as u64) as usize];
        let seen = slot.sec.load(Relaxed);
        if seen != sec
            && slot
                .sec
                .compare_exchange(seen, sec, Relaxed, Relaxed)
                .is_ok()
        {
            for c in &slot.counts {
                c.store(0, Relaxed);
            }
        }
        slot.counts[kind as usize].fetch_add(1, Relaxed);
    }

    /// Per-second points for the `secs` seconds before `now_ms` (oldest first, the current
    /// incomplete second excluded).
    pub fn recent(&self, now_ms: u64, secs: usize) -> Vec<RatePoint> {
        let now = now_ms / 1000;
        let secs = secs.min(RING_SECS - 1) as u64;
        (now.saturating_sub(secs)..now)
            .map(|sec| {
                let slot = &self.slots[(sec % RING_SECS as u64) as usize];
                let mut p = RatePoint {
                    sec,
                    ..RatePoint::default()
                };
                if slot.sec.load(Relaxed) == sec {
                    p.delivered = slot.counts[0].load(Relaxed);
                    p.deferred = slot.counts[1].load(Relaxed);
                    p.failed = slot.counts[2].load(Relaxed);
                }
                p
            })
            .collect()
    }
}

/// Sums consecutive points into windows of `width` seconds (the last window may be partial).
pub fn windows(points: &[RatePoint], width: usize) -> Vec<RatePoint> {
    points
        .chunks(width.max(1))
        .map(|c| RatePoint {
            sec: c.first().map_or(0, |p| p.sec),
            delivered: c.iter().map(|p| p.delivered).sum(),
            deferred: c.iter().map(|p| p.deferred).sum(),
            failed: c.iter().map(|p| p.failed).sum(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_per_second_and_forgets_old_seconds() {
        let r = RateRing::default();
        r.add(10_000, Kind::Delivered);
        r.add(10_500, Kind::Delivered);
        r.add(11_000, Kind::Failed);
        let pts = r.recent(12_000, 2);
        assert_eq!(pts.len(), 2);
        assert_eq!((pts[0].sec, pts[0].delivered), (10, 2));
        assert_eq!((pts[1].sec, pts[1].failed), (11, 1));
        // The same slot a full ring later starts from zero.
        r.add(10_000 + RING_SECS as u64 * 1000, Kind::Deferred);
        let later = r.recent(11_000 + RING_SECS as u64 * 1000, 1);
        assert_eq!((later[0].delivered, later[0].deferred), (0, 1));
        let w = windows(&pts, 15);
        assert_eq!((w.len(), w[0].delivered, w[0].failed), (1, 2, 1));
    }
}
