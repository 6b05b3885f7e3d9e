//! Tests of the deferred queue (`deferred.rs`) and of parking and resuming (`parking.rs`): a
//! parked copy comes back whole from disk, its files go when it does, its window permit is
//! given back while it waits, and copies of a destination whose hosts are down are parked on
//! arrival instead of filling the in-memory queue.

use super::deferred::DeferredStore;
use super::hand_rig::{hand, job, START_MS};
use crate::config::SchedulerConfig;
use crate::workers::scripted::test_post_at;
use herald_types::{DeferralKind, LaneKind, Reply};
use std::time::Duration;
use tokio::time::Instant;

fn files(dir: &std::path::Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    out.sort();
    out
}

#[tokio::test(start_paused = true)]
async fn a_parked_copy_comes_back_whole_from_disk_and_its_file_goes_with_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("deferred");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("7.jsonl"), b"left by a previous process\n").expect("stale");
    let mut store = DeferredStore::open(Some(dir.clone()));
    assert!(files(&dir).is_empty(), "a previous life's lines are gone");
    let post = test_post_at(9, START_MS, 3_600_000);
    let mut j = job(&post, 42, "Someone@Example.test");
    j.tries = 3;
    j.lane = LaneKind::Slow;
    j.deferral = Some((
        DeferralKind::Greylist,
        Box::new(Reply::new(450, None, "greylisted")),
    ));
    j.grey_delay = Some(Duration::from_secs(90));
    let greylisted_at = Instant::now();
    j.greylisted_at = Some(greylisted_at);
    let permits = post.window.available_permits();
    let copy = store.park(j);
    assert!(copy.on_disk());
    use std::os::unix::fs::PermissionsExt;
    let mode =
        |p: &std::path::Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700, "members' addresses: owner only");
    assert_eq!(mode(&dir.join("0.jsonl")), 0o600);
    assert_eq!(
        post.window.available_permits(),
        permits + 1,
        "the permit is back"
    );
    assert_eq!(copy.expires_ms, START_MS + 3_600_000);
    assert_eq!((store.len(), files(&dir).len()), (1, 1));
    assert!(store.disk_bytes() > 0);

    tokio::time::advance(Duration::from_secs(95)).await;
    let back = store.resume(copy).expect("read back");
    assert_eq!(back.member.id.0, 42);
    assert_eq!(back.member.address.to_string(), "Someone@example.test");
    assert_eq!((back.tries, back.lane), (3, LaneKind::Slow));
    let (kind, reply) = back.deferral.as_ref().expect("deferral");
    assert_eq!(
        (*kind, reply.code, reply.text.as_str()),
        (DeferralKind::Greylist, 450, "greylisted")
    );
    assert_eq!(back.grey_delay, Some(Duration::from_secs(90)));
    // The time it was first greylisted survives the 95 s parked (the destination learns its
    // greylisting interval from the whole wait).
    let at = back.greylisted_at.expect("greylisted_at");
    let off = at.max(greylisted_at) - at.min(greylisted_at);
    assert!(off <= Duration::from_millis(1), "{off:?}");
    assert!(Instant::now() - at >= Duration::from_secs(95));
    assert!(!back.holds_permit);
    drop(back);
    assert_eq!(
        post.window.available_permits(),
        permits + 1,
        "no second permit"
    );
    assert_eq!((store.len(), store.disk_bytes()), (0, 0));
}

#[tokio::test]
async fn segments_are_removed_once_every_line_in_them_was_read_back() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut store = DeferredStore::open(Some(tmp.path().to_path_buf()));
    let post = test_post_at(1, START_MS, u64::MAX);
    // ~200-byte lines: 16 MiB segments need ~85,000 of them; 200,000 span three segments.
    let copies: Vec<_> = (0..200_000)
        .map(|i| store.park(job(&post, i, &format!("m{i}@d{}.test", i % 50))))
        .collect();
    assert!(files(tmp.path()).len() >= 3, "{:?}", files(tmp.path()));
    for (n, copy) in copies.into_iter().enumerate() {
        let job = store.resume(copy).expect("read back");
        assert_eq!(job.member.id.0, n as i64);
    }
    assert_eq!(store.len(), 0);
    assert_eq!(store.disk_bytes(), 0);
    // Only the segment being written is left, and it is empty.
    let left = files(tmp.path());
    assert_eq!(left.len(), 1, "{left:?}");
    let len = std::fs::metadata(tmp.path().join(&left[0]))
        .expect("meta")
        .len();
    assert_eq!(len, 0);
}

