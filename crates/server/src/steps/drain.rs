//! Step 4 of `server::run`, the drain: listeners, then the hand-off, then the scheduler, then
//! the other stages, then the stores — each step with a time limit, so a stop is bounded
//! whatever state the disk, the store or the peers are in.
//!
//! The limits, from the moment the drain starts (just after SIGTERM):
//!
//! - listeners: [`LISTENERS`] for the sessions under way to end (they finish their
//!   transaction; one still running then is cut, and its client, without a `250`, keeps the
//!   message); the hand-off of accepted posts [`HANDOFF`] to put down what it holds;
//! - the scheduler: a transaction already on the wire gets `DRAIN_AT_SHUTDOWN` (10 s, the
//!   scheduler's) to finish; a tarpit or a hung host is given up then and its copies stay in
//!   the spool; the scheduler task gets [`SCHEDULER`] from its stop;
//! - the rest (reporting shards, the bounce and lists stages, the archive writer, the
//!   journal's last commit, the delivery log and statistics, leaving the cluster): [`TAIL`]
//!   together. A journal that still cannot be written then (a full disk with nothing left to
//!   give back, see `reserve.rs`) leaves the outcomes of at most open connections ×
//!   `max_copies_per_batch` copies unjournaled: those copies are sent again at the next start,
//!   the same window a crash leaves. Nothing accepted is lost.
//!
//! [`STOP_LIMIT`] is the sum, the bound docs/install.md states; `herald serve` exits at that point
//! even if a step misbehaves.

use super::{Served, Stages};
use crate::ServerError;
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;

/// Sessions under way get this long to end once the listeners stop accepting.
const LISTENERS: Duration = Duration::from_secs(3);
/// The hand-off task, to put down what it holds (it stays in the spool).
const HANDOFF: Duration = Duration::from_secs(1);
/// The scheduler task, from its stop: its workers' drain (10 s) and a margin for their last
/// journal commit. A polite QUIT still under way then is cut (the batch is journaled first).
const SCHEDULER: Duration = Duration::from_secs(11);
/// Everything after the scheduler, together.
const TAIL: Duration = Duration::from_secs(5);
/// The longest a stop takes, from SIGTERM to exit (20 s).
pub(crate) const STOP_LIMIT: Duration = Duration::from_secs(
    LISTENERS.as_secs() + HANDOFF.as_secs() + SCHEDULER.as_secs() + TAIL.as_secs(),
);

/// Runs `fut` until `deadline`; `None` (and a warning naming `what`) if it is not done then.
async fn until<F: Future>(deadline: Instant, what: &str, fut: F) -> Option<F::Output> {
    match tokio::time::timeout_at(deadline, fut).await {
        Ok(out) => Some(out),
        Err(_) => {
            tracing::warn!(
                step = what,
                "stopping: a step did not finish in time; going on without it"
            );
            None
        }
    }
}

/// Waits for `task` until `deadline`, then aborts it.
async fn join_until<T>(
    deadline: Instant,
    what: &str,
    task: tokio::task::JoinHandle<T>,
) -> Option<T> {
    let abort = task.abort_handle();
    match until(deadline, what, task).await {
        Some(Ok(out)) => Some(out),
        Some(Err(e)) => {
            tracing::error!(step = what, error = %e, "task failed while stopping");
            None
        }
        None => {
            abort.abort();
            None
        }
    }
}

/// Runs blocking `f` off the async threads until `deadline` (a thread stuck on a disk or a
/// store is left behind; the process exits without it).
async fn blocking_until<T: Send + 'static>(
    deadline: Instant,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    join_until(deadline, what, tokio::task::spawn_blocking(f)).await
}

/// Step 4: listeners, then the scheduler, then the other stages, then the stores.
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
    stages.handoff.1.cancel();
    join_until(Instant::now() + HANDOFF, "hand-off", stages.handoff.0).await;
    stages.scheduler_stop.cancel();
    join_until(
        Instant::now() + SCHEDULER,
        "scheduler",
        stages.scheduler_task,
    )
    .await;
    tracing::info!("stopping: scheduler stopped");
    let tail = Instant::now() + TAIL;
    if let Some(shards) = &stages.shards {
        // Every outcome is in: report it, and hand back what is unfinished.
        until(tail, "shared fan-out report", shards.finish()).await;
    }
    // After the scheduler: its report loop has handed every failure to the bounce stage.
    stages.stages_stop.cancel();
    for task in stages.tasks {
        join_until(tail, "stage", task).await;
    }
    tracing::info!("stopping: stages stopped");
    if let Some(writer) = stages.archive_writer {
        // Its senders went with the tasks above; it stores what is queued and ends.
        blocking_until(tail, "archive writer", move || writer.join()).await;
    }
    last_commit(&stages.spool, tail).await;
    let t = stages.telemetry.clone();
    blocking_until(tail, "delivery log and statistics", move || {
        t.flush_log();
        t.flush_stats();
    })
    .await;
    // Last: the node is `running` while it drains, then `left` (the task's end writes it).
    stages.heartbeat.1.cancel();
    join_until(tail, "leave the cluster", stages.heartbeat.0).await;
    tracing::info!(
        took_ms = started.elapsed().as_millis() as u64,
        "herald stopped"
    );
    Ok(())
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
