//! Dispatch (`dispatch.rs`) on a hand-driven actor: which lane a worker's batch comes from, and
//! how many connections a destination and the whole scheduler get.

use super::hand_rig::{hand, job, Hand, START_MS};
use crate::config::SchedulerConfig;
use crate::messages::Job;
use crate::workers::scripted::test_post_at;
use herald_types::{LaneKind, RcptOutcome};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

fn ids(batch: &[Job]) -> Vec<i64> {
    batch.iter().map(|j| j.member.id.0).collect()
}

/// What a worker of `lane` asking for up to `max` copies gets.
fn need_work(h: &mut Hand, dest: &Arc<str>, lane: LaneKind, max: usize) -> Vec<Job> {
    let (tx, mut rx) = oneshot::channel();
    h.actor.on_need_work(dest.clone(), lane, max, tx);
    rx.try_recv().unwrap_or_default()
}

#[tokio::test]
async fn dispatch_serves_the_fast_lane_first_and_retries_when_it_is_empty() {
    let mut h = hand(SchedulerConfig::default(), &[("a.test", "mx.a.test")]).await;
    let dest = h.dest("a.test");
    let post = test_post_at(1, START_MS, u64::MAX);
    // Two retries ready in the slow lane, then two first attempts: put straight into the queues
    // (no pump), so no worker is started and the test is the only one asking for work.
    let d = h.actor.dests.get_mut(&dest).expect("destination");
    for id in [1, 2] {
        let mut j = job(&post, id, &format!("r{id}@a.test"));
        j.lane = LaneKind::Slow;
        d.slow.push_back(j);
    }
    for id in [3, 4] {
        d.fast.push_back(job(&post, id, &format!("f{id}@a.test")));
    }
    h.actor.queued = 4;
    h.actor.slow_queued = 2;

    let fast = need_work(&mut h, &dest, LaneKind::Fast, 10);
    assert_eq!(
        ids(&fast),
        [3, 4],
        "a fast worker takes first attempts first"
    );
    assert_eq!((h.actor.queued, h.actor.slow_queued), (2, 2));
    // With no first attempt left, a fast worker's open connection serves the retries.
    let rest = need_work(&mut h, &dest, LaneKind::Fast, 1);
    assert_eq!(ids(&rest), [1]);
    assert_eq!((h.actor.queued, h.actor.slow_queued), (1, 1));
}

#[tokio::test]
async fn a_slow_worker_takes_retries_before_first_attempts() {
    let mut h = hand(SchedulerConfig::default(), &[("a.test", "mx.a.test")]).await;
    let dest = h.dest("a.test");
    let post = test_post_at(1, START_MS, u64::MAX);
    let d = h.actor.dests.get_mut(&dest).expect("destination");
    d.fast.push_back(job(&post, 1, "f@a.test"));
    let mut retry = job(&post, 2, "r@a.test");
    retry.lane = LaneKind::Slow;
    d.slow.push_back(retry);
    h.actor.queued = 2;
    h.actor.slow_queued = 1;
    let batch = need_work(&mut h, &dest, LaneKind::Slow, 1);
    assert_eq!(ids(&batch), [2]);
    assert_eq!((h.actor.queued, h.actor.slow_queued), (1, 0));
}

#[tokio::test]
async fn an_idle_worker_is_parked_and_a_worker_of_a_stopping_scheduler_gets_nothing() {
    let mut h = hand(SchedulerConfig::default(), &[("a.test", "mx.a.test")]).await;
    let dest = h.dest("a.test");
    let (tx, mut rx) = oneshot::channel();
    h.actor.on_need_work(dest.clone(), LaneKind::Fast, 10, tx);
    assert!(rx.try_recv().is_err(), "no answer yet: the worker waits");
    assert_eq!(h.actor.dests.get(&dest).map(|d| d.parked.len()), Some(1));
    h.actor.shutting_down = true;
    let (tx, mut rx) = oneshot::channel();
    h.actor.on_need_work(dest, LaneKind::Fast, 10, tx);
    assert_eq!(rx.try_recv().map(|b| b.len()).ok(), Some(0));
}

/// Hands the workers' messages to the actor (and ticks it while they are quiet) until `copies`
/// copies are delivered, and returns the most connections seen at once, overall and per
/// destination. Run on a paused clock: a quiet spell auto-advances time to the next tick, so
/// the idle-connection close is reached in virtual milliseconds.
async fn drive(h: &mut Hand, copies: usize) -> (usize, usize) {
    let (mut most, mut most_per_dest, mut delivered) = (0, 0, 0);
    let run = async {
        while delivered < copies {
            // The actor's tick, when the workers are quiet: it closes idle connections.
            match tokio::time::timeout(Duration::from_millis(20), h.ctrl.recv()).await {
                Ok(Some(msg)) => h.actor.handle(msg).await,
                Ok(None) => panic!("every worker context is gone"),
                Err(_) => h.actor.on_tick().await,
            }
            most = most.max(h.actor.connections);
            let per_dest = h.actor.dests.values().map(|d| d.workers()).max();
            most_per_dest = most_per_dest.max(per_dest.unwrap_or(0));
            delivered += h
                .outcomes()
                .iter()
                .filter(|o| matches!(o.outcome, RcptOutcome::Delivered(_)))
                .count();
        }
    };
    tokio::time::timeout(Duration::from_secs(20), run)
        .await
        .expect("every copy delivered");
    (most, most_per_dest)
}

