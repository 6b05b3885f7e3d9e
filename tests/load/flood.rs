//! End to end: a connection flood against the running server must not lock out
//! legitimate posts. 2,000 idle and 200 slow (one byte a second) SMTP connections from 500
//! loopback addresses, each in its own /24 (a botnet, so the per-client and per-network limits
//! do not stop it), reconnecting a second after each cut like a real bot; meanwhile posts from
//! an address outside the flood must each get their 250 after DATA in under a second, and the
//! LMTP listener must keep accepting. Default `[smtp_in]` settings (max_sessions 500,
//! command_timeout_secs 300): without stress mode and shedding the flood's first 500
//! connections would hold every slot for five minutes.
//!
//! Everything runs on 127.0.0.0/8; flood sources are bound before connect (127.100.0.7, …).
//! The process holds some 3,000 sockets, so the test raises its RLIMIT_NOFILE soft limit to
//! the hard limit (rustix, no unsafe). Bounded: the flood runs for a fixed time and every wait
//! has a timeout; the whole test takes about 15 s.
//!
//! `cargo test --release --test load flood:: -- --nocapture` prints the figures (BENCHMARKS.md);
//! `-- --ignored` also runs the same flood with stress mode and shedding off, for contrast.

use crate::support;

use herald_server::Config;
use herald_sim::{Profile, World};
use serde_json::json;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

const LIST: &str = "flood@lists.test";
const IDLE: usize = 2000;
const SLOW: usize = 200;
const SOURCES: usize = 500;
/// Legitimate posts, one every [`POST_EVERY`], once the flood has filled the slots.
const POSTS: usize = 12;
const POST_EVERY: Duration = Duration::from_millis(500);
/// Time for the flood's first wave to connect and fill every slot before the first post.
const SETTLE: Duration = Duration::from_secs(3);
/// How long a bot waits before it comes back after being cut off.
const COMEBACK: Duration = Duration::from_secs(1);

/// What one run measured.
#[derive(Debug, Default)]
struct Figures {
    /// Connect to 250 after DATA, per accepted post.
    accepted: Vec<Duration>,
    /// The reply that refused each post that was not accepted.
    refused: Vec<String>,
    lmtp: String,
    /// Connections the flood opened (all waves).
    flood_connects: u64,
    /// `herald_inbound_refusals_total` by reason, after the flood.
    refusals: Vec<(String, u64)>,
    stressed_during_flood: i64,
}

impl Figures {
    fn print(&self, label: &str) {
        let mut ms: Vec<f64> = self
            .accepted
            .iter()
            .map(|d| d.as_secs_f64() * 1e3)
            .collect();
        ms.sort_by(f64::total_cmp);
        let median = ms.get(ms.len() / 2).copied().unwrap_or(f64::NAN);
        let max = ms.last().copied().unwrap_or(f64::NAN);
        println!("flood ({label}): {IDLE} idle + {SLOW} slow connections from {SOURCES} addresses");
        let mut refused: Vec<(&str, usize)> = Vec::new();
        for reply in &self.refused {
            match refused.iter_mut().find(|(r, _)| r == reply) {
                Some((_, n)) => *n += 1,
                None => refused.push((reply, 1)),
            }
        }
        println!(
            "  legitimate posts: {} of {POSTS} accepted, median {median:.1} ms, max {max:.1} ms; refused: {refused:?}",
            self.accepted.len(),
        );
        println!("  LMTP during the flood: {}", self.lmtp);
        println!(
            "  flood connections opened: {}; herald_inbound_stress during the flood: {}",
            self.flood_connects, self.stressed_during_flood
        );
        println!("  refusals by reason: {:?}", self.refusals);
    }

