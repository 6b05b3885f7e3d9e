//! The last step of the enqueue path, in a task of its own: the cluster-wide claim of a list
//! post's Message-ID, the spool write (durable on return), the duplicate-suppression record,
//! the shared fan-out's commit, and the post put in the hand-off backlog. Apart from the
//! decisions before it because it runs detached from the caller: once the spool has the post,
//! its hand-off must happen even if the caller goes away.

use crate::backlog::Reservation;
use crate::cluster_dedup::Claim;
use crate::error::EnqueueError;
use bytes::Bytes;
use herald_spool::{DedupStore, PostKind, PostMeta, Seen, Spool, SpooledPost};
use herald_telemetry::{Event, Telemetry};
use herald_types::PostId;

/// What makes a post durable and puts it in the backlog, moved into a task of its own.
pub(super) struct Commit {
    /// See `Draft::claim` and `Draft::hand_off`.
    pub(super) claim: bool,
    pub(super) hand_off: bool,
    pub(super) spool: Spool,
    pub(super) telemetry: Telemetry,
    pub(super) dedup: Option<DedupStore>,
    pub(super) cluster_dedup: Option<crate::ClusterDedup>,
    pub(super) shared: Option<std::sync::Arc<dyn crate::SharedIntake>>,
    /// `None`: the hand-off task has stopped (shutdown); the post is resumed from the spool.
    pub(super) reservation: Option<Reservation>,
}

impl Commit {
    /// Spools the post (durable on return), records list posts' Message-IDs for duplicate
    /// suppression, and puts the post in the backlog.
    pub(super) async fn run(self, meta: PostMeta, body: Bytes) -> Result<PostId, EnqueueError> {
        // The cluster-wide claim before the spool write: of nodes taking the same post at once
        // one spools it, the others answer as for a retry (see `cluster_dedup`).
        let cluster = match (&self.cluster_dedup, &meta.message_id, self.claim) {
            (Some(c), Some(mid), true) => match c.claim(meta.list_id, mid).await {
                Claim::Spool { claimed: true } => Some((c, mid)),
                Claim::Spool { claimed: false } => None,
                Claim::Duplicate(first) => return Ok(first),
                Claim::Busy => return Err(EnqueueError::ClaimedElsewhere),
            },
            _ => None,
        };
        let id = match self.spool.accept(meta.clone(), body.clone()).await {
            Ok(id) => id,
            Err(e) => {
                if let Some((c, mid)) = cluster {
                    c.release(meta.list_id, mid).await;
                }
                return Err(e.into());
            }
        };
        if let (Some(d), Some(mid), PostKind::ListPost | PostKind::Held) =
            (&self.dedup, &meta.message_id, meta.kind)
        {
            let seen = Seen {
                list: meta.list_id,
                post: id,
                max_member: meta.max_member_id,
                at_ms: meta.received_at_ms,
            };
            d.record(mid, seen);
        }
        if let Some((c, mid)) = cluster {
            c.record(meta.list_id, mid, id).await;
        }
        let post = SpooledPost { id, meta, body };
        if let (Some(shared), PostKind::ListPost) = (&self.shared, post.meta.kind) {
            // Committed to the shared store before the 250 (group commit with concurrent posts).
            shared.share(&post).await;
        }
        if post.meta.kind == PostKind::ListPost {
            self.telemetry.emit(Event::PostAccepted {
                post: post.id,
                list: post.meta.list_address.clone(),
                size: post.body.len(),
                received_at_ms: post.meta.received_at_ms,
                recovered: false,
            });
        }
        match self.reservation {
            Some(_) if !self.hand_off => {
                tracing::info!(post = %id, list = %post.meta.list_address,
                    "held post brought by an import: waits for a moderator, nobody is mailed");
            }
            Some(r) => r.hand(post),
            None => tracing::info!(post = %id, kind = ?post.meta.kind,
                "accepted while stopping: handed over from the spool at the next start"),
        }
        Ok(id)
    }
}
