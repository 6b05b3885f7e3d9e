//! The statistics store: delivery outcomes aggregated in memory and flushed every few seconds to
//! SQLite (`<data_dir>/stats.db`), so reports read small aggregates instead of re-reading logs.
//!
//! Why SQLite rather than an append-only file: the reports need upserts (a minute's cell grows
//! across flushes), grouped reads by hour, day and post, and retention by deleting old rows; SQLite
//! does all of it with one well-tested file, is already in the build (the directory uses it), and
//! a separate database file keeps the stats writer off the directory's lock. Durability is
//! relaxed (WAL, `synchronous=OFF`): losing the last seconds of statistics in a crash is fine,
//! slowing fan-out for them is not (seeds/001: duplicate.db wants speed, not fsync).
//!
//! Tables (all roll-ups, no per-copy rows):
//! - `minute_totals(minute, outcome)`: copies and SMTP time per minute — the day picture.
//! - `hour_domains(hour, domain, outcome)`: copies per hour and recipient domain — the hourly
//!   table (hosts = rows, recipients = sum).
//! - `post_domains(post, domain, outcome, reason)`: copies, SMTP time, latest attempt — one
//!   post's failures by reason and slowest destinations.
//! - `post_curve(post, second)`: delivered/failed per second after acceptance (per minute after
//!   the first hour) — the post's curve and t50/t95/t100.
//! - `posts(post)`: arrivals (list, accepted at, size, recipients, completed at).
//!
//! Cost on the hot path: one mutex (measured, see `contention`) and a few hash-map updates per
//! attempt, with no allocation once a domain has been seen in the flush interval.
//! Limits: pending cells are flushed early past [`MAX_PENDING_CELLS`]; the writer thread's
//! request channel is bounded. Retention: every [`PRUNE_EVERY`] the writer deletes the roll-ups
//! older than `keep_days` (minutes and hours by their time, a post's rows by its acceptance), so
//! the file stops growing once it holds `keep_days` of history (SQLite reuses the freed pages;
//! the file itself does not shrink without a `VACUUM`).

mod aggregate;
pub mod report;
mod store;

pub use report::{DayReport, HourRow, MinutePoint, PostArrival, PostReport};

use crate::contention::{Contention, LockId};
use crate::event::Event;
use aggregate::Pending;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Cells held in memory before an early flush is requested.
pub const MAX_PENDING_CELLS: usize = 200_000;

/// How often the writer deletes roll-ups past `keep_days`.
pub const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// Where and how often statistics are written, and how long they are kept.
#[derive(Debug, Clone)]
pub struct StatsConfig {
    pub path: PathBuf,
    pub flush_secs: u64,
    /// Roll-ups older than this many days are deleted; 0 keeps them forever.
    pub keep_days: u32,
}

/// Why statistics could not be stored or read.
#[derive(Debug, thiserror::Error)]
pub enum StatsError {
    #[error("statistics database: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("statistics are turned off in this server's configuration (stats.enabled)")]
    Disabled,
    #[error("the statistics writer has stopped")]
    Stopped,
    #[error("cannot start the statistics writer: {0}")]
    Thread(std::io::Error),
    /// Opening failed, or the file is from a newer Herald (the message says what to do).
    #[error(transparent)]
    Open(#[from] herald_store::OpenError),
}

enum Msg {
    Flush(Option<SyncSender<Result<(), String>>>),
}

/// The sink: aggregates events and hands them to the writer thread.
pub(crate) struct StatsSink {
    pending: Arc<Mutex<Pending>>,
    contention: Arc<Contention>,
    tx: SyncSender<Msg>,
    path: PathBuf,
}

impl StatsSink {
    pub(crate) fn open(cfg: &StatsConfig, contention: Arc<Contention>) -> Result<Self, StatsError> {
        let conn = store::open_writer(&cfg.path)?;
        let pending = Arc::new(Mutex::new(Pending::default()));
        let (tx, rx) = sync_channel::<Msg>(64);
        let every = Duration::from_secs(cfg.flush_secs.max(1));
        let (p, c) = (pending.clone(), contention.clone());
        let keep_days = cfg.keep_days;
        std::thread::Builder::new()
            .name("stats-writer".into())
            .spawn(move || {
                let mut conn = conn;
                let mut pruned: Option<std::time::Instant> = None;
                loop {
                    if keep_days > 0 && pruned.is_none_or(|t| t.elapsed() >= PRUNE_EVERY) {
                        pruned = Some(std::time::Instant::now());
                        prune(&conn, keep_days, herald_types::unix_ms_now());
                    }
                    let ack = match rx.recv_timeout(every) {
                        Ok(Msg::Flush(ack)) => ack,
                        Err(RecvTimeoutError::Timeout) => None,
                        Err(RecvTimeoutError::Disconnected) => {
                            let _ = write_pending(&mut conn, &p, &c);
                            return;
                        }
                    };
                    let r = write_pending(&mut conn, &p, &c).map_err(|e| e.to_string());
                    if let Err(e) = &r {
                        tracing::error!(error = %e, "statistics flush failed");
                    }
                    if let Some(ack) = ack {
                        let _ = ack.send(r);
                    }
                }
            })
            .map_err(StatsError::Thread)?;
        Ok(StatsSink {
            pending,
            contention,
            tx,
            path: cfg.path.clone(),
        })
    }

