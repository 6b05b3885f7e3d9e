//! A full data disk never blocks a stop or a start, and the health endpoints tell the truth,
//! met the way an operator meets it: the real `herald` binary on a small real file system
//! ([`herald_sim::disk::SmallDisk`], a tmpfs; CI runs as root) filled by another writer.
//!
//! - SIGTERM while the journal cannot be written (fan-out under way to slow hosts): the server
//!   exits within the documented stop limit, and after space returns and a restart every
//!   member has every post exactly once;
//! - while the spool is unwritable, `/readyz` answers 503 with the reason, `/healthz` stays
//!   200 and `herald_ready` is 0;
//! - a start on a full disk comes up with posts refused (`452 4.3.1` over SMTP, `503` with a
//!   problem body over the HTTP API), `/readyz` 503 and
//!   `/healthz` 200 (`herald probe` says the same, by its exit status), and takes posts again
//!   by itself once space returns: each member gets the next post once.
//!
//! Both use the server's default data-disk reserve (`[server] disk_reserve_mib`, 16 MiB), so
//! the disk is 96 MiB (a tmpfs only uses memory for what is written). Each test prints its
//! figures (`cargo test --test it full_disk:: -- --nocapture`).

use crate::support;

use herald_sim::disk::SmallDisk;
use herald_sim::{Profile, World};
use serde_json::json;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use support::binary::BinaryServer;
use support::*;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const DISK: u64 = 96 << 20;
/// What docs/install.md promises for a stop, whatever the disk (`herald_server::STOP_LIMIT`).
const STOP_LIMIT: Duration = Duration::from_secs(20);

/// Copies received per (message-id, recipient).
fn copies(world: &World) -> HashMap<(String, String), u64> {
    let mut per = HashMap::new();
    for c in world.recorder().snapshot().copies {
        if let Some(mid) = c.message_id {
            *per.entry((mid.to_string(), c.recipient.to_string()))
                .or_default() += 1;
        }
    }
    per
}

/// (members still missing a copy of one of `mids`, duplicate copies of them).
fn tally(world: &World, mids: &[String], members: &[String]) -> (usize, u64) {
    let per = copies(world);
    let mut missing = 0;
    let mut dups = 0;
    for mid in mids {
        for m in members {
            match per.get(&(mid.clone(), m.clone())) {
                None => missing += 1,
                Some(n) => dups += n - 1,
            }
        }
    }
    (missing, dups)
}

/// One post over SMTP; the first reply that is not positive, or the reply to the body.
async fn post_once(addr: std::net::SocketAddr, list: &str, message: &str) -> String {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (r, mut w) = stream.into_split();
    let mut r = BufReader::new(r);
    async fn reply(r: &mut BufReader<tokio::net::tcp::OwnedReadHalf>) -> String {
        loop {
            let mut line = String::new();
            let n = tokio::time::timeout(Duration::from_secs(10), r.read_line(&mut line))
                .await
                .expect("a reply within 10 s")
                .expect("read");
            assert!(n > 0, "connection closed");
            if line.as_bytes().get(3) != Some(&b'-') {
                return line.trim_end().to_string();
            }
        }
    }
    reply(&mut r).await;
    for cmd in [
        "EHLO client.test".to_string(),
        "MAIL FROM:<a@outside.test>".to_string(),
        format!("RCPT TO:<{list}>"),
        "DATA".to_string(),
    ] {
        w.write_all(format!("{cmd}\r\n").as_bytes())
            .await
            .expect("write");
        let line = reply(&mut r).await;
        if !(line.starts_with('2') || line.starts_with("354")) {
            return line;
        }
    }
    w.write_all(message.as_bytes()).await.expect("write");
    w.write_all(b"\r\n.\r\n").await.expect("write");
    let last = reply(&mut r).await;
    let _ = w.write_all(b"QUIT\r\n").await;
    last
}

fn message(n: usize) -> String {
    format!(
        "From: a@outside.test\r\nSubject: post {n}\r\nMessage-ID: <disk-{n}@outside.test>\r\n\r\nHello {n}.\r\n"
    )
}

