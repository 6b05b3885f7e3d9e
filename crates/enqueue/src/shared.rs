//! The seam through which a list post is made durable in a store shared by several nodes
//! before it is acknowledged (`herald-shards` implements it when `[cluster]
//! shared_fanout` is on). Enqueue only knows that a post can be handed over and waited for.

use herald_spool::SpooledPost;
use std::future::Future;
use std::pin::Pin;

/// Whether the shared store took the post.
pub type ShareFuture<'a> = Pin<Box<dyn Future<Output = bool> + Send + 'a>>;

/// A shared store for list posts, written with group commit.
pub trait SharedIntake: Send + Sync {
    /// Takes `post` (already durable in this node's spool) into the shared store and returns
    /// true once it is committed there — or, when the store is slow or down, once it is queued
    /// for it (published when the store answers, from the spool after a restart). False:
    /// refused (its queue is full), the post is fanned out by this node alone. Either way
    /// enqueue then hands the post on as usual (the archive reads it; fan-out knows whether
    /// it was taken).
    fn share<'a>(&'a self, post: &'a SpooledPost) -> ShareFuture<'a>;
}
