//! State shared between the `Spool` handles (any task) and the writer thread: the live-post
//! table, the statistics counters, the post-id counter and whether the journal can be written.
//!
//! Invariants: only the writer thread mutates the live table; handles only read it. The mutex is
//! a std `Mutex` because it is never held across an `.await` — every critical section is a map
//! lookup, an insert, or a clone of small metadata. Counters are relaxed atomics: they are
//! telemetry, not synchronization.

use crate::error::SpoolError;
use crate::live::LiveTable;
use crate::model::SpoolStats;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

pub(crate) struct Shared {
    live: Mutex<LiveTable>,
    pub stats: StatsCell,
    /// Next post id to hand out (see `Spool::open` for how it is seeded).
    pub next_id: AtomicU64,
    /// The journal cannot be written now (see [`Shared::set_unwritable`]).
    unwritable: AtomicBool,
    /// Why, while `unwritable`: the first error of the current outage.
    outage: Mutex<Option<String>>,
    /// New posts are held off although the journal may still write (the data disk is short of
    /// space and the server keeps what is left for outcomes): why, see [`Shared::hold_posts`].
    held: Mutex<Option<String>>,
    /// `held` is set (one relaxed load on the hot path).
    holding: AtomicBool,
}

impl Shared {
    pub(crate) fn new(live: LiveTable, next_id: u64) -> Shared {
        Shared {
            live: Mutex::new(live),
            stats: StatsCell::default(),
            next_id: AtomicU64::new(next_id),
            unwritable: AtomicBool::new(false),
            outage: Mutex::new(None),
            held: Mutex::new(None),
            holding: AtomicBool::new(false),
        }
    }

    /// The live table. A panic while holding the lock cannot leave it half-updated in a way that
    /// matters more than refusing service would, so a poisoned lock is simply taken over.
    pub(crate) fn live(&self) -> MutexGuard<'_, LiveTable> {
        self.live.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The journal cannot be written: new posts are refused until [`Shared::set_writable`].
    /// The first reason of an outage is kept.
    pub(crate) fn set_unwritable(&self, reason: String) {
        let mut f = self.outage.lock().unwrap_or_else(|e| e.into_inner());
        if f.is_none() {
            *f = Some(reason);
            self.stats.outages.fetch_add(1, Relaxed);
        }
        self.unwritable.store(true, Relaxed);
    }

    /// A repair succeeded: the journal takes new posts again.
    pub(crate) fn set_writable(&self) {
        let mut f = self.outage.lock().unwrap_or_else(|e| e.into_inner());
        *f = None;
        self.unwritable.store(false, Relaxed);
    }

    /// New posts are refused for `reason` until [`Shared::release_posts`], while outcomes and
    /// completions are still journaled.
    pub(crate) fn hold_posts(&self, reason: String) {
        let mut h = self.held.lock().unwrap_or_else(|e| e.into_inner());
        *h = Some(reason);
        self.holding.store(true, Relaxed);
    }

    pub(crate) fn release_posts(&self) {
        let mut h = self.held.lock().unwrap_or_else(|e| e.into_inner());
        *h = None;
        self.holding.store(false, Relaxed);
    }

    /// New posts can be taken: the journal writes and posts are not held off.
    pub(crate) fn is_writable(&self) -> bool {
        !self.unwritable.load(Relaxed) && !self.holding.load(Relaxed)
    }

    /// Why new posts are refused now (an outage, or posts held off), if they are. Cheap when
    /// healthy (two relaxed loads).
    pub(crate) fn failure(&self) -> Option<SpoolError> {
        if self.unwritable.load(Relaxed) {
            let f = self.outage.lock().unwrap_or_else(|e| e.into_inner());
            return Some(SpoolError::Unwritable {
                reason: f.clone().unwrap_or_default(),
            });
        }
        if self.holding.load(Relaxed) {
            let h = self.held.lock().unwrap_or_else(|e| e.into_inner());
            return Some(SpoolError::Unwritable {
                reason: h.clone().unwrap_or_default(),
            });
        }
        None
    }

    /// Why the journal itself cannot be written now, if it cannot (posts held off do not count).
    pub(crate) fn outage(&self) -> Option<SpoolError> {
        if !self.unwritable.load(Relaxed) {
            return None;
        }
        let f = self.outage.lock().unwrap_or_else(|e| e.into_inner());
        Some(SpoolError::Unwritable {
            reason: f.clone().unwrap_or_default(),
        })
    }
}

/// Atomic counters behind [`SpoolStats`].
#[derive(Default)]
pub(crate) struct StatsCell {
    pub commits: AtomicU64,
    pub records: AtomicU64,
    pub bytes: AtomicU64,
    fsync_total_us: AtomicU64,
    fsync_last_us: AtomicU64,
    fsync_max_us: AtomicU64,
    group_last: AtomicU64,
    group_max: AtomicU64,
    pub segments: AtomicU64,
    pub rolls: AtomicU64,
    pub relocated: AtomicU64,
    pub deleted: AtomicU64,
    pub ignored: AtomicU64,
    pub quarantined: AtomicU64,
    pub torn_bytes: AtomicU64,
    /// Times the journal became unwritable (each outage once, however long).
    pub outages: AtomicU64,
}

impl StatsCell {
    /// One group commit of `records` records whose fdatasync took `fsync`.
    pub(crate) fn on_commit(&self, records: u64, fsync: Duration) {
        let us = u64::try_from(fsync.as_micros()).unwrap_or(u64::MAX);
        self.commits.fetch_add(1, Relaxed);
        self.records.fetch_add(records, Relaxed);
        self.fsync_total_us.fetch_add(us, Relaxed);
        self.fsync_last_us.store(us, Relaxed);
        self.fsync_max_us.fetch_max(us, Relaxed);
        self.group_last.store(records, Relaxed);
        self.group_max.fetch_max(records, Relaxed);
    }

    pub(crate) fn snapshot(&self, live_posts: u64, writable: bool) -> SpoolStats {
        let commits = self.commits.load(Relaxed);
        let records = self.records.load(Relaxed);
        SpoolStats {
            commits,
            records_written: records,
            bytes_written: self.bytes.load(Relaxed),
            fsync_last_us: self.fsync_last_us.load(Relaxed),
            fsync_avg_us: self.fsync_total_us.load(Relaxed) / commits.max(1),
            fsync_max_us: self.fsync_max_us.load(Relaxed),
            group_last_records: self.group_last.load(Relaxed),
            group_avg_records: if commits == 0 {
                0.0
            } else {
                records as f64 / commits as f64
            },
            group_max_records: self.group_max.load(Relaxed),
            live_posts,
            segments: self.segments.load(Relaxed),
            segment_rolls: self.rolls.load(Relaxed),
            relocated_posts: self.relocated.load(Relaxed),
            segments_deleted: self.deleted.load(Relaxed),
            ignored_outcomes: self.ignored.load(Relaxed),
            quarantined_segments: self.quarantined.load(Relaxed),
            torn_tail_bytes: self.torn_bytes.load(Relaxed),
            writable,
            outages: self.outages.load(Relaxed),
        }
    }
}
