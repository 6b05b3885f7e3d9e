//! What workers' reports change (`outcome.rs`), on a hand-driven actor under tokio's paused
//! clock: where a deferred copy goes and when it is retried, when it is given up instead, and
//! what a failed connection does to the destination's copies and budget.

use super::hand_rig::{hand, job, Hand, START_MS};
use crate::config::SchedulerConfig;
use crate::messages::{FailKind, HostFailure, HostKey, Job};
use crate::workers::scripted::test_post_at;
use herald_types::{DeferralKind, EnhancedStatus, FailureCause, LaneKind, RcptOutcome, Reply};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

fn cfg() -> SchedulerConfig {
    SchedulerConfig {
        retry_initial_secs: 60,
        retry_max_secs: 3600,
        retry_jitter: 0.0,
        greylist_retry_secs: 300,
        throttle_retry_secs: 30,
        ..SchedulerConfig::default()
    }
}

/// A first attempt that was deferred for `kind` with `reply`.
fn deferred(id: i64, rcpt: &str, kind: DeferralKind, reply: Reply) -> Job {
    let post = test_post_at(1, START_MS, u64::MAX);
    let mut j = job(&post, id, rcpt);
    j.tries = 1;
    j.deferral = Some((kind, Box::new(reply)));
    j
}

/// `(member id, kind, lane, seconds from now)` of every waiting copy of `dest`, soonest first.
fn waiting(h: &Hand, dest: &Arc<str>) -> Vec<(i64, DeferralKind, LaneKind, u64)> {
    let now = Instant::now();
    let mut out: Vec<_> = h.actor.dests[dest]
        .waiting
        .iter()
        .map(|w| {
            let secs = w.at.saturating_duration_since(now).as_secs();
            (w.copy.job().member.id.0, w.kind, w.copy.job().lane, secs)
        })
        .collect();
    out.sort_by_key(|w| w.3);
    out
}

#[tokio::test(start_paused = true)]
async fn a_deferred_first_attempt_moves_to_the_slow_lane_and_waits_as_long_as_its_reason_says() {
    let mut h = hand(cfg(), &[("a.test", "mx.a.test")]).await;
    let dest = h.dest("a.test");
    let grey = Reply::new(450, None, "Greylisted, retry in 90 seconds");
    let busy = Reply::new(
        421,
        Some(EnhancedStatus::new(4, 7, 28)),
        "too many messages",
    );
    let other = Reply::new(451, None, "temporary local problem");
    let jobs = vec![
        deferred(1, "g@a.test", DeferralKind::Greylist, grey),
        deferred(2, "t@a.test", DeferralKind::Throttle, busy),
        deferred(3, "o@a.test", DeferralKind::Other, other),
    ];
    h.actor.defer(&dest, jobs).await;
    // Throttling: `throttle_retry_secs`; other failures: the exponential schedule's first step;
    // greylisting: the interval the server named, not the 300 s default.
    // Each with its jitter: throttling ±20 %, greylisting 1 s and up to 10 % after.
    let w = waiting(&h, &dest);
    let got: Vec<_> = w.iter().map(|w| (w.0, w.1, w.2)).collect();
    assert_eq!(
        got,
        [
            (2, DeferralKind::Throttle, LaneKind::Slow),
            (3, DeferralKind::Other, LaneKind::Slow),
            (1, DeferralKind::Greylist, LaneKind::Slow),
        ]
    );
    assert!((23..=36).contains(&w[0].3), "{w:?}");
    assert_eq!(w[1].3, 60);
    assert!((90..=99).contains(&w[2].3), "{w:?}");
    assert_eq!(
        (h.actor.queued, h.actor.slow_queued, h.actor.deferred.len()),
        (0, 0, 3),
        "parked: outside the in-memory queue"
    );
    assert_eq!(h.actor.dests[&dest].deferred, 3);
    assert_eq!(
        h.actor.stragglers.len(),
        3,
        "slow-lane copies are stragglers"
    );
}

#[tokio::test(start_paused = true)]
async fn a_copy_past_its_lists_maximum_age_is_expired_instead_of_deferred() {
    let mut h = hand(cfg(), &[("a.test", "mx.a.test")]).await;
    let dest = h.dest("a.test");
    // Accepted an hour before the actor's wall time, with ten minutes to live.
    let post = test_post_at(1, START_MS - 3_600_000, 600_000);
    let mut j = job(&post, 1, "u@a.test");
    j.tries = 3;
    let last = Reply::new(451, None, "temporary local problem");
    j.deferral = Some((DeferralKind::Other, Box::new(last.clone())));
    h.actor.defer(&dest, vec![j]).await;
    assert!(h.actor.dests[&dest].waiting.is_empty());
    assert_eq!(h.actor.queued, 0);
    let outcomes = h.outcomes();
    assert_eq!(outcomes.len(), 1);
    let o = &outcomes[0];
    assert!(matches!(o.outcome, RcptOutcome::Failed(_)));
    assert_eq!(
        o.cause,
        Some(FailureCause::Expired {
            last_reply: Some(last)
        }),
        "expired with the last reply: not a remote failure, never scored as a bounce"
    );
    assert!(
        !o.journaled,
        "decided without a connection: the report loop journals it"
    );
}

/// The destination `a.test` with `n` first attempts queued and one worker connecting.
async fn connecting_with_copies(n: i64) -> (Hand, Arc<str>) {
    let mut h = hand(cfg(), &[("a.test", "mx.a.test")]).await;
    let dest = h.dest("a.test");
    let post = test_post_at(1, START_MS, u64::MAX);
    let d = h.actor.dests.get_mut(&dest).expect("destination");
    for id in 1..=n {
        d.fast.push_back(job(&post, id, &format!("u{id}@a.test")));
    }
    d.fast_workers = 1;
    d.connecting = 1;
    h.actor.queued = n as usize;
    (h, dest)
}

