//! How many copies of a post being fanned out are not queued yet — its share of the gauge
//! `herald_expansion_pending_copies`, which intake's backpressure reads (through
//! `herald_unfinished_copies`): a post accepted for a 1,000,000-member list is a million copies
//! of work long before its pages are read.
//!
//! The estimate is the list's member count, asked once when the fan-out starts, off the
//! fan-out's path (a count over a large list takes a while; the first pages do not wait for
//! it). What the post adds to the gauge it takes back: page by page as copies are queued, and
//! the rest when the expansion ends, however it ends (`Drop`), so the gauge never drifts.

use herald_telemetry::exposition::Gauge;
use tokio::task::JoinHandle;

/// The member count being asked for (enabled members).
type Count = JoinHandle<Result<u64, herald_directory::DirectoryError>>;

/// One expansion's part of the gauge.
pub struct Pending {
    gauge: Gauge,
    /// Added to the gauge and not taken back yet.
    added: i64,
    /// Members read so far (before the estimate is known, they are taken off it when it comes).
    read: u64,
    known: bool,
    count: Option<Count>,
}

impl Pending {
    pub fn new(gauge: Gauge) -> Pending {
        Pending {
            gauge,
            added: 0,
            read: 0,
            known: false,
            count: None,
        }
    }

    /// The estimate will come from `count` (a task started by the caller).
    pub fn count_with(&mut self, count: Count) {
        self.count = Some(count);
    }

    /// Takes the count into the estimate once its task has finished (never waits for it), less
    /// the `already_done` members of a resumed post. A failed count leaves no estimate.
    pub async fn take_count(&mut self, already_done: u64) {
        if !self.count.as_ref().is_some_and(|c| c.is_finished()) {
            return;
        }
        if let Some(task) = self.count.take() {
            // Finished: the await returns at once.
            if let Ok(Ok(members)) = task.await {
                self.estimate(members.saturating_sub(already_done));
            }
        }
    }

    /// The estimate came: `members` in the post's audience (at most), less those read already.
    pub fn estimate(&mut self, members: u64) {
        if self.known {
            return;
        }
        self.known = true;
        let left = i64::try_from(members.saturating_sub(self.read)).unwrap_or(i64::MAX);
        self.added = self.added.saturating_add(left);
        self.gauge.inc_by(left);
    }

    /// `n` members were read and their copies queued (or skipped).
    pub fn read(&mut self, n: u64) {
        self.read = self.read.saturating_add(n);
        let take = i64::try_from(n).unwrap_or(i64::MAX).min(self.added);
        if take > 0 {
            self.added -= take;
            self.gauge.dec_by(take);
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if self.added > 0 {
            self.gauge.dec_by(self.added);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_post_adds_it_takes_back_however_its_pages_and_estimate_interleave() {
        let g = Gauge::default();
        {
            let mut p = Pending::new(g.clone());
            p.read(300);
            assert_eq!(g.get(), 0, "nothing known, nothing added");
            p.estimate(1000);
            assert_eq!(g.get(), 700);
            p.read(500);
            assert_eq!(g.get(), 200);
            p.read(500); // more members than estimated (added meanwhile)
            assert_eq!(g.get(), 0);
            p.estimate(5000); // a second estimate is ignored
            assert_eq!(g.get(), 0);
        }
        {
            let mut p = Pending::new(g.clone());
            p.estimate(800);
            p.read(100);
            assert_eq!(g.get(), 700);
        } // the expansion ended early (shutdown, error)
        assert_eq!(g.get(), 0);
    }
}
