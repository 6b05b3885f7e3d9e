//! The intake's promises with the real `herald serve` binary: a `250` is
//! given once the post is durable in the spool, before its hand-off to archive and fan-out,
//! so what stands between the `250` and the members must survive a crash and a stop.
//!
//! - `kill9_during_intake_loses_no_acknowledged_post_and_sends_none_twice`: 100 concurrent
//!   SMTP senders post to a list; the server is killed with SIGKILL at a random moment of the
//!   intake (the delay is printed; `HERALD_KILL_AFTER_MS` replays one), started again, and
//!   every post that got `250` reaches every member exactly once. Posts that got no `250`
//!   may or may not arrive (they may have been durable already), but never twice.
//! - `sigterm_with_a_backlog_stops_in_bounded_time_and_resumes_it`: a few thousand posts
//!   accepted, most still to archive and fan out; SIGTERM must stop the server within
//!   [`STOP_BOUND`]; started again, it delivers every post to every member exactly once.
//!
//! Members: `m0@live.test` on a receiver that accepts all along (fan-out runs during the
//! intake, so copies are in flight at the kill), and `m1@held.test`, `m2@held.test` whose
//! domain answers SERVFAIL until the restart (their copies wait, deferred, so the restart
//! must deliver them from the spool). Counting is per member and Message-ID, from what the
//! simulated receivers recorded.

use crate::support;

use herald_sim::{Profile, World};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::binary::BinaryServer;
use support::*;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const LIST: &str = "intake@lists.test";
const SENDERS: usize = 100;
const LIVE: &str = "m0@live.test";
const HELD: [&str; 2] = ["m1@held.test", "m2@held.test"];
/// How long a stop with thousands of posts still to archive and fan out may take.
const STOP_BOUND: Duration = Duration::from_secs(10);
/// Fan-out in the test: few connections, small batches, so the copies a kill can catch
/// between delivery and journal are few (and counted).
const SCHEDULER: &str = "[scheduler]\nmax_connections_per_destination = 2\n\
    max_copies_per_batch = 4\nretry_initial_secs = 1\nretry_max_secs = 2\n\
    destination_backoff_secs = 1\ntick_ms = 50\n\
    [smtp_in]\nmax_sessions_per_client = 0\nmax_sessions_per_network = 0\n";

/// A world with `live.test` (accepts everything) and `held.test` (SERVFAIL until released).
async fn start_world() -> World {
    let mut cfg = world_config(&[Profile::Normal, Profile::Normal], false);
    cfg.receiver.check_mime_every = 0;
    for (d, name) in cfg.domains.iter_mut().zip(["live.test", "held.test"]) {
        d.name = name.into();
        d.mx_host = format!("mx.{name}");
    }
    let world = World::start(cfg).await.expect("world");
    hold(&world, true);
    world
}

/// `held.test` answers SERVFAIL (`true`): its copies are deferred, none delivered.
fn hold(world: &World, held: bool) {
    world
        .dns()
        .update_zone(|z| {
            z.set_servfail("held.test", held);
        })
        .expect("zone");
}

async fn start_server(dir: &std::path::Path, world: &World) -> BinaryServer {
    let mut server = BinaryServer::configure(dir, &dir.join("data"), world, SCHEDULER);
    server.start().await;
    create_list(&server.api, LIST, json!({"posting_policy": "anyone"})).await;
    add_members(&server.api, LIST, &[LIVE, HELD[0], HELD[1]]).await;
    server
}

/// One sender's posts that got `250`, by Message-ID.
type Acked = Arc<Mutex<BTreeSet<String>>>;

/// One whole reply (its last line); `None` when the connection failed or closed.
async fn read_reply(r: &mut BufReader<tokio::net::tcp::OwnedReadHalf>) -> Option<String> {
    loop {
        let mut line = String::new();
        let n = tokio::time::timeout(Duration::from_secs(60), r.read_line(&mut line))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            return None;
        }
        if line.as_bytes().get(3) != Some(&b'-') {
            return Some(line);
        }
    }
}

