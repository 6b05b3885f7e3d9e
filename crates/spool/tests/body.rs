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
