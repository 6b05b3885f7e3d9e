//! The heartbeat task: one heartbeat every `[cluster] heartbeat_interval_secs` until the server
//! stops, then the node's row is marked `left`.
//!
//! A failed heartbeat (the store unreachable) is logged and counted, never fatal: the node goes
//! on serving what it has, and other nodes see it dead if the outage outlasts the dead window —
//! which is the truth as far as the shared store can tell.

use crate::Cluster;
use std::sync::Arc;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

/// Runs until `stop`; then leaves the cluster (blocking store calls run off the async threads).
pub async fn run(cluster: Arc<Cluster>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(cluster.interval());
    // A late tick (a stalled store) is followed by a full interval, not a burst.
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    tick.tick().await; // the first tick is immediate: join already wrote the first heartbeat
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tick.tick() => {}
        }
        let c = cluster.clone();
        match tokio::task::spawn_blocking(move || c.beat()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "heartbeat failed"),
            Err(e) => tracing::warn!(error = %e, "heartbeat task failed"),
        }
    }
    let c = cluster.clone();
    match tokio::task::spawn_blocking(move || c.leave()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "could not mark this node as left"),
        Err(e) => tracing::warn!(error = %e, "leave task failed"),
    }
}

/// The heartbeat as a row of the running table: the last thing stopped, so the node is
/// `running` while it drains and `left` once it is done (this task's end writes it).
pub fn start(cluster: Arc<Cluster>) -> herald_stage::Started {
    herald_stage::Started::spawn("cluster heartbeat", herald_stage::StopAt::Leave, |stop| {
        run(cluster, stop)
    })
}
