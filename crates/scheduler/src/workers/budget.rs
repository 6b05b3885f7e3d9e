//! The global byte budget for spliced copies (`scheduler.max_copy_bytes`).
//!
//! A copy costs memory only while it is materialized: from the moment a worker splices it from
//! the post's shared template until its batch has been written and answered. A worker takes its
//! batch's bytes here *before* it splices and gives them back when the batch is sent (and its
//! buffers are dropped); nothing keeps a spliced buffer between batches. So the bytes of every
//! copy in memory at once stay under one number, however many connections are open — a 1 MB
//! post to 1,000 open connections no longer means 1,000 MB of copies.
//!
//! Why a semaphore of bytes rather than building each copy just before its DATA or streaming
//! the splice: the SMTP client pipelines the next copy's MAIL/RCPT/DATA behind a body, checks
//! SIZE and BODY=8BITMIME against the whole body, and DKIM signs the finished copy; all of that
//! wants the copy whole. Bounding how many whole copies exist at once keeps those paths as they
//! are and puts the bound in one place (tokio's `Semaphore`, FIFO, so a big copy is not starved
//! by small ones arriving behind it).
//!
//! Never a deadlock:
//! - A batch asks for at most the whole budget: a single copy larger than the budget still goes,
//!   alone. (`SchedulerConfig::validate` keeps `batch_bytes` ≤ the budget, so only a one-copy
//!   batch can be larger than it.)
//! - A worker asks once per batch and holds nothing of the budget while it waits (no
//!   hold-and-wait): holders are workers inside an SMTP exchange, which ends within its lane's
//!   timeouts without needing any byte, and they give their bytes back before they journal,
//!   report or ask the actor for more work.
//! - The splice may come out larger than its estimate (`Template::size_hint`); the difference
//!   is taken without waiting when free and otherwise still counted ([`CopyBytes::settle`]), so
//!   the gauge never under-reports and a worker never waits while it holds bytes.
//!
//! What is not counted here: per-connection buffers whose size does not grow with the copy (the
//! SMTP client's command buffer, which inlines bodies up to `INLINE_BODY_MAX`; its reply
//! buffer; TLS records), bounded by `max_connections`; and the post itself (body and template,
//! once per post, shared by every copy).
//!
//! `/metrics`: `herald_copy_bytes_in_flight` (bytes of copies materialized now), its high-water
//! mark `herald_copy_bytes_in_flight_peak`, the budget `herald_copy_bytes_budget`, and the time
//! workers wait for bytes (`herald_stage_wait_seconds{stage="copy_bytes"}`).

use herald_telemetry::{StageId, Telemetry};
use std::sync::atomic::{AtomicI64, Ordering};
use tokio::sync::{Semaphore, SemaphorePermit};

/// The largest budget: tokio's semaphore takes at most `u32::MAX` permits per request, and a
/// request may be the whole budget.
pub const MAX_BUDGET: usize = u32::MAX as usize;

/// Bytes of spliced copies that may be in memory at once, shared by every worker.
pub struct CopyBudget {
    permits: Semaphore,
    total: usize,
    /// Bytes counted now (can exceed `total` by splices that outgrew their estimate when the
    /// difference was not free).
    held: AtomicI64,
    /// The most ever counted at once.
    peak: AtomicI64,
    telemetry: Telemetry,
}

impl CopyBudget {
    /// A budget of `total` bytes (at least 1, at most [`MAX_BUDGET`]); publishes it on `/metrics`.
    pub fn new(total: usize, telemetry: Telemetry) -> CopyBudget {
        let total = total.clamp(1, MAX_BUDGET);
        telemetry
            .gauges()
            .copy_bytes_budget
            .set(i64::try_from(total).unwrap_or(i64::MAX));
        CopyBudget {
            permits: Semaphore::new(total),
            total,
            held: AtomicI64::new(0),
            peak: AtomicI64::new(0),
            telemetry,
        }
    }

    /// The budget in bytes.
    pub fn total(&self) -> usize {
        self.total
    }