/// `GET path`: status and body text.
async fn get(api: &str, path: &str) -> (u16, String) {
    let resp = reqwest::get(format!("{api}{path}")).await.expect("GET");
    let status = resp.status().as_u16();
    (status, resp.text().await.unwrap_or_default())
}

/// Waits (10 s at most) until `/readyz` answers `status`; returns the body and the ms it took.
async fn wait_ready(api: &str, status: u16) -> (String, u128) {
    let started = Instant::now();
    loop {
        let (got, body) = get(api, "/readyz").await;
        if got == status {
            return (body, started.elapsed().as_millis());
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "/readyz still {got}, want {status}: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Fills the disk (twice: a repair or a log rotation can free a page now and then).
fn fill(disk: &SmallDisk, tag: &str) {
    disk.fill(&format!("runaway-{tag}.log")).expect("fill");
    disk.fill(&format!("runaway-{tag}-2.log"))
        .expect("fill again");
}

fn free_runaways(disk: &SmallDisk) {
    for e in std::fs::read_dir(disk.path()).expect("read disk").flatten() {
        if e.file_name().to_string_lossy().starts_with("runaway-") {
            std::fs::remove_file(e.path()).expect("remove a runaway file");
        }
    }
}

/// A slow world of `domains` domains, a `herald serve` on `disk`, and a list of `members`.
async fn setup(
    disk: &SmallDisk,
    domains: usize,
    members: usize,
    delay_ms: u64,
) -> (World, BinaryServer, Vec<String>) {
    let slow = Profile::Slow {
        delay: Duration::from_millis(delay_ms),
    };
    let world = World::start(world_config(&vec![slow; domains], false))
        .await
        .expect("world");
    let scheduler = "[scheduler]\nmax_connections_per_destination = 4\nmax_copies_per_batch = 16\n\
         retry_initial_secs = 1\nretry_max_secs = 2\ndestination_backoff_secs = 1\ntick_ms = 50\n";
    let mut server =
        BinaryServer::configure(disk.path(), &disk.path().join("data"), &world, scheduler);
    server.start().await;
    let list = "disk@lists.test";
    create_list(&server.api, list, json!({"posting_policy": "anyone"})).await;
    let (status, report) = http_bytes(
        &format!("{}/api/v1/lists/{list}/import", server.api),
        members_csv(members, domains).into_bytes(),
    )
    .await;
    assert_eq!(status, 200, "{report}");
    let members = (0..members)
        .map(|i| format!("m{i}@d{}.test", i % domains))
        .collect();
    (world, server, members)
}

/// Waits until every member has every post in `mids` (120 s at most); returns the duplicates.
async fn wait_delivered(world: &World, mids: &[String], members: &[String]) -> u64 {
    let started = Instant::now();
    loop {
        let (missing, dups) = tally(world, mids, members);
        if missing == 0 {
            return dups;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "{missing} copies never arrived"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_on_a_full_disk_stops_in_bounded_time_and_sends_nothing_twice() {
    const MEMBERS: usize = 400;
    let Some(disk) = SmallDisk::mount(DISK) else {
        return;
    };
    let (world, mut server, members) = setup(&disk, 4, MEMBERS, 40).await;
    let list = "disk@lists.test";
    let mids: Vec<String> = (0..3).map(|n| format!("<disk-{n}@outside.test>")).collect();
    for n in 0..3 {
        let reply = post_once(server.smtp, list, &message(n)).await;
        assert!(reply.starts_with("250"), "{reply}");
    }
    // Fan-out is under way when the disk fills.
    let started = Instant::now();
    while world.recorder().accepted() < 40 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "fan-out never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    fill(&disk, "a");
    let (reason, noticed_ms) = wait_ready(&server.api, 503).await;
    assert!(
        reason.contains("spool"),
        "the reason names the spool: {reason}"
    );
    assert_eq!(
        get(&server.api, "/healthz").await.0,
        200,
        "liveness stays 200"
    );
    assert_eq!(metric(&server.api, "herald_ready").await, 0);
    let before_stop = world.recorder().accepted();

    let stopping = Instant::now();
    let stopped = tokio::time::timeout(STOP_LIMIT + Duration::from_secs(10), server.stop()).await;
    let took = stopping.elapsed();
    assert!(
        stopped.is_ok(),
        "SIGTERM on a full disk did not stop the server in {took:?}"
    );
    assert!(
        took <= STOP_LIMIT,
        "the stop took {took:?}, over the stated {STOP_LIMIT:?}"
    );

    free_runaways(&disk);
    server.start().await;
    let dups = wait_delivered(&world, &mids, &members).await;
    assert_eq!(dups, 0, "copies sent twice after a stop on a full disk");
    println!(
        "full disk: /readyz 503 {noticed_ms} ms after the disk filled ({reason:?}); SIGTERM with \
         {before_stop} of {} copies out: stopped in {took:?}; after space returned and a \
         restart: 0 missing, {dups} duplicates",
        3 * MEMBERS
    );
    server.stop().await;
    world.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_on_a_full_disk_comes_up_paused_and_resumes_when_space_returns() {
    let Some(disk) = SmallDisk::mount(DISK) else {
        return;
    };
    let (world, mut server, members) = setup(&disk, 2, 4, 0).await;
    let list = "disk@lists.test";
    server.stop().await;
    fill(&disk, "b");

    // Comes up: alive, not ready, posts refused with 452 4.3.1.
    let starting = Instant::now();
    server.start().await;
    let up_ms = starting.elapsed().as_millis();
    assert_eq!(get(&server.api, "/healthz").await.0, 200);
    let (reason, _) = wait_ready(&server.api, 503).await;
    assert!(
        reason.contains("spool"),
        "the reason names the spool: {reason}"
    );
    assert_eq!(metric(&server.api, "herald_ready").await, 0);
    // What a service manager or a container health check without curl runs.
    let (alive, said) = support::binary::herald_with_config(&server.config, &["probe"]);
    assert!(alive, "herald probe (liveness) says yes: {said}");
    let (ready, said) = support::binary::herald_with_config(&server.config, &["probe", "--ready"]);
    assert!(
        !ready && said.contains("spool"),
        "herald probe --ready fails with the reason: {said}"
    );
    let refused = post_once(server.smtp, list, &message(10)).await;
    assert!(
        refused.starts_with("452 4.3.1"),
        "a post on a full disk gets 452 4.3.1: {refused}"
    );
    // A post through the HTTP API meets the same disk: 503 with a problem body, so the
    // client keeps it and retries, as an SMTP client does on 452 (not a 400 that blames the
    // message).
    let (status, problem) = http_bytes(
        &format!("{}/api/v1/lists/{list}/posts", server.api),
        message(12).into_bytes(),
    )
    .await;
    assert_eq!(status, 503, "an API post on a full disk: {problem}");
    assert_eq!(problem["status"], 503, "a problem body: {problem}");
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("disk is full")),
        "the problem says why: {problem}"
    );

    // Space returns: ready again by itself, posts taken and delivered once.
    free_runaways(&disk);
    let (_, resumed_ms) = wait_ready(&server.api, 200).await;
    let (ready, said) = support::binary::herald_with_config(&server.config, &["probe", "--ready"]);
    assert!(ready && said.contains("ready"), "{said}");
    let reply = post_once(server.smtp, list, &message(11)).await;
    assert!(reply.starts_with("250"), "posts are taken again: {reply}");
    let mids = vec!["<disk-11@outside.test>".to_string()];
    let dups = wait_delivered(&world, &mids, &members).await;
    assert_eq!(dups, 0);
    assert!(
        !copies(&world)
            .keys()
            .any(|(mid, _)| mid == "<disk-10@outside.test>" || mid == "<disk-12@outside.test>"),
        "the refused posts were not sent"
    );
    println!(
        "start on a full disk: answering in {up_ms} ms, /readyz 503 ({reason:?}), SMTP \
         {refused:?}; ready again {resumed_ms} ms after space returned; the next post \
         delivered once to each of {} members",
        members.len()
    );
    server.stop().await;
    world.shutdown().await;
}
