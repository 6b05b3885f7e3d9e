//! The hand-off backlog against a real spool and a real SQLite directory:
//! the answer waits for the spool only, never for a stalled stage; a full backlog makes the
//! sender wait; a caller that goes away mid-enqueue never leaves a durable post without its
//! hand-off; a stopped hand-off leaves what it had not handed over in the spool, where the
//! next start finds it — and nothing is handed over twice.

use bytes::Bytes;
use herald_directory::Directory;
use herald_enqueue::{
    ArrivalCheck, Backlog, Enqueuer, Handoff, HandoffReceivers, IntakeSection, LmtpClients, Origin,
    Submission,
};
use herald_spool::{PostKind, Spool, SpoolConfig};
use herald_telemetry::{Telemetry, TelemetryConfig};
use herald_types::{Address, List, ListAddressKind, ListSettings, PostId, PostingPolicy};
use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

struct World {
    dir: tempfile::TempDir,
    enqueuer: Arc<Enqueuer>,
    handed: HandoffReceivers,
    list: List,
    stop: CancellationToken,
    handoff: Option<tokio::task::JoinHandle<()>>,
    depth: Arc<herald_enqueue::backlog::BacklogDepth>,
}

fn a(s: &str) -> Address {
    Address::parse(s).expect("address")
}

/// A world whose stage channels hold `stage_capacity` posts and nobody reads them until the
/// test does.
fn world(stage_capacity: usize, intake: IntakeSection) -> World {
    let dir = tempfile::tempdir().expect("tempdir");
    let directory = Directory::open(&dir.path().join("herald.db")).expect("directory");
    let list = directory
        .create_list(
            &a("dev@lists.test"),
            &ListSettings {
                posting_policy: PostingPolicy::Anyone,
                ..ListSettings::default()
            },
        )
        .expect("list");
    let (spool, _) = Spool::open(SpoolConfig::new(dir.path().join("spool"))).expect("spool");
    let telemetry = Telemetry::new(&TelemetryConfig {
        log_path: None,
        log_rotation: None,
        stats: None,
    })
    .expect("telemetry");
    let (handoff, handed) = Handoff::channels(stage_capacity);
    let (backlog, queue) = Backlog::new(&intake);
    let depth = backlog.depth();
    let stop = CancellationToken::new();
    let task = tokio::spawn(herald_enqueue::backlog::run(queue, handoff, stop.clone()));
    let enqueuer = Arc::new(Enqueuer {
        directory,
        spool,
        telemetry,
        max_message_bytes: 1 << 20,
        dedup: None,
        arrival: ArrivalCheck::new(
            None,
            "herald.test",
            Duration::from_secs(1),
            LmtpClients::Unknown,
        ),
        backlog,
        post_rate: Default::default(),
        content_filter: None,
        shared: None,
        cluster_dedup: None,
    });
    World {
        dir,
        enqueuer,
        handed,
        list,
        stop,
        handoff: Some(task),
        depth,
    }
}

fn post(list: &List, n: usize) -> Submission {
    let body = format!(
        "From: a@x.test\r\nSubject: post {n}\r\nMessage-ID: <p{n}@x.test>\r\n\r\nbody {n}\r\n"
    );
    Submission::List {
        list: Box::new(list.clone()),
        role: ListAddressKind::Post,
        origin: Origin::Admin,
        body: Bytes::from(body),
    }
}

/// Every post the fan-out channel gets within `limit` of quiet.
async fn drain_fanout(w: &mut World, limit: Duration) -> Vec<PostId> {
    let mut got = Vec::new();
    while let Ok(Some(p)) = tokio::time::timeout(limit, w.handed.fanout.recv()).await {
        assert_eq!(p.meta.kind, PostKind::ListPost);
        got.push(p.id);
    }
    got
}

/// The live posts of the spool in `dir`, reopened after the world is gone: what the next
/// start would resume.
fn recovered(dir: &std::path::Path) -> BTreeSet<PostId> {
    let (_spool, posts) = Spool::open(SpoolConfig::new(dir.join("spool"))).expect("reopen");
    posts.into_iter().map(|p| p.id).collect()
}

#[tokio::test]
async fn the_answer_waits_for_the_spool_not_for_a_stalled_stage() {
    // Fan-out takes one post and then nothing (a stage far behind): every enqueue still
    // returns, durable, and each post is handed over once, in order, when the stage reads.
    let mut w = world(1, IntakeSection::default());
    let mut ids = Vec::new();
    for n in 0..200 {
        let id = tokio::time::timeout(Duration::from_secs(5), w.enqueuer.enqueue(post(&w.list, n)))
            .await
            .expect("answered without waiting for fan-out")
            .expect("enqueued");
        ids.push(id);
    }
    assert!(w.depth.posts() >= 190, "waiting: {}", w.depth.posts());
    let got = drain_fanout(&mut w, Duration::from_millis(500)).await;
    assert_eq!(got, ids, "each post once, in the order it was spooled");
    assert_eq!(w.depth.posts(), 0);
    assert_eq!(w.depth.bytes(), 0);
    assert_eq!(w.depth.handed(), 200);
}

