//! Publishing: a list post this node accepted goes to the shared store, once, with its shards;
//! then its local copy in the spool is completed. Every post waiting when the publisher wakes
//! goes into the same transaction (group commit: one commit for concurrent posts). Enqueue
//! waits for that commit before its `250` ([`SharedIntake`]): a post is durable in the shared
//! store when acknowledged, unless the store did not answer within [`SHARE_WAIT`] (then it is
//! durable in the spool and published when the store is back).
//!
//! A post that cannot be published (the store is down) stays in the local spool and is tried
//! again with backoff; if the node stops first, its next start republishes it from the
//! recovered spool — idempotent by (origin node, spool id). Nothing accepted is lost.

use crate::node::Shards;
use crate::share::Share;
use herald_directory::NewClusterPost;
use herald_enqueue::{ShareFuture, SharedIntake};
use herald_spool::{PostKind, RecoveredPost, SpooledPost};
use herald_telemetry::Event;
use herald_types::PostId;
use sha2::{Digest, Sha256};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// Posts published in one transaction at most.
pub(crate) const MAX_BATCH: usize = 64;
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// What a restarted node does with the posts its spool recovered, in shared mode:
/// `(for the scheduler, to publish, stale shards)`. A list post without a range is this node's
/// own and may never have been published; a shard's local post is dropped (its lease was
/// handed back at start, and whoever claims it resumes from the reported position).
pub fn split_recovered(
    recovered: Vec<RecoveredPost>,
) -> (Vec<RecoveredPost>, Vec<SpooledPost>, Vec<PostId>) {
    let (mut keep, mut publish, mut stale) = (Vec::new(), Vec::new(), Vec::new());
    for p in recovered {
        match (p.meta.kind, p.meta.member_range.is_some()) {
            (PostKind::ListPost, true) => stale.push(p.id),
            (PostKind::ListPost, false) => publish.push(SpooledPost {
                id: p.id,
                meta: p.meta,
                body: p.body,
            }),
            _ => keep.push(p),
        }
    }
    (keep, publish, stale)
}

/// How long enqueue waits for the shared store's commit before it acknowledges a post anyway
/// (it is durable in the spool and published when the store answers).
const SHARE_WAIT: Duration = Duration::from_secs(5);

impl SharedIntake for Shards {
    fn share<'a>(&'a self, post: &'a SpooledPost) -> ShareFuture<'a> {
        Box::pin(async move {
            let (tx, rx) = oneshot::channel();
            let share = Share {
                post: post.clone(),
                committed: Some(tx),
            };
            if self.publish_tx.try_send(share).is_err() {
                tracing::warn!(post = %post.id, "publisher queue full; post fanned out here only");
                return false;
            }
            self.taken(post.id);
            if !matches!(tokio::time::timeout(SHARE_WAIT, rx).await, Ok(Ok(()))) {
                tracing::warn!(post = %post.id, "the shared store did not commit a post in time; it is durable in the spool and published when the store answers");
            }
            true
        })
    }
}

impl Shards {
    /// The publisher's loop: until `stop`, batches of waiting posts into the shared store.
    pub(crate) async fn publish_loop(
        &self,
        mut rx: mpsc::Receiver<Share>,
        stop: CancellationToken,
    ) {
        loop {
            let first = tokio::select! {
                _ = stop.cancelled() => return,
                p = rx.recv() => match p { Some(p) => p, None => return },
            };
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(p) => batch.push(p),
                    Err(_) => break,
                }
            }
            self.publish(batch, &stop).await;
        }
    }

    /// Publishes `batch` (retrying while the store is down), then completes the local posts
    /// and tells whoever waits for the commit.
    pub(crate) async fn publish(&self, batch: Vec<Share>, stop: &CancellationToken) {
        let mut rows = Vec::with_capacity(batch.len());
        let mut posts = Vec::with_capacity(batch.len());
        for Share { post: p, committed } in batch {
            match serde_json::to_string(&p.meta) {
                Ok(meta_json) => {
                    rows.push(NewClusterPost {
                        origin_node: self.node.clone(),
                        origin_post: p.id.0,
                        list_id: p.meta.list_id,
                        max_member_id: p.meta.max_member_id,
                        meta_json,
                        body_sha256: Sha256::digest(&p.body).to_vec(),
                        body: p.body.to_vec(),
                    });
                    posts.push((p.id, committed));
                }
                Err(e) => {
                    // Cannot happen for our own struct; if it did, the post still goes out.
                    tracing::error!(post = %p.id, error = %e, "post not shareable; fanned out here");
                    self.scheduler.submit(p);
                }
            }
        }
        if rows.is_empty() {
            return;
        }
        let mut backoff = Duration::from_millis(100);
        let published = loop {
            let (d, r, n) = (self.directory.clone(), rows.clone(), self.shard_members);
            match tokio::task::spawn_blocking(move || d.publish_posts(&r, n)).await {
                Ok(Ok(ids)) => break ids,
                Ok(Err(e)) => {
                    tracing::warn!(posts = rows.len(), error = %e, "cannot publish posts to the shared store; retrying")
                }
                Err(e) => tracing::warn!(error = %e, "publish task failed; retrying"),
            }
            if stop.is_cancelled() {
                // Still in the local spool: the next start republishes them.
                return;
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        };
        self.counters.published.add(posts.len() as u64);
        // Its shards are claimable now: this node claims them without waiting an interval.
        self.tracker.wake();
        for ((post, committed), (cluster_post, shards)) in posts.into_iter().zip(published) {
            if let Some(tx) = committed {
                let _ = tx.send(());
            }
            tracing::info!(%post, cluster_post, shards, "post shared with the cluster");
            if let Err(e) = self.spool.complete(post).await {
                tracing::error!(%post, error = %e, "cannot complete a published post in the spool");
            }
            self.telemetry.emit(Event::PostCompleted { post });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_spool::{DoneSet, PostMeta};
    use herald_types::{Address, ListId, MemberId};

    fn recovered(id: u64, kind: PostKind, range: Option<(i64, i64)>) -> RecoveredPost {
        RecoveredPost {
            id: PostId(id),
            meta: PostMeta {
                kind,
                list_id: ListId(1),
                list_address: Address::parse("l@l.test").expect("address"),
                envelope_from: None,
                received_at_ms: 0,
                max_member_id: MemberId(10),
                message_id: None,
                recipients: Vec::new(),
                hold_reason: None,
                null_sender: false,
                audience: Default::default(),
                dsn: None,
                member_range: range.map(|(lo, hi)| Box::new((MemberId(lo), MemberId(hi)))),
            },
            body: bytes::Bytes::from_static(b"x"),
            done: DoneSet::new(),
            delivered: 0,
            failed: 0,
        }
    }

    /// After a restart in shared mode: the node's own list posts are published (they may never
    /// have been), shard posts are dropped (their shards were handed back), and everything
    /// else stays with the local stages.
    #[test]
    fn recovered_posts_are_split_by_what_they_are() {
        let (keep, publish, stale) = split_recovered(vec![
            recovered(1, PostKind::ListPost, None),
            recovered(2, PostKind::ListPost, Some((1, 5))),
            recovered(3, PostKind::Generated, None),
            recovered(4, PostKind::Held, None),
        ]);
        let ids = |v: Vec<PostId>| v.into_iter().map(|p| p.0).collect::<Vec<_>>();
        assert_eq!(ids(keep.iter().map(|p| p.id).collect()), vec![3, 4]);
        assert_eq!(ids(publish.iter().map(|p| p.id).collect()), vec![1]);
        assert_eq!(ids(stale), vec![2]);
    }
}
