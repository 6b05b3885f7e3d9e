//! Step 4 of `server::run`, the drain: listeners, then the hand-off, then the scheduler, then
//! the other stages, then the stores — each step with a time limit, so a stop is bounded
//! whatever state the disk, the store or the peers are in.
//!
//! The listeners are stopped here; the stages by their table (`herald_stage::Running::stop`),
//! which holds the limits after the listeners'. The limits, from the moment the drain starts
//! (just after SIGTERM):
//!
//! - listeners: [`LISTENERS`] for the sessions under way to end (they finish their
//!   transaction; one still running then is cut, and its client, without a `250`, keeps the
//!   message); the hand-off of accepted posts `HANDOFF` to put down what it holds;
//! - the scheduler: a transaction already on the wire gets `DRAIN_AT_SHUTDOWN` (10 s, the
//!   scheduler's) to finish; a tarpit or a hung host is given up then and its copies stay in
//!   the spool; the scheduler task gets `DELIVERY` from its stop;
//! - the rest (reporting shards, the bounce and lists stages, the archive writer, the
//!   journal's last commit, the delivery log and statistics, leaving the cluster): `TAIL`
//!   together. A journal that still cannot be written then (a full disk with nothing left to
//!   give back, see `reserve.rs`) leaves the outcomes of at most open connections ×
//!   `max_copies_per_batch` copies unjournaled: those copies are sent again at the next start,
//!   the same window a crash leaves. Nothing accepted is lost.
//!
//! [`STOP_LIMIT`] is the sum, the bound docs/install.md states; `herald serve` exits at that point
//! even if a step misbehaves.

use super::{Served, Stages};
use crate::ServerError;
use herald_stage::{blocking_until, join_until, until, Started, StopAt, DELIVERY, HANDOFF, TAIL};
use std::time::Duration;
use tokio::time::Instant;

/// Sessions under way get this long to end once the listeners stop accepting.
const LISTENERS: Duration = Duration::from_secs(3);
/// The longest a stop takes, from SIGTERM to exit (20 s).
pub(crate) const STOP_LIMIT: Duration = Duration::from_secs(
    LISTENERS.as_secs() + HANDOFF.as_secs() + DELIVERY.as_secs() + TAIL.as_secs(),
);

/// Step 4: the listeners, then the stage table in stop order.
pub(crate) async fn drain(stages: Stages, served: Served) -> Result<(), ServerError> {
    let started = Instant::now();
    let listeners = started + LISTENERS;
    for (what, task) in served.inbound {
        match join_until(listeners, what, task).await {
            Some(Ok(())) | None => {}
            Some(Err(e)) => tracing::error!(what, error = %e, "listener ended with an error"),
        }
    }
    if let Some(Err(e)) = join_until(listeners, "HTTP", served.api).await {
        tracing::error!(error = %e, "HTTP listener ended with an error");
    }
    for task in served.imap {
        join_until(listeners, "IMAP", task).await;
    }
    tracing::info!("stopping: listeners closed");
    // No new posts from outside now. What is still waiting for its hand-off stays in the
    // spool (durable, acknowledged) and is resumed at the next start; handing it over now
    // would make the stop wait for the whole backlog to be archived and expanded.
    stages.running.stop().await;
    tracing::info!(
        took_ms = started.elapsed().as_millis() as u64,
        "herald stopped"
    );
    Ok(())
}

/// The stores as a row of the table: once the writers are done, the journal's last commit,
/// then the delivery log and statistics written out.
pub(super) fn stores(
    spool: &herald_spool::Spool,
    telemetry: &herald_telemetry::Telemetry,
) -> Started {
    let (spool, t) = (spool.clone(), telemetry.clone());
    let finish = move |deadline: Instant| {
        Box::pin(async move {
            last_commit(&spool, deadline).await;
            blocking_until(deadline, "delivery log and statistics", move || {
                t.flush_log();
                t.flush_stats();
            })
            .await;
        }) as std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
    };
    Started::new(
        "stores",
        StopAt::Stores,
        tokio_util::sync::CancellationToken::new(),
        (),
    )
    .with_finish(Box::new(finish))
}

/// The journal's last commit, until `deadline`. A journal that cannot be written (a full disk)
/// is not waited for: what it could not take is said in the log, and the next start resends
/// those copies (bounded, see the module docs).
async fn last_commit(spool: &herald_spool::Spool, deadline: Instant) {
    let why = match until(deadline, "journal commit", spool.flush()).await {
        Some(Ok(())) => return,
        Some(Err(e)) => e.to_string(),
        None => spool
            .journal_outage()
            .unwrap_or_else(|| "the last commit did not finish in time".into()),
    };
    tracing::error!(
        reason = %why,
        "stopping with outcomes not journaled: copies delivered since the journal's last \
         commit are sent again at the next start (at most open connections × \
         max_copies_per_batch); nothing accepted is lost"
    );
}
