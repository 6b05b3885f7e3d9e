//! The scheduler's own final verdicts (no route, expiry, the operator's give-up) reach the report
//! loop with their [`FailureCause`], and the log's reply is the cause's reply: tests on the
//! actor's own state (no network).

use super::routes::RouteError;
use super::routes_tests::{actor, hosts, job, post};
use super::Route;
use crate::messages::{Action, Command, Selector};
use crate::messages::{OutcomeReport, Report};
use herald_routing::ResolveError;
use herald_types::{DeferralKind, LaneKind};
use herald_types::{EnhancedStatus, FailureCause, NoRoute, RcptOutcome, Reply};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

fn next_outcome(rx: &mut mpsc::Receiver<Report>) -> OutcomeReport {
    match rx.try_recv() {
        Ok(Report::Outcome(o)) => *o,
        Ok(Report::Expanded { .. }) => panic!("expected an outcome, got an expansion"),
        Err(e) => panic!("no outcome reported: {e}"),
    }
}

/// The outcome is `Failed` with the cause's reply, and the cause is the one given.
fn assert_failed_with(o: &OutcomeReport, cause: &FailureCause) {
    assert_eq!(o.cause.as_ref(), Some(cause));
    assert_eq!(o.outcome, RcptOutcome::Failed(cause.reply()));
}

#[test]
fn no_route_agrees_with_the_resolvers_permanence() {
    let d = || "gone.test".to_string();
    let errors = [
        ResolveError::NullMx { domain: d() },
        ResolveError::NoSuchDomain { domain: d() },
        ResolveError::NoAddress { domain: d() },
        ResolveError::InvalidDomain { domain: d() },
        ResolveError::Timeout { domain: d() },
        ResolveError::Temporary {
            domain: d(),
            detail: "SERVFAIL".into(),
        },
    ];
    for e in errors {
        let permanent = e.is_permanent();
        let reply = e.synthetic_reply();
        match RouteError::Dns(e).no_route() {
            Some(FailureCause::NoRoute { reply: r, .. }) => {
                assert!(permanent);
                assert_eq!(r, reply, "the log keeps the resolver's reply");
            }
            Some(other) => panic!("unexpected cause {other:?}"),
            None => assert!(!permanent),
        }
    }
    let policy = Reply::new(451, EnhancedStatus::parse("4.7.5"), "no MX host allowed");
    assert_eq!(RouteError::MtaSts(policy).no_route(), None);
}

#[tokio::test]
async fn a_domain_that_does_not_exist_fails_its_copies_with_no_route() {
    let (mut actor, mut reports) = actor();
    let post = post();
    actor.routes.insert(
        "gone.test".into(),
        Route::Resolving(vec![job(&post, 1, "a@gone.test")]),
    );
    actor.queued = 1;
    let e = ResolveError::NoSuchDomain {
        domain: "gone.test".into(),
    };
    let cause = FailureCause::NoRoute {
        why: NoRoute::NoSuchDomain,
        reply: e.synthetic_reply(),
    };
    actor
        .on_resolved("gone.test".into(), Err(RouteError::Dns(e)))
        .await;
    assert_failed_with(&next_outcome(&mut reports), &cause);
    assert_eq!(actor.queued, 0);
    // The dead route fails later copies the same way, without a lookup.
    actor.accept_jobs(vec![job(&post, 2, "b@gone.test")]).await;
    assert_failed_with(&next_outcome(&mut reports), &cause);
}

#[tokio::test]
async fn an_expired_copy_carries_its_last_deferral() {
    let (mut actor, mut reports) = actor();
    let mut copy = job(&post(), 1, "slow@a.test");
    let greylisted = Reply::new(451, EnhancedStatus::parse("4.7.1"), "greylisted");
    copy.deferral = Some((DeferralKind::Greylist, Box::new(greylisted.clone())));
    actor.expire(copy).await;
    let cause = FailureCause::Expired {
        last_reply: Some(greylisted),
    };
    assert_failed_with(&next_outcome(&mut reports), &cause);
}

#[tokio::test]
async fn an_operators_give_up_is_its_own_cause() {
    let (mut actor, mut reports) = actor();
    let post = post();
    let key = actor.destination_for(hosts(), None, None);
    let mut copy = job(&post, 1, "slow@a.test");
    copy.lane = LaneKind::Slow;
    // Parked on disk, beside another recipient's copy (read back, found not to match, parked
    // again).
    let tmp = tempfile::tempdir().expect("tempdir");
    actor.deferred = crate::actor::deferred::DeferredStore::open(Some(tmp.path().into()));
    let at = Instant::now() + Duration::from_secs(600);
    actor.park(&key, at, DeferralKind::Greylist, copy);
    let mut other = job(&post, 2, "other@a.test");
    other.lane = LaneKind::Slow;
    actor.park(&key, at, DeferralKind::Greylist, other);
    let (tx, rx) = tokio::sync::oneshot::channel();
    let cmd = Command {
        selector: Selector::Recipient("slow@a.test".into()),
        action: Action::GiveUp,
        reply: tx,
    };
    actor.on_operator(cmd).await;
    assert_eq!(rx.await.ok(), Some(1));
    assert_failed_with(&next_outcome(&mut reports), &FailureCause::OperatorGaveUp);
    assert_eq!((actor.queued, actor.slow_queued), (0, 0));
    assert_eq!(actor.deferred.len(), 1, "the other copy stays parked");
}
