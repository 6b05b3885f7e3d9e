//! The hand-over channels from enqueue to the stages downstream: list posts and generated
//! mail to fan-out, bounces to the bounce stage, requests, held posts and postmaster mail to the
//! lists stage. Bounded: a full channel makes the hand-off task (`backlog.rs`) wait.
//!
//! One-way arrows: this crate never imports those stages; the composition root holds the
//! receivers and connects them.

use herald_spool::{PostKind, SpooledPost};
use tokio::sync::mpsc;

/// The senders of the hand-over channels; the composition root holds the receivers.
#[derive(Clone)]
pub struct Handoff {
    /// List posts and generated mail, to fan-out (the scheduler's expansion).
    pub fanout: mpsc::Sender<SpooledPost>,
    /// Spooled bounces, straight to the bounce stage.
    pub bounces: mpsc::Sender<SpooledPost>,
    /// Requests, held posts and postmaster mail, to the lists stage.
    pub lists: mpsc::Sender<SpooledPost>,
}

/// The receiving ends of a [`Handoff`].
pub struct HandoffReceivers {
    pub fanout: mpsc::Receiver<SpooledPost>,
    pub bounces: mpsc::Receiver<SpooledPost>,
    pub lists: mpsc::Receiver<SpooledPost>,
}

impl Handoff {
    /// Hands a spooled post to the stage that owns its kind, waiting for room in its channel.
    /// False when that stage is not running (the server is stopping): the post is durable in
    /// the spool and the stage picks it up at the next start.
    pub async fn send(&self, post: SpooledPost) -> bool {
        let (id, kind) = (post.id, post.meta.kind);
        let to = match kind {
            PostKind::ListPost | PostKind::Generated => &self.fanout,
            PostKind::Bounce => &self.bounces,
            PostKind::Held | PostKind::Request | PostKind::Postmaster => {
                tracing::info!(post = %id, list = %post.meta.list_address, kind = ?kind,
                    reason = ?post.meta.hold_reason, "kept for the lists stage");
                &self.lists
            }
        };
        if to.send(post).await.is_err() {
            tracing::warn!(post = %id, kind = ?kind, "the next stage is not running");
            return false;
        }
        true
    }

    /// Three bounded channels of `capacity` each.
    pub fn channels(capacity: usize) -> (Handoff, HandoffReceivers) {
        let (fanout, fanout_rx) = mpsc::channel(capacity);
        let (bounces, bounces_rx) = mpsc::channel(capacity);
        let (lists, lists_rx) = mpsc::channel(capacity);
        let rx = HandoffReceivers {
            fanout: fanout_rx,
            bounces: bounces_rx,
            lists: lists_rx,
        };
        (
            Handoff {
                fanout,
                bounces,
                lists,
            },
            rx,
        )
    }
}
