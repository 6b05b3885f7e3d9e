//! The spool's behaviour through its public API, on real files: durability of accepts and
//! outcomes, commit policy, completion, group commit, segment rolls and compaction.
#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is a test failure

mod common;

use common::{body, cfg, meta, open, segments};
use herald_spool::{FinalState, SpoolError};
use herald_types::{MemberId, PostId};
use std::time::{Duration, Instant};

#[test]
fn spool_handles_can_be_shared_across_tasks() {
    fn assert_send_sync<T: Send + Sync + Clone + 'static>() {}
    assert_send_sync::<herald_spool::Spool>();
}

#[tokio::test]
async fn accepted_posts_come_back_after_reopen_with_their_bodies() {
    let dir = tempfile::tempdir().unwrap();
    let c = cfg(dir.path());
    let (spool, recovered) = open(&c);
    assert!(recovered.is_empty());
    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push(
            spool
                .accept(meta(n), body(n, 500 + n as usize * 1000))
                .await
                .unwrap(),
        );
    }
    let big = spool.accept(meta(9), body(9, 1 << 20)).await.unwrap();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "ids are monotonic: {ids:?}"
    );
    assert_eq!(spool.stats().live_posts, 4);
    drop(spool);

    let (spool, recovered) = open(&c);
    let got: Vec<PostId> = recovered.iter().map(|p| p.id).collect();
    assert_eq!(got, [ids.clone(), vec![big]].concat());
    for (n, p) in recovered.iter().take(3).enumerate() {
        assert_eq!(p.meta, meta(n as u64));
        assert_eq!(p.body, body(n as u64, 500 + n * 1000));
        assert!(p.done.is_empty());
    }
    assert_eq!(recovered[3].body.len(), 1 << 20);
    let next = spool.accept(meta(5), body(5, 100)).await.unwrap();
    assert!(next > big, "ids keep growing after a reopen");
}

#[tokio::test]
async fn flushed_outcomes_come_back_as_the_done_set() {
    let dir = tempfile::tempdir().unwrap();
    let c = cfg(dir.path());
    let (spool, _) = open(&c);
    let a = spool.accept(meta(1), body(1, 300)).await.unwrap();
    let b = spool.accept(meta(2), body(2, 300)).await.unwrap();
    for m in 1..=100 {
        let state = if m % 10 == 0 {
            FinalState::Failed
        } else {
            FinalState::Delivered
        };
        spool.record(a, MemberId(m), state).await.unwrap();
    }
    // A second final state for a member is ignored, so counts cannot drift from the set.
    spool
        .record(a, MemberId(1), FinalState::Failed)
        .await
        .unwrap();
    spool
        .record(b, MemberId(7), FinalState::Delivered)
        .await
        .unwrap();
    spool.flush().await.unwrap();
    let p = spool.progress(a).unwrap();
    assert_eq!((p.delivered, p.failed), (90, 10));
    drop(spool);

    let (_spool, recovered) = open(&c);
    let ra = recovered.iter().find(|p| p.id == a).unwrap();
    assert_eq!(ra.done.len(), 100);
    assert_eq!((ra.delivered, ra.failed), (90, 10));
    assert!(ra.done.contains(MemberId(100)) && !ra.done.contains(MemberId(101)));
    let rb = recovered.iter().find(|p| p.id == b).unwrap();
    assert_eq!(rb.done.iter().collect::<Vec<_>>(), vec![MemberId(7)]);
}

async fn wait_for(mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    false
}

#[tokio::test]
async fn records_wait_for_a_commit_and_flush_forces_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = cfg(dir.path());
    c.commit_interval_ms = 60_000;
    c.commit_max_records = 1_000_000;
    let (spool, _) = open(&c);
    let p = spool.accept(meta(1), body(1, 100)).await.unwrap();
    let after_accept = spool.stats();
    assert_eq!(after_accept.commits, 1, "accept commits at once");
    for m in 1..=10 {
        spool
            .record(p, MemberId(m), FinalState::Delivered)
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(30)).await;
    let s = spool.stats();
    assert_eq!(s.commits, 1, "records alone do not force a commit");
    assert_eq!(
        s.records_written, 1,
        "the 10 outcomes are not committed yet: a crash may lose them"
    );
    spool.flush().await.unwrap();
    let s = spool.stats();
    assert_eq!((s.commits, s.records_written), (2, 11));
    assert_eq!(s.group_last_records, 10);
    spool.flush().await.unwrap();
    assert_eq!(spool.stats().commits, 2, "an empty flush needs no fsync");
}

