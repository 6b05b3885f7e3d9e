//! Duplicate suppression across the nodes of a cluster: a list post's
//! Message-ID is claimed in the shared store (`cluster_dedup`, PostgreSQL) before the post is
//! spooled, so a sending MTA that retries at another node of the cluster (it lost our 250; the
//! list domain has several MX hosts) is acknowledged with the first post's id instead of
//! fanned out again — also when it delivers the same message to several nodes at the same
//! instant.
//!
//! Atomic: the claim is one insert on the table's unique key (list, Message-ID). Of nodes
//! claiming at once, one wins and spools the post; the others find the claim and wait (up to
//! [`CLAIM_WAIT`]) for the winner to record its post's id, then answer as duplicates of it,
//! exactly as the node's own log answers a retry. The winner records the id before its `250`.
//!
//! The window between claim and record, and what a crash in it costs:
//! - the winner dies before its spool write: no `250` went out and nothing was spooled; the
//!   claim stays unrecorded, so other nodes answer the retries `451` (try again) until the
//!   claim is [`ABANDONED_MS`] old, then the next retry claims it and is accepted: no loss;
//! - the winner dies after its spool write but before the record: no `250` went out, but the
//!   post is in its spool and is delivered when it restarts; a retry accepted elsewhere after
//!   [`ABANDONED_MS`] is a duplicate — bounded by the posts inside that one round trip at the
//!   moment of the crash, like every other crash duplicate (see docs/cluster.md);
//! - the spool write fails: the claim is released at once and the sender gets the spool's
//!   error (a retry is welcome).
//!
//! The local log stays the fast path: the store is asked only when the local log does not know
//! the Message-ID. A store that does not answer never refuses a post: the claim fails open
//! (logged), as a lost retry is a duplicate, not a loss.
//!
//! SECURITY: Message-IDs are sender-controlled: cleaned as the local log cleans them (no
//! whitespace or control characters, at most 998 octets) and bound parameters in SQL.

use herald_directory::{DedupClaim, Directory, SeenPost};
use herald_spool::dedup::clean_id;
use herald_types::{ListId, PostId};
use std::time::Duration;

/// How long a post waits for another node's claim of its Message-ID to be recorded before
/// it is answered `451` (try again): the other node's spool write and one store round trip.
pub const CLAIM_WAIT: Duration = Duration::from_secs(5);
/// How old an unrecorded claim is when another node may take it over (its node died before
/// it spooled the post, so no `250` went out). Shorter than an MTA's retry interval.
pub const ABANDONED_MS: u64 = 30_000;
/// Pause between looks at a pending claim.
const CLAIM_POLL: Duration = Duration::from_millis(50);

/// What a claim decided for a post about to be spooled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// Spool it (this node holds the claim, or the store did not answer: fail open).
    Spool { claimed: bool },
    /// A retry of this post (at whichever node): acknowledge with its id.
    Duplicate(PostId),
    /// Another node is spooling it right now and has not recorded it within [`CLAIM_WAIT`].
    Busy,
}

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
    /// Claims `message_id` on `list` for this node before the post is spooled (see the
    /// module doc); waits for another node's pending claim to be recorded.
    pub async fn claim(&self, list: ListId, message_id: &str) -> Claim {
        let id = clean_id(message_id);
        if id.is_empty() {
            return Claim::Spool { claimed: false };
        }
        let started = tokio::time::Instant::now();
        loop {
            let (d, mid, node, window) = (
                self.directory.clone(),
                id.clone(),
                self.node.clone(),
                self.window_ms,
            );
            let got = tokio::task::spawn_blocking(move || {
                d.dedup_claim(list, &mid, &node, window, ABANDONED_MS)
            })
            .await;
            match got {
                Ok(Ok(DedupClaim::Claimed)) => return Claim::Spool { claimed: true },
                Ok(Ok(DedupClaim::Seen(seen))) => {
                    tracing::info!(%list, node = %seen.node, first = seen.post, message_id,
                        "duplicate Message-ID within the dedup window (cluster): acknowledged, not fanned out again");
                    return Claim::Duplicate(PostId(seen.post));
                }
                Ok(Ok(DedupClaim::Pending { node })) => {
                    if started.elapsed() >= CLAIM_WAIT {
                        tracing::warn!(%list, %node, message_id,
                            "the same Message-ID is being accepted by another node; answered try-again");
                        return Claim::Busy;
                    }
                    tokio::time::sleep(CLAIM_POLL).await;
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "cannot claim a Message-ID in the shared store; taken as new");
                    return Claim::Spool { claimed: false };
                }
                Err(e) => {
                    tracing::warn!(error = %e, "Message-ID claim task failed; taken as new");
                    return Claim::Spool { claimed: false };
                }
            }
        }
    }

    /// Records that this node spooled `message_id` for `list` as `post` (fills in its claim).
    /// Awaited before the `250`: a node that answers has told the cluster which post it was.
    pub async fn record(&self, list: ListId, message_id: &str, post: PostId) {
        let id = clean_id(message_id);
        if id.is_empty() {
            return;
        }
        let (d, window) = (self.directory.clone(), self.window_ms);
        let seen = SeenPost {
            node: self.node.clone(),
            post: post.0,
        };
        let done = tokio::task::spawn_blocking(move || d.dedup_record(list, &id, &seen, window));
        match done.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cannot record a Message-ID in the shared store")
            }
            Err(e) => tracing::warn!(error = %e, "Message-ID record task failed"),
        }
    }

    /// Drops this node's claim of `message_id` (its post could not be spooled).
    pub async fn release(&self, list: ListId, message_id: &str) {
        let id = clean_id(message_id);
        let (d, node) = (self.directory.clone(), self.node.clone());
        let done = tokio::task::spawn_blocking(move || d.dedup_release(list, &id, &node));
        match done.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e,
                "cannot release a Message-ID claim; other nodes take it over once abandoned"),
            Err(e) => tracing::warn!(error = %e, "Message-ID release task failed"),
        }
    }
}
