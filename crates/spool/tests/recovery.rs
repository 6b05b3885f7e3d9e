//! Recovery from damaged journals: torn tails are cut, corruption is quarantined (never silently
//! dropped), and hostile segment files cause a quarantine, not a panic.
#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is a test failure

mod common;

use common::{body, cfg, journal_files, meta, open, segments, Rng};
use herald_spool::FinalState;
use herald_types::{MemberId, PostId};
use std::io::Write;
use std::path::Path;

/// Three posts; the first has members 1..=10 final. Returns the ids.
async fn populate(dir: &Path) -> Vec<PostId> {
    let (spool, _) = open(&cfg(dir));
    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push(spool.accept(meta(n), body(n, 700)).await.unwrap());
    }
    for m in 1..=10 {
        spool
            .record(ids[0], MemberId(m), FinalState::Delivered)
            .await
            .unwrap();
    }
    spool.close().await.unwrap();
    ids
}

fn append(path: &Path, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(bytes).unwrap();
}

#[tokio::test]
async fn garbage_after_the_last_record_is_cut_as_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let ids = populate(dir.path()).await;
    let seg = segments(dir.path()).pop().unwrap();
    let mut rng = Rng(0x5eed);
    append(&seg, &rng.bytes(3000));

    let (spool, recovered) = open(&cfg(dir.path()));
    assert_eq!(recovered.iter().map(|p| p.id).collect::<Vec<_>>(), ids);
    assert_eq!(recovered[0].done.len(), 10);
    assert_eq!(spool.stats().torn_tail_bytes, 3000);
    assert!(journal_files(dir.path(), ".corrupt").is_empty());
    // The spool keeps working on the repaired segment.
    let more = spool.accept(meta(7), body(7, 100)).await.unwrap();
    drop(spool);
    let (spool, recovered) = open(&cfg(dir.path()));
    assert_eq!(recovered.len(), 4);
    assert_eq!(recovered[3].id, more);
    assert_eq!(spool.stats().torn_tail_bytes, 0);
}

#[tokio::test]
async fn a_record_cut_in_half_is_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let ids = populate(dir.path()).await;
    let seg = segments(dir.path()).pop().unwrap();
    // The last record is the outcome for member 10 (27 bytes): cut it in the middle.
    let len = std::fs::metadata(&seg).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&seg)
        .unwrap()
        .set_len(len - 12)
        .unwrap();

    let (spool, recovered) = open(&cfg(dir.path()));
    assert_eq!(recovered.iter().map(|p| p.id).collect::<Vec<_>>(), ids);
    let done: Vec<i64> = recovered[0].done.iter().map(|m| m.0).collect();
    assert_eq!(
        done,
        (1..=9).collect::<Vec<_>>(),
        "everything before the cut survives"
    );
    assert_eq!(spool.stats().torn_tail_bytes, 27 - 12);
    assert!(journal_files(dir.path(), ".corrupt").is_empty());
}

#[tokio::test]
async fn corruption_inside_the_last_segment_is_quarantined_not_cut() {
    let dir = tempfile::tempdir().unwrap();
    let ids = populate(dir.path()).await;
    let seg = segments(dir.path()).pop().unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    // Damage the second post's body: intact records follow, so this is not a torn write.
    let needle = b"line 1 of the body";
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap();
    bytes[at] ^= 0x01;
    std::fs::write(&seg, &bytes).unwrap();

    let (spool, recovered) = open(&cfg(dir.path()));
    assert_eq!(
        recovered.iter().map(|p| p.id).collect::<Vec<_>>(),
        vec![ids[0]]
    );
    assert!(
        recovered[0].done.is_empty(),
        "its outcomes came after the damage"
    );
    assert_eq!(spool.stats().quarantined_segments, 1);
    let corrupt = journal_files(dir.path(), ".corrupt");
    assert_eq!(corrupt.len(), 1);
    assert_eq!(
        std::fs::read(&corrupt[0]).unwrap(),
        bytes,
        "kept verbatim for the operator"
    );
    drop(spool);

    // What was returned is now what the journal says: a second open agrees, and finds no more damage.
    let (spool, recovered) = open(&cfg(dir.path()));
    assert_eq!(
        recovered.iter().map(|p| p.id).collect::<Vec<_>>(),
        vec![ids[0]]
    );
    assert_eq!(recovered[0].body, body(0, 700));
    assert_eq!(spool.stats().quarantined_segments, 0);
    assert_eq!(journal_files(dir.path(), ".corrupt").len(), 1);
}

#[tokio::test]
async fn corruption_in_an_older_segment_is_quarantined() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = cfg(dir.path());
    c.segment_max_bytes = 4096;
    let (spool, _) = open(&c);
    // A 5000-byte post fills segment 1, so the next post lands in segment 2.
    let first = spool.accept(meta(1), body(1, 5000)).await.unwrap();
    let second = spool.accept(meta(2), body(2, 100)).await.unwrap();
    drop(spool);
    let segs = segments(dir.path());
    assert_eq!(segs.len(), 2);
    let mut bytes = std::fs::read(&segs[0]).unwrap();
    bytes[2000] ^= 0x40;
    std::fs::write(&segs[0], bytes).unwrap();

    let (spool, recovered) = open(&c);
    assert_eq!(
        recovered.iter().map(|p| p.id).collect::<Vec<_>>(),
        vec![second]
    );
    assert_ne!(first, second);
    assert_eq!(spool.stats().quarantined_segments, 1);
    assert_eq!(journal_files(dir.path(), ".corrupt").len(), 1);
    drop(spool);
    let (_spool, recovered) = open(&c);
    assert_eq!(
        recovered.iter().map(|p| p.id).collect::<Vec<_>>(),
        vec![second]
    );
}