/// A sender: one SMTP connection posting up to `posts` posts one after another, until the
/// server goes away. Every `250` is recorded as it arrives (a killed server ends the session
/// with an error, which only ends the sender).
async fn sender(smtp: SocketAddr, i: usize, posts: usize, acked: Acked, sent: Acked) {
    let Ok(stream) = tokio::net::TcpStream::connect(smtp).await else {
        return;
    };
    let (r, mut w) = stream.into_split();
    let mut r = BufReader::new(r);
    if read_reply(&mut r).await.is_none() {
        return;
    }
    if w.write_all(b"EHLO sender.outside.test\r\n").await.is_err()
        || read_reply(&mut r).await.is_none()
    {
        return;
    }
    for n in 0..posts {
        let mid = format!("s{i}-p{n}@outside.test");
        let head = format!("MAIL FROM:<s{i}@outside.test>\r\nRCPT TO:<{LIST}>\r\nDATA\r\n");
        if w.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        for _ in 0..3 {
            match read_reply(&mut r).await {
                Some(l) if l.starts_with('2') || l.starts_with('3') => {}
                _ => return,
            }
        }
        let body = format!(
            "From: s{i}@outside.test\r\nTo: {LIST}\r\nSubject: post {n} of sender {i}\r\n\
             Message-ID: <{mid}>\r\n\r\nHello from sender {i}, post {n}.\r\n.\r\n"
        );
        sent.lock().expect("lock").insert(mid.clone());
        if w.write_all(body.as_bytes()).await.is_err() {
            return;
        }
        match read_reply(&mut r).await {
            Some(l) if l.starts_with("250") => {
                acked.lock().expect("lock").insert(mid);
            }
            _ => return,
        }
    }
    let _ = w.write_all(b"QUIT\r\n").await;
}

/// Starts [`SENDERS`] senders of `posts` posts each.
fn start_senders(
    smtp: SocketAddr,
    posts: usize,
) -> (Acked, Acked, Vec<tokio::task::JoinHandle<()>>) {
    let acked: Acked = Default::default();
    let sent: Acked = Default::default();
    let tasks = (0..SENDERS)
        .map(|i| tokio::spawn(sender(smtp, i, posts, acked.clone(), sent.clone())))
        .collect();
    (acked, sent, tasks)
}

/// Copies per member and Message-ID, from what the receivers recorded.
fn copies(world: &World) -> BTreeMap<(String, String), Vec<u64>> {
    let mut out: BTreeMap<(String, String), Vec<u64>> = BTreeMap::new();
    for c in world.recorder().snapshot().copies {
        let mid = c.message_id.as_deref().unwrap_or("").trim();
        let mid = mid
            .trim_start_matches('<')
            .trim_end_matches('>')
            .to_string();
        out.entry((c.recipient.to_string(), mid))
            .or_default()
            .push(c.at_ms);
    }
    out
}