#[tokio::test]
async fn commits_happen_after_max_records_or_the_interval() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = cfg(dir.path());
    c.commit_interval_ms = 60_000;
    c.commit_max_records = 8;
    let (spool, _) = open(&c);
    let p = spool.accept(meta(1), body(1, 100)).await.unwrap();
    for m in 1..=8 {
        spool
            .record(p, MemberId(m), FinalState::Delivered)
            .await
            .unwrap();
    }
    assert!(
        wait_for(|| spool.stats().commits == 2).await,
        "8 records trigger a commit"
    );
    drop(spool);

    let mut c = cfg(dir.path());
    c.commit_interval_ms = 5;
    let (spool, _) = open(&c);
    let start = spool.stats().commits;
    spool
        .record(p, MemberId(9), FinalState::Failed)
        .await
        .unwrap();
    assert!(
        wait_for(|| spool.stats().commits == start + 1).await,
        "the interval triggers a commit"
    );
}

#[tokio::test]
async fn dropping_the_last_handle_commits_what_is_queued() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = cfg(dir.path());
    c.commit_interval_ms = 60_000;
    let (spool, _) = open(&c);
    let p = spool.accept(meta(1), body(1, 100)).await.unwrap();
    let clone = spool.clone();
    for m in 1..=5 {
        clone
            .record(p, MemberId(m), FinalState::Delivered)
            .await
            .unwrap();
    }
    drop(clone);
    spool.close().await.unwrap();
    let (_spool, recovered) = open(&c);
    assert_eq!(recovered[0].done.len(), 5);
}

