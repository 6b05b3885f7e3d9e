//! What the publisher's queue carries (a leaf, so `node` and `publisher` do not import each
//! other): a post, and who waits for its commit (enqueue, before its `250`).

use herald_spool::SpooledPost;
use tokio::sync::oneshot;

pub(crate) struct Share {
    pub post: SpooledPost,
    pub committed: Option<oneshot::Sender<()>>,
}