fn failure(kind: FailKind) -> HostFailure {
    HostFailure {
        key: HostKey {
            name: "mx.a.test".into(),
            addr: [127, 0, 0, 1].into(),
        },
        kind,
        reason: "connection refused".into(),
        tls: None,
    }
}

#[tokio::test(start_paused = true)]
async fn a_failed_connection_defers_the_destinations_copies_as_host_down() {
    let (mut h, dest) = connecting_with_copies(2).await;
    let error = Reply::new(421, None, "cannot connect to any host");
    let failed = vec![failure(FailKind::Host)];
    h.actor
        .on_connect_failed(dest.clone(), failed, error, false, None)
        .await;
    // Each copy is reported deferred (the log's line for this attempt), then waits.
    let outcomes = h.outcomes();
    assert_eq!(outcomes.len(), 2);
    assert!(outcomes
        .iter()
        .all(|o| matches!(o.outcome, RcptOutcome::Deferred(_)) && o.cause.is_none()));
    // No policy applies and DANE was not why: the log names neither.
    assert!(outcomes.iter().all(|o| (o.mta_sts, o.dane) == (None, None)));
    let w = waiting(&h, &dest);
    assert_eq!(w.len(), 2);
    assert!(w
        .iter()
        .all(|(_, kind, lane, _)| (*kind, *lane) == (DeferralKind::HostDown, LaneKind::Slow)));
    let d = &h.actor.dests[&dest];
    assert_eq!((d.fast.len(), d.connecting), (0, 0));
    assert!(d.waiting.iter().all(|w| w.copy.job().tries == 1));
    assert_eq!(d.last_error.as_deref(), Some("cannot connect to any host"));
}

#[tokio::test(start_paused = true)]
async fn a_local_shortage_marks_no_host_down_and_keeps_the_copies_ready() {
    use herald_types::LocalResource;
    let (mut h, dest) = connecting_with_copies(2).await;
    let error = Reply::new(
        451,
        Some(EnhancedStatus::new(4, 3, 0)),
        "too many open files",
    );
    // Far more failures than host_down_after_failures: none of them is the host's.
    for _ in 0..5 {
        let failed = vec![failure(FailKind::Local(LocalResource::ProcessFiles))];
        h.actor
            .on_connect_failed(dest.clone(), failed, error.clone(), false, None)
            .await;
    }
    assert_eq!(h.actor.health.down_count(), 0, "no host is down");
    assert!(h.outcomes().is_empty(), "no copy was deferred");
    let d = &h.actor.dests[&dest];
    assert_eq!((d.fast.len(), d.waiting.len()), (2, 0), "copies stay ready");
    assert!(
        h.actor.shortage.active(Instant::now()),
        "new connections pause"
    );
    let m = &h.actor.ctx.telemetry.metrics().descriptors;
    assert_eq!(m.shortages(LocalResource::ProcessFiles), 5);
}

#[tokio::test(start_paused = true)]
async fn a_busy_greeting_defers_as_throttling_and_cuts_the_budget_not_the_host() {
    let (mut h, dest) = connecting_with_copies(1).await;
    let error = Reply::new(421, Some(EnhancedStatus::new(4, 7, 28)), "too busy");
    // Two busy answers: two host failures would mark the host down; these are no verdict on
    // its health, and the budget is cut once per cooldown.
    let failed = vec![failure(FailKind::Throttle), failure(FailKind::Throttle)];
    h.actor
        .on_connect_failed(dest.clone(), failed, error, false, None)
        .await;
    let w = waiting(&h, &dest);
    assert_eq!(
        (w[0].0, w[0].1, w[0].2),
        (1, DeferralKind::Throttle, LaneKind::Slow)
    );
    assert!((23..=36).contains(&w[0].3), "{w:?}");
    let budget = &h.actor.dests[&dest].budget;
    assert_eq!(
        h.actor.budgets[budget].connection_limit(),
        1,
        "the two connections of slow start halved"
    );
    assert_eq!(h.actor.health.down_count(), 0, "a busy host is not down");
}

#[tokio::test(start_paused = true)]
async fn a_dane_failure_is_named_on_each_deferred_copy() {
    let (mut h, dest) = connecting_with_copies(1).await;
    let error = Reply::new(421, None, "TLSA records do not match");
    let failed = vec![failure(FailKind::Other)];
    h.actor
        .on_connect_failed(dest, failed, error, true, None)
        .await;
    let outcomes = h.outcomes();
    assert_eq!(outcomes.len(), 1);
    assert_eq!(outcomes[0].dane, Some(herald_types::DaneNote::Failed));
}

#[test]
fn greylisting_waits_for_what_the_server_said_or_learned_then_backs_off() {
    use crate::actor::outcome::greylist_delay;
    let s = Duration::from_secs;
    let (first, max) = (s(60), s(300));
    assert_eq!(
        greylist_delay(Some(s(90)), Some(s(40)), None, first, max),
        s(90)
    );
    assert_eq!(
        greylist_delay(None, None, None, first, max),
        s(60),
        "a short first retry"
    );
    assert_eq!(
        greylist_delay(None, Some(s(75)), None, first, max),
        s(75),
        "learned"
    );
    assert_eq!(
        greylist_delay(None, Some(s(75)), Some(s(61)), first, max),
        s(122),
        "greylisted again: the last wait was too short, back off"
    );
    assert_eq!(greylist_delay(None, None, Some(s(200)), first, max), s(300));
    assert_eq!(greylist_delay(None, None, None, s(600), max), s(300));
}
