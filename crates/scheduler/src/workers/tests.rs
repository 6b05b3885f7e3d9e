//! The worker over a scripted session: what it tells the actor and the report loop, and in
//! which order (each outcome reported, journaled by the worker, before the batch's summary).

use super::scripted::{test_ctx_with, test_post_at, Answer, Scripted};
use super::{run, WorkerPlan};
use crate::messages::{Ctrl, HostKey, Job, Report, Target};
use herald_types::{
    Address, EnhancedStatus, ListId, Member, MemberId, MemberStatus, RcptOutcome, Reply,
};
use herald_types::{DeferralKind, LaneKind};
use std::sync::Arc;
use tokio::sync::mpsc;

fn plan(host: &str) -> WorkerPlan {
    let key = HostKey {
        name: host.into(),
        addr: [127, 0, 0, 1].into(),
    };
    WorkerPlan {
        dest: host.into(),
        lane: LaneKind::Fast,
        targets: vec![Target {
            addr: (key.addr, 25).into(),
            key,
            probe: false,
        }],
        max_messages: 100,
        sts: None,
        dane: None,
        egress_pool: None,
    }
}

fn job(id: i64, rcpt: &str) -> Job {
    let post = test_post_at(1, herald_types::unix_ms_now(), u64::MAX);
    let member = Arc::new(Member {
        id: MemberId(id),
        list_id: ListId(1),
        address: Address::parse(rcpt).expect("addr"),
        display_name: None,
        status: MemberStatus::Enabled,
        fields: Default::default(),
    });
    Job::new(post, member)
}

#[tokio::test]
async fn a_batch_is_reported_copy_by_copy_before_its_summary() {
    let net = Scripted::default();
    let reply = |code, e: (u8, u16, u16), text: &str| {
        Reply::new(code, Some(EnhancedStatus::new(e.0, e.1, e.2)), text)
    };
    net.reply(
        "b@w.test",
        RcptOutcome::Deferred(reply(450, (4, 7, 1), "Greylisted, retry in 60 seconds")),
    );
    net.reply(
        "c@w.test",
        RcptOutcome::Failed(reply(550, (5, 1, 1), "no such user")),
    );
    let (ctrl_tx, mut ctrl) = mpsc::channel(16);
    let (reports_tx, mut reports) = mpsc::channel(16);
    let ctx = test_ctx_with(Arc::new(net.clone()), ctrl_tx, reports_tx);
    let worker = tokio::spawn(run(plan("mx.w.test"), ctx));
    assert!(matches!(ctrl.recv().await, Some(Ctrl::Connected { .. })));
    let Some(Ctrl::NeedWork { reply, max, .. }) = ctrl.recv().await else {
        panic!("the worker asks for work");
    };
    assert_eq!(max, 8, "half of the 16-copy unjournaled window");
    let jobs = vec![job(1, "a@w.test"), job(2, "b@w.test"), job(3, "c@w.test")];
    assert!(reply.send(jobs).is_ok());
    let Some(Ctrl::BatchDone(done)) = ctrl.recv().await else {
        panic!("the batch's summary");
    };
    // Its three outcomes reached the report loop's channel before the summary.
    let mut outcomes = Vec::new();
    while let Ok(Report::Outcome(o)) = reports.try_recv() {
        outcomes.push(o);
    }
    assert_eq!(outcomes.len(), 3);
    assert!(outcomes.iter().all(|o| o.journaled && o.tries == 1));
    assert_eq!(outcomes[0].relay, "mx.w.test[127.0.0.1]:25");
    assert!(matches!(outcomes[2].outcome, RcptOutcome::Failed(_)));
    assert_eq!(done.delivered, 1);
    assert_eq!(done.deferred.len(), 1);
    let kind = done.deferred[0].deferral.as_ref().map(|(k, _)| *k);
    assert_eq!(kind, Some(DeferralKind::Greylist));
    let Some(Ctrl::NeedWork { reply, .. }) = ctrl.recv().await else {
        panic!("the worker asks again");
    };
    assert!(reply.send(Vec::new()).is_ok());
    assert!(matches!(ctrl.recv().await, Some(Ctrl::WorkerExit { .. })));
    worker.await.expect("worker");
}

#[tokio::test]
async fn a_refused_connection_is_a_host_failure_for_the_actor() {
    let net = Scripted::default();
    net.answer("mx.r.test", Answer::Refuse, 1);
    let (ctrl_tx, mut ctrl) = mpsc::channel(16);
    let (reports_tx, _reports) = mpsc::channel(16);
    let ctx = test_ctx_with(Arc::new(net), ctrl_tx, reports_tx);
    run(plan("mx.r.test"), ctx).await;
    let Some(Ctrl::ConnectFailed { failed, .. }) = ctrl.recv().await else {
        panic!("the failure is reported");
    };
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].kind, crate::messages::FailKind::Host);
    assert!(matches!(ctrl.recv().await, Some(Ctrl::WorkerExit { .. })));
}

#[tokio::test]
async fn a_batch_waits_for_copy_bytes_and_gives_them_back_once_sent() {
    let (ctrl_tx, mut ctrl) = mpsc::channel(16);
    let (reports_tx, _reports) = mpsc::channel(16);
    let ctx = test_ctx_with(Arc::new(Scripted::default()), ctrl_tx, reports_tx);
    // Another worker holds the whole budget.
    let total = ctx.copy_budget.total();
    let held = ctx.copy_budget.acquire(total).await;
    let worker = tokio::spawn(run(plan("mx.w.test"), ctx.clone()));
    assert!(matches!(ctrl.recv().await, Some(Ctrl::Connected { .. })));
    let Some(Ctrl::NeedWork { reply, .. }) = ctrl.recv().await else {
        panic!("the worker asks for work");
    };
    assert!(reply
        .send(vec![job(1, "a@w.test"), job(2, "b@w.test")])
        .is_ok());
    let early = tokio::time::timeout(std::time::Duration::from_millis(100), ctrl.recv()).await;
    assert!(early.is_err(), "nothing is sent before the bytes are free");
    drop(held);
    let Some(Ctrl::BatchDone(done)) = ctrl.recv().await else {
        panic!("the batch goes once the bytes are free");
    };
    assert_eq!(done.delivered, 2);
    // The batch's bytes went back with it, before the worker asked for more work.
    let Some(Ctrl::NeedWork { reply, .. }) = ctrl.recv().await else {
        panic!("the worker asks again");
    };
    assert_eq!(ctx.copy_budget.held(), 0);
    assert!(
        ctx.copy_budget.peak() >= total,
        "the other worker's whole budget"
    );
    assert!(reply.send(Vec::new()).is_ok());
    assert!(matches!(ctrl.recv().await, Some(Ctrl::WorkerExit { .. })));
    worker.await.expect("worker");
}