#[tokio::test(start_paused = true)]
async fn a_destination_gets_one_connection_until_its_host_answers_then_up_to_its_limit() {
    let cfg = SchedulerConfig {
        max_connections_per_destination: 2,
        max_copies_per_batch: 1,
        ..SchedulerConfig::default()
    };
    let mut h = hand(cfg, &[("a.test", "mx.a.test")]).await;
    let post = test_post_at(1, START_MS, u64::MAX);
    let jobs = (0..8).map(|i| job(&post, i, &format!("u{i}@a.test")));
    h.actor.accept_jobs(jobs.collect()).await;
    // Eight copies, one per batch, but the host has not answered yet: one connection attempt
    // (a hung host holds one worker, not eight).
    assert_eq!(h.actor.connections, 1);
    let (most, most_per_dest) = drive(&mut h, 8).await;
    assert_eq!(
        most_per_dest, 2,
        "after the first answer, up to the destination's limit"
    );
    assert_eq!(most, 2);
    assert_eq!(h.net.connects_to("mx.a.test").len(), 2);
}

/// On 2,000 domains (ten million members), idle connections (parked, waiting for more copies of
/// their destination) held every slot of the global budget while destinations with thousands of
/// ready copies waited out the idle time. An idle connection now gives its slot up at once when
/// another destination starves: within seconds of virtual time (the paused clock also jumps
/// while a worker's blocking work runs on a loaded machine), not the ten minutes of idle time.
#[tokio::test(start_paused = true)]
async fn an_idle_connection_gives_its_slot_to_a_starved_destination_at_once() {
    let cfg = SchedulerConfig {
        max_connections: 2,
        idle_connection_ms: 600_000,
        ..SchedulerConfig::default()
    };
    let dests = [
        ("a.test", "mx.a.test"),
        ("b.test", "mx.b.test"),
        ("c.test", "mx.c.test"),
    ];
    let mut h = hand(cfg, &dests).await;
    let post = test_post_at(1, START_MS, u64::MAX);
    // a and b take both slots; c starves.
    let first = vec![
        job(&post, 1, "u@a.test"),
        job(&post, 2, "u@b.test"),
        job(&post, 3, "u@c.test"),
    ];
    h.actor.accept_jobs(first).await;
    assert_eq!(h.actor.connections, 2);
    let t0 = tokio::time::Instant::now();
    drive(&mut h, 3).await;
    assert!(
        t0.elapsed() < Duration::from_secs(20),
        "the starved destination waited {:?} for an idle connection's slot",
        t0.elapsed()
    );
    for rcpt in ["u@a.test", "u@b.test", "u@c.test"] {
        assert_eq!(h.net.copies_to(rcpt).len(), 1, "{rcpt} served once");
    }
    // With nobody starving, an idle connection stays for its idle time (reused by the next copy
    // of its destination): let the workers ask for more and park.
    while let Ok(Some(msg)) = tokio::time::timeout(Duration::from_millis(20), h.ctrl.recv()).await {
        h.actor.handle(msg).await;
    }
    let parked: usize = h.actor.dests.values().map(|d| d.parked.len()).sum();
    assert!(parked >= 1, "idle connections park when nobody waits");
    assert!(h.actor.starved.is_empty());
}

#[tokio::test(start_paused = true)]
async fn when_the_connection_budget_is_spent_a_destination_waits_for_a_free_connection() {
    let cfg = SchedulerConfig {
        max_connections: 1,
        // The first connection stays open, idle, this long after its copy; then it closes and
        // the waiting destination gets the connection.
        idle_connection_ms: 10,
        ..SchedulerConfig::default()
    };
    let mut h = hand(cfg, &[("a.test", "mx.a.test"), ("b.test", "mx.b.test")]).await;
    let post = test_post_at(1, START_MS, u64::MAX);
    let jobs = vec![job(&post, 1, "u@a.test"), job(&post, 2, "u@b.test")];
    h.actor.accept_jobs(jobs).await;
    assert_eq!(h.actor.connections, 1);
    assert_eq!(
        h.actor.starved.len(),
        1,
        "the other destination waits for the budget"
    );
    let (most, _) = drive(&mut h, 2).await;
    assert_eq!(most, 1, "never more than the global budget");
    assert!(h.actor.starved.is_empty());
    for rcpt in ["u@a.test", "u@b.test"] {
        assert_eq!(h.net.copies_to(rcpt).len(), 1, "{rcpt} served once");
    }
}
