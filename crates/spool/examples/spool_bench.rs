//! Spool throughput: outcome records per second (batched, group-committed) and accepts per second
//! (each durable; concurrent accepts share fdatasyncs). Prints the median of several runs.
//!
//! ```text
//! cargo run --release -p herald-spool --example spool_bench -- [records] [accepts] [concurrency] [runs]
//! ```
//! Defaults: 200000 records, 2000 accepts of 10 KB, 64 concurrent, 5 runs. The spool lives in a
//! temporary directory under `$TMPDIR` (use a real disk: tmpfs makes fsync free).
#![allow(clippy::unwrap_used)] // a benchmark: failing loudly is the right thing

use bytes::Bytes;
use herald_spool::{FinalState, PostKind, PostMeta, Spool, SpoolConfig, SpoolStats};
use herald_types::{Address, ListId, MemberId};
use std::time::Instant;

fn meta() -> PostMeta {
    PostMeta {
        kind: PostKind::ListPost,
        list_id: ListId(1),
        list_address: Address::parse("bench@example.org").unwrap(),
        envelope_from: Some(Address::parse("sender@example.com").unwrap()),
        received_at_ms: herald_types::unix_ms_now(),
        max_member_id: MemberId(1_000_000),
        message_id: None,
        recipients: Vec::new(),
        hold_reason: None,
        null_sender: false,
        audience: Default::default(),
        dsn: None,
        member_range: None,
    }
}

fn arg(n: usize, default: usize) -> usize {
    std::env::args()
        .nth(n)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Records `n` outcomes for one post from a single task, then flushes. Returns records/s.
async fn bench_records(n: usize) -> (f64, SpoolStats) {
    let dir = tempfile::tempdir().unwrap();
    let (spool, _) = Spool::open(SpoolConfig::new(dir.path())).unwrap();
    let post = spool
        .accept(meta(), Bytes::from_static(b"x"))
        .await
        .unwrap();
    let start = Instant::now();
    for m in 1..=n as i64 {
        spool
            .record(post, MemberId(m), FinalState::Delivered)
            .await
            .unwrap();
    }
    spool.flush().await.unwrap();
    let rate = n as f64 / start.elapsed().as_secs_f64();
    (rate, spool.stats())
}

/// `total` accepts of 10 KB bodies from `conc` concurrent tasks. Returns accepts/s.
async fn bench_accepts(total: usize, conc: usize) -> (f64, SpoolStats) {
    let dir = tempfile::tempdir().unwrap();
    let (spool, _) = Spool::open(SpoolConfig::new(dir.path())).unwrap();
    let body = Bytes::from(vec![b'a'; 10_000]);
    let start = Instant::now();
    let tasks: Vec<_> = (0..conc)
        .map(|_| {
            let (spool, body) = (spool.clone(), body.clone());
            tokio::spawn(async move {
                for _ in 0..total / conc {
                    spool.accept(meta(), body.clone()).await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let rate = (total / conc * conc) as f64 / start.elapsed().as_secs_f64();
    (rate, spool.stats())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let (records, accepts, conc, runs) = (arg(1, 200_000), arg(2, 2000), arg(3, 64), arg(4, 5));
    let mut rates = Vec::new();
    let mut last = SpoolStats::default();
    for _ in 0..runs {
        let (r, s) = bench_records(records).await;
        rates.push(r);
        last = s;
    }
    println!(
        "records: median {:>10.0} records/s ({records} per run, {runs} runs); last run: {} commits, \
         avg group {:.0} records, avg fsync {} us",
        median(rates),
        last.commits,
        last.group_avg_records,
        last.fsync_avg_us
    );
    for c in [1, conc] {
        let mut rates = Vec::new();
        for _ in 0..runs {
            let (r, s) = bench_accepts(if c == 1 { accepts / 4 } else { accepts }, c).await;
            rates.push(r);
            last = s;
        }
        println!(
            "accepts: median {:>10.0} accepts/s (10 KB bodies, concurrency {c}); last run: {} commits, \
             avg group {:.1} posts, avg fsync {} us",
            median(rates),
            last.commits,
            last.group_avg_records,
            last.fsync_avg_us
        );
    }
}