#[tokio::test(start_paused = true)]
async fn copies_for_a_destination_whose_hosts_are_down_wait_on_disk_not_in_the_window() {
    let cfg = SchedulerConfig {
        max_queued_copies: 10,
        max_queued_copies_per_post: 10,
        ..SchedulerConfig::default()
    };
    let mut h = hand(
        cfg,
        &[("dead.test", "mx.dead.test"), ("live.test", "mx.live.test")],
    )
    .await;
    let tmp = tempfile::tempdir().expect("tempdir");
    h.actor.deferred = DeferredStore::open(Some(tmp.path().to_path_buf()));
    let dead = h.dest("dead.test");
    let hosts = h.actor.dests[&dead].hosts.clone();
    // The host fails twice: down for `destination_backoff_secs`.
    let key = crate::messages::HostKey {
        name: "mx.dead.test".into(),
        addr: [127, 0, 0, 1].into(),
    };
    for _ in 0..2 {
        h.actor.health.record_failure(&key, "refused", START_MS);
    }
    assert!(h.actor.health.plan_is_empty(&hosts, START_MS));
    let post = test_post_at(1, START_MS, u64::MAX);
    let jobs: Vec<_> = (0..100)
        .map(|i| job(&post, i, &format!("m{i}@dead.test")))
        .collect();
    h.actor.accept_jobs(jobs).await;
    assert_eq!(
        h.actor.queued, 0,
        "none of them takes a place in the window"
    );
    assert_eq!(h.actor.deferred.len(), 100);
    assert_eq!(h.actor.dests[&dead].waiting.len(), 100);
    assert!(h.actor.dests[&dead]
        .waiting
        .iter()
        .all(|w| w.copy.on_disk()));
    // Live copies still get in.
    let live: Vec<_> = (100..105)
        .map(|i| job(&post, i, &format!("m{i}@live.test")))
        .collect();
    h.actor.accept_jobs(live).await;
    assert_eq!(h.actor.queued, 5);

    // When their time comes and the host is still down (its probe went out and failed), they
    // are parked again until the next probe, not brought into the window.
    h.actor
        .health
        .record_failure(&key, "refused again", START_MS + 31_000);
    tokio::time::advance(Duration::from_secs(31)).await;
    h.actor.resume_due(Instant::now()).await;
    assert_eq!((h.actor.queued, h.actor.deferred.len()), (5, 100));
    let next = h.actor.dests[&dead]
        .waiting
        .peek()
        .map(|w| w.at)
        .expect("parked");
    assert!(next > Instant::now(), "parked until the next probe");

    // The host answers: every parked copy is due now and comes back, in batches the window
    // has room for (at least one batch per tick).
    h.actor
        .health
        .record_success(&key, &Default::default(), START_MS + 40_000);
    for d in h.actor.dests.values_mut() {
        d.wake_waiting(Instant::now());
    }
    h.actor.resume_due(Instant::now()).await;
    assert_eq!(
        h.actor.queued,
        5 + 16,
        "one batch: the window is full of live copies"
    );
    assert_eq!(h.actor.deferred.len(), 100 - 16);
}

