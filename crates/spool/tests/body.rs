//! `Spool::body`: a live post's body read back from the journal (moderation approves held posts
//! long after acceptance), before and after a restart; `None` once completed. Also: the
//! `recipients` metadata of generated mail survives recovery.
#![allow(clippy::unwrap_used)]

mod common;

use common::{body, cfg, meta, open};
use herald_spool::PostKind;
use herald_types::Address;

#[tokio::test]
async fn bodies_read_back_until_completed_and_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let c = cfg(dir.path());
    let (spool, _) = open(&c);
    let b1 = body(1, 5_000);
    let mut m = meta(1);
    m.kind = PostKind::Generated;
    m.recipients = vec![Address::parse("x@d0.test").unwrap()];
    let id1 = spool.accept(m.clone(), b1.clone()).await.unwrap();
    let id2 = spool.accept(meta(2), body(2, 100)).await.unwrap();
    assert_eq!(spool.body(id1).await.unwrap(), Some(b1.clone()));
    spool.complete(id2).await.unwrap();
    assert_eq!(spool.body(id2).await.unwrap(), None);
    spool.close().await.unwrap();

    let (spool, recovered) = open(&c);
    assert_eq!(recovered.len(), 1);
    assert_eq!(recovered[0].meta, m, "recipients survive recovery");
    assert_eq!(spool.body(id1).await.unwrap(), Some(b1));
    spool.close().await.unwrap();
}

/// Postmaster mail: counted by kind as it comes and goes (inbound bounds it with this count),
/// its handled-at-arrival marker (member 1) survives a restart, and so does `null_sender`.
#[tokio::test]
async fn live_counts_by_kind_and_the_postmaster_marker_survive_restarts() {
    use herald_spool::FinalState;
    use herald_types::{ListId, MemberId};
    let dir = tempfile::tempdir().unwrap();
    let c = cfg(dir.path());
    let (spool, _) = open(&c);
    let mut pm = meta(1);
    pm.kind = PostKind::Postmaster;
    pm.list_id = ListId::NONE;
    pm.list_address = Address::parse("postmaster@herald.test").unwrap();
    let a = spool.accept(pm.clone(), body(1, 300)).await.unwrap();
    let b = spool.accept(pm.clone(), body(2, 300)).await.unwrap();
    let mut fwd = meta(3);
    fwd.kind = PostKind::Generated;
    fwd.null_sender = true;
    fwd.recipients = vec![Address::parse("ops@d0.test").unwrap()];
    spool.accept(fwd.clone(), body(3, 300)).await.unwrap();
    spool.accept(meta(4), body(4, 300)).await.unwrap();
    assert_eq!(spool.live_count(PostKind::Postmaster), 2);
    assert_eq!(spool.live_count(PostKind::Generated), 1);
    assert_eq!(spool.live_count(PostKind::Held), 0);
    spool
        .record(a, MemberId(1), FinalState::Delivered)
        .await
        .unwrap();
    spool.complete(b).await.unwrap();
    assert_eq!(spool.live_count(PostKind::Postmaster), 1);
    spool.close().await.unwrap();

    let (spool, recovered) = open(&c);
    assert_eq!(spool.live_count(PostKind::Postmaster), 1);
    assert_eq!(spool.live_count(PostKind::ListPost), 1);
    let kept = recovered.iter().find(|p| p.id == a).unwrap();
    assert!(kept.done.contains(MemberId(1)), "handled marker recovered");
    assert_eq!(kept.delivered, 1);
    let f = recovered
        .iter()
        .find(|p| p.meta.kind == PostKind::Generated)
        .unwrap();
    assert_eq!(f.meta, fwd, "null_sender survives recovery");
    spool.close().await.unwrap();
}
