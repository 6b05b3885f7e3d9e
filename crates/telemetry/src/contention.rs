//! Where time is lost inside Herald: how long work waits in each stage's channel, and how long
//! the shared structures are locked (the `plockstat -C` view of seeds/003, built in).
//!
//! Cheap by construction: a lock is first tried without blocking, and the clock is read for the
//! wait only when that fails (like plockstat tracing only *block* events); hold time costs two
//! clock reads. Stage waits are histograms fed with the enqueue→dequeue time of one message.
//!
//! Limits: the set of locks and stages is fixed at compile time ([`LockId`], [`StageId`]), so the
//! metrics' label sets are bounded.

use crate::exposition::{
    self, Counter, Histogram, HistogramFamily, Registry, SecondsCounter, Timing,
};
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Instant;

/// Buckets (seconds) for stage waits: from 10 µs to a minute.
const WAIT_BOUNDS: &[f64] = &[
    0.00001, 0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 60.0,
];

/// The shared structures whose locks are measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockId {
    /// The post index of the progress book (read-locked per attempt).
    ProgressIndex,
    /// One post's delivery-time list (locked per delivered copy).
    ProgressTimes,
    /// The statistics aggregator's pending cells (locked per attempt).
    StatsPending,
    /// The straggler book (locked per deferred or final attempt).
    Stragglers,
}

impl LockId {
    pub const ALL: [LockId; 4] = [
        LockId::ProgressIndex,
        LockId::ProgressTimes,
        LockId::StatsPending,
        LockId::Stragglers,
    ];
    pub fn name(self) -> &'static str {
        match self {
            LockId::ProgressIndex => "progress_index",
            LockId::ProgressTimes => "progress_times",
            LockId::StatsPending => "stats_pending",
            LockId::Stragglers => "stragglers",
        }
    }
}

/// The channels between stages whose waits are measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StageId {
    /// Expansion blocked sending a page of jobs to the scheduler actor (backpressure).
    JobsSend,
    /// An outcome waiting in the report channel between a worker and the report loop.
    ReportQueue,
    /// The report loop waiting for room in the spool's journal writer queue.
    SpoolRecord,
    /// A worker waiting for the copy byte budget before it splices a batch.
    CopyBytes,
}

impl StageId {
    pub const ALL: [StageId; 4] = [
        StageId::JobsSend,
        StageId::ReportQueue,
        StageId::SpoolRecord,
        StageId::CopyBytes,
    ];
    pub fn name(self) -> &'static str {
        match self {
            StageId::JobsSend => "jobs_send",
            StageId::ReportQueue => "report_queue",
            StageId::SpoolRecord => "spool_record",
            StageId::CopyBytes => "copy_bytes",
        }
    }
}

/// Counters of one lock.
#[derive(Default)]
pub struct LockStats {
    acquisitions: AtomicU64,
    /// Acquisitions that found the lock taken and had to wait.
    contended: AtomicU64,
    wait_ns: AtomicU64,
    hold_ns: AtomicU64,
    hold_max_ns: AtomicU64,
}

/// A snapshot of one lock's counters, for the status API and `herald top`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LockView {
    pub lock: &'static str,
    pub acquisitions: u64,
    pub contended: u64,
    pub wait_us: u64,
    pub hold_us: u64,
    pub hold_max_us: u64,
}

/// A snapshot of one stage's wait histogram.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StageView {
    pub stage: &'static str,
    pub count: u64,
    pub total_us: u64,
    pub mean_us: u64,
    pub max_us: u64,
}

/// Every lock's and stage's counters.
pub struct Contention {
    locks: [LockStats; 4],
    /// Each stage's series of `herald_stage_wait_seconds` and its longest wait (µs).
    stages: [(Timing, AtomicU64); 4],
    stage_family: HistogramFamily<[(&'static str, &'static str); 1]>,
}

