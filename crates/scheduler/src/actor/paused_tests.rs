//! The actor's behaviours on tokio's paused clock: its real loop, dispatch and workers, driven
//! by jobs and control messages, with scripted sessions (`workers/scripted.rs`) in place of
//! SMTP connections. No socket and no sleep: the paused runtime skips ahead to the next timer
//! whenever every task waits, so hours of retries run in milliseconds, and wall time
//! ([`Clock::following_tokio`]) moves with it (expiry).

use super::hand_rig::{hand, job, START_MS};
use crate::config::SchedulerConfig;
use crate::messages::{Ctrl, Job, OutcomeReport, QueueSnapshot, Report};
use crate::workers::scripted::{test_post_at, Answer, Scripted};
use herald_types::{EnhancedStatus, FailureCause, RcptOutcome, Reply};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// The actor's tick in these tests: retries are due on the tick after their time.
const TICK: Duration = Duration::from_millis(100);

fn cfg() -> SchedulerConfig {
    SchedulerConfig {
        tick_ms: TICK.as_millis() as u64,
        retry_initial_secs: 60,
        retry_max_secs: 3600,
        retry_jitter: 0.0,
        greylist_retry_secs: 300,
        destination_backoff_secs: 30,
        route_refresh_secs: 10_000_000,
        ..SchedulerConfig::default()
    }
}

/// A running actor with its scripted Internet.
struct Rig {
    net: Scripted,
    jobs: mpsc::Sender<Vec<Job>>,
    ctrl: mpsc::Sender<Ctrl>,
    reports: mpsc::Receiver<Report>,
    started: Instant,
    /// The scheduler's shutdown, shared by the actor and its workers as in production.
    shutdown: tokio_util::sync::CancellationToken,
    actor: tokio::task::JoinHandle<()>,
    ctx: std::sync::Arc<crate::workers::WorkerCtx>,
}

/// Starts an actor (built as `hand_rig` builds one) and runs its own loop.
async fn rig(cfg: SchedulerConfig, domains: &[(&str, &str)]) -> Rig {
    let hand = hand(cfg, domains).await;
    let (jobs, jobs_rx) = mpsc::channel(64);
    let ctx = hand.actor.ctx.clone();
    let shutdown = ctx.shutdown.clone();
    let actor = tokio::spawn(hand.actor.run(jobs_rx, hand.ctrl, shutdown.clone()));
    Rig {
        net: hand.net,
        jobs,
        ctrl: hand.ctrl_tx,
        reports: hand.reports,
        started: Instant::now(),
        shutdown,
        actor,
        ctx,
    }
}

fn deferred(code: u16, text: &str) -> RcptOutcome {
    RcptOutcome::Deferred(Reply::new(code, Some(EnhancedStatus::new(4, 3, 0)), text))
}

impl Rig {
    async fn send(&self, jobs: Vec<Job>) {
        self.jobs.send(jobs).await.expect("actor running");
    }

    /// The next outcome report (the paused clock runs ahead while the actor waits).
    async fn outcome(&mut self) -> OutcomeReport {
        loop {
            match self.reports.recv().await.expect("actor running") {
                Report::Outcome(o) => return *o,
                Report::Expanded { .. } => {}
            }
        }
    }

    /// Outcome reports until one is final.
    async fn until_final(&mut self) -> (Vec<OutcomeReport>, OutcomeReport) {
        let mut before = Vec::new();
        loop {
            let o = self.outcome().await;
            if o.outcome.is_final() {
                return (before, o);
            }
            before.push(o);
        }
    }

    async fn snapshot(&self) -> QueueSnapshot {
        let (tx, rx) = oneshot::channel();
        let req = crate::messages::SnapshotRequest::default();
        self.ctrl.send(Ctrl::Snapshot(req, tx)).await.expect("ctrl");
        rx.await.expect("snapshot")
    }
}

/// `b - a` is `want`, give or take the tick that promotes retries.
fn about(a: Instant, b: Instant, want: Duration) {
    let gap = b - a;
    assert!(
        gap >= want && gap <= want + 2 * TICK,
        "gap {gap:?}, expected {want:?} (+ up to two ticks)"
    );
}

/// `b - a` is within `lo..=hi` (a jittered delay), give or take the tick that promotes retries.
fn within(a: Instant, b: Instant, lo: Duration, hi: Duration) {
    let gap = b - a;
    assert!(
        gap >= lo && gap <= hi + 2 * TICK,
        "gap {gap:?}, expected {lo:?}..={hi:?} (+ up to two ticks)"
    );
}

