//! Dedup store throughput: lookups per second over a store of 1,000,000 Message-IDs, and the cost
//! of one flush. Run: `cargo run --release -p herald-enqueue --example dedup_bench`.
//! The bar is >= 1,000,000 lookups/s (seeds/001: dedup needs speed, not an fsync per
//! lookup).

use herald_enqueue::{DedupConfig, DedupStore, Seen};
use herald_types::{ListId, MemberId, PostId};
use std::time::Instant;

const ENTRIES: u64 = 1_000_000;
const LOOKUPS: u64 = 5_000_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let cfg = DedupConfig {
        path: dir.path().join("dedup.log"),
        window_ms: u64::MAX,
        max_entries: ENTRIES as usize + 1,
    };
    let store = DedupStore::open(cfg, 0)?;
    let ids: Vec<String> = (0..ENTRIES)
        .map(|i| format!("{i:016x}.{}@mail.example.org", i * 7919))
        .collect();
    let t = Instant::now();
    for (i, id) in ids.iter().enumerate() {
        let seen = Seen {
            list: ListId(1 + (i % 3) as i64),
            post: PostId(i as u64 + 1),
            max_member: MemberId(1000),
            at_ms: 1,
        };
        store.record(id, seen);
    }
    let rec = t.elapsed();
    let t = Instant::now();
    store.flush()?;
    let flush = t.elapsed();
    let t = Instant::now();
    let cpu0 = thread_cpu_ns();
    let mut hits = 0u64;
    for i in 0..LOOKUPS {
        // Half hits, half misses.
        let hit = i % 2 == 0;
        let probe = if hit {
            ids[(i.wrapping_mul(2654435761) % ENTRIES) as usize].as_str()
        } else {
            "absent-message-id@nowhere.example"
        };
        if store.seen_on_list(ListId(1), probe, 2).is_some() {
            hits += 1;
        }
    }
    let look = t.elapsed();
    let cpu = thread_cpu_ns().zip(cpu0).map(|(b, a)| b.saturating_sub(a));
    println!(
        "records: {ENTRIES} in {:.2?} ({:.0}/s); flush of {ENTRIES} records: {:.2?}",
        rec,
        ENTRIES as f64 / rec.as_secs_f64(),
        flush
    );
    println!(
        "lookups: {LOOKUPS} in {:.2?} = {:.0} lookups/s ({hits} hits)",
        look,
        LOOKUPS as f64 / look.as_secs_f64()
    );
    if let Some(ns) = cpu {
        // On a shared machine the wall-clock rate includes time other processes had the CPU;
        // this is the rate per second of CPU this thread actually got.
        println!(
            "lookups per CPU-second of this thread: {:.0} ({:.1}% of wall time on CPU)",
            LOOKUPS as f64 / (ns as f64 / 1e9),
            100.0 * ns as f64 / look.as_nanos() as f64
        );
    }
    Ok(())
}

/// Nanoseconds this thread has run on a CPU (Linux `/proc/thread-self/schedstat`).
fn thread_cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}
