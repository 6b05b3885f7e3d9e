//! Measures what the node registry costs (BENCHMARKS.md): heartbeats written per
//! second by one node in a loop (each is the `UPDATE` plus the schema-version read), and the
//! time of `Cluster::status` (what `/api/v1/status`, `herald status` and each `/metrics` scrape
//! read) with 10 and 1,000 node rows — on SQLite and on a private PostgreSQL server started by
//! `herald-pg-harness` on loopback.
//!
//! `cargo run -p herald-cluster --example heartbeat_bench --release`

use herald_cluster::{Cluster, ClusterConfig, Identity};
use herald_directory::Directory;
use std::time::{Duration, Instant};

fn me(i: usize) -> Identity {
    Identity {
        node_id: format!("node-{i:04}"),
        address: format!("127.0.0.2:{}", 8000 + i),
        version: "0.1.0".into(),
    }
}

fn run(name: &str, d: Directory) {
    let cfg = ClusterConfig::default();
    let node = Cluster::join(d.clone(), &cfg, me(0)).expect("join");
    let window = Duration::from_secs(3);
    let start = Instant::now();
    let mut beats = 0u64;
    while start.elapsed() < window {
        node.beat().expect("beat");
        beats += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{name}: {beats} heartbeats in {secs:.2} s = {:.0}/s ({:.0} µs each)",
        beats as f64 / secs,
        secs * 1e6 / beats as f64
    );
    for total in [10usize, 1000] {
        for i in 1..total {
            Cluster::join(d.clone(), &cfg, me(i)).expect("join");
        }
        let reps = 200;
        let mut times: Vec<Duration> = (0..reps)
            .map(|_| {
                let t = Instant::now();
                let s = node.status().expect("status");
                assert_eq!(s.len(), total);
                t.elapsed()
            })
            .collect();
        times.sort();
        println!(
            "{name}: status of {total} nodes: median {} µs, p95 {} µs",
            times[reps / 2].as_micros(),
            times[reps * 95 / 100].as_micros()
        );
    }
}

fn main() {
    let dir = tempfile::tempdir().expect("tempdir");
    run(
        "sqlite",
        Directory::open(&dir.path().join("herald.db")).expect("sqlite"),
    );
    let url = herald_pg_harness::PgServer::shared()
        .fresh_database()
        .expect("postgresql");
    run(
        "postgresql",
        Directory::open_postgres(&url, 4).expect("postgresql"),
    );
}
