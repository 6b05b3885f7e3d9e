//! The global budget of buffered inbound message octets, shared by every session of every
//! listener (TIGER_STYLE: a limit on everything, including the sum of per-session limits).
//!
//! Without it the worst case is `max_sessions` × `max_message_octets` (500 × 25 MiB by default)
//! held in memory at once. A [`DataReader`](crate::data::DataReader) takes a [`Reservation`]
//! before its body grows; when the budget is spent the message is read to its end without being
//! kept and refused with `452 4.3.1` (transient: the client keeps its copy and retries).
//!
//! Invariants: [`BufferBudget::used`] never exceeds [`BufferBudget::max`]; every octet taken is
//! given back exactly once, when the [`Reservation`] is dropped (RAII: on every exit path,
//! including a dropped connection task). A reservation grows in steps of [`GRANT_STEP`] so a
//! session touches the shared atomic once per step, not once per line.
//!
//! Pure bookkeeping on one atomic: no lock, no I/O, so it belongs with the protocol code.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// How much a reservation grows at a time (fewer updates of the shared atomic). A session may
/// therefore hold up to this much more than it has buffered.
pub const GRANT_STEP: u64 = 64 * 1024;

/// Octets of message bodies buffered by all sessions, bounded by `max`.
#[derive(Debug)]
pub struct BufferBudget {
    max: u64,
    used: AtomicU64,
}

impl BufferBudget {
    pub fn new(max_octets: u64) -> Arc<BufferBudget> {
        Arc::new(BufferBudget {
            max: max_octets,
            used: AtomicU64::new(0),
        })
    }

    /// Octets currently reserved by sessions (for tests and metrics).
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    pub fn max(&self) -> u64 {
        self.max
    }

    /// Octets not reserved right now.
    pub fn available(&self) -> u64 {
        self.max.saturating_sub(self.used())
    }

    /// An empty reservation against this budget.
    pub fn reservation(self: &Arc<Self>) -> Reservation {
        Reservation {
            budget: self.clone(),
            octets: 0,
        }
    }

    /// Takes `n` octets if they fit; all or nothing.
    fn try_take(&self, n: u64) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |used| {
                used.checked_add(n).filter(|&total| total <= self.max)
            })
            .is_ok()
    }

    fn give_back(&self, n: u64) {
        self.used.fetch_sub(n, Ordering::AcqRel);
    }
}

/// Octets one message holds against a [`BufferBudget`]; returned when dropped.
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<BufferBudget>,
    octets: u64,
}

impl Reservation {
    /// Makes sure `total` octets are reserved, taking up to `cap` (at least `total`) in one
    /// step so that the next lines need no update. False when the budget cannot cover `total`;
    /// what was reserved before stays reserved.
    pub fn grow_to(&mut self, total: u64, cap: u64) -> bool {
        if total <= self.octets {
            return true;
        }
        let generous = self.octets.saturating_add(GRANT_STEP).min(cap).max(total);
        for want in [generous, total] {
            let extra = want - self.octets;
            if self.budget.try_take(extra) {
                self.octets = want;
                return true;
            }
        }
        false
    }

    /// Gives everything back now (a refused message keeps nothing).
    pub fn release(&mut self) {
        self.budget.give_back(std::mem::take(&mut self.octets));
    }

    pub fn octets(&self) -> u64 {
        self.octets
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_are_bounded_and_returned_on_drop() {
        let budget = BufferBudget::new(100_000);
        let mut a = budget.reservation();
        assert!(a.grow_to(10, 80_000));
        assert_eq!(a.octets(), GRANT_STEP, "grows a step at a time");
        let mut b = budget.reservation();
        assert!(!b.grow_to(50_000, 80_000), "only 34,464 left");
        assert!(
            b.grow_to(30_000, 80_000),
            "falls back to exactly what is needed"
        );
        assert_eq!(budget.used(), GRANT_STEP + 30_000);
        drop(a);
        assert_eq!(budget.used(), 30_000);
        b.release();
        assert_eq!(budget.used(), 0);
        drop(b);
        assert_eq!(budget.used(), 0, "released once only");
    }
}
