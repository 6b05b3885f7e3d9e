//! How long a day's report takes over ten million delivery records (under 2 s).
//!
//! Builds a statistics store the way the server does (the same aggregation and SQLite writer):
//! 20 posts spread over one day, 500,000 recipients each over 5,000 domains (sizes skewed like
//! real lists), 2 % failures, deliveries spread over each post's first 30 minutes. Then times the
//! `herald report day` path (query + PNG) and the hourly table.
//!
//!     cargo run --release --example report_bench [-- <records, default 10000000>]

// Only the day picture is used here.
#[allow(dead_code)]
#[path = "../src/report/chart.rs"]
mod chart;

use herald_telemetry::stats::{StatsReader, StatsWriter};
use herald_telemetry::{Attempt, Event};
use herald_types::{Address, EnhancedStatus, MemberId, PostId, RcptOutcome, Reply};
use std::time::Instant;

const POSTS: u64 = 20;
const DOMAINS: u64 = 5_000;
const DAY_MS: u64 = 1_795_132_800_000; // 2026-11-21T00:00:00Z

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let records: u64 = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(10_000_000);
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("stats.db");
    let t = Instant::now();
    let mut w = StatsWriter::open(&path)?;
    let per_post = records / POSTS;
    let list = Address::parse("big@lists.example")?;
    let ok = RcptOutcome::Delivered(Reply::new(250, None, "ok"));
    let bad = RcptOutcome::Failed(Reply::new(550, Some(EnhancedStatus::new(5, 1, 1)), "no"));
    let mut attempt = Box::new(Attempt {
        post: PostId(0),
        member: MemberId(0),
        rcpt: String::with_capacity(64),
        relay: "mx.example[127.0.0.1]:25".into(),
        accepted_at_ms: 0,
        xdelay_ms: 0,
        tries: 1,
        tls: None,
        mta_sts: None,
        dane: None,
        source: None,
        outcome: ok.clone(),
    });
    for p in 0..POSTS {
        let accepted = DAY_MS + 3_600_000 + p * 4_000_000;
        let post = PostId(0x1000 + p);
        w.add(
            &Event::PostAccepted {
                post,
                list: list.clone(),
                size: 10_240,
                received_at_ms: accepted,
                recovered: false,
            },
            accepted,
        )?;
        w.add(
            &Event::PostExpanded {
                post,
                recipients: per_post,
                already_done: 0,
            },
            accepted,
        )?;
        let mut event = Event::Attempt(attempt);
        for i in 0..per_post {
            let Event::Attempt(a) = &mut event else {
                unreachable!()
            };
            // Skewed domains: the square makes low numbers (big providers) far more common.
            let x = (i.wrapping_mul(2_654_435_761) % 10_000) as f64 / 10_000.0;
            let domain = (x * x * DOMAINS as f64) as u64;
            a.post = post;
            a.accepted_at_ms = accepted;
            a.rcpt.clear();
            use std::fmt::Write as _;
            let _ = write!(a.rcpt, "m{i}@d{domain}.example");
            a.xdelay_ms = 5 + domain % 50;
            a.outcome = if i % 50 == 0 { bad.clone() } else { ok.clone() };
            let at = accepted + i * 1_800_000 / per_post;
            w.add(&event, at)?;
        }
        let Event::Attempt(a) = event else {
            unreachable!()
        };
        attempt = a;
        w.add(&Event::PostCompleted { post }, accepted + 1_800_000)?;
    }
    w.flush()?;
    let built = t.elapsed();
    let size = std::fs::metadata(&path)?.len()
        + std::fs::metadata(dir.path().join("stats.db-wal")).map_or(0, |m| m.len());

    let t = Instant::now();
    let reader = StatsReader::open(&path)?;
    let day = reader.day(DAY_MS)?;
    let queried = t.elapsed();
    let png = dir.path().join("day.png");
    // The chart draws the API's view of the day, which the CLI receives as JSON: the same
    // round trip here (the API's own mapping is private to the server).
    let view: herald_api_types::DayReport = serde_json::from_value(serde_json::to_value(&day)?)?;
    chart::day(&view, "report_bench", &png)?;
    let day_total = t.elapsed();
    let t = Instant::now();
    let hours = reader.hourly(DAY_MS, DAY_MS + 86_400_000)?;
    let hourly = t.elapsed();
    assert_eq!(day.delivered + day.failed, per_post * POSTS);
    println!("records           {}", per_post * POSTS);
    println!(
        "store built in    {:.1} s ({:.1} MB)",
        built.as_secs_f64(),
        size as f64 / 1e6
    );
    println!(
        "day report        {:.3} s (query {:.3} s + PNG), {} minutes, {} arrivals",
        day_total.as_secs_f64(),
        queried.as_secs_f64(),
        day.minutes.len(),
        day.arrivals.len()
    );
    println!(
        "hourly table      {:.3} s, {} hours",
        hourly.as_secs_f64(),
        hours.len()
    );
    Ok(())
}
