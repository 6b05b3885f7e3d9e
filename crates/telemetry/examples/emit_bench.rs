//! What emitting an attempt event costs, with and without the statistics sink (the CPU side of
//! the goal "< 3 % of fan-out throughput"): one million delivered attempts over 8,000 members of
//! one domain, as the report loop emits them. The delivery log is off in both runs.
//!
//!     cargo run --release -p herald-telemetry --example emit_bench

use herald_telemetry::{Attempt, Event, StatsConfig, Telemetry, TelemetryConfig};
use herald_types::{Address, MemberId, PostId, RcptOutcome, Reply};
use std::time::Instant;

const EVENTS: u64 = 1_000_000;

fn run(t: &Telemetry) -> f64 {
    let post = PostId(1);
    t.emit(Event::PostAccepted {
        post,
        list: Address::parse("l@lists.example").expect("address"),
        size: 10_240,
        received_at_ms: herald_types::unix_ms_now(),
        recovered: false,
    });
    let rcpts: Vec<String> = (0..8000).map(|i| format!("m{i}@d0.example")).collect();
    let started = Instant::now();
    for i in 0..EVENTS {
        t.emit(Event::Attempt(Box::new(Attempt {
            post,
            member: MemberId(i as i64 % 8000),
            rcpt: rcpts[(i % 8000) as usize].clone(),
            relay: "mx.d0.example[127.1.0.10]:25".into(),
            accepted_at_ms: herald_types::unix_ms_now(),
            xdelay_ms: 3,
            tries: 1,
            tls: None,
            mta_sts: None,
            dane: None,
            source: None,
            outcome: RcptOutcome::Delivered(Reply::new(250, None, "2.0.0 ok")),
        })));
    }
    started.elapsed().as_nanos() as f64 / EVENTS as f64
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    for round in 0..3 {
        let off = run(&Telemetry::disabled_log());
        let with = Telemetry::new(&TelemetryConfig {
            log_path: None,
            log_rotation: None,
            stats: Some(StatsConfig {
                path: dir.path().join(format!("stats{round}.db")),
                flush_secs: 5,
                keep_days: 0,
            }),
        })?;
        let on = run(&with);
        println!(
            "round {round}: emit without stats {off:.0} ns/event, with stats {on:.0} ns/event (+{:.0} ns)",
            on - off
        );
    }
    Ok(())
}