    fn refusals(&self, reason: &str) -> u64 {
        self.refusals
            .iter()
            .find(|(r, _)| r == reason)
            .map_or(0, |(_, n)| *n)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legitimate_posts_get_through_a_connection_flood_and_lmtp_keeps_accepting() {
    let _alone = crate::alone().await;
    let figures = run_flood(|_| {}).await;
    figures.print("stress mode and shedding on, the defaults");
    assert!(
        figures.refused.is_empty(),
        "every legitimate post accepted: {figures:?}"
    );
    assert_eq!(figures.accepted.len(), POSTS);
    let slowest = figures.accepted.iter().max().copied().unwrap_or_default();
    assert!(slowest < Duration::from_secs(1), "{slowest:?}: {figures:?}");
    assert!(figures.lmtp.starts_with("250"), "{}", figures.lmtp);
    assert!(
        figures.refusals("shed") > 0,
        "idlers were shed: {figures:?}"
    );
    assert_eq!(figures.stressed_during_flood, 1, "stress mode showed");
    assert_eq!(
        figures.refusals("per_client_limit"),
        0,
        "the flood is spread out"
    );
}

/// The same flood with stress mode and shedding off: the behaviour before them, where the
/// flood held every session slot and legitimate posters were locked out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "contrast for BENCHMARKS.md; about 15 s"]
async fn without_stress_mode_the_flood_locks_legitimate_posts_out() {
    let _alone = crate::alone().await;
    let figures = run_flood(|c| {
        c.smtp_in.stress_threshold_percent = 0;
        c.smtp_in.shed_idle_sessions = false;
    })
    .await;
    figures.print("stress mode and shedding off");
    assert!(figures.lmtp.starts_with("250"), "LMTP has its own slots");
    assert!(!figures.refused.is_empty(), "{figures:?}");
}

async fn run_flood(tune: impl FnOnce(&mut Config)) -> Figures {
    raise_fd_limit(8192);
    let world = World::start(world_config(&[Profile::Normal], false))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = server_config(&world, dir.path().to_path_buf());
    tune(&mut cfg);
    let server = TestServer::start(cfg).await;
    create_list(&server.api, LIST, json!({})).await;

    let stop = CancellationToken::new();
    let connects = Arc::new(AtomicU64::new(0));
    let mut flood = JoinSet::new();
    for bot in 0..IDLE + SLOW {
        let from = flood_source(bot % SOURCES);
        let (stop, connects, target) = (stop.clone(), connects.clone(), server.smtp);
        // Spread the first wave over a second, as a botnet's connections arrive.
        let first = Duration::from_millis((bot % 100) as u64 * 10);
        flood.spawn(async move {
            let slow = bot >= IDLE;
            tokio::select! {
                () = stop.cancelled() => {}
                () = bot_loop(from, target, slow, first, connects) => {}
            }
        });
    }
    tokio::time::sleep(SETTLE).await;
    let (_, metrics) = http("GET", &format!("{}/metrics", server.api), None).await;
    let stressed_during_flood = gauge(metrics.as_str().unwrap_or(""), "herald_inbound_stress");

    let mut figures = Figures::default();
    for i in 0..POSTS {
        let started = Instant::now();
        match post(server.smtp, i).await {
            Ok(()) => figures.accepted.push(started.elapsed()),
            Err(reply) => figures.refused.push(reply),
        }
        tokio::time::sleep(POST_EVERY.saturating_sub(started.elapsed())).await;
    }
    figures.lmtp = lmtp_post(server.lmtp).await;
    figures.flood_connects = connects.load(Relaxed);
    figures.stressed_during_flood = stressed_during_flood;

    stop.cancel();
    flood.shutdown().await;
    let (_, metrics) = http("GET", &format!("{}/metrics", server.api), None).await;
    let text = metrics.as_str().unwrap_or("");
    let prefix = "herald_inbound_refusals_total{reason=\"";
    figures.refusals = text
        .lines()
        .filter_map(|l| l.strip_prefix(prefix))
        .filter_map(|l| l.split_once("\"} "))
        .map(|(r, n)| (r.to_string(), n.parse().unwrap_or(0)))
        .collect();
    server.stop().await;
    world.shutdown().await;
    figures
}

/// Bot `i`'s address: 127.(100 + i / 200).(i % 200).7, so every bot address is in its own /24.
fn flood_source(i: usize) -> IpAddr {
    let (hi, lo) = (100 + i / 200, i % 200);
    IpAddr::V4(Ipv4Addr::new(127, hi as u8, lo as u8, 7))
}

/// One bot: connect, hold the connection idle (or trickle a command one byte a second) until
/// the server cuts it off, wait a second, come back. Ends when its task is cancelled.
async fn bot_loop(
    from: IpAddr,
    target: SocketAddr,
    slow: bool,
    first: Duration,
    connects: Arc<AtomicU64>,
) {
    tokio::time::sleep(first).await;
    loop {
        let socket = TcpSocket::new_v4().expect("socket");
        socket
            .bind(SocketAddr::new(from, 0))
            .expect("bind a loopback source");
        let connected = tokio::time::timeout(Duration::from_secs(5), socket.connect(target)).await;
        if let Ok(Ok(stream)) = connected {
            connects.fetch_add(1, Relaxed);
            let (mut r, mut w) = stream.into_split();
            let reading = async {
                let mut sink = [0u8; 512];
                while matches!(r.read(&mut sink).await, Ok(n) if n > 0) {}
            };
            let trickling = async {
                if !slow {
                    return std::future::pending().await;
                }
                for b in b"EHLO bot.example\r\n".iter().cycle() {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    if w.write_all(&[*b]).await.is_err() {
                        break;
                    }
                }
                std::future::pending().await
            };
            tokio::select! {
                () = reading => {}
                () = trickling => {}
            }
        }
        tokio::time::sleep(COMEBACK).await;
    }
}

/// One legitimate post from 127.0.0.1 (not a flood address): `Err` with the refusing reply.
async fn post(smtp: SocketAddr, i: usize) -> Result<(), String> {
    let (mut s, banner) = Smtp::connect(smtp).await;
    if !banner.starts_with("220") {
        return Err(banner);
    }
    let r = s.cmd("EHLO legit.example").await;
    if !r.starts_with("250") {
        return Err(r);
    }
    let body = format!(
        "From: alice@d0.test\r\nSubject: during the flood\r\nMessage-ID: <flood{i}@d0.test>\r\n\r\nhi\r\n"
    );
    let r = s.send_mail("alice@d0.test", &[LIST], body.as_bytes()).await;
    if !r.starts_with("250") {
        return Err(r);
    }
    s.cmd("QUIT").await;
    Ok(())
}

/// One LMTP transaction; the reply to the end of DATA.
async fn lmtp_post(lmtp: SocketAddr) -> String {
    let (mut s, banner) = Smtp::connect(lmtp).await;
    if !banner.starts_with("220") {
        return banner;
    }
    let r = s.cmd("LHLO mta.example").await;
    if !r.starts_with("250") {
        return r;
    }
    let body =
        b"From: bob@d0.test\r\nSubject: via LMTP\r\nMessage-ID: <lmtp@d0.test>\r\n\r\nhi\r\n";
    s.send_mail("bob@d0.test", &[LIST], body).await
}

/// An unlabelled gauge's value in Prometheus text.
fn gauge(text: &str, name: &str) -> i64 {
    text.lines()
        .filter_map(|l| l.strip_prefix(name))
        .filter_map(|l| l.strip_prefix(' '))
        .find_map(|v| v.trim().parse().ok())
        .unwrap_or(-1)
}

/// Lifts the soft limit on open files to at least `want` (up to the hard limit).
fn raise_fd_limit(want: u64) {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    let soft = limit.current.unwrap_or(u64::MAX);
    if soft >= want {
        return;
    }
    let hard = limit.maximum.unwrap_or(u64::MAX);
    limit.current = Some(want.min(hard));
    if let Err(e) = setrlimit(Resource::Nofile, limit) {
        println!("could not raise RLIMIT_NOFILE from {soft}: {e}");
    }
}
