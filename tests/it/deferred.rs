//! Dead destinations never hold back live ones, and senders see backpressure, end to end through
//! the real `herald` binary over the simulated Internet.
//!
//! 1. With the in-memory queue cut to 200 copies, posts whose dead-host copies (refused and
//!    hung hosts) reach more than ten times that still reach every live member within seconds
//!    of their `250`: deferred copies and copies for down hosts wait in the deferred queue on
//!    disk, not in the window (`scheduler/actor/deferred.rs`). Before, the window filled with
//!    dead copies after two posts and nothing was delivered to anyone after that.
//! 2. With the same window, a destination that answers but slowly, with a backlog ten times
//!    the window, never holds back live members either: past its share of the in-memory queue
//!    its copies wait on disk for room (`scheduler/actor/overflow.rs`) and come back as it
//!    takes them; and after `kill -9` the copies that waited for room are delivered once.
//! 3. With `[intake] max_unfinished_copies` low, a post whose live copies go out slowly makes
//!    the next RCPT get `452 4.3.1` (and `herald_intake_backpressure` 1), and once they are
//!    delivered intake answers `250` again — while the parked dead copies, more than the bound,
//!    are not counted.

use crate::support;

use herald_sim::{Profile, World};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use support::binary::BinaryServer;
use support::*;

const LIST: &str = "busy@lists.test";

/// Short slow-lane timeouts, so probes of hung hosts end quickly.
const SLOW_LANE: &str = "slow_connect_timeout_secs = 2
slow_banner_timeout_secs = 2
slow_command_timeout_secs = 3
slow_data_timeout_secs = 3
";

fn message(tag: &str) -> Vec<u8> {
    format!(
        "From: Poster <poster@outside.test>\r\nTo: {LIST}\r\nSubject: {tag}\r\n\
         Message-ID: <{tag}@outside.test>\r\n\r\nHello, members.\r\n"
    )
    .into_bytes()
}

async fn start(world: &World, dir: &tempfile::TempDir, extra: &str) -> BinaryServer {
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).expect("data dir");
    let mut server = BinaryServer::configure(dir.path(), &data, world, extra);
    server.start().await;
    server
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_hosts_with_ten_times_the_window_never_hold_back_live_members() {
    // d0–d3 answer; d4–d6 refuse connections; d7–d9 accept and never greet.
    let mut profiles = vec![Profile::Normal; 4];
    profiles.extend([Profile::Refused, Profile::Refused, Profile::Refused]);
    profiles.extend([Profile::Hung, Profile::Hung, Profile::Hung]);
    let world = World::start(world_config(&profiles, false))
        .await
        .expect("world");
    let t0 = Instant::now();
    let dir = tempfile::tempdir().expect("tempdir");
    let extra = format!(
        "[scheduler]\nmax_queued_copies = 200\nmax_queued_copies_per_post = 200\n\
         queued_copies_per_domain = 0\n{SLOW_LANE}"
    );
    let mut server = start(&world, &dir, &extra).await;
    const MEMBERS: usize = 140; // 14 per domain: 56 live, 84 dead
    const POSTS: usize = 24; // 24 x 84 = 2,016 dead copies: ten times the window of 200
    setup_personalized_list(&server.api, LIST, members_csv(MEMBERS, 10)).await;
    let live: Vec<String> = (0..MEMBERS)
        .filter(|i| i % 10 < 4)
        .map(|i| format!("m{i}@d{}.test", i % 10))
        .collect();

    let sent_ms = post_many(&server, "deferred", POSTS, t0).await;

    let want = (live.len() * POSTS) as u64;
    assert!(
        world
            .recorder()
            .wait_for(want, Duration::from_secs(40))
            .await,
        "live members did not get every post: {} of {want} copies",
        world.recorder().snapshot().accepted
    );
    let snap = world.recorder().snapshot();
    assert_eq!(snap.duplicates, 0);
    for rcpt in &live {
        assert_eq!(snap.copies_for(rcpt).len(), POSTS, "{rcpt}");
    }
    // Each post reached all its live members within seconds of its 250 (the world's clock
    // starts a moment before `t0`: this errs on the long side).
    let mut worst = 0u64;
    for c in &snap.copies {
        let sent = c
            .message_id
            .as_deref()
            .and_then(|m| sent_ms.get(m))
            .copied();
        let sent = sent.expect("a copy of a post we sent");
        worst = worst.max(c.at_ms.saturating_sub(sent));
    }
    eprintln!("slowest live copy: {worst} ms after its post's 250");
    assert!(worst < 10_000, "a live copy took {worst} ms");

    // The dead copies, ten times the window, wait in the deferred queue on disk.
    let api = server.api.clone();
    eventually(Duration::from_secs(20), "every dead copy parked", || {
        let api = api.clone();
        async move { metric(&api, "herald_deferred_copies").await >= 2016 }
    })
    .await;
    assert!(metric(&server.api, "herald_deferred_queue_bytes").await > 0);
    assert!(metric(&server.api, "herald_queue_recipients").await >= 2016);
    assert_eq!(metric(&server.api, "herald_intake_backpressure").await, 0);
    server.stop().await;
    world.shutdown().await;
}