#[tokio::test]
async fn random_bytes_as_a_segment_are_quarantined() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    std::fs::create_dir_all(&journal).unwrap();
    let mut rng = Rng(42);
    std::fs::write(journal.join("0000000000000001.log"), rng.bytes(64 << 10)).unwrap();
    std::fs::write(journal.join("README.txt"), b"not a segment").unwrap();

    let (spool, recovered) = open(&cfg(dir.path()));
    assert!(recovered.is_empty());
    assert_eq!(spool.stats().quarantined_segments, 1);
    assert!(journal.join("0000000000000001.log.corrupt").exists());
    assert!(
        journal.join("README.txt").exists(),
        "strangers are left alone"
    );
    let id = spool.accept(meta(1), body(1, 100)).await.unwrap();
    drop(spool);
    let (_spool, recovered) = open(&cfg(dir.path()));
    assert_eq!(recovered.iter().map(|p| p.id).collect::<Vec<_>>(), vec![id]);
    // The new segment did not reuse the quarantined file's seq.
    assert!(!segments(dir.path())
        .iter()
        .any(|p| p.ends_with("0000000000000001.log")));
}

#[tokio::test]
async fn a_random_segment_after_good_ones_loses_nothing_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let ids = populate(dir.path()).await;
    let last = segments(dir.path()).pop().unwrap();
    let name = last.file_name().unwrap().to_str().unwrap();
    let next = u64::from_str_radix(&name[..16], 16).unwrap() + 1;
    let hostile = dir.path().join("journal").join(format!("{next:016x}.log"));
    std::fs::write(&hostile, Rng(7).bytes(10_000)).unwrap();

    let (spool, recovered) = open(&cfg(dir.path()));
    assert_eq!(recovered.iter().map(|p| p.id).collect::<Vec<_>>(), ids);
    assert_eq!(recovered[0].done.len(), 10);
    assert_eq!(spool.stats().quarantined_segments, 1);
}

/// A crude fuzz: damage a real journal at random places and sizes; `open` must never panic or
/// fail, and whatever it returns must be stable across a second open.
#[tokio::test]
async fn randomly_damaged_journals_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    populate(dir.path()).await;
    let seg = segments(dir.path()).pop().unwrap();
    let pristine = std::fs::read(&seg).unwrap();
    let mut rng = Rng(0xdead_beef);
    for round in 0..25 {
        let mut bytes = pristine.clone();
        match round % 3 {
            0 => {
                let at = rng.below(bytes.len() as u64) as usize;
                let n = (rng.below(64) as usize).min(bytes.len() - at);
                let noise = rng.bytes(n);
                bytes[at..at + n].copy_from_slice(&noise);
            }
            1 => bytes.truncate(rng.below(bytes.len() as u64) as usize),
            _ => {
                let n = rng.below(5000) as usize;
                bytes.extend(rng.bytes(n));
            }
        }
        let case = tempfile::tempdir().unwrap();
        let journal = case.path().join("journal");
        std::fs::create_dir_all(&journal).unwrap();
        std::fs::write(journal.join(seg.file_name().unwrap()), &bytes).unwrap();
        let (spool, first) = open(&cfg(case.path()));
        drop(spool);
        let (_spool, second) = open(&cfg(case.path()));
        let ids = |v: &[herald_spool::RecoveredPost]| {
            v.iter().map(|p| (p.id, p.done.len())).collect::<Vec<_>>()
        };
        assert_eq!(ids(&first), ids(&second), "round {round}");
    }
}

/// A digest fanned out and completed just before a crash is still known at the next open, so
/// the digest stage (whose ledger may not have recorded it yet) does not send it again; a
/// completed ordinary post and a live digest are not listed.
#[tokio::test]
async fn digests_completed_in_the_journal_are_listed_at_open() {
    use herald_types::DeliveryMode;
    let dir = tempfile::tempdir().unwrap();
    let (spool, _) = open(&cfg(dir.path()));
    assert!(spool.completed_digests_at_open().is_empty());
    let digest = |n: u64| {
        let mut m = meta(n);
        m.audience = DeliveryMode::DigestMime;
        m.message_id = Some(format!("<digest-{n}@example.org>"));
        m
    };
    let done_digest = spool.accept(digest(1), body(1, 300)).await.unwrap();
    let _live_digest = spool.accept(digest(2), body(2, 300)).await.unwrap();
    let done_post = spool.accept(meta(3), body(3, 300)).await.unwrap();
    spool.complete(done_digest).await.unwrap();
    spool.complete(done_post).await.unwrap();
    drop(spool); // as a crash leaves it: no close

    let (spool, recovered) = open(&cfg(dir.path()));
    assert_eq!(
        spool.completed_digests_at_open(),
        ["<digest-1@example.org>".to_string()]
    );
    assert_eq!(recovered.len(), 1, "the live digest is recovered as live");
}