fn wait_histogram() -> Histogram {
    Histogram::new(WAIT_BOUNDS.iter().copied())
}

impl Default for Contention {
    fn default() -> Self {
        let stage_family =
            HistogramFamily::new_with_constructor(wait_histogram as fn() -> Histogram);
        Contention {
            locks: Default::default(),
            stages: StageId::ALL.map(|id| {
                let h = Timing::new(stage_family.get_or_create_owned(&[("stage", id.name())]));
                (h, AtomicU64::new(0))
            }),
            stage_family,
        }
    }
}

fn nanos(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

impl Contention {
    fn lock_stats(&self, id: LockId) -> &LockStats {
        &self.locks[id as usize]
    }

    /// Records that work waited `micros` in stage `id`'s channel.
    pub fn stage_wait(&self, id: StageId, micros: u64) {
        let (h, max) = &self.stages[id as usize];
        h.observe_micros(micros);
        max.fetch_max(micros, Relaxed);
    }

    /// Records the wait from `since` until now.
    pub fn stage_wait_since(&self, id: StageId, since: Instant) {
        self.stage_wait(id, nanos(since) / 1000);
    }

    /// Locks `m`, measuring wait (only when contended) and hold time.
    pub fn lock<'a, T>(&'a self, id: LockId, m: &'a Mutex<T>) -> Timed<'a, MutexGuard<'a, T>> {
        let s = self.lock_stats(id);
        let guard = match m.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => {
                let t = Instant::now();
                let g = m.lock().unwrap_or_else(|p| p.into_inner());
                s.contended.fetch_add(1, Relaxed);
                s.wait_ns.fetch_add(nanos(t), Relaxed);
                g
            }
        };
        Timed::new(s, guard)
    }

    /// Read-locks `l`, measuring as [`Contention::lock`] does.
    pub fn read<'a, T>(
        &'a self,
        id: LockId,
        l: &'a RwLock<T>,
    ) -> Timed<'a, RwLockReadGuard<'a, T>> {
        let s = self.lock_stats(id);
        let guard = match l.try_read() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => {
                let t = Instant::now();
                let g = l.read().unwrap_or_else(|p| p.into_inner());
                s.contended.fetch_add(1, Relaxed);
                s.wait_ns.fetch_add(nanos(t), Relaxed);
                g
            }
        };
        Timed::new(s, guard)
    }

    /// Write-locks `l`, measuring as [`Contention::lock`] does.
    pub fn write<'a, T>(
        &'a self,
        id: LockId,
        l: &'a RwLock<T>,
    ) -> Timed<'a, RwLockWriteGuard<'a, T>> {
        let s = self.lock_stats(id);
        let t = Instant::now();
        let g = l.write().unwrap_or_else(|p| p.into_inner());
        let waited = nanos(t);
        if waited > 1_000 {
            s.contended.fetch_add(1, Relaxed);
        }
        s.wait_ns.fetch_add(waited, Relaxed);
        Timed::new(s, g)
    }

    pub fn locks(&self) -> Vec<LockView> {
        LockId::ALL
            .iter()
            .map(|&id| {
                let s = self.lock_stats(id);
                LockView {
                    lock: id.name(),
                    acquisitions: s.acquisitions.load(Relaxed),
                    contended: s.contended.load(Relaxed),
                    wait_us: s.wait_ns.load(Relaxed) / 1000,
                    hold_us: s.hold_ns.load(Relaxed) / 1000,
                    hold_max_us: s.hold_max_ns.load(Relaxed) / 1000,
                }
            })
            .collect()
    }

    pub fn stages(&self) -> Vec<StageView> {
        StageId::ALL
            .iter()
            .map(|&id| {
                let (h, max) = &self.stages[id as usize];
                let (count, total_us) = (h.count(), h.sum_micros());
                StageView {
                    stage: id.name(),
                    count,
                    total_us,
                    mean_us: total_us.checked_div(count).unwrap_or(0),
                    max_us: max.load(Relaxed),
                }
            })
            .collect()
    }

    /// Registers the stage-wait histograms (live series) in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        exposition::register(
            registry,
            "herald_stage_wait_seconds",
            "Time work waits between stages (channel or queue).",
            self.stage_family.clone(),
        );
    }

    /// Registers the lock counters as they are now. They stay plain atomics (read at scrape
    /// time) because they are bumped on every acquisition of the hottest locks.
    pub fn register_snapshot(&self, registry: &mut Registry) {
        let locks = self.locks();
        let by_lock =
            |pick: fn(&LockView) -> u64| locks.iter().map(move |v| ([("lock", v.lock)], pick(v)));
        let count = |c: &Counter, v: u64| {
            c.inc_by(v);
        };
        // Kept in µs, shown in seconds.
        let seconds = |c: &SecondsCounter, v: u64| {
            c.inc_by(v as f64 / 1e6);
        };
        exposition::rows(
            registry,
            "herald_lock_acquisitions_total",
            "Acquisitions of a shared structure's lock.",
            by_lock(|v| v.acquisitions),
            count,
        );
        exposition::rows(
            registry,
            "herald_lock_contended_total",
            "Acquisitions that had to wait.",
            by_lock(|v| v.contended),
            count,
        );
        exposition::rows(
            registry,
            "herald_lock_wait_seconds_total",
            "Time spent waiting for a shared structure's lock.",
            by_lock(|v| v.wait_us),
            seconds,
        );
        exposition::rows(
            registry,
            "herald_lock_hold_seconds_total",
            "Time a shared structure's lock was held.",
            by_lock(|v| v.hold_us),
            seconds,
        );
    }
}