/// Tries the list at RCPT on `smtp` (then RSET): the reply's first line.
async fn rcpt_reply(smtp: &mut Smtp) -> String {
    let r = smtp.cmd("MAIL FROM:<poster@outside.test>").await;
    assert!(r.starts_with("250"), "{r}");
    let r = smtp.cmd(&format!("RCPT TO:<{LIST}>")).await;
    smtp.cmd("RSET").await;
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn intake_answers_452_while_live_work_is_over_its_bound_and_250_once_it_drained() {
    // d0 answers slowly (every reply 150 ms late); d1 refuses; d2 never greets.
    let slow = Profile::Slow {
        delay: Duration::from_millis(150),
    };
    let world = World::start(world_config(
        &[slow, Profile::Refused, Profile::Hung],
        false,
    ))
    .await
    .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let extra = format!("[intake]\nmax_unfinished_copies = 100\n[scheduler]\n{SLOW_LANE}");
    let mut server = start(&world, &dir, &extra).await;
    // 200 members per domain: 200 live copies per post, 400 dead ones (four times the bound).
    setup_personalized_list(&server.api, LIST, members_csv(600, 3)).await;
    let (mut smtp, _) = Smtp::connect(server.smtp).await;
    smtp.cmd("EHLO poster.outside.test").await;
    let r = smtp
        .send_mail("poster@outside.test", &[LIST], &message("first"))
        .await;
    assert!(r.starts_with("250"), "{r}");

    // 200 live copies going out slowly: more than the bound.
    let mut refused = String::new();
    let started = Instant::now();
    while !refused.starts_with("452") {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "never refused: {refused}"
        );
        refused = rcpt_reply(&mut smtp).await;
    }
    assert!(refused.starts_with("452 4.3.1"), "{refused}");
    assert!(refused.contains("try again later"), "{refused}");
    assert_eq!(metric(&server.api, "herald_intake_backpressure").await, 1);
    assert!(metric(&server.api, "herald_unfinished_copies").await > 90);

    // Once the live copies are out, list posts are taken again, though the parked dead copies
    // (400) are four times the bound.
    let mut again = String::new();
    let started = Instant::now();
    while !again.starts_with("250") {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "still refused: {again}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        again = rcpt_reply(&mut smtp).await;
    }
    // Taken again once at most 90 % of the bound is left: 110 of the 200 live copies are out.
    let out = world.recorder().snapshot().accepted;
    assert!(out >= 110, "the live copies drained first: {out}");
    let api = server.api.clone();
    eventually(Duration::from_secs(20), "the dead copies parked", || {
        let api = api.clone();
        async move { metric(&api, "herald_deferred_copies").await >= 400 }
    })
    .await;
    assert!(rcpt_reply(&mut smtp).await.starts_with("250"));
    assert_eq!(metric(&server.api, "herald_intake_backpressure").await, 0);
    let r = smtp
        .send_mail("poster@outside.test", &[LIST], &message("second"))
        .await;
    assert!(r.starts_with("250"), "{r}");
    smtp.cmd("QUIT").await;
    // Both posts reach every live member, once.
    assert!(
        world
            .recorder()
            .wait_for(400, Duration::from_secs(30))
            .await,
        "{} copies",
        world.recorder().snapshot().accepted
    );
    let snap = world.recorder().snapshot();
    assert_eq!((snap.accepted, snap.duplicates), (400, 0));
    server.stop().await;
    world.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_kill_9_every_parked_copy_is_delivered_once_when_its_host_answers() {
    // d1's address refuses connections until a receiver starts there after the crash.
    let world = World::start(world_config(&[Profile::Normal, Profile::Refused], false))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = two_posts_with_d1_down(&world, &dir, "crash").await;
    // Crash only once the delivered copies are journaled (a copy the receiver took whose reply
    // was still on its way is the bounded duplicate a crash may cost, not what this tests).
    let api = server.api.clone();
    eventually(Duration::from_secs(20), "d0's copies journaled", || {
        let api = api.clone();
        async move {
            metric(&api, "herald_copies_total{outcome=\"delivered\"}").await == 100
                && metric(&api, "herald_unjournaled_copies").await == 0
        }
    })
    .await;
    eventually(Duration::from_secs(20), "d1's copies parked", || {
        let api = api.clone();
        async move { metric(&api, "herald_deferred_copies").await == 100 }
    })
    .await;
    let deferred = dir.path().join("data/deferred");
    let on_disk: u64 = std::fs::read_dir(&deferred)
        .expect("deferred dir")
        .map(|e| e.expect("entry").metadata().expect("meta").len())
        .sum();
    assert!(on_disk > 0, "parked copies are on disk");
    server.kill9();

    // The host answers now, on the same address; the server starts again.
    let mut later = world_config(&[Profile::Normal, Profile::Normal], false);
    later.domains.remove(0);
    later.domains[0].mx_addr = world.config().domains[1].mx_addr;
    later.smtp_port = world.smtp_port();
    let back = World::start(later).await.expect("second world");
    server.start().await;
    assert!(
        back.recorder().wait_for(100, Duration::from_secs(30)).await,
        "parked copies not delivered after the restart: {}",
        back.recorder().snapshot().accepted
    );
    let api = server.api.clone();
    eventually(Duration::from_secs(10), "the deferred queue empty", || {
        let api = api.clone();
        async move { metric(&api, "herald_deferred_copies").await == 0 }
    })
    .await;
    let snap = back.recorder().snapshot();
    assert_eq!((snap.accepted, snap.duplicates), (100, 0));
    for i in (1..100).step_by(2) {
        assert_eq!(snap.copies_for(&format!("m{i}@d1.test")).len(), 2, "m{i}");
    }
    // Nothing delivered before the crash went again.
    let first = world.recorder().snapshot();
    assert_eq!((first.accepted, first.duplicates), (100, 0));
    server.stop().await;
    back.shutdown().await;
    world.shutdown().await;
}

/// Posts whose every copy waits for a down host keep their bytes on disk, not in memory; when
/// the host answers (the server never restarted), each waiting member gets the same copy as the
/// members delivered from memory at once: same Message-ID, same size (the addresses `m{2k}@d0`
/// and `m{2k+1}@d1` are as long, so a personalized copy is too), each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn posts_waiting_on_a_down_host_go_to_disk_and_come_back_whole_when_it_answers() {
    let world = World::start(world_config(&[Profile::Normal, Profile::Refused], false))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = two_posts_with_d1_down(&world, &dir, "spill").await;
    let api = server.api.clone();
    eventually(Duration::from_secs(20), "both posts' bytes on disk", || {
        let api = api.clone();
        async move {
            metric(&api, "herald_deferred_copies").await == 100
                && metric(&api, "herald_deferred_posts").await == 2
                && metric(&api, "herald_deferred_posts_in_memory").await == 0
        }
    })
    .await;
    let files = std::fs::read_dir(dir.path().join("data/deferred/posts"))
        .expect("posts dir")
        .count();
    assert_eq!(files, 2, "one file a post");

    // The host answers now, on the same address; the server keeps running.
    let mut later = world_config(&[Profile::Normal, Profile::Normal], false);
    later.domains.remove(0);
    later.domains[0].mx_addr = world.config().domains[1].mx_addr;
    later.smtp_port = world.smtp_port();
    let back = World::start(later).await.expect("second world");
    assert!(
        back.recorder().wait_for(100, Duration::from_secs(30)).await,
        "waiting copies not delivered: {}",
        back.recorder().snapshot().accepted
    );
    eventually(Duration::from_secs(10), "the post files gone", || {
        let api = api.clone();
        let posts = dir.path().join("data/deferred/posts");
        async move {
            metric(&api, "herald_deferred_posts").await == 0
                && std::fs::read_dir(&posts).map_or(0, |d| d.count()) == 0
        }
    })
    .await;
    let (first, later) = (world.recorder().snapshot(), back.recorder().snapshot());
    assert_eq!((later.accepted, later.duplicates), (100, 0));
    for i in (1..100).step_by(2) {
        for tag in ["spill-1", "spill-2"] {
            let id = format!("<{tag}@outside.test>");
            let of = |snap: &herald_sim::Snapshot, rcpt: &str| {
                let copies: Vec<usize> = snap
                    .copies_for(rcpt)
                    .iter()
                    .filter(|c| c.message_id.as_deref() == Some(id.as_str()))
                    .map(|c| c.size)
                    .collect();
                assert_eq!(copies.len(), 1, "{rcpt} {tag}: {copies:?}");
                copies[0]
            };
            assert_eq!(
                of(&later, &format!("m{i}@d1.test")),
                of(&first, &format!("m{}@d0.test", i - 1)),
                "m{i} {tag}: the copy from disk is the copy from memory"
            );
        }
    }
    server.stop().await;
    back.shutdown().await;
    world.shutdown().await;
}

