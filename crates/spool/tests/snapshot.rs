//! `Spool::snapshot`, the backup's cut of the journal: copying the linked bytes gives a journal
//! that recovers to exactly the state at the cut, even while the live spool goes on accepting,
//! recording, completing, rolling segments and compacting (deleting) the ones the cut named.
#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is a test failure

mod common;

use common::{body, meta, open, segments};
use herald_spool::{FinalState, SpoolConfig};
use herald_types::{MemberId, PostId};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;

/// Copies `bytes` of each linked segment into `<dest>/journal/`, as a backup does.
fn copy_cut(cut: &[herald_spool::SnapshotSegment], dest: &Path) {
    let journal = dest.join("journal");
    std::fs::create_dir_all(&journal).unwrap();
    for seg in cut {
        let mut from = std::fs::File::open(&seg.path).unwrap().take(seg.bytes);
        let mut bytes = Vec::new();
        from.read_to_end(&mut bytes).unwrap();
        assert_eq!(
            bytes.len() as u64,
            seg.bytes,
            "{} is shorter than its cut",
            seg.name
        );
        let mut to = std::fs::File::create(journal.join(&seg.name)).unwrap();
        to.write_all(&bytes).unwrap();
        std::fs::remove_file(&seg.path).unwrap();
    }
}

#[tokio::test]
async fn a_copied_cut_recovers_to_the_state_at_the_cut_while_the_spool_goes_on() {
    let live_dir = tempfile::tempdir().unwrap();
    // Small segments, so the work after the cut rolls and compacts several times.
    let c = SpoolConfig {
        segment_max_bytes: 8 << 10,
        ..SpoolConfig::new(live_dir.path())
    };
    let (spool, _) = open(&c);
    let mut expected: BTreeMap<PostId, Vec<i64>> = BTreeMap::new();
    let mut posts = Vec::new();
    for n in 0..6u64 {
        let id = spool.accept(meta(n), body(n, 3000)).await.unwrap();
        posts.push(id);
        for m in 0..(n as i64 * 5) {
            spool
                .record(id, MemberId(m), FinalState::Delivered)
                .await
                .unwrap();
        }
        expected.insert(id, (0..(n as i64 * 5)).collect());
    }
    // One post finished before the cut: it must not come back.
    spool.complete(posts[0]).await.unwrap();
    expected.remove(&posts[0]);
    // Outcomes recorded but not yet committed are committed by the cut itself.
    let staging = live_dir.path().join("backup-staging");
    let cut = spool.snapshot(&staging).await.unwrap();
    assert!(cut.len() > 1, "the test needs several segments: {cut:?}");

    // The live spool goes on: more posts, outcomes for the old ones, completions that make the
    // cut's oldest segments deletable, rolls.
    for n in 10..20u64 {
        let id = spool.accept(meta(n), body(n, 3000)).await.unwrap();
        spool
            .record(id, MemberId(1), FinalState::Delivered)
            .await
            .unwrap();
    }
    for &id in &posts[1..4] {
        spool
            .record(id, MemberId(999), FinalState::Failed)
            .await
            .unwrap();
        spool.complete(id).await.unwrap();
    }
    spool.flush().await.unwrap();
    let live_names: Vec<String> = segments(live_dir.path())
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(
        cut.iter().any(|s| !live_names.contains(&s.name)),
        "compaction should have deleted a segment the cut holds (live: {live_names:?})"
    );

    let restored = tempfile::tempdir().unwrap();
    copy_cut(&cut, restored.path());
    let (_copy, recovered) = open(&SpoolConfig::new(restored.path()));
    let got: BTreeMap<PostId, Vec<i64>> = recovered
        .iter()
        .map(|p| {
            let mut done: Vec<i64> = p.done.iter().map(|m| m.0).collect();
            done.sort_unstable();
            (p.id, done)
        })
        .collect();
    assert_eq!(
        got, expected,
        "the copy recovers to the cut, nothing after it"
    );
    for p in &recovered {
        let n = posts.iter().position(|&id| id == p.id).unwrap() as u64;
        assert_eq!(p.body, body(n, 3000), "bodies come back whole");
    }
}

#[tokio::test]
async fn a_snapshot_into_an_unwritable_place_is_an_error_and_the_spool_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let (spool, _) = open(&SpoolConfig::new(dir.path()));
    let id = spool.accept(meta(1), body(1, 100)).await.unwrap();
    let blocker = dir.path().join("a-file");
    std::fs::write(&blocker, b"x").unwrap();
    let err = spool.snapshot(&blocker.join("sub")).await.unwrap_err();
    assert!(err.to_string().contains("a-file"), "{err}");
    spool
        .record(id, MemberId(3), FinalState::Delivered)
        .await
        .unwrap();
    spool.flush().await.unwrap();
    assert_eq!(spool.progress(id).unwrap().delivered, 1);
}
