//! The unit of work: one member's copy of one post. Jobs are small (a shared post context and a
//! shared member) so the in-flight window, not the post size, bounds memory.

use herald_fanout::Template;
use herald_types::{ListId, Member, PostId};
use std::sync::Arc;
use std::time::Instant;

/// What every copy of a post shares.
pub struct PostCtx {
    pub id: PostId,
    pub list_id: ListId,
    /// Rendered once; spliced per member at send time.
    pub template: Template,
    pub accepted_at_ms: u64,
    /// Copies not delivered within this age are given up.
    pub max_age_ms: u64,
}

/// One recipient copy waiting for, or in, delivery.
pub struct Job {
    pub post: Arc<PostCtx>,
    pub member: Arc<Member>,
    /// Attempts made so far.
    pub tries: u32,
    /// Not before this instant (retry schedule).
    pub not_before: Option<Instant>,
}

impl Job {
    pub fn new(post: Arc<PostCtx>, member: Arc<Member>) -> Job {
        Job {
            post,
            member,
            tries: 0,
            not_before: None,
        }
    }

    /// The recipient domain, which decides the destination.
    pub fn domain(&self) -> &str {
        self.member.address.domain()
    }

    /// True when the copy is older than its list allows.
    pub fn expired(&self, now_ms: u64) -> bool {
        now_ms.saturating_sub(self.post.accepted_at_ms) > self.post.max_age_ms
    }
}