    pub(crate) fn observe(&self, event: &Event) {
        let now_ms = herald_types::unix_ms_now();
        let cells = {
            let mut p = self.contention.lock(LockId::StatsPending, &self.pending);
            p.add(event, now_ms);
            p.cells()
        };
        if cells > MAX_PENDING_CELLS {
            // Full channel: a flush is already on its way.
            let _ = self.tx.try_send(Msg::Flush(None));
        }
    }

    /// Writes everything aggregated so far; returns when it is in the database.
    pub(crate) fn flush(&self) -> Result<(), StatsError> {
        let (ack_tx, ack_rx) = sync_channel(1);
        self.tx
            .send(Msg::Flush(Some(ack_tx)))
            .map_err(|_| StatsError::Stopped)?;
        match ack_rx.recv_timeout(Duration::from_secs(30)) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => {
                tracing::error!(error = %e, "statistics flush failed");
                Err(StatsError::Stopped)
            }
            Err(_) => Err(StatsError::Stopped),
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

/// Deletes roll-ups older than `keep_days`; a failure is reported and tried again at the next
/// prune.
fn prune(conn: &rusqlite::Connection, keep_days: u32, now_ms: u64) {
    let cutoff_ms = now_ms.saturating_sub(u64::from(keep_days).saturating_mul(86_400_000));
    match store::prune(conn, cutoff_ms) {
        Ok(0) => {}
        Ok(rows) => tracing::info!(rows, keep_days, "statistics older than keep_days deleted"),
        Err(e) => tracing::warn!(error = %e, "cannot delete old statistics"),
    }
}

/// Swaps the pending cells out under the lock and writes them in one transaction.
fn write_pending(
    conn: &mut rusqlite::Connection,
    pending: &Mutex<Pending>,
    contention: &Contention,
) -> Result<(), StatsError> {
    let batch = std::mem::take(&mut *contention.lock(LockId::StatsPending, pending));
    if batch.cells() == 0 {
        return Ok(());
    }
    let written = store::write(conn, &batch);
    if written.is_err() {
        // A full or failing disk: keep the batch for the next flush (bounded: past
        // MAX_PENDING_CELLS it is dropped rather than grow without limit).
        let mut p = contention.lock(LockId::StatsPending, pending);
        if p.cells() + batch.cells() <= 4 * MAX_PENDING_CELLS {
            p.merge_back(batch);
        }
    }
    written
}

/// Read access to a statistics database, for reports (the server's API, or a benchmark).
pub struct StatsReader {
    conn: rusqlite::Connection,
}

impl StatsReader {
    pub fn open(path: &Path) -> Result<StatsReader, StatsError> {
        Ok(StatsReader {
            conn: store::open_reader(path)?,
        })
    }

    pub fn hourly(&self, since_ms: u64, until_ms: u64) -> Result<Vec<HourRow>, StatsError> {
        report::hourly(&self.conn, since_ms, until_ms)
    }

    pub fn day(&self, day_start_ms: u64) -> Result<DayReport, StatsError> {
        report::day(&self.conn, day_start_ms)
    }

    pub fn post(
        &self,
        post: herald_types::PostId,
        slowest: usize,
    ) -> Result<Option<PostReport>, StatsError> {
        report::post(&self.conn, post, slowest)
    }
}

/// Aggregates events straight into a database without a server: for benchmarks and tests that
/// need a known store. Times come from the caller.
pub struct StatsWriter {
    conn: rusqlite::Connection,
    pending: Pending,
}

impl StatsWriter {
    pub fn open(path: &Path) -> Result<StatsWriter, StatsError> {
        Ok(StatsWriter {
            conn: store::open_writer(path)?,
            pending: Pending::default(),
        })
    }

    /// Aggregates one event as if it happened at `now_ms`.
    pub fn add(&mut self, event: &Event, now_ms: u64) -> Result<(), StatsError> {
        self.pending.add(event, now_ms);
        if self.pending.cells() > MAX_PENDING_CELLS {
            self.flush()?;
        }
        Ok(())
    }

    pub fn flush(&mut self) -> Result<(), StatsError> {
        let batch = std::mem::take(&mut self.pending);
        store::write(&mut self.conn, &batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Attempt;
    use herald_types::{Address, EnhancedStatus, MemberId, PostId, RcptOutcome, Reply};

    fn attempt(post: u64, rcpt: &str, outcome: RcptOutcome, xdelay_ms: u64) -> Event {
        Event::Attempt(Box::new(Attempt {
            post: PostId(post),
            member: MemberId(1),
            rcpt: rcpt.into(),
            relay: "mx.x.test[127.0.0.1]:25".into(),
            accepted_at_ms: 3_600_000,
            xdelay_ms,
            tries: 1,
            tls: None,
            mta_sts: None,
            dane: None,
            source: None,
            outcome,
        }))
    }

    #[test]
    fn reports_read_back_exact_counts_across_flushes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("stats.db");
        let mut w = StatsWriter::open(&path).expect("open");
        let t0 = 3_600_000; // 01:00 on day 0
        w.add(
            &Event::PostAccepted {
                post: PostId(7),
                list: Address::parse("l@x.test").expect("addr"),
                size: 100,
                received_at_ms: t0,
                recovered: false,
            },
            t0,
        )
        .expect("add");
        let ok = || RcptOutcome::Delivered(Reply::new(250, None, "ok"));
        let bad = || RcptOutcome::Failed(Reply::new(550, Some(EnhancedStatus::new(5, 1, 1)), "no"));
        let later = || RcptOutcome::Deferred(Reply::new(451, None, "later"));
        for i in 0..10 {
            w.add(&attempt(7, &format!("m{i}@a.test"), ok(), 5), t0 + 1_500)
                .expect("add");
        }
        w.flush().expect("flush");
        for i in 0..4 {
            w.add(
                &attempt(7, &format!("n{i}@b.test"), ok(), 50),
                t0 + 3_700_000,
            )
            .expect("add");
        }
        w.add(&attempt(7, "x@c.test", bad(), 1), t0 + 2_000)
            .expect("add");
        w.add(&attempt(7, "y@c.test", later(), 1), t0 + 2_000)
            .expect("add");
        w.add(
            &Event::PostExpanded {
                post: PostId(7),
                recipients: 15,
                already_done: 0,
            },
            t0,
        )
        .expect("add");
        w.flush().expect("flush");

        let r = StatsReader::open(&path).expect("reader");
        let hours = r.hourly(0, u64::MAX / 2).expect("hourly");
        assert_eq!(hours.len(), 2, "{hours:?}");
        assert_eq!((hours[0].delivered, hours[0].delivered_hosts), (10, 1));
        assert_eq!(
            (hours[0].failed, hours[0].failed_hosts, hours[0].deferred),
            (1, 1, 1)
        );
        assert_eq!((hours[1].hour_ms, hours[1].delivered), (2 * 3_600_000, 4));
        let day = r.day(0).expect("day");
        assert_eq!((day.delivered, day.failed, day.deferred), (14, 1, 1));
        assert_eq!(day.arrivals.len(), 1);
        assert_eq!(day.minutes.len(), 2);
        let p = r.post(PostId(7), 5).expect("post").expect("known");
        assert_eq!(
            (p.delivered, p.failed, p.deferred, p.recipients),
            (14, 1, 1, Some(15))
        );
        assert_eq!(p.failures[0].reason, "550 5.1.1");
        assert_eq!(p.slowest[0].domain, "b.test");
        assert_eq!(p.t50_secs, Some(2), "{:?}", p.curve);
        assert_eq!(p.t100_secs, Some(3660 + 60));
        assert!(r.post(PostId(8), 5).expect("post").is_none());
    }
}