    /// The most bytes ever counted at once.
    pub fn peak(&self) -> usize {
        usize::try_from(self.peak.load(Ordering::Relaxed)).unwrap_or(0)
    }

    /// Bytes counted now.
    pub fn held(&self) -> usize {
        usize::try_from(self.held.load(Ordering::Relaxed)).unwrap_or(0)
    }

    /// Waits (first come, first served) until `bytes` of the budget are free and takes them; a
    /// request larger than the whole budget waits for the whole budget. The caller must hold no
    /// other bytes of this budget (see the module docs).
    pub async fn acquire(&self, bytes: usize) -> CopyBytes<'_> {
        let want = bytes.min(self.total);
        let n = u32::try_from(want).unwrap_or(u32::MAX);
        let permit = match self.permits.try_acquire_many(n) {
            Ok(p) => Some(p),
            Err(_) => {
                let t = std::time::Instant::now();
                // The semaphore is never closed, so this is always a permit; were it closed,
                // the copy would go uncounted by the semaphore rather than panic.
                let p = self.permits.acquire_many(n).await.ok();
                self.telemetry
                    .contention()
                    .stage_wait_since(StageId::CopyBytes, t);
                p
            }
        };
        self.count(i64::try_from(bytes).unwrap_or(i64::MAX));
        CopyBytes {
            budget: self,
            permit,
            bytes,
        }
    }

    fn count(&self, delta: i64) {
        let now = self.held.fetch_add(delta, Ordering::Relaxed) + delta;
        let gauges = self.telemetry.gauges();
        if delta >= 0 {
            gauges.copy_bytes_in_flight.inc_by(delta);
        } else {
            gauges.copy_bytes_in_flight.dec_by(delta.saturating_neg());
        }
        if delta > 0 && self.peak.fetch_max(now, Ordering::Relaxed) < now {
            gauges.copy_bytes_in_flight_peak.set(now);
        }
    }
}

/// A batch's share of the budget; given back when dropped (after the batch is sent and its
/// buffers are gone).
pub struct CopyBytes<'a> {
    budget: &'a CopyBudget,
    /// `None` once dropped (or if the semaphore were ever closed).
    permit: Option<SemaphorePermit<'a>>,
    /// Bytes counted for the batch (the permit holds `min(bytes, total)` of them, or fewer when
    /// a splice outgrew its estimate and the rest was not free).
    bytes: usize,
}

impl CopyBytes<'_> {
    /// Bytes counted for the batch.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Adjusts the count to what the spliced buffers really hold (their capacity): bytes not
    /// needed go back at once; bytes beyond the estimate are taken if free, never waited for
    /// (this worker already holds bytes), and counted either way.
    pub fn settle(&mut self, actual: usize) {
        if let Some(permit) = self.permit.as_mut() {
            let held = permit.num_permits();
            let target = actual.min(self.budget.total);
            if target < held {
                // Dropping the split-off part returns it to the budget.
                drop(permit.split(held - target));
            } else if target > held {
                let more = u32::try_from(target - held).unwrap_or(u32::MAX);
                if let Ok(extra) = self.budget.permits.try_acquire_many(more) {
                    permit.merge(extra);
                }
            }
        }
        let delta = i64::try_from(actual).unwrap_or(i64::MAX)
            - i64::try_from(self.bytes).unwrap_or(i64::MAX);
        self.budget.count(delta);
        self.bytes = actual;
    }
}