#[tokio::test(start_paused = true)]
async fn retries_back_off_exponentially_in_the_slow_lane() {
    let mut rig = rig(cfg(), &[("a.test", "mx.a.test")]).await;
    for _ in 0..3 {
        rig.net
            .reply("u@a.test", deferred(451, "temporary local problem"));
    }
    let post = test_post_at(1, START_MS, u64::MAX);
    rig.send(vec![job(&post, 1, "u@a.test")]).await;
    let first = rig.outcome().await;
    assert!(matches!(first.outcome, RcptOutcome::Deferred(_)));
    // A deferred first attempt moves to the slow lane (a lane move), waiting for its retry.
    let snap = rig.snapshot().await;
    assert_eq!((snap.fast_lane, snap.slow_lane), (0, 1));
    let (deferrals, last) = rig.until_final().await;
    assert_eq!(deferrals.len(), 2);
    assert!(matches!(last.outcome, RcptOutcome::Delivered(_)));
    assert_eq!(last.tries, 4);
    let at = rig.net.copies_to("u@a.test");
    assert_eq!(at.len(), 4);
    about(at[0], at[1], Duration::from_secs(60));
    about(at[1], at[2], Duration::from_secs(120));
    about(at[2], at[3], Duration::from_secs(240));
}

#[tokio::test(start_paused = true)]
async fn a_greylisted_copy_is_retried_after_the_interval_the_server_names() {
    let mut rig = rig(cfg(), &[("g.test", "mx.g.test")]).await;
    rig.net
        .reply("u@g.test", deferred(450, "Greylisted, retry in 90 seconds"));
    let post = test_post_at(1, START_MS, u64::MAX);
    rig.send(vec![job(&post, 1, "u@g.test")]).await;
    let (_, last) = rig.until_final().await;
    assert!(matches!(last.outcome, RcptOutcome::Delivered(_)));
    let at = rig.net.copies_to("u@g.test");
    assert_eq!(at.len(), 2);
    // Not the 60 s of the exponential schedule nor the 300 s default: the named 90 s (plus
    // 1 s and up to 10 % of jitter, never before it).
    within(
        at[0],
        at[1],
        Duration::from_secs(91),
        Duration::from_secs(100),
    );
}

#[tokio::test(start_paused = true)]
async fn a_down_host_is_probed_after_its_down_period_and_brought_back_up() {
    let mut rig = rig(cfg(), &[("d.test", "mx.d.test")]).await;
    rig.net.answer("mx.d.test", Answer::Refuse, 2);
    let post = test_post_at(1, START_MS, u64::MAX);
    rig.send(vec![job(&post, 1, "u@d.test")]).await;
    let (_, last) = rig.until_final().await;
    assert!(matches!(last.outcome, RcptOutcome::Delivered(_)));
    let connects = rig.net.connects_to("mx.d.test");
    let answers: Vec<Answer> = connects.iter().map(|(_, a)| *a).collect();
    assert_eq!(answers, [Answer::Refuse, Answer::Refuse, Answer::Accept]);
    // First refusal: an ordinary retry (60 s). Second: the host is down (2 failures) for
    // `destination_backoff_secs`; its probe comes then, long before the copy's own 120 s retry,
    // and the copy waiting for it goes out over the probe's connection.
    about(connects[0].0, connects[1].0, Duration::from_secs(60));
    about(connects[1].0, connects[2].0, Duration::from_secs(30));
    assert_eq!(rig.snapshot().await.hosts_down, 0);
}