#[tokio::test]
async fn completed_posts_are_not_recovered() {
    let dir = tempfile::tempdir().unwrap();
    let c = cfg(dir.path());
    let (spool, _) = open(&c);
    let a = spool.accept(meta(1), body(1, 100)).await.unwrap();
    let b = spool.accept(meta(2), body(2, 100)).await.unwrap();
    spool
        .record(a, MemberId(1), FinalState::Delivered)
        .await
        .unwrap();
    spool.complete(a).await.unwrap();
    assert!(matches!(spool.complete(a).await, Err(SpoolError::UnknownPost(id)) if id == a));
    assert!(matches!(
        spool.complete(PostId(12345)).await,
        Err(SpoolError::UnknownPost(_))
    ));
    // An outcome for a finished post is dropped and counted, not an error for the caller.
    spool
        .record(a, MemberId(2), FinalState::Delivered)
        .await
        .unwrap();
    spool.flush().await.unwrap();
    assert_eq!(spool.stats().ignored_outcomes, 1);
    assert_eq!(
        spool
            .live_posts()
            .iter()
            .map(|(id, _)| *id)
            .collect::<Vec<_>>(),
        vec![b]
    );
    assert_eq!(spool.live_posts()[0].1, meta(2));
    drop(spool);
    let (_spool, recovered) = open(&c);
    assert_eq!(recovered.iter().map(|p| p.id).collect::<Vec<_>>(), vec![b]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_accepts_share_fsyncs() {
    let dir = tempfile::tempdir().unwrap();
    let (spool, _) = open(&cfg(dir.path()));
    let tasks: Vec<_> = (0..50)
        .map(|n| {
            let s = spool.clone();
            tokio::spawn(async move { s.accept(meta(n), body(n, 2000)).await.unwrap() })
        })
        .collect();
    let mut ids = Vec::new();
    for t in tasks {
        ids.push(t.await.unwrap());
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 50);
    let s = spool.stats();
    assert!(s.commits < 50, "50 accepts took {} fsyncs", s.commits);
    assert!(s.group_max_records > 1);
    assert_eq!(s.records_written, 50);
}

#[tokio::test]
async fn segments_roll_and_spent_ones_are_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = cfg(dir.path());
    c.segment_max_bytes = 4096;
    let (spool, _) = open(&c);
    // One long-lived post: it must survive every roll and compaction with its done set.
    let keep = spool.accept(meta(0), body(0, 1500)).await.unwrap();
    spool
        .record(keep, MemberId(1), FinalState::Delivered)
        .await
        .unwrap();
    for n in 1..=40u64 {
        let p = spool.accept(meta(n), body(n, 1000)).await.unwrap();
        spool
            .record(p, MemberId(1), FinalState::Delivered)
            .await
            .unwrap();
        spool
            .record(keep, MemberId(1 + n as i64), FinalState::Failed)
            .await
            .unwrap();
        spool.complete(p).await.unwrap();
        assert!(
            segments(dir.path()).len() <= 3,
            "spent segments are deleted"
        );
    }
    spool.flush().await.unwrap();
    let s = spool.stats();
    assert!(s.segment_rolls >= 8, "{s:?}");
    assert!(s.relocated_posts >= 1 && s.segments_deleted >= 6, "{s:?}");
    assert_eq!(s.segments as usize, segments(dir.path()).len());
    drop(spool);

    let (_spool, recovered) = open(&c);
    assert_eq!(recovered.len(), 1);
    let r = &recovered[0];
    assert_eq!((r.id, r.body.clone()), (keep, body(0, 1500)));
    assert_eq!(r.done.len(), 41);
    assert_eq!((r.delivered, r.failed), (1, 40));
}

#[tokio::test]
async fn ids_differ_across_a_wiped_spool() {
    let dir = tempfile::tempdir().unwrap();
    let (spool, _) = open(&cfg(dir.path()));
    let first = spool.accept(meta(1), body(1, 100)).await.unwrap();
    drop(spool);
    std::fs::remove_dir_all(dir.path().join("journal")).unwrap();
    tokio::time::sleep(Duration::from_millis(3)).await;
    let (spool, recovered) = open(&cfg(dir.path()));
    assert!(recovered.is_empty());
    let second = spool.accept(meta(1), body(1, 100)).await.unwrap();
    assert!(second > first, "{second} after {first}");
}

#[tokio::test]
async fn oversized_bodies_are_refused_before_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    let (spool, _) = open(&cfg(dir.path()));
    // Zeroed allocation: the pages are never touched, so this costs no real memory.
    let huge = bytes::Bytes::from(vec![0u8; 600 << 20]);
    let err = spool.accept(meta(1), huge).await.unwrap_err();
    assert!(matches!(err, SpoolError::TooLarge { .. }) && !err.is_transient());
    assert_eq!(spool.stats().commits, 0);
}

#[tokio::test]
async fn a_failed_roll_refuses_posts_but_keeps_outcomes_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = cfg(dir.path());
    c.segment_max_bytes = 4096;
    let (spool, _) = open(&c);
    // Pull the directory out from under the writer: the next roll cannot create its segment.
    std::fs::remove_dir_all(dir.path().join("journal")).unwrap();
    let first = spool.accept(meta(1), body(1, 5000)).await.unwrap();
    let err = spool.accept(meta(2), body(2, 100)).await.unwrap_err();
    assert!(matches!(err, SpoolError::Unwritable { .. }), "{err}");
    assert!(err.is_transient() && err.is_storage_shortage());
    assert!(err.to_string().contains("create segment"), "{err}");
    assert!(!spool.is_writable());
    assert!(!spool.stats().writable);
    assert_eq!(spool.stats().outages, 1);
    // Outcomes are not refused: they wait in memory for the repair.
    spool
        .record(first, MemberId(1), FinalState::Delivered)
        .await
        .unwrap();
    // The writer applies it in memory (asynchronously): wait for it to show.
    for _ in 0..100 {
        if spool.progress(first).unwrap().delivered == 1 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the outcome was not kept during the outage");
}