impl Drop for CopyBytes<'_> {
    fn drop(&mut self) {
        drop(self.permit.take());
        self.budget
            .count(-i64::try_from(self.bytes).unwrap_or(i64::MAX));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    fn budget(total: usize) -> Arc<CopyBudget> {
        Arc::new(CopyBudget::new(total, Telemetry::disabled_log()))
    }

    #[tokio::test]
    async fn bytes_are_counted_while_held_and_given_back_on_drop() {
        let b = budget(1000);
        let a = b.acquire(300).await;
        let c = b.acquire(700).await;
        assert_eq!((b.held(), b.peak()), (1000, 1000));
        assert_eq!(b.permits.available_permits(), 0);
        drop(a);
        assert_eq!(b.held(), 700);
        drop(c);
        assert_eq!((b.held(), b.peak()), (0, 1000));
        assert_eq!(b.permits.available_permits(), 1000);
        let g = b.telemetry.gauges();
        assert_eq!(g.copy_bytes_in_flight.get(), 0);
        assert_eq!(g.copy_bytes_in_flight_peak.get(), 1000);
        assert_eq!(g.copy_bytes_budget.get(), 1000);
    }

    #[tokio::test]
    async fn a_request_waits_until_the_bytes_are_free() {
        let b = budget(1000);
        let first = b.acquire(800).await;
        let b2 = b.clone();
        let waiter = tokio::spawn(async move {
            let got = b2.acquire(500).await;
            got.bytes()
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !waiter.is_finished(),
            "500 more bytes do not fit beside 800"
        );
        drop(first);
        let got = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("released bytes wake the waiter")
            .expect("task");
        assert_eq!(got, 500);
        assert_eq!(b.peak(), 800);
    }

    #[tokio::test]
    async fn a_copy_larger_than_the_budget_goes_alone_with_the_whole_budget() {
        let b = budget(1000);
        let small = b.acquire(100).await;
        let b2 = b.clone();
        let big = tokio::spawn(async move {
            let got = b2.acquire(5000).await;
            // Nothing else holds bytes while the big copy does.
            let alone = b2.permits.available_permits() == 0 && b2.held() == 5000;
            drop(got);
            alone
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !big.is_finished(),
            "the big copy waits for the whole budget"
        );
        // First come, first served: a small request behind the big one waits too.
        let b3 = b.clone();
        let behind = tokio::spawn(async move { b3.acquire(10).await.bytes() });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!behind.is_finished());
        drop(small);
        let alone = tokio::time::timeout(Duration::from_secs(5), big)
            .await
            .expect("the big copy gets the budget")
            .expect("task");
        assert!(alone);
        assert_eq!(behind.await.expect("task"), 10);
        assert_eq!(
            b.peak(),
            5000,
            "the gauge shows the real bytes, not the clamp"
        );
        assert_eq!((b.held(), b.permits.available_permits()), (0, 1000));
    }

    #[tokio::test]
    async fn settle_gives_back_what_the_splice_did_not_need_and_counts_what_it_outgrew() {
        let b = budget(1000);
        let mut a = b.acquire(600).await;
        a.settle(400);
        assert_eq!((b.held(), b.permits.available_permits()), (400, 600));
        // Outgrown while the rest is free: taken.
        a.settle(700);
        assert_eq!((b.held(), b.permits.available_permits()), (700, 300));
        // Outgrown while another batch holds the rest: counted, not waited for.
        let other = b.acquire(300).await;
        a.settle(900);
        assert_eq!(b.held(), 1200);
        assert_eq!(b.peak(), 1200, "the gauge never under-reports");
        drop(a);
        drop(other);
        assert_eq!((b.held(), b.permits.available_permits()), (0, 1000));
    }

    #[tokio::test]
    async fn many_small_holders_and_one_budget_never_deadlock() {
        // 64 tasks, each taking a random share (some over the whole budget) again and again.
        let b = budget(4096);
        let mut tasks = Vec::new();
        for t in 0..64u64 {
            let b = b.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..50u64 {
                    let want = ((t * 7919 + i * 104_729) % 6000) as usize + 1;
                    let mut got = b.acquire(want).await;
                    got.settle(want);
                    tokio::task::yield_now().await;
                }
            }));
        }
        for t in tasks {
            tokio::time::timeout(Duration::from_secs(20), t)
                .await
                .expect("no deadlock")
                .expect("task");
        }
        assert_eq!((b.held(), b.permits.available_permits()), (0, 4096));
        assert!(b.peak() <= 6000);
    }
}