#[tokio::test(start_paused = true)]
async fn a_throttled_destination_has_its_budget_cut_then_restored() {
    let mut rig = rig(cfg(), &[("t.test", "mx.t.test")]).await;
    rig.net.answer("mx.t.test", Answer::Busy, 1);
    let post = test_post_at(1, START_MS, u64::MAX);
    rig.send(vec![job(&post, 1, "u@t.test")]).await;
    let first = rig.outcome().await;
    assert!(matches!(first.outcome, RcptOutcome::Deferred(_)));
    let limit = |s: &QueueSnapshot| s.destinations.first().map(|d| d.connection_limit);
    let cut = limit(&rig.snapshot().await).expect("destination listed");
    assert_eq!(cut, 1, "the 421 halves the two connections of slow start");
    // A throttled copy is retried after `throttle_retry_secs` (30 s), not on the host-down
    // schedule; its success adds back to the budget (additive increase).
    let (_, last) = rig.until_final().await;
    assert!(matches!(last.outcome, RcptOutcome::Delivered(_)));
    let connects = rig.net.connects_to("mx.t.test");
    // ±20 % jitter: throttled copies do not all come back in the same second.
    within(
        connects[0].0,
        connects[1].0,
        Duration::from_secs(24),
        Duration::from_secs(36),
    );
    for i in 0..40 {
        rig.send(vec![job(&post, 10 + i, &format!("v{i}@t.test"))])
            .await;
        rig.outcome().await;
    }
    let snap = rig.snapshot().await;
    let now = limit(&snap).unwrap_or(20);
    assert!(now > cut, "budget restored from {cut} to {now}");
}

#[tokio::test(start_paused = true)]
async fn a_copy_older_than_its_list_allows_expires_with_cause_expired() {
    let mut rig = rig(cfg(), &[("e.test", "mx.e.test")]).await;
    for _ in 0..20 {
        rig.net
            .reply("u@e.test", deferred(451, "temporary local problem"));
    }
    let max_age = Duration::from_secs(600);
    let post = test_post_at(1, START_MS, max_age.as_millis() as u64);
    rig.send(vec![job(&post, 1, "u@e.test")]).await;
    let (deferrals, last) = rig.until_final().await;
    assert!(!deferrals.is_empty());
    let Some(FailureCause::Expired { last_reply }) = &last.cause else {
        panic!("expected an expiry, got {:?}", last.cause);
    };
    assert_eq!(last_reply.as_ref().map(|r| r.code), Some(451));
    assert!(matches!(last.outcome, RcptOutcome::Failed(_)));
    assert!(rig.started.elapsed() >= max_age);
    // 60 + 120 + 240 s of retries, then the next (480 s) would pass the 600 s limit: expired
    // when that retry comes due, without a further attempt.
    assert_eq!(rig.net.copies_to("u@e.test").len(), 4);
}

#[tokio::test(start_paused = true)]
async fn a_small_post_is_not_stuck_behind_a_big_one() {
    let cfg = SchedulerConfig {
        max_connections_per_destination: 1,
        max_copies_per_batch: 4,
        ..cfg()
    };
    let mut rig = rig(cfg, &[("f.test", "mx.f.test")]).await;
    rig.net.reply_delay(Duration::from_millis(10));
    let big = test_post_at(1, START_MS, u64::MAX);
    let small = test_post_at(2, START_MS, u64::MAX);
    let big_jobs: Vec<Job> = (0..200)
        .map(|i| job(&big, i, &format!("b{i}@f.test")))
        .collect();
    rig.send(big_jobs).await;
    rig.send(vec![job(&small, 1000, "s@f.test")]).await;
    // The destination's ready queue takes posts in turn: the small post's copy goes out in one
    // of the first batches, not after the big post's 200 copies.
    let mut position = None;
    for n in 0..201 {
        let o = rig.outcome().await;
        if o.post == small.id {
            position = Some(n);
            break;
        }
    }
    let position = position.expect("the small post's copy was delivered");
    assert!(
        position < 12,
        "small post delivered after {position} big copies"
    );
}

