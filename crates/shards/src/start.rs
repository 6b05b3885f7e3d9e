//! The shared fan-out as a row of the running table, in two halves around the scheduler's
//! start: [`prepare`] takes the node's recovered list posts out of the scheduler's share
//! (they go to the shared store instead) and makes the tracker the scheduler reports final
//! outcomes to; [`start`] then runs the publisher and the node's loop.
//!
//! Stop order: its tasks stop with the scheduler (a child of its token), and at
//! [`herald_stage::StopAt::Report`], once every outcome is in, the node reports and hands
//! back what it has not finished ([`crate::Shards::finish`]).

use crate::{Shards, ShardsDeps, Tracker};
use herald_spool::{RecoveredPost, SpooledPost};
use herald_types::PostId;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// What [`prepare`] kept for [`start`].
pub struct Prepared {
    /// Give it to the scheduler as `SchedulerDeps::finals`, and to [`ShardsDeps::tracker`].
    pub tracker: Arc<Tracker>,
    to_publish: Vec<SpooledPost>,
    stale: Vec<PostId>,
}

/// With `[cluster] shared_fanout`: splits `recovered` (what stays for the local scheduler is
/// left in it). `None`, and `recovered` untouched, without the shared fan-out.
pub fn prepare(shared_fanout: bool, recovered: &mut Vec<RecoveredPost>) -> Option<Prepared> {
    if !shared_fanout {
        return None;
    }
    let (keep, to_publish, stale) = crate::split_recovered(std::mem::take(recovered));
    *recovered = keep;
    Some(Prepared {
        tracker: Arc::new(Tracker::default()),
        to_publish,
        stale,
    })
}

/// Starts the publisher and the node's loop; `stop` is a child of the scheduler's.
pub fn start(
    deps: ShardsDeps,
    prepared: Prepared,
    stop: CancellationToken,
) -> herald_stage::Started<Arc<Shards>> {
    let shards = Shards::new(deps);
    let tasks = shards.start(prepared.to_publish, prepared.stale, stop.clone());
    let me = shards.clone();
    herald_stage::Started::new("shared fan-out", herald_stage::StopAt::Report, stop, shards)
        .with_tasks(tasks)
        .with_finish(Box::new(move |_| {
            Box::pin(async move { me.finish().await })
        }))
}

/// The shared fan-out as fan-out: the one fan-out consumer (`herald_stage::fan_out`) hands it
/// the posts enqueue hands over (list posts to the shared store, the rest to this node).
impl herald_stage::FanOut for Shards {
    fn submit(&self, post: SpooledPost) {
        Shards::submit(self, post)
    }
}