#[tokio::test]
async fn a_full_backlog_makes_the_sender_wait_and_loses_nothing() {
    let intake = IntakeSection {
        backlog_max_posts: 3,
        ..IntakeSection::default()
    };
    let mut w = world(1, intake);
    // 1 in the stage's channel, 1 in the hand-off task's hands, 3 waiting: the sixth waits.
    let mut tasks = Vec::new();
    for n in 0..10 {
        let (e, p) = (w.enqueuer.clone(), post(&w.list, n));
        tasks.push(tokio::spawn(async move { e.enqueue(p).await }));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let done = tasks.iter().filter(|t| t.is_finished()).count();
    assert_eq!(
        done, 5,
        "the backlog is bounded: the rest wait before spooling"
    );
    assert_eq!(
        w.enqueuer.spool.live_posts().len(),
        5,
        "nothing spooled beyond it"
    );
    let got = drain_fanout(&mut w, Duration::from_millis(500)).await;
    let mut ids = Vec::new();
    for t in tasks {
        ids.push(t.await.expect("join").expect("enqueued"));
    }
    let (got, ids): (HashSet<_>, HashSet<_>) =
        (got.iter().copied().collect(), ids.into_iter().collect());
    assert_eq!(got, ids, "all ten handed over, each once");
}

#[tokio::test]
async fn a_caller_that_goes_away_never_strands_a_durable_post() {
    // Callers dropped at every point of an enqueue (an HTTP client hanging up, a stage
    // stopping): whatever reached the spool is handed over while the process runs, once.
    let mut w = world(8192, IntakeSection::default());
    let mut answered = HashSet::new();
    let (mut n, mut live) = (0usize, HashSet::new());
    // Until a few callers went away after the spool had their post (timing decides where
    // each cut falls; 50 at a time, at most 3,000).
    while live.len() < answered.len() + 5 && n < 3000 {
        for _ in 0..50 {
            let cut = Duration::from_micros((n as u64 * 37) % 3000);
            let e = w.enqueuer.enqueue(post(&w.list, n));
            if let Ok(Ok(id)) = tokio::time::timeout(cut, e).await {
                answered.insert(id);
            }
            n += 1;
        }
        w.enqueuer.spool.flush().await.expect("flush");
        live = w
            .enqueuer
            .spool
            .live_posts()
            .into_iter()
            .map(|(id, _)| id)
            .collect();
    }
    assert!(
        live.len() > answered.len(),
        "no caller went away after the spool had its post ({} live, {} answered)",
        live.len(),
        answered.len()
    );
    let got = drain_fanout(&mut w, Duration::from_millis(500)).await;
    let unique: HashSet<PostId> = got.iter().copied().collect();
    assert_eq!(unique.len(), got.len(), "a post handed over twice");
    assert_eq!(
        unique, live,
        "every durable post handed over, answered or not"
    );
    assert!(answered.is_subset(&unique));
}

#[tokio::test]
async fn a_stop_leaves_the_backlog_in_the_spool_for_the_next_start() {
    let mut w = world(1, IntakeSection::default());
    let mut ids = Vec::new();
    for n in 0..50 {
        ids.push(
            w.enqueuer
                .enqueue(post(&w.list, n))
                .await
                .expect("enqueued"),
        );
    }
    // Fan-out takes five, then the server stops.
    let mut first = Vec::new();
    for _ in 0..5 {
        let p = tokio::time::timeout(Duration::from_secs(5), w.handed.fanout.recv())
            .await
            .expect("handed over")
            .expect("open");
        first.push(p.id);
    }
    w.stop.cancel();
    if let Some(task) = w.handoff.take() {
        task.await.expect("hand-off task");
    }
    // Accepted after the hand-off stopped (the lists stage writing during a shutdown): still
    // durable and acknowledged, for the next start.
    let late = w
        .enqueuer
        .enqueue(post(&w.list, 50))
        .await
        .expect("accepted while stopping");
    let after_stop = drain_fanout(&mut w, Duration::from_millis(100)).await;
    let handed: Vec<PostId> = first.iter().chain(&after_stop).copied().collect();
    assert_eq!(
        handed,
        ids[..handed.len()],
        "handed over in order, each once"
    );
    assert!(handed.len() < 50, "the stop did not wait for the backlog");
    let dir = w.dir;
    drop(w.enqueuer);
    let resumed = recovered(dir.path());
    let want: BTreeSet<PostId> = ids.iter().copied().chain([late]).collect();
    assert_eq!(
        resumed, want,
        "every accepted post is live in the spool for the next start"
    );
}