/// 20 members on four fast domains (d0–d3) and `slow` on d4, one CSV.
fn fast_and_slow_members(slow: usize) -> (String, Vec<String>, Vec<String>) {
    let fast: Vec<String> = (0..20).map(|i| format!("f{i}@d{}.test", i % 4)).collect();
    let slow: Vec<String> = (0..slow).map(|i| format!("s{i}@d4.test")).collect();
    let mut csv = String::from("email,name,city\n");
    for (i, a) in fast.iter().chain(&slow).enumerate() {
        csv.push_str(&format!("{a},Member {i},City{}\n", i % 7));
    }
    (csv, fast, slow)
}

/// Posts `n` messages tagged `{prefix}-{p}` to the list over one session: each one's Message-ID
/// with the time its `250` came (ms after `t0`).
async fn post_many(
    server: &BinaryServer,
    prefix: &str,
    n: usize,
    t0: Instant,
) -> HashMap<String, u64> {
    let (mut smtp, _) = Smtp::connect(server.smtp).await;
    smtp.cmd("EHLO poster.outside.test").await;
    let mut sent_ms = HashMap::new();
    for p in 0..n {
        let tag = format!("{prefix}-{p}");
        let r = smtp
            .send_mail("poster@outside.test", &[LIST], &message(&tag))
            .await;
        assert!(r.starts_with("250"), "post {p}: {r}");
        sent_ms.insert(
            format!("<{tag}@outside.test>"),
            t0.elapsed().as_millis() as u64,
        );
    }
    smtp.cmd("QUIT").await;
    sent_ms
}

