//! The unit of work: one member's copy of one post. Jobs are small (a shared post context and a
//! shared member) so the in-flight window, not the post size, bounds memory.
//!
//! Fairness: each post has its own window of queued copies ([`PostCtx::window`], a semaphore the
//! expander takes a permit from per copy). A job gives its permit back when it is dropped — when
//! its copy is final — so a million-member post can hold at most its window of the queue and a
//! small post arriving later is never stuck behind it in admission. A copy parked in the deferred
//! queue (waiting for a retry time or a down host) gives its permit back at once: the window
//! bounds a post's copies that may be tried now, never the ones waiting.

use herald_fanout::Template;
use herald_types::{DeferralKind, LaneKind};
use herald_types::{ListId, Member, PostId, Reply};
use std::sync::Arc;
use tokio::sync::Semaphore;

/// What every copy of a post shares.
pub struct PostCtx {
    pub id: PostId,
    pub list_id: ListId,
    /// Rendered once; spliced per member at send time.
    pub template: Template,
    pub accepted_at_ms: u64,
    /// Copies not delivered within this age are given up.
    pub max_age_ms: u64,
    /// Queued copies this post may still add (see the module docs).
    pub window: Arc<Semaphore>,
    /// DSN parameters (RFC 3461) every copy passes on to a server that offers DSN: only mail
    /// Herald relays (a postmaster forward) has them; a list post never does (the list is the
    /// new originator).
    pub dsn: Option<herald_types::Dsn>,
    /// The list's egress pool setting: part of the destination key of its copies.
    pub egress_pool: Option<Arc<str>>,
}

/// One recipient copy waiting for, or in, delivery.
pub struct Job {
    pub post: Arc<PostCtx>,
    pub member: Arc<Member>,
    /// Attempts made so far.
    pub tries: u32,
    /// Fast until an attempt failed temporarily, then slow.
    pub lane: LaneKind,
    /// Why the last attempt was deferred, and the reply (for expiry reports).
    pub deferral: Option<(DeferralKind, Box<Reply>)>,
    /// Times its MAIL was refused for rate and it went straight back to the ready queue (the
    /// provider's pace releases it); bounded by the actor.
    pub rate_refusals: u8,
    /// Times the connection dropped while its body was in flight (one is retried at once).
    pub drops: u8,
    /// When it was first greylisted (to learn the destination's interval when it gets through).
    pub greylisted_at: Option<tokio::time::Instant>,
    /// The last greylisting retry delay it waited (the next one backs off from it).
    pub grey_delay: Option<std::time::Duration>,
    /// True while the copy holds a permit of its post's window (from expansion until it is
    /// final or parked in the deferred queue: a parked copy no longer takes a place in the
    /// window, and comes back without one).
    pub holds_permit: bool,
}

impl Job {
    pub fn new(post: Arc<PostCtx>, member: Arc<Member>) -> Job {
        Job {
            post,
            member,
            tries: 0,
            lane: LaneKind::Fast,
            deferral: None,
            rate_refusals: 0,
            drops: 0,
            greylisted_at: None,
            grey_delay: None,
            holds_permit: true,
        }
    }

    /// Gives the copy's place in its post's window back (it is parked: see
    /// `actor/deferred.rs`); at most once.
    pub fn release_permit(&mut self) {
        if std::mem::take(&mut self.holds_permit) {
            self.post.window.add_permits(1);
        }
    }

    /// The recipient domain, which decides the destination.
    pub fn domain(&self) -> &str {
        self.member.address.domain()
    }

    /// True when the copy is older than its list allows.
    pub fn expired(&self, now_ms: u64) -> bool {
        self.age_ms(now_ms) > self.post.max_age_ms
    }

    pub fn age_ms(&self, now_ms: u64) -> u64 {
        now_ms.saturating_sub(self.post.accepted_at_ms)
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        // The copy left the queue for good: its post may queue another.
        self.release_permit();
    }
}
