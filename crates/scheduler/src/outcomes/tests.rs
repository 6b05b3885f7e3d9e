//! The report loop over a real spool in a temporary directory: what it journals, when it
//! completes a post, and what it hands to the bounce stage. Each test reopens the spool at the
//! end, so what it asserts is what recovery would see after a restart.

use super::run;
use crate::messages::{Job, OutcomeReport, Report};
use crate::workers::scripted::test_post_at;
use herald_spool::{PostKind, PostMeta, RecoveredPost, Spool, SpoolConfig};
use herald_telemetry::Telemetry;
use herald_types::{
    Address, EnhancedStatus, FailedCopy, FailureCause, ListId, Member, MemberId, MemberStatus,
    PostId, RcptOutcome, Reply,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

fn meta() -> PostMeta {
    PostMeta {
        kind: PostKind::ListPost,
        list_id: ListId(1),
        list_address: Address::parse("l@lists.test").expect("addr"),
        envelope_from: Some(Address::parse("s@sender.test").expect("addr")),
        received_at_ms: herald_types::unix_ms_now(),
        max_member_id: MemberId(100),
        message_id: None,
        recipients: Vec::new(),
        hold_reason: None,
        null_sender: false,
        audience: Default::default(),
        dsn: None,
        member_range: None,
    }
}

/// A spool in a fresh directory with one accepted post.
async fn spool_with_post() -> (tempfile::TempDir, Spool, PostId) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (spool, _) = Spool::open(SpoolConfig::new(dir.path())).expect("spool");
    let post = spool
        .accept(
            meta(),
            bytes::Bytes::from_static(b"Subject: x\r\n\r\nbody\r\n"),
        )
        .await
        .expect("accept");
    (dir, spool, post)
}

/// What recovery finds after the spool is closed and opened again.
async fn reopen(spool: Spool, dir: &Path) -> Vec<RecoveredPost> {
    spool.close().await.expect("close");
    let path: PathBuf = dir.to_path_buf();
    Spool::open(SpoolConfig::new(path)).expect("reopen").1
}

fn job(post: PostId, member: i64, rcpt: &str) -> Job {
    let ctx = test_post_at(post.0, herald_types::unix_ms_now(), u64::MAX);
    let member = Arc::new(Member {
        id: MemberId(member),
        list_id: ListId(1),
        address: Address::parse(rcpt).expect("addr"),
        display_name: None,
        status: MemberStatus::Enabled,
        fields: Default::default(),
    });
    Job::new(ctx, member)
}

fn outcome(post: PostId, member: i64, rcpt: &str, outcome: RcptOutcome) -> Report {
    let report = OutcomeReport::new(
        &job(post, member, rcpt),
        outcome,
        "mx[127.0.0.1]:25".into(),
        1,
    );
    Report::Outcome(Box::new(report))
}

fn delivered() -> RcptOutcome {
    RcptOutcome::Delivered(Reply::new(250, Some(EnhancedStatus::new(2, 0, 0)), "ok"))
}

