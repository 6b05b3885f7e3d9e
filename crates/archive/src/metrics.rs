//! The archive's numbers for `/metrics`: what the writer did since the server started (posts
//! archived, duplicates, refused, failed batches), how far behind it is (posts queued; the
//! index lag: from a post's arrival to the commit that made it searchable, for the last batch),
//! and the store's size (messages, file bytes), read at scrape time.
//!
//! The writer updates [`WriterStats`] with relaxed atomics (counters read by a scrape, no
//! ordering with anything else); the scrape reads the message count with one `COUNT(*)` over
//! the store's smallest index (measured in BENCHMARKS.md at 1 M messages) and the file sizes
//! from the file system.

use herald_telemetry::exposition::{self, counter_at, gauge_at, rows, Counter, Gauge, Registry};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// The writer's counters, shared with the HTTP API for `/metrics`.
#[derive(Debug, Default)]
pub struct WriterStats {
    pub added: AtomicU64,
    pub duplicates: AtomicU64,
    pub refused: AtomicU64,
    /// Batches whose transaction failed (their posts are in the spool's history only).
    pub failed_batches: AtomicU64,
    /// Posts handed to the writer and not yet stored.
    pub queued: AtomicU64,
    /// For the last stored batch: milliseconds from its oldest post's arrival to the commit.
    pub last_lag_ms: AtomicU64,
}

impl WriterStats {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// Registers the archive's series into a scrape. `messages`: the store's message count, when
/// it could be read.
pub fn register(stats: Option<&WriterStats>, messages: Option<i64>, db: &Path, out: &mut Registry) {
    if let Some(n) = messages {
        gauge_at(
            out,
            "herald_archive_messages",
            "Messages in the archive (all lists).",
            n,
        );
    }
    let file = |suffix: &str| {
        let mut p = db.as_os_str().to_owned();
        p.push(suffix);
        std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
    };
    let bytes = file("") + file("-wal");
    gauge_at(
        out,
        "herald_archive_file_bytes",
        "Bytes of the archive database on disk (compressed messages, overview and full-text index, WAL).",
        i64::try_from(bytes).unwrap_or(i64::MAX),
    );
    let Some(s) = stats else { return };
    let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
    rows(
        out,
        "herald_archive_posts_total",
        "List posts the archive writer took since the server started, by outcome (added, duplicate: already archived, refused: over a limit or tombstoned).",
        [
            ([("outcome", "added".to_string())], load(&s.added)),
            ([("outcome", "duplicate".to_string())], load(&s.duplicates)),
            ([("outcome", "refused".to_string())], load(&s.refused)),
        ],
        |c: &Counter, n| {
            c.inc_by(n);
        },
    );
    counter_at(
        out,
        "herald_archive_failed_batches_total",
        "Archive transactions that failed (their posts were delivered but not archived; see the log).",
        load(&s.failed_batches),
    );
    gauge_at(
        out,
        "herald_archive_queue",
        "Posts handed to the archive writer and not yet stored.",
        i64::try_from(load(&s.queued)).unwrap_or(i64::MAX),
    );
    let lag = Gauge::<f64, AtomicU64>::default();
    lag.set(load(&s.last_lag_ms) as f64 / 1e3);
    exposition::register(
        out,
        "herald_archive_index_lag_seconds",
        "For the last archived batch: seconds from its oldest post's arrival to the commit that made it browsable and searchable.",
        lag,
    );
}