/// A guard that records its hold time when dropped.
pub struct Timed<'a, G> {
    stats: &'a LockStats,
    since: Instant,
    guard: G,
}

impl<'a, G> Timed<'a, G> {
    fn new(stats: &'a LockStats, guard: G) -> Self {
        stats.acquisitions.fetch_add(1, Relaxed);
        Timed {
            stats,
            since: Instant::now(),
            guard,
        }
    }
}

impl<G: std::ops::Deref> std::ops::Deref for Timed<'_, G> {
    type Target = G::Target;
    fn deref(&self) -> &G::Target {
        &self.guard
    }
}

impl<G: std::ops::DerefMut> std::ops::DerefMut for Timed<'_, G> {
    fn deref_mut(&mut self) -> &mut G::Target {
        &mut self.guard
    }
}

impl<G> Drop for Timed<'_, G> {
    fn drop(&mut self) {
        let held = nanos(self.since);
        self.stats.hold_ns.fetch_add(held, Relaxed);
        self.stats.hold_max_ns.fetch_max(held, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_acquisitions_holds_and_contention() {
        let c = Contention::default();
        let m = Mutex::new(0u32);
        {
            let mut g = c.lock(LockId::StatsPending, &m);
            *g += 1;
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let v = &c.locks()[LockId::StatsPending as usize];
        assert_eq!(
            (v.lock, v.acquisitions, v.contended),
            ("stats_pending", 1, 0)
        );
        assert!(v.hold_us >= 2000, "{v:?}");
        c.stage_wait(StageId::ReportQueue, 1500);
        let s = &c.stages()[StageId::ReportQueue as usize];
        assert_eq!((s.count, s.mean_us, s.max_us), (1, 1500, 1500));
        let mut registry = Registry::default();
        c.register(&mut registry);
        c.register_snapshot(&mut registry);
        let mut out = String::new();
        exposition::encode(&mut out, &[&registry]);
        assert!(
            out.contains("herald_stage_wait_seconds_count{stage=\"report_queue\"} 1\n"),
            "{out}"
        );
        assert!(out.contains("herald_lock_acquisitions_total{lock=\"stats_pending\"} 1\n"));
    }
}