/// The longest a copy to a recipient `keep` takes took after its post's `250` (the world's clock
/// starts a moment before `t0`: this errs on the long side).
fn slowest_copy(
    snap: &herald_sim::Snapshot,
    sent_ms: &HashMap<String, u64>,
    keep: impl Fn(&str) -> bool,
) -> u64 {
    let mut worst = 0u64;
    for c in snap.copies.iter().filter(|c| keep(&c.recipient)) {
        let sent = c.message_id.as_deref().and_then(|m| sent_ms.get(m));
        let sent = *sent.expect("a copy of a post we sent");
        worst = worst.max(c.at_ms.saturating_sub(sent));
    }
    worst
}

/// Waits (until `deadline`) for the world to take `want` copies: the most ready copies one
/// destination held in memory meanwhile, and the most copies waiting for room.
async fn peaks_until(world: &World, api: &str, want: u64, deadline: Instant) -> (u64, u64) {
    let (mut ready, mut for_room) = (0, 0);
    while world.recorder().snapshot().accepted < want {
        assert!(
            Instant::now() < deadline,
            "not every copy delivered: {} of {want}",
            world.recorder().snapshot().accepted
        );
        ready = ready.max(metric(api, "herald_destination_ready_copies_max").await);
        for_room = for_room.max(metric(api, "herald_deferred_copies_for_room").await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (ready, for_room)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_destination_with_ten_times_the_window_never_holds_back_live_members() {
    // d0–d3 answer at once; d4 answers every command 25 ms late (with 10 connections, a few
    // dozen copies a second: far slower than the posts bring them).
    let mut profiles = vec![Profile::Normal; 4];
    profiles.push(Profile::Slow {
        delay: Duration::from_millis(25),
    });
    let world = World::start(world_config(&profiles, false))
        .await
        .expect("world");
    let t0 = Instant::now();
    let dir = tempfile::tempdir().expect("tempdir");
    // A window of 200: each destination's share is 50 (a quarter), and retries may pass it by
    // one batch (16).
    let extra = "[scheduler]\nmax_queued_copies = 200\nmax_queued_copies_per_post = 200\n\
                 queued_copies_per_domain = 0\nmax_connections_per_destination = 10\n";
    let mut server = start(&world, &dir, extra).await;
    const POSTS: usize = 20; // 20 x 100 = 2,000 slow copies: ten times the window
    let (csv, fast, slow) = fast_and_slow_members(100);
    setup_personalized_list(&server.api, LIST, csv).await;

    let sent_ms = post_many(&server, "slowdest", POSTS, t0).await;

    // Every live member on the fast domains gets every post within seconds of its 250, while
    // the slow destination's backlog waits on disk.
    let api = server.api.clone();
    let live =
        |snap: &herald_sim::Snapshot| fast.iter().map(|r| snap.copies_for(r).len()).sum::<usize>();
    let (mut peak, mut for_room) = (0, 0);
    while live(&world.recorder().snapshot()) < fast.len() * POSTS {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the fast members did not get every post: {} of {}",
            live(&world.recorder().snapshot()),
            fast.len() * POSTS
        );
        peak = peak.max(metric(&api, "herald_destination_ready_copies_max").await);
        for_room = for_room.max(metric(&api, "herald_deferred_copies_for_room").await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let worst = slowest_copy(&world.recorder().snapshot(), &sent_ms, |r| {
        r.starts_with('f')
    });
    eprintln!("slowest live copy: {worst} ms after its post's 250");
    assert!(worst < 10_000, "a live copy took {worst} ms");

    // The slow destination drains; its in-memory share never passed its bound.
    let want = ((fast.len() + slow.len()) * POSTS) as u64;
    let (ready, waited) =
        peaks_until(&world, &server.api, want, t0 + Duration::from_secs(150)).await;
    (peak, for_room) = (peak.max(ready), for_room.max(waited));
    eprintln!("most ready copies of one destination: {peak}; most waiting for room: {for_room}");
    // The backlog beyond the share (less what went meanwhile) waited on disk.
    assert!(
        for_room >= 500,
        "the slow backlog waits on disk: {for_room}"
    );
    assert!(peak <= 50 + 16, "{peak} ready copies in one destination");
    let snap = world.recorder().snapshot();
    assert_eq!((snap.accepted, snap.duplicates), (want, 0));
    for rcpt in fast.iter().chain(&slow) {
        assert_eq!(snap.copies_for(rcpt).len(), POSTS, "{rcpt}");
    }
    eventually(Duration::from_secs(10), "the deferred queue empty", || {
        let api = api.clone();
        async move {
            metric(&api, "herald_deferred_copies").await == 0
                && metric(&api, "herald_deferred_copies_for_room").await == 0
        }
    })
    .await;
    server.stop().await;
    world.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_kill_9_copies_waiting_for_room_are_delivered_once() {
    // d4 takes 20 s per reply: nothing reaches it before the crash (no copy it took is lost
    // with its journal record), and its backlog waits for room.
    let mut profiles = vec![Profile::Normal; 4];
    profiles.push(Profile::Slow {
        delay: Duration::from_secs(20),
    });
    let world = World::start(world_config(&profiles, false))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let extra = "[scheduler]\nmax_queued_copies = 200\nmax_queued_copies_per_post = 200\n\
                 queued_copies_per_domain = 0\n";
    let mut server = start(&world, &dir, extra).await;
    let (csv, fast, slow) = fast_and_slow_members(100);
    setup_personalized_list(&server.api, LIST, csv).await;
    let (mut smtp, _) = Smtp::connect(server.smtp).await;
    smtp.cmd("EHLO poster.outside.test").await;
    let tags = ["room-1", "room-2", "room-3"];
    for tag in tags {
        let r = smtp
            .send_mail("poster@outside.test", &[LIST], &message(tag))
            .await;
        assert!(r.starts_with("250"), "{r}");
    }
    let live = (fast.len() * tags.len()) as u64;
    let api = server.api.clone();
    eventually(
        Duration::from_secs(20),
        "live copies journaled, d4's waiting for room",
        || {
            let api = api.clone();
            async move {
                metric(&api, "herald_copies_total{outcome=\"delivered\"}").await == live
                    && metric(&api, "herald_unjournaled_copies").await == 0
                    && metric(&api, "herald_deferred_copies_for_room").await >= 100
            }
        },
    )
    .await;
    server.kill9();
    let first = world.recorder().snapshot();
    assert_eq!((first.accepted, first.duplicates), (live, 0));

    // Every host answers at once now, on the same addresses; the server starts again.
    let (dns, port) = (world.dns_addr(), world.smtp_port());
    world.shutdown().await;
    let mut later = world_config(&vec![Profile::Normal; 5], false);
    (later.dns_addr, later.smtp_port) = (dns, port);
    let back = World::start(later).await.expect("second world");
    server.start().await;
    let want = (slow.len() * tags.len()) as u64;
    assert!(
        back.recorder()
            .wait_for(want, Duration::from_secs(60))
            .await,
        "copies that waited for room not delivered after the restart: {} of {want}",
        back.recorder().snapshot().accepted
    );
    let snap = back.recorder().snapshot();
    assert_eq!((snap.accepted, snap.duplicates), (want, 0));
    for rcpt in &slow {
        assert_eq!(snap.copies_for(rcpt).len(), tags.len(), "{rcpt}");
    }
    // Nothing delivered before the crash went again.
    for rcpt in &fast {
        assert!(snap.copies_for(rcpt).is_empty(), "{rcpt} got a copy twice");
    }
    server.stop().await;
    back.shutdown().await;
}

/// A server whose hosts are marked down after one failure and retried only after 10 minutes,
/// with `LIST` of 100 members over d0 (answering) and d1 (refusing), and two posts tagged
/// `<prefix>-1` and `<prefix>-2` sent; returns once d0's 100 copies arrived (d1's wait).
async fn two_posts_with_d1_down(
    world: &World,
    dir: &tempfile::TempDir,
    prefix: &str,
) -> BinaryServer {
    let extra = "[scheduler]\nretry_initial_secs = 600\nretry_max_secs = 600\n\
                 destination_backoff_secs = 1\ndestination_backoff_max_secs = 2\n\
                 host_down_after_failures = 1\n";
    let server = start(world, dir, extra).await;
    setup_personalized_list(&server.api, LIST, members_csv(100, 2)).await;
    let (mut smtp, _) = Smtp::connect(server.smtp).await;
    smtp.cmd("EHLO poster.outside.test").await;
    for n in 1..=2 {
        let r = smtp
            .send_mail(
                "poster@outside.test",
                &[LIST],
                &message(&format!("{prefix}-{n}")),
            )
            .await;
        assert!(r.starts_with("250"), "{r}");
    }
    assert!(
        world
            .recorder()
            .wait_for(100, Duration::from_secs(20))
            .await
    );
    server
}