#[tokio::test(start_paused = true)]
async fn a_tarpit_is_served_by_the_slow_lane_with_a_few_connections_never_marked_down() {
    let mut rig = rig(cfg(), &[("t.test", "mx.t.test")]).await;
    rig.net.answer("mx.t.test", Answer::Tarpit, 1000);
    // Each copy takes a tarpit 10 s of trickled replies.
    rig.net.reply_delay(Duration::from_secs(10));
    let post = test_post_at(1, START_MS, u64::MAX);
    let jobs: Vec<Job> = (0..12)
        .map(|i| job(&post, i, &format!("u{i}@t.test")))
        .collect();
    rig.send(jobs).await;
    for _ in 0..12 {
        let o = rig.outcome().await;
        // Never deferred: the first pass's give-up is not a try, the slow lane delivers.
        assert!(
            matches!(o.outcome, RcptOutcome::Delivered(_)),
            "{:?}",
            o.outcome
        );
        assert_eq!(o.tries, 1, "{}", o.rcpt);
    }
    // 12 copies of 10 s over 4 connections: 30 s, plus slow start's first second (and the
    // paused clock may run ahead while a worker waits for the real journal thread); one
    // connection would take 120 s.
    let took = rig.started.elapsed();
    assert!(took <= Duration::from_secs(45), "took {took:?}");
    let connects = rig.net.connects_to("mx.t.test");
    let answers: Vec<Answer> = connects.iter().map(|(_, a)| *a).collect();
    assert_eq!(answers[0], Answer::Tarpit, "the first pass recognised it");
    assert!(
        answers[1..].iter().all(|a| *a == Answer::Accept) && (4..=5).contains(&answers.len()),
        "then 3 or 4 patient connections: {answers:?}"
    );
    let snap = rig.snapshot().await;
    assert_eq!(snap.hosts_down, 0, "a tarpit answers: never down");
    // A second post goes to the slow lane at once: no first-pass attempt this time.
    let post = test_post_at(2, START_MS, u64::MAX);
    rig.send(vec![job(&post, 100, "v@t.test")]).await;
    let o = rig.outcome().await;
    assert!(
        matches!(o.outcome, RcptOutcome::Delivered(_)),
        "{:?}",
        o.outcome
    );
    let answers: Vec<Answer> = rig
        .net
        .connects_to("mx.t.test")
        .iter()
        .map(|(_, a)| *a)
        .collect();
    assert_eq!(
        answers.iter().filter(|a| **a == Answer::Tarpit).count(),
        1,
        "{answers:?}"
    );
}

/// SIGTERM during fan-out to tarpits: a transaction still on the wire gets
/// `DRAIN_AT_SHUTDOWN` to finish, then is given up — the actor stops instead of waiting out
/// a slow-lane timeout (minutes) per connection, and a supervisor never has to `SIGKILL` it.
#[tokio::test(start_paused = true)]
async fn a_stop_gives_a_running_transaction_a_bounded_drain() {
    use crate::workers::DRAIN_AT_SHUTDOWN;
    let mut rig = rig(cfg(), &[("t.test", "mx.t.test")]).await;
    // Each copy takes 5 s to be answered: 8 copies in a batch take 40 s.
    rig.net.reply_delay(Duration::from_secs(5));
    let post = test_post_at(1, START_MS, u64::MAX);
    let jobs = (0..8)
        .map(|i| job(&post, i, &format!("u{i}@t.test")))
        .collect();
    rig.send(jobs).await;
    // Outcomes are reported at the end of a batch: watch the wire for the first answer.
    while rig.net.copies_to("u0@t.test").is_empty() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let stop = Instant::now();
    rig.shutdown.cancel();
    rig.actor.await.expect("actor ends");
    let took = stop.elapsed();
    // Two more copies are answered in the drain; the rest of the batch is given up.
    let answered = (0..8)
        .filter(|i| !rig.net.copies_to(&format!("u{i}@t.test")).is_empty())
        .count();
    assert!(
        took >= DRAIN_AT_SHUTDOWN && took <= DRAIN_AT_SHUTDOWN + Duration::from_secs(6),
        "stopped {took:?} after shutdown"
    );
    assert!((2..=4).contains(&answered), "{answered} copies answered");
    assert!(
        rig.reports.try_recv().is_err(),
        "nothing reported for a given-up batch"
    );
    let gauges = rig.ctx.telemetry.gauges();
    assert_eq!(
        gauges.unjournaled_copies.get(),
        0,
        "every answered copy journaled"
    );
    assert_eq!(gauges.inflight_copies.get(), 0);
    assert_eq!(gauges.connections_open.get(), 0);
}

/// A connection still being opened to a host that never answers carries no copy: a stop gives
/// it up at once.
#[tokio::test(start_paused = true)]
async fn a_stop_gives_up_a_connection_still_opening_at_once() {
    let mut rig = rig(cfg(), &[("h.test", "mx.h.test")]).await;
    rig.net.answer("mx.h.test", Answer::Hang, 100);
    let post = test_post_at(1, START_MS, u64::MAX);
    rig.send(vec![job(&post, 1, "u@h.test")]).await;
    while rig.net.connects_to("mx.h.test").is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let stop = Instant::now();
    rig.shutdown.cancel();
    rig.actor.await.expect("actor ends");
    let took = stop.elapsed();
    assert!(
        took <= Duration::from_secs(1),
        "stopped {took:?} after shutdown"
    );
    assert!(
        rig.reports.try_recv().is_err(),
        "no outcome for a copy never sent"
    );
}
