//! The spool on a disk that fills up and is freed again: new posts are refused while
//! the journal cannot be written, outcomes and completions wait in memory, and the writer
//! repairs the journal by itself once space returns — no restart, nothing lost.
//!
//! The disk is a real tmpfs of a few hundred KiB ([`herald_sim::disk::SmallDisk`]), filled
//! with a file so the journal's writes get ENOSPC exactly as on an operator's full data disk.

#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is a test failure

mod common;

use common::{body, cfg, meta, open};
use herald_sim::disk::SmallDisk;
use herald_spool::{FinalState, SpoolError};
use herald_types::MemberId;
use std::time::{Duration, Instant};

#[tokio::test]
async fn a_full_disk_pauses_the_journal_and_it_heals_when_space_returns() {
    let Some(disk) = SmallDisk::mount(512 << 10) else {
        return;
    };
    let c = cfg(disk.path());
    let (spool, _) = open(&c);
    let kept = spool.accept(meta(1), body(1, 4000)).await.unwrap();
    let completed = spool.accept(meta(2), body(2, 4000)).await.unwrap();
    for m in 1..=10 {
        spool
            .record(kept, MemberId(m), FinalState::Delivered)
            .await
            .unwrap();
    }
    spool.flush().await.unwrap();

    let filled = disk.fill("filler").unwrap();
    assert!(filled > 0 && disk.free_bytes() < 4096, "disk is full");

    // The first post to meet the full disk is refused (never acknowledged, never recovered).
    let refused = spool.accept(meta(3), body(3, 20_000)).await.unwrap_err();
    assert!(refused.is_storage_shortage(), "{refused}");
    assert!(!spool.is_writable());
    // Outcomes and a completion during the outage: accepted into memory, durable later.
    for m in 11..=3000 {
        spool
            .record(kept, MemberId(m), FinalState::Delivered)
            .await
            .unwrap();
    }
    let s2 = spool.clone();
    let completing = tokio::spawn(async move { s2.complete(completed).await });
    let s3 = spool.clone();
    let flushing = tokio::spawn(async move { s3.flush().await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !completing.is_finished() && !flushing.is_finished(),
        "they wait for the repair"
    );
    let again = spool.accept(meta(4), body(4, 100)).await.unwrap_err();
    assert!(matches!(again, SpoolError::Unwritable { .. }), "{again}");
    assert_eq!(
        spool.stats().outages,
        1,
        "one outage, however many refusals"
    );

    // Space returns: the writer notices by itself.
    std::fs::remove_file(disk.path().join("filler")).unwrap();
    let freed = Instant::now();
    flushing.await.unwrap().unwrap();
    completing.await.unwrap().unwrap();
    let healed_in = freed.elapsed();
    assert!(spool.is_writable());
    assert!(
        healed_in < Duration::from_secs(5),
        "healed in {healed_in:?}"
    );
    let later = spool.accept(meta(5), body(5, 100)).await.unwrap();
    println!("disk full: healed {healed_in:?} after space returned; filler {filled} bytes");
    drop(spool);

    // What a restart finds: the outage's outcomes and completion are durable, the refused post
    // is not there, the later one is.
    let (_spool, recovered) = open(&c);
    let ids: Vec<_> = recovered.iter().map(|r| r.id).collect();
    assert_eq!(
        ids,
        vec![kept, later],
        "completed and refused posts are gone"
    );
    let k = &recovered[0];
    assert_eq!((k.done.len(), k.delivered), (3000, 3000));
}