/// A post whose every copy is parked keeps its rendered bytes on disk, not in memory: the
/// first copy resumed reads them back and is spliced from the same bytes; a post still used by
/// a queued copy stays in memory; the file goes with the post's last parked copy; a damaged
/// file makes the copy's post unknown (logged; the spool keeps the copy), never a garbled copy.
#[tokio::test(start_paused = true)]
async fn a_post_whose_copies_all_wait_keeps_its_bytes_on_disk_until_one_is_tried() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("deferred");
    let mut store = DeferredStore::open(Some(dir.clone()));
    let member = |post: &std::sync::Arc<crate::messages::PostCtx>, i: i64| {
        job(post, i, &format!("m{i}@dead.test"))
    };
    let mut expected = Vec::new();
    let (parked, busy) = {
        let post = test_post_at(1, START_MS, u64::MAX);
        let first = member(&post, 1);
        first.post.template.splice(&first.member, &mut expected);
        let parked = vec![store.park(first), store.park(member(&post, 2))];
        (parked, test_post_at(2, START_MS, u64::MAX))
    };
    // Post 2 has a copy parked and one still queued (held here).
    let queued = member(&busy, 3);
    let busy_parked = store.park(member(&busy, 4));
    drop(busy);
    assert_eq!((store.posts(), store.posts_in_memory()), (2, 2));

    store.spill_idle(Instant::now());
    assert_eq!(store.posts_in_memory(), 2, "not before SPILL_EVERY");
    tokio::time::advance(super::deferred::SPILL_EVERY).await;
    store.spill_idle(Instant::now());
    assert_eq!(
        (store.posts(), store.posts_in_memory()),
        (2, 1),
        "post 1 went to disk, post 2 is still used by a queued copy"
    );
    let tpl = dir
        .join("posts")
        .join(format!("{}.tpl", herald_types::PostId(1)));
    assert!(tpl.exists());
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&tpl).expect("meta").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    let mut parked = parked.into_iter();
    let back = store
        .resume(parked.next().expect("first"))
        .expect("read back");
    let mut copy = Vec::new();
    back.post.template.splice(&back.member, &mut copy);
    assert_eq!(
        copy, expected,
        "the same copy as before the bytes went to disk"
    );
    assert_eq!(store.posts_in_memory(), 2);
    drop(back);
    // Spilled again while its last copy waits: the file is already there, kept as it is.
    tokio::time::advance(super::deferred::SPILL_EVERY).await;
    store.spill_idle(Instant::now());
    assert_eq!(store.posts_in_memory(), 1);
    std::fs::write(&tpl, b"damaged").expect("damage");
    assert!(
        store.resume(parked.next().expect("second")).is_none(),
        "a damaged file never becomes a copy"
    );
    assert_eq!(store.read_failures, 1);
    assert!(
        !tpl.exists(),
        "the file went with the post's last parked copy"
    );

    drop(queued);
    let back = store.resume(busy_parked).expect("post 2 from memory");
    drop(back);
    assert_eq!((store.len(), store.posts(), store.disk_bytes()), (0, 0, 0));

    // A new process starts with no post files of the last one.
    std::fs::create_dir_all(dir.join("posts")).expect("mkdir");
    std::fs::write(&tpl, b"left behind").expect("stale");
    let _store = DeferredStore::open(Some(dir.clone()));
    assert!(!dir.join("posts").exists());
}

#[test]
fn a_parked_copy_costs_about_a_hundred_bytes_of_memory() {
    // What the destination's index keeps per parked copy (the line itself is on disk).
    let size = std::mem::size_of::<super::queue::Waiting>();
    eprintln!("a parked copy: {size} bytes of index");
    assert!(size <= 104, "{size} bytes");
}

/// A destination whose hosts were down for a while (many copies parked) gives the index's
/// memory back once its copies have come out, instead of keeping the peak for the process's
/// life.
#[tokio::test(start_paused = true)]
async fn a_destination_gives_back_its_parked_index_after_the_copies_leave() {
    use super::queue::{Destination, Waiting};
    let mut store = DeferredStore::open(None);
    let post = test_post_at(1, START_MS, u64::MAX);
    let mut d = Destination::new("dead.test".into(), Default::default(), "dead.test".into());
    let now = Instant::now();
    for i in 0..20_000 {
        d.push_waiting(Waiting {
            at: now,
            seq: i as u64,
            kind: DeferralKind::HostDown,
            copy: store.park(job(&post, i, &format!("m{i}@dead.test"))),
        });
    }
    let peak = d.waiting.capacity();
    assert!(peak >= 20_000);
    while let Some(w) = d.pop_due(now) {
        drop(store.resume(w.copy));
    }
    assert!(
        d.waiting.capacity() <= 1024,
        "{} of {peak} kept",
        d.waiting.capacity()
    );
}
