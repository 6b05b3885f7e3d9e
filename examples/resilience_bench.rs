//! Resilience benchmark: the same post to an internet-100k-like list on two simulated
//! worlds — one with 2 % hung, 1 % refused, 3 % slow, 1 % greylisting hosts and 0.5 % unknown
//! users, and the same world without the hung, refused and slow hosts — and the t95 / t100 of the
//! deliverable recipients (time from posting to the copy's arrival at the receiver) in both.
//! Target: messy t95 within 1.2x of clean t95.
//!
//! ```text
//! cargo run --release --example resilience_bench -- [members] [domains] [timeout_secs]
//! ```
//! Defaults: 100000 members, 2000 domains, 240 s per world. Bounded: each world run stops at its
//! timeout, and everything (server, world) is shut down before the next.
//!
//! The greylisting hosts of the world ask for 60 s; the benchmark sets
//! `scheduler.greylist_retry_secs = 65` (the world's text names no interval), so t100 includes
//! one greylisting round. Everything else is Herald's default configuration.

use herald_server::{config::ListenConfig, Config, Listeners};
use herald_sim::{Expectation, GenSpec, ProfileFractions, ReceiverSettings, World, WorldConfig};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const LIST: &str = "bench@lists.herald.test";

struct RunResult {
    deliverable: usize,
    delivered: usize,
    t95_ms: Option<u64>,
    t100_ms: Option<u64>,
    elapsed: Duration,
}

fn spec(domains: usize, messy: bool) -> GenSpec {
    let f = |v: f64| if messy { v } else { 0.0 };
    GenSpec {
        domains,
        seed: 7,
        fractions: ProfileFractions {
            hung: f(0.02),
            refused: f(0.01),
            slow: f(0.03),
            greylist: 0.01,
            unknown_users: 0.005,
            ..ProfileFractions::default()
        },
        unknown_users_rate: 0.5,
        receiver: ReceiverSettings {
            check_mime_every: 100,
            ..ReceiverSettings::default()
        },
        ..GenSpec::default()
    }
}

async fn run(
    members: usize,
    domains: usize,
    messy: bool,
    limit: Duration,
) -> anyhow::Result<RunResult> {
    let cfg = WorldConfig::generate(&spec(domains, messy))?;
    let addresses = cfg.member_addresses(members);
    let world = World::start(cfg).await?;
    let deliverable: HashSet<&str> = addresses
        .iter()
        .filter(|a| world.expectation(a) == Expectation::Deliverable)
        .map(String::as_str)
        .collect();
    let dir = tempfile::tempdir()?;
    let listeners = Listeners::bind_ephemeral().await?;
    let (smtp, lmtp, http) = listeners.addrs()?;
    let mut config = Config {
        data_dir: dir.path().to_path_buf(),
        listen: ListenConfig {
            smtp,
            lmtp,
            http,
            submissions: None,
        },
        ..Config::default()
    };
    config.dns.nameservers = vec![world.dns_addr()];
    config.delivery.port = world.smtp_port();
    config.delivery.helo_name = "herald.bench".into();
    config.log.delivery_log = false;
    config.scheduler.greylist_retry_secs = 65;
    config.server.allow_root = true; // in-process, like the tests
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(herald_server::run(config, listeners, shutdown.clone()));
    let api = format!("http://{http}");
    let client = reqwest::Client::new();
    wait_up(&client, &api).await?;
    client
        .post(format!("{api}/api/v1/lists"))
        .json(&json!({"address": LIST, "settings": {"posting_policy": "anyone", "personalize": true}}))
        .send()
        .await?
        .error_for_status()?;
    let mut csv = String::from("email,name\n");
    for (i, a) in addresses.iter().enumerate() {
        csv.push_str(&format!("{a},Member {i}\n"));
    }
    client
        .post(format!("{api}/api/v1/lists/{LIST}/import"))
        .body(csv)
        .send()
        .await?
        .error_for_status()?;
    let body = "Hello members.\r\n".repeat(600);
    let msg = format!("From: p@herald.test\r\nTo: {LIST}\r\nSubject: bench\r\nMessage-ID: <bench-{messy}@herald.test>\r\n\r\n{body}");
    let posted_unix_ms = herald_types::unix_ms_now();
    let started = Instant::now();
    let r: Value = client
        .post(format!("{api}/api/v1/lists/{LIST}/posts"))
        .body(msg)
        .send()
        .await?
        .json()
        .await?;
    anyhow::ensure!(r["post"].is_string(), "post refused: {r}");
    let want = deliverable.len() as u64;
    while started.elapsed() < limit {
        if world.recorder().accepted() >= want {
            let snap = world.recorder().snapshot();
            let n = snap
                .copies
                .iter()
                .filter(|c| deliverable.contains(c.recipient.as_ref()))
                .count();
            if n >= deliverable.len() {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let elapsed = started.elapsed();
    let snap = world.recorder().snapshot();
    let base = world.recorder().started_unix_ms();
    let mut seen = HashSet::new();
    let mut times: Vec<u64> = snap
        .copies
        .iter()
        .filter(|c| deliverable.contains(c.recipient.as_ref()) && seen.insert(c.recipient.clone()))
        .map(|c| (base + c.at_ms).saturating_sub(posted_unix_ms))
        .collect();
    times.sort_unstable();
    let n = deliverable.len();
    let at = |k: usize| (k > 0 && times.len() >= k).then(|| times[k - 1]);
    let result = RunResult {
        deliverable: n,
        delivered: times.len(),
        t95_ms: at((n * 95).div_ceil(100)),
        t100_ms: at(n),
        elapsed,
    };
    shutdown.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(60), server).await;
    world.shutdown().await;
    Ok(result)
}

async fn wait_up(client: &reqwest::Client, api: &str) -> anyhow::Result<()> {
    let started = Instant::now();
    while client.get(format!("{api}/healthz")).send().await.is_err() {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(30),
            "server did not start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

fn ms(v: Option<u64>) -> String {
    v.map_or("not reached".into(), |v| {
        format!("{:.2} s", v as f64 / 1000.0)
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let members = args.first().copied().unwrap_or(100_000);
    let domains = args.get(1).copied().unwrap_or(2000);
    let limit = Duration::from_secs(args.get(2).copied().unwrap_or(240) as u64);
    let mut results = Vec::new();
    for messy in [false, true] {
        let name = if messy { "messy" } else { "clean" };
        let r = run(members, domains, messy, limit).await?;
        println!(
            "{name:5}: deliverable {} delivered {}  t95 {}  t100 {}  (run {:.1} s)",
            r.deliverable,
            r.delivered,
            ms(r.t95_ms),
            ms(r.t100_ms),
            r.elapsed.as_secs_f64()
        );
        results.push(r);
    }
    if let (Some(c), Some(m)) = (results[0].t95_ms, results[1].t95_ms) {
        println!(
            "t95 ratio messy/clean: {:.3} (target <= 1.2)",
            m as f64 / c.max(1) as f64
        );
    }
    if let (Some(c), Some(m)) = (results[0].t100_ms, results[1].t100_ms) {
        println!("t100 ratio messy/clean: {:.3}", m as f64 / c.max(1) as f64);
    }
    Ok(())
}
