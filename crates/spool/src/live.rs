//! The in-memory table of live posts: what the spool must remember about every post accepted and
//! not yet completed. Built by recovery, then owned by the writer thread and shared read-only
//! (behind a mutex) with `Spool::live_posts` and `Spool::progress`.
//!
//! Invariants: a live post's entire state can be rebuilt by replaying the segments whose seq is
//! `>= base`, where its newest Post record lies (at `loc`). `delivered + failed == done.len()`.
//!
//! Limits: memory is per live post, not per record: the metadata (a few hundred bytes), a
//! location, two counters and a roaring set (bounded by members, ~128 KiB per million dense ids).
//! Bodies are not kept; compaction reads them back from disk.

use crate::model::{DoneSet, FinalState, PostKind, PostMeta, PostProgress, RecoveredPost};
use crate::scan::FrameLoc;
use herald_types::{MemberId, PostId};
use std::collections::HashMap;

/// One live post.
#[derive(Debug, Clone)]
pub(crate) struct LivePost {
    pub meta: PostMeta,
    /// Seq of the segment holding the newest copy of the Post record.
    pub base: u64,
    pub loc: FrameLoc,
    pub done: DoneSet,
    pub delivered: u64,
    pub failed: u64,
}

/// What applying an outcome did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Applied {
    /// A new final state: journal it.
    New,
    /// The member was already final for this post: nothing to write.
    Duplicate,
    /// The post is not live: nothing to write.
    UnknownPost,
}

#[derive(Debug, Default)]
pub(crate) struct LiveTable {
    posts: HashMap<PostId, LivePost>,
    /// Live posts by kind, kept with every insert and remove: admission checks (how much
    /// postmaster mail is stored) read it in O(1) instead of scanning `posts`.
    kinds: HashMap<PostKind, usize>,
}

impl LiveTable {
    /// Adds a post, or — for a copy written by compaction — moves an existing one to its new
    /// location while keeping its state (a checkpoint record follows the copy).
    pub(crate) fn insert_post(&mut self, id: PostId, meta: PostMeta, base: u64, loc: FrameLoc) {
        match self.posts.get_mut(&id) {
            Some(p) => {
                p.base = base;
                p.loc = loc;
            }
            None => {
                *self.kinds.entry(meta.kind).or_default() += 1;
                let post = LivePost {
                    meta,
                    base,
                    loc,
                    done: DoneSet::new(),
                    delivered: 0,
                    failed: 0,
                };
                self.posts.insert(id, post);
            }
        }
    }

    pub(crate) fn apply_outcome(
        &mut self,
        post: PostId,
        member: MemberId,
        state: FinalState,
    ) -> Applied {
        let Some(p) = self.posts.get_mut(&post) else {
            return Applied::UnknownPost;
        };
        if !p.done.insert(member) {
            return Applied::Duplicate;
        }
        match state {
            FinalState::Delivered => p.delivered += 1,
            FinalState::Failed => p.failed += 1,
        }
        Applied::New
    }

    /// Replaces a post's final-state set with a checkpoint; false if the post is unknown.
    pub(crate) fn apply_checkpoint(
        &mut self,
        post: PostId,
        delivered: u64,
        failed: u64,
        done: DoneSet,
    ) -> bool {
        match self.posts.get_mut(&post) {
            Some(p) => {
                p.done = done;
                p.delivered = delivered;
                p.failed = failed;
                true
            }
            None => false,
        }
    }

    pub(crate) fn remove(&mut self, post: PostId) -> Option<LivePost> {
        let removed = self.posts.remove(&post)?;
        if let Some(n) = self.kinds.get_mut(&removed.meta.kind) {
            *n = n.saturating_sub(1);
        }
        Some(removed)
    }

    /// Live posts of `kind`.
    pub(crate) fn count(&self, kind: PostKind) -> usize {
        self.kinds.get(&kind).copied().unwrap_or(0)
    }

    pub(crate) fn get(&self, post: PostId) -> Option<&LivePost> {
        self.posts.get(&post)
    }

    pub(crate) fn get_mut(&mut self, post: PostId) -> Option<&mut LivePost> {
        self.posts.get_mut(&post)
    }

    pub(crate) fn len(&self) -> usize {
        self.posts.len()
    }

    /// Oldest segment any live post still depends on; segments before it may be deleted.
    pub(crate) fn min_base(&self) -> Option<u64> {
        self.posts.values().map(|p| p.base).min()
    }

    /// Live posts whose newest Post record lies in a segment older than `seq`, in id order.
    pub(crate) fn based_before(&self, seq: u64) -> Vec<PostId> {
        let mut ids: Vec<PostId> = self
            .posts
            .iter()
            .filter(|(_, p)| p.base < seq)
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        ids
    }

    pub(crate) fn metas(&self) -> Vec<(PostId, PostMeta)> {
        let mut v: Vec<_> = self
            .posts
            .iter()
            .map(|(id, p)| (*id, p.meta.clone()))
            .collect();
        v.sort_unstable_by_key(|(id, _)| *id);
        v
    }

    pub(crate) fn progress(&self, post: PostId) -> Option<PostProgress> {
        self.posts.get(&post).map(|p| PostProgress {
            delivered: p.delivered,
            failed: p.failed,
        })
    }

    /// Builds the recovery result; posts whose body is missing from `bodies` are skipped (cannot
    /// happen: every live post was created from a Post record that carried its body).
    pub(crate) fn recovered(&self, bodies: &HashMap<PostId, bytes::Bytes>) -> Vec<RecoveredPost> {
        let mut v: Vec<RecoveredPost> = self
            .posts
            .iter()
            .filter_map(|(id, p)| {
                Some(RecoveredPost {
                    id: *id,
                    meta: p.meta.clone(),
                    body: bodies.get(id)?.clone(),
                    done: p.done.clone(),
                    delivered: p.delivered,
                    failed: p.failed,
                })
            })
            .collect();
        v.sort_unstable_by_key(|p| p.id);
        v
    }
}
