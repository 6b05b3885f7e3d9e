//! The soak's samples: one line of samples.jsonl every `--sample-every` seconds, from the start
//! of the load to the end of the idle period (a first sample at t = 0, a last one at the end).
//!
//! Each sample: the Herald process's RSS, threads and open descriptors (/proc/<pid>), the
//! queue gauges of its latest /metrics poll, the spool's and the data directory's bytes on disk
//! (allocated blocks, as `du` counts them, with the data directory's top-level entries each),
//! and for the interval since the previous sample: SMTP acceptance latency p50/p99 (end of DATA
//! to `250`), posts accepted/refused/skipped, send errors, membership changes, bounces, polls,
//! and the copies a second the world accepted (its status.json).
//!
//! SECURITY: reads /proc and local files only.

use super::{now_ms, Shared};
use anyhow::{Context, Result};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The queue gauges copied from /metrics into each sample.
const GAUGES: &[&str] = &[
    "herald_unfinished_copies",
    "herald_deferred_copies",
    "herald_deferred_queue_bytes",
    "herald_expansion_pending_copies",
    "herald_inflight_copies",
    "herald_unjournaled_copies",
    "herald_posts_active",
    "herald_destinations_active",
    "herald_hosts_down",
    "herald_connections_open",
    "herald_intake_backpressure",
    "herald_inbound_stress",
    "herald_posts_accepted_total",
    "herald_posts_completed_total",
];

/// What happened in the current interval (reset by each sample).
#[derive(Default)]
pub struct Interval {
    pub smtp_latency_us: Vec<u32>,
    pub lmtp_latency_us: Vec<u32>,
    pub accepted: u64,
    pub refused: u64,
    pub skipped: u64,
    pub send_errors: u64,
    pub last_error: Option<String>,
    pub churn_ok: u64,
    pub churn_failed: u64,
    pub bounces_ok: u64,
    pub bounces_failed: u64,
    pub polls_ok: u64,
    pub polls_failed: u64,
    pub poll_max_ms: f64,
}

/// The `q` quantile of sorted `v` in ms (nearest rank); null when empty.
fn quantile_ms(v: &[u32], q: f64) -> Value {
    if v.is_empty() {
        return Value::Null;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    json!(f64::from(v[rank - 1]) / 1000.0)
}

/// A field of /proc/<pid>/status (the number before " kB" for sizes); None when gone.
fn proc_status(pid: u32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Open descriptors of a process; None when gone.
fn fds(pid: u32) -> Option<usize> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()
        .map(|d| d.count())
}

/// Bytes allocated on disk under `path` (files and directories; symlinks not followed).
pub fn disk_bytes(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    let mut total = meta.blocks() * 512;
    if meta.is_dir() {
        if let Ok(entries) = std::fs::read_dir(path) {
            for e in entries.flatten() {
                total += disk_bytes(&e.path());
            }
        }
    }
    total
}

/// The data directory's top-level entries and their bytes on disk.
fn breakdown(dir: &Path) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            out.insert(
                e.file_name().to_string_lossy().into_owned(),
                disk_bytes(&e.path()),
            );
        }
    }
    out
}

/// The world's accepted copies and duplicates so far (status.json).
fn world_counts(dir: &Path) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(dir.join("status.json")).ok()?;
    let v: Value = serde_json::from_str(&text).ok()?;
    Some((v["accepted"].as_u64()?, v["duplicates"].as_u64()?))
}

/// Samples until the end of the idle period; writes samples.jsonl and echoes each to stderr.
pub async fn run(shared: Arc<Shared>, load_ends: Instant) -> Result<()> {
    let a = &shared.args;
    let path = a.out.join("samples.jsonl");
    let log = super::JsonLog::create(&path)?;
    let started = Instant::now();
    let ends = load_ends + Duration::from_secs(a.idle);
    let every = Duration::from_secs(a.sample_every.max(1));
    let mut prev = (started, world_counts(&a.world_dir).unwrap_or((0, 0)).0);
    let mut at = started;
    loop {
        tokio::time::sleep_until(at).await;
        let now = Instant::now();
        let phase = if now < load_ends { "load" } else { "idle" };
        let s = one(&shared, started, phase, &mut prev).await?;
        eprintln!("soak sample: {s}");
        log.write(&s);
        log.flush();
        if now >= ends {
            return Ok(());
        }
        at = (at + every).min(ends);
    }
}

async fn one(
    shared: &Shared,
    started: Instant,
    phase: &str,
    prev: &mut (Instant, u64),
) -> Result<Value> {
    let a = &shared.args;
    let iv = shared
        .interval
        .lock()
        .map(|mut g| std::mem::take(&mut *g))
        .ok()
        .context("interval stats")?;
    let metrics = shared.metrics.lock().map(|m| m.clone()).unwrap_or_default();
    let (data_dir, spool_dir) = (
        a.data_dir.clone(),
        a.spool_dir
            .clone()
            .unwrap_or_else(|| a.data_dir.join("spool")),
    );
    // Walking a big spool takes a while: off the runtime, so the load keeps its pace.
    let (data, spool, parts) = tokio::task::spawn_blocking(move || {
        (
            disk_bytes(&data_dir),
            disk_bytes(&spool_dir),
            breakdown(&data_dir),
        )
    })
    .await?;
    let now = Instant::now();
    let (copies, dups) = world_counts(&a.world_dir).unwrap_or((prev.1, 0));
    let secs = now.duration_since(prev.0).as_secs_f64().max(0.001);
    let copies_per_sec = copies.saturating_sub(prev.1) as f64 / secs;
    *prev = (now, copies);
    let (mut smtp, mut lmtp) = (iv.smtp_latency_us, iv.lmtp_latency_us);
    smtp.sort_unstable();
    lmtp.sort_unstable();
    let gauges: BTreeMap<&str, f64> = GAUGES
        .iter()
        .filter_map(|g| metrics.get(*g).map(|v| (*g, *v)))
        .collect();
    Ok(json!({
        "t_secs": now.duration_since(started).as_secs_f64(), "unix_ms": now_ms(), "phase": phase,
        "rss_kb": proc_status(a.pid, "VmRSS:"), "hwm_kb": proc_status(a.pid, "VmHWM:"),
        "threads": proc_status(a.pid, "Threads:"), "fds": fds(a.pid),
        "spool_bytes": spool, "data_bytes": data, "data_parts": parts, "metrics": gauges,
        "smtp_p50_ms": quantile_ms(&smtp, 0.5), "smtp_p99_ms": quantile_ms(&smtp, 0.99),
        "smtp_max_ms": quantile_ms(&smtp, 1.0), "lmtp_p50_ms": quantile_ms(&lmtp, 0.5),
        "accepted": iv.accepted, "refused": iv.refused, "skipped": iv.skipped,
        "send_errors": iv.send_errors, "last_error": iv.last_error,
        "churn_ok": iv.churn_ok, "churn_failed": iv.churn_failed,
        "bounces_ok": iv.bounces_ok, "bounces_failed": iv.bounces_failed,
        "polls_ok": iv.polls_ok, "polls_failed": iv.polls_failed, "poll_max_ms": iv.poll_max_ms,
        "world_copies": copies, "world_duplicates": dups, "copies_per_sec": copies_per_sec,
        "interval_secs": secs,
    }))
}
