//! Duplicate suppression across the nodes of a cluster (issue 17 item 4): a list post's
//! Message-ID is recorded in the shared store (`cluster_dedup`, PostgreSQL) as well as in the
//! node's own dedup log, so a sending MTA that retries at another node of the cluster (it lost
//! our 250; the list domain has several MX hosts) is acknowledged with the first post's id
//! instead of fanned out again.
//!
//! The local log stays the fast path: the store is asked only when the local log does not know
//! the Message-ID. A store that does not answer never refuses a post: the lookup fails open
//! (logged), as a lost retry is a duplicate, not a loss. The record is written after the post
//! is spooled, in a task of its own (the 250 does not wait for it), so two nodes taking the
//! same retry within milliseconds may both accept it — the same bound as one node's own log
//! before its flush.
//!
//! SECURITY: Message-IDs are sender-controlled: cleaned as the local log cleans them (no
//! whitespace or control characters, at most 998 octets) and bound parameters in SQL.

use crate::dedup::clean_id;
use herald_directory::{Directory, SeenPost};
use herald_types::{ListId, PostId};

/// The shared half of duplicate suppression.
#[derive(Clone)]
pub struct ClusterDedup {
    pub directory: Directory,
    /// This node's id (the node registry's).
    pub node: String,
    /// The same window as the local log (`[lists] dedup_window_secs`).
    pub window_ms: u64,
}

impl ClusterDedup {
    /// The post (at whichever node) that already carried `message_id` to `list` within the
    /// window; `None` when none did or the store did not answer.
    pub async fn seen(&self, list: ListId, message_id: &str) -> Option<PostId> {
        let id = clean_id(message_id);
        if id.is_empty() {
            return None;
        }
        let (d, window) = (self.directory.clone(), self.window_ms);
        match tokio::task::spawn_blocking(move || d.dedup_seen(list, &id, window)).await {
            Ok(Ok(Some(seen))) => {
                tracing::info!(%list, node = %seen.node, first = seen.post, message_id, "duplicate Message-ID within the dedup window at another node: acknowledged, not fanned out again");
                Some(PostId(seen.post))
            }
            Ok(Ok(None)) => None,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cannot ask the shared store for a Message-ID; taken as new");
                None
            }
            Err(e) => {
                tracing::warn!(error = %e, "Message-ID lookup task failed; taken as new");
                None
            }
        }
    }

    /// Records that this node spooled `message_id` for `list` as `post` (in a task: the
    /// caller does not wait).
    pub fn record(&self, list: ListId, message_id: &str, post: PostId) {
        let id = clean_id(message_id);
        if id.is_empty() {
            return;
        }
        let (d, window) = (self.directory.clone(), self.window_ms);
        let seen = SeenPost {
            node: self.node.clone(),
            post: post.0,
        };
        tokio::task::spawn_blocking(move || {
            if let Err(e) = d.dedup_record(list, &id, &seen, window) {
                tracing::warn!(error = %e, "cannot record a Message-ID in the shared store");
            }
        });
    }
}
