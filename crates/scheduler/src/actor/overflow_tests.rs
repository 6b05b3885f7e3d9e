//! Room per destination (`overflow.rs`) on a hand-driven actor: a destination past its share
//! of the in-memory queue parks the rest on disk in arrival order, with no try charged; they
//! come back oldest first when it falls below half its share (when a batch is taken, and each
//! tick); posts whose every copy waits go to disk; retries due are not held back by them; the
//! bound follows the destination's connection limit.

use super::deferred::DeferredStore;
use super::hand_rig::{hand, job, Hand, START_MS};
use crate::config::SchedulerConfig;
use crate::messages::{Job, Selector};
use crate::workers::scripted::test_post_at;
use herald_types::{DeferralKind, LaneKind};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::time::Instant;

fn need_work(h: &mut Hand, dest: &Arc<str>, max: usize) -> Vec<Job> {
    let (tx, mut rx) = oneshot::channel();
    h.actor.on_need_work(dest.clone(), LaneKind::Fast, max, tx);
    rx.try_recv().unwrap_or_default()
}

/// A window of 200: each destination's share is 50.
async fn rig(tmp: &tempfile::TempDir) -> (Hand, Arc<str>, Arc<str>) {
    let cfg = SchedulerConfig {
        max_queued_copies: 200,
        max_queued_copies_per_post: 200,
        ..SchedulerConfig::default()
    };
    let mut h = hand(
        cfg,
        &[("slow.test", "mx.slow.test"), ("fast.test", "mx.fast.test")],
    )
    .await;
    h.actor.deferred = DeferredStore::open(Some(tmp.path().to_path_buf()));
    let (slow, fast) = (h.dest("slow.test"), h.dest("fast.test"));
    (h, slow, fast)
}

#[tokio::test(start_paused = true)]
async fn past_its_share_a_destination_parks_the_rest_in_order_and_takes_them_back_below_half() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mut h, slow, fast) = rig(&tmp).await;
    assert_eq!(h.actor.room_bound(&slow), 50);
    let post = test_post_at(1, START_MS, u64::MAX);
    let jobs: Vec<_> = (0..300)
        .map(|i| job(&post, i, &format!("m{i}@slow.test")))
        .collect();
    h.actor.accept_jobs(jobs).await;
    let d = &h.actor.dests[&slow];
    assert_eq!((d.ready_len(), d.overflow.len()), (50, 250));
    assert!(d.overflow.iter().all(|c| c.on_disk()));
    assert_eq!((h.actor.queued, h.actor.deferred.len()), (50, 250));
    assert!(h.outcomes().is_empty(), "no deferral is reported");
    // They are work that may be tried now: intake's backpressure counts them.
    h.actor.update_gauges();
    let g = h.actor.ctx.telemetry.gauges();
    assert_eq!(g.deferred_copies_for_room.get(), 250);
    assert_eq!(g.destination_ready_max.get(), 50);
    assert_eq!(g.unfinished_copies.get(), 300);
    // Another destination still gets its copies into memory.
    let live: Vec<_> = (1000..1020)
        .map(|i| job(&post, i, &format!("m{i}@fast.test")))
        .collect();
    h.actor.accept_jobs(live).await;
    assert_eq!(h.actor.dests[&fast].ready_len(), 20);

    // Below half its share (a worker took 30 copies), the tick brings copies back up to it.
    let taken =
        h.actor
            .dests
            .get_mut(&slow)
            .expect("dest")
            .take_batch(LaneKind::Fast, 30, usize::MAX);
    h.actor.queued -= taken.len();
    let mut seen: Vec<i64> = taken.iter().map(|j| j.member.id.0).collect();
    h.actor.refill_overflow().await;
    let d = &h.actor.dests[&slow];
    assert_eq!((d.ready_len(), d.overflow.len()), (50, 220));
    // A worker taking batches gets the rest oldest first, each once, whole: no try charged, no
    // deferral; they come back as batches are taken, never past the share.
    let mut peak = 0;
    loop {
        let batch = need_work(&mut h, &slow, 16);
        if batch.is_empty() {
            break;
        }
        peak = peak.max(h.actor.dests[&slow].ready_len());
        for j in batch {
            assert_eq!((j.tries, j.lane), (0, LaneKind::Fast));
            assert!(j.deferral.is_none());
            seen.push(j.member.id.0);
        }
    }
    assert_eq!(seen, (0..300).collect::<Vec<i64>>());
    assert!(peak <= 50, "{peak} ready at most");
    assert_eq!(h.actor.deferred.len(), 0);
    assert_eq!(h.actor.queued, 20, "the fast destination's copies");
}