/// Waits until every member has a copy of every post in `acked` (or `limit` passes), then
/// until the server has nothing left to send; returns the copies.
async fn wait_delivered(
    world: &World,
    api: &str,
    acked: &BTreeSet<String>,
    limit: Duration,
) -> BTreeMap<(String, String), Vec<u64>> {
    let start = Instant::now();
    let members = [LIVE, HELD[0], HELD[1]];
    loop {
        let got = copies(world);
        let missing = acked
            .iter()
            .flat_map(|m| members.iter().map(move |r| (r.to_string(), m.clone())))
            .filter(|k| !got.contains_key(k))
            .count();
        if missing == 0 {
            break;
        }
        assert!(
            start.elapsed() < limit,
            "{missing} copies of acknowledged posts never arrived"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    wait_settled(api, Duration::from_secs(60)).await;
    copies(world)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_during_intake_loses_no_acknowledged_post_and_sends_none_twice() {
    let world = start_world().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = start_server(dir.path(), &world).await;
    let kill_after = std::env::var("HERALD_KILL_AFTER_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
            500 + u64::from(nanos % 2500)
        });
    eprintln!(
        "SIGKILL {kill_after} ms into the intake (HERALD_KILL_AFTER_MS={kill_after} replays it)"
    );
    // More than any run can send before the kill: the kill always lands mid-intake.
    let (acked, sent, tasks) = start_senders(server.smtp, 1000);
    tokio::time::sleep(Duration::from_millis(kill_after)).await;
    let killed_at_ms = world.recorder().elapsed_ms();
    server.kill9();
    for t in tasks {
        t.await.expect("sender");
    }
    let acked = acked.lock().expect("lock").clone();
    let sent = sent.lock().expect("lock").clone();
    assert!(
        !acked.is_empty(),
        "no post was acknowledged before the kill"
    );
    assert!(
        acked.len() < SENDERS * 1000,
        "the intake finished before the kill"
    );
    let live_before = world.recorder().accepted();
    eprintln!(
        "killed with {} posts acknowledged, {} sent without an answer, {live_before} copies delivered",
        acked.len(),
        sent.len() - acked.len()
    );

    hold(&world, false);
    server.start().await;
    let got = wait_delivered(&world, &server.api, &acked, Duration::from_secs(300)).await;
    let mut twice_held = Vec::new();
    let mut twice_live = Vec::new();
    for ((rcpt, mid), at) in &got {
        assert!(sent.contains(mid), "a copy of a post nobody sent: {mid}");
        if at.len() > 1 {
            if rcpt == LIVE {
                twice_live.push((mid.clone(), at.clone()));
            } else {
                twice_held.push((rcpt.clone(), mid.clone()));
            }
        }
    }
    // held.test got nothing before the restart: a second copy there could only be a post
    // handed over or expanded twice.
    assert!(
        twice_held.is_empty(),
        "posts fanned out twice: {twice_held:?}"
    );
    // live.test received during the intake: a copy delivered just before the kill whose
    // outcome was not yet journaled is sent again (DESIGN: bounded by connections × batch,
    // 2 × 4 here), and only such a copy.
    for (mid, at) in &twice_live {
        assert_eq!(at.len(), 2, "{mid} sent {} times", at.len());
        assert!(
            at[0] <= killed_at_ms,
            "{mid}: its first copy came after the kill, so the second is not a crash's"
        );
    }
    assert!(
        twice_live.len() <= 8,
        "{} copies sent twice, more than the 2 x 4 a kill can catch in flight",
        twice_live.len()
    );
    let extra = got
        .keys()
        .filter(|(r, m)| r == LIVE && !acked.contains(m))
        .count();
    eprintln!(
        "after restart: {} copies; {} posts without a 250 delivered anyway (durable before the kill); \
         {} copies to live.test sent twice (in flight at the kill)",
        got.values().map(Vec::len).sum::<usize>(),
        extra,
        twice_live.len()
    );
    server.stop().await;
    world.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_a_backlog_stops_in_bounded_time_and_resumes_it() {
    let world = start_world().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = start_server(dir.path(), &world).await;
    // 100 senders x 30 posts, all answered before the stop.
    let (acked, _sent, tasks) = start_senders(server.smtp, 30);
    for t in tasks {
        t.await.expect("sender");
    }
    let acked = acked.lock().expect("lock").clone();
    assert_eq!(acked.len(), SENDERS * 30, "every post acknowledged");
    // /metrics accounts for every acknowledged post: handed to its stage or waiting in the
    // backlog. Posts only move from waiting to handed now, so reading the backlog first counts
    // none twice or never; the hand-off task holds at most one post between the two counts.
    let waiting = metric(&server.api, "herald_intake_backlog_posts").await;
    let handed = metric(&server.api, "herald_intake_handed_total").await;
    let n = acked.len() as u64;
    assert!(
        handed <= n && waiting + handed + 1 >= n,
        "{n} acknowledged: {handed} handed + {waiting} waiting on /metrics"
    );
    let delivered = world.recorder().accepted();
    let total = acked.len() as u64 * 3;
    assert!(
        delivered + 1000 < total,
        "the backlog is gone already ({delivered} of {total} copies delivered)"
    );
    let stopping = Instant::now();
    server.stop().await;
    let took = stopping.elapsed();
    eprintln!(
        "SIGTERM with {} of {total} copies still to send: stopped in {took:?}",
        total - delivered
    );
    assert!(took < STOP_BOUND, "the stop took {took:?}");

    hold(&world, false);
    server.start().await;
    let got = wait_delivered(&world, &server.api, &acked, Duration::from_secs(300)).await;
    let twice: Vec<_> = got.iter().filter(|(_, at)| at.len() > 1).collect();
    assert!(
        twice.is_empty(),
        "sent twice after a graceful stop: {twice:?}"
    );
    assert_eq!(
        got.len(),
        acked.len() * 3,
        "exactly the acknowledged posts, to every member"
    );
    server.stop().await;
    world.shutdown().await;
}