/// A report loop running over `spool`, with the bounce stage's end of its channel.
struct Loop {
    tx: mpsc::Sender<Report>,
    failed: mpsc::Receiver<FailedCopy>,
    done: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Loop {
    fn start(spool: &Spool) -> Loop {
        let (tx, rx) = mpsc::channel(64);
        let (fail_tx, failed) = mpsc::channel(64);
        let done = CancellationToken::new();
        let task = tokio::spawn(run(
            rx,
            spool.clone(),
            Telemetry::disabled_log(),
            Some(fail_tx),
            None,
            done.clone(),
        ));
        Loop {
            tx,
            failed,
            done,
            task,
        }
    }

    async fn send(&self, reports: Vec<Report>) {
        for r in reports {
            self.tx.send(r).await.expect("loop running");
        }
    }

    /// Stops the loop as the actor does at shutdown (it drains what is queued first) and
    /// returns the failed copies it handed on.
    async fn stop(mut self) -> Vec<FailedCopy> {
        self.done.cancel();
        self.task.await.expect("report loop");
        let mut failed = Vec::new();
        while let Ok(f) = self.failed.try_recv() {
            failed.push(f);
        }
        failed
    }
}

/// Runs `reports` through a report loop from start to shutdown.
async fn feed(spool: &Spool, reports: Vec<Report>) -> Vec<FailedCopy> {
    let l = Loop::start(spool);
    l.send(reports).await;
    l.stop().await
}

/// Waits until the spool has seen `delivered` deliveries of `post` (the loop works on its own
/// task; the spool's progress counts records not yet committed).
async fn until_delivered(spool: &Spool, post: PostId, delivered: u64) {
    let wait = async {
        while spool.progress(post).map(|p| p.delivered) != Some(delivered) {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), wait)
        .await
        .expect("the report loop journals the outcomes");
}

#[tokio::test]
async fn a_post_is_not_completed_while_some_recipients_are_not_final() {
    let (dir, spool, post) = spool_with_post().await;
    let reports = vec![
        Report::Expanded {
            post,
            recipients: 2,
            already_done: 0,
        },
        outcome(post, 1, "a@x.test", delivered()),
        // A deferral is not final: it neither counts toward completion nor is journaled.
        outcome(
            post,
            2,
            "b@x.test",
            RcptOutcome::Deferred(Reply::new(451, None, "later")),
        ),
    ];
    feed(&spool, reports).await;
    let recovered = reopen(spool, dir.path()).await;
    assert_eq!(recovered.len(), 1, "the post stays in the spool");
    let r = &recovered[0];
    assert_eq!(r.id, post);
    assert!(r.done.contains(MemberId(1)), "the delivery was journaled");
    assert!(!r.done.contains(MemberId(2)), "the deferral was not");
    assert_eq!((r.delivered, r.failed), (1, 0));
}

#[tokio::test]
async fn the_report_loop_completes_a_post_only_after_its_outcomes_are_journaled() {
    let (dir, spool, post) = spool_with_post().await;
    // Outcomes before the expansion total, as happens when the first copies go out while
    // expansion still reads the list: the post completes on the report that makes it whole.
    let l = Loop::start(&spool);
    l.send(vec![
        outcome(post, 1, "a@x.test", delivered()),
        outcome(post, 2, "b@x.test", delivered()),
    ])
    .await;
    until_delivered(&spool, post, 2).await;
    l.send(vec![Report::Expanded {
        post,
        recipients: 3,
        already_done: 0,
    }])
    .await;
    l.send(vec![outcome(post, 3, "c@x.test", delivered())])
        .await;
    l.stop().await;
    assert_eq!(spool.progress(post), None, "completed: no longer live");
    let recovered = reopen(spool, dir.path()).await;
    assert!(
        recovered.is_empty(),
        "a completed post is not recovered: its outcomes were journaled before its completion"
    );
}

#[tokio::test]
async fn members_done_before_a_restart_count_toward_completion() {
    let (dir, spool, post) = spool_with_post().await;
    let reports = vec![
        Report::Expanded {
            post,
            recipients: 3,
            already_done: 2,
        },
        outcome(post, 3, "c@x.test", delivered()),
    ];
    feed(&spool, reports).await;
    assert!(reopen(spool, dir.path()).await.is_empty());
}

#[tokio::test]
async fn a_permanent_failure_is_journaled_and_handed_to_the_bounce_stage_with_its_cause() {
    let (dir, spool, post) = spool_with_post().await;
    let reply = Reply::new(550, Some(EnhancedStatus::new(5, 1, 1)), "no such user");
    let expired = FailureCause::Expired { last_reply: None };
    // Decided without a connection (`journaled` false): the loop journals it itself.
    let scheduler_verdict = OutcomeReport::failed(&job(post, 2, "b@x.test"), expired.clone());
    let reports = vec![
        Report::Expanded {
            post,
            recipients: 3,
            already_done: 0,
        },
        outcome(post, 1, "a@x.test", RcptOutcome::Failed(reply.clone())),
        Report::Outcome(Box::new(scheduler_verdict)),
    ];
    let failed = feed(&spool, reports).await;
    assert_eq!(failed.len(), 2);
    assert_eq!(failed[0].post, post);
    assert_eq!(failed[0].list, ListId(1));
    assert_eq!(failed[0].rcpt.to_string(), "a@x.test");
    assert_eq!(failed[0].cause, FailureCause::Remote(reply));
    assert_eq!(failed[1].cause, expired);
    let recovered = reopen(spool, dir.path()).await;
    assert_eq!(recovered.len(), 1);
    assert_eq!((recovered[0].delivered, recovered[0].failed), (0, 2));
}