#[tokio::test(start_paused = true)]
async fn a_post_whose_remaining_copies_all_wait_for_room_goes_to_disk() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mut h, slow, _) = rig(&tmp).await;
    let first = test_post_at(1, START_MS, u64::MAX);
    let second = test_post_at(2, START_MS, u64::MAX);
    let mut jobs: Vec<_> = (0..60)
        .map(|i| job(&first, i, &format!("m{i}@slow.test")))
        .collect();
    jobs.extend((100..200).map(|i| job(&second, i, &format!("m{i}@slow.test"))));
    drop((first, second));
    h.actor.accept_jobs(jobs).await;
    assert_eq!(h.actor.dests[&slow].overflow.len(), 110);
    tokio::time::advance(super::deferred::SPILL_EVERY).await;
    h.actor.deferred.spill_idle(Instant::now());
    assert_eq!(
        (h.actor.deferred.posts(), h.actor.deferred.posts_in_memory()),
        (2, 1),
        "the second post's bytes are on disk; the first is still used by ready copies"
    );
    // Its copies come back whole when there is room (its bytes read back from disk).
    let mut second_copies = 0;
    loop {
        let batch = need_work(&mut h, &slow, 16);
        if batch.is_empty() {
            break;
        }
        for j in batch
            .iter()
            .filter(|j| j.post.id == herald_types::PostId(2))
        {
            let mut copy = Vec::new();
            j.post.template.splice(&j.member, &mut copy);
            assert!(!copy.is_empty());
            second_copies += 1;
        }
    }
    assert_eq!(second_copies, 100);
    assert_eq!((h.actor.deferred.len(), h.actor.deferred.posts()), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn retries_due_come_back_while_copies_wait_for_room() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mut h, slow, _) = rig(&tmp).await;
    let post = test_post_at(1, START_MS, u64::MAX);
    let jobs: Vec<_> = (0..200)
        .map(|i| job(&post, i, &format!("m{i}@slow.test")))
        .collect();
    h.actor.accept_jobs(jobs).await;
    for i in 500..520 {
        let mut j = job(&post, i, &format!("r{i}@slow.test"));
        j.lane = LaneKind::Slow;
        j.tries = 1;
        h.actor.park(&slow, Instant::now(), DeferralKind::Other, j);
    }
    h.actor.resume_due(Instant::now()).await;
    h.actor.refill_overflow().await;
    let d = &h.actor.dests[&slow];
    assert_eq!(
        (
            d.fast.len(),
            d.slow.len(),
            d.waiting.len(),
            d.overflow.len()
        ),
        (50, 16, 4, 150),
        "retries fill the share and one batch past it"
    );
}

#[tokio::test(start_paused = true)]
async fn the_operator_reaches_copies_waiting_for_room() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mut h, slow, _) = rig(&tmp).await;
    let post = test_post_at(1, START_MS, u64::MAX);
    let jobs: Vec<_> = (0..200)
        .map(|i| job(&post, i, &format!("m{i}@slow.test")))
        .collect();
    h.actor.accept_jobs(jobs).await;
    // Retry now: the copy goes first when there is room.
    let sel = Selector::Recipient("M99@slow.test".into());
    assert_eq!(h.actor.overflow_first(&sel), 1);
    assert_eq!(h.actor.dests[&slow].overflow.len(), 150);
    let mut order = Vec::new();
    for _ in 0..4 {
        order.extend(need_work(&mut h, &slow, 16).iter().map(|j| j.member.id.0));
    }
    let mut want: Vec<i64> = (0..50).collect();
    want.push(99);
    want.extend(50..63);
    assert_eq!(order, want, "m99 first of the copies that waited");
    // Give up: every match leaves the deferred queue (two refills took 64 of the 150).
    let taken = h.actor.take_overflow(&Selector::Domain("slow.test".into()));
    assert_eq!(taken.len(), 150 - 64);
    assert_eq!(h.actor.dests[&slow].overflow.len(), 0);
    assert_eq!(h.actor.deferred.len(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_destinations_share_follows_its_connection_limit() {
    let h = hand(SchedulerConfig::default(), &[("a.test", "mx.a.test")]).await;
    let dest = h.dest("a.test");
    // A destination just met has two connections (slow start): the floor.
    assert_eq!(h.actor.room_bound(&dest), super::overflow::ROOM_FLOOR);
    // Its limit doubles every second up to 20: 20 × 16 × 8.
    tokio::time::advance(Duration::from_secs(5)).await;
    assert_eq!(h.actor.room_bound(&dest), 2560);
}
