//! The running table: every started stage in start order, and the walk that stops them in
//! stop order, each place with a time limit so a stop is bounded whatever state the disk,
//! the store or the peers are in.
//!
//! The limits, from the moment each place is reached: the hand-off [`HANDOFF`] to put down
//! what it holds; delivery [`DELIVERY`] (a transaction already on the wire gets the
//! scheduler's own 10 s drain, then a margin for its last journal commit); everything after
//! delivery [`TAIL`] together. A step that is not done by then is given up (a task aborted,
//! a thread left behind) with a warning naming it.

use crate::{Finish, Started};
use crate::{StopAt, Task};
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The hand-off task, to put down what it holds (it stays in the spool).
pub const HANDOFF: Duration = Duration::from_secs(1);
/// The scheduler task, from its stop: its workers' drain (10 s) and a margin for their last
/// journal commit. A polite QUIT still under way then is cut (the batch is journaled first).
pub const DELIVERY: Duration = Duration::from_secs(11);
/// Everything after delivery, together.
pub const TAIL: Duration = Duration::from_secs(5);

/// One row of the table: what the drain needs of a started stage.
struct Row {
    name: &'static str,
    stop_at: StopAt,
    stop: CancellationToken,
    tasks: Vec<Task>,
    finish: Option<Finish>,
}

/// The started stages, in start order.
#[derive(Default)]
pub struct Running {
    rows: Vec<Row>,
}

impl Running {
    /// Adds a started stage (its row) and hands back what it offers.
    pub fn add<O>(&mut self, started: Started<O>) -> O {
        self.rows.push(Row {
            name: started.name,
            stop_at: started.stop_at,
            stop: started.stop,
            tasks: started.tasks,
            finish: started.finish,
        });
        started.offers
    }

    /// The names of the started stages, in start order (for the log).
    pub fn names(&self) -> Vec<&'static str> {
        self.rows.iter().map(|r| r.name).collect()
    }

    /// Stops every stage, place by place in stop order; within a place, every token is
    /// cancelled first, then each stage (in start order) finishes and its tasks are waited for.
    pub async fn stop(self) {
        let mut rows = self.rows;
        // Stable: stages of one place keep their start order.
        rows.sort_by_key(|r| r.stop_at);
        let mut tail: Option<Instant> = None;
        let mut rest = rows.into_iter().peekable();
        while let Some(first) = rest.peek() {
            let at = first.stop_at;
            let deadline = match at {
                StopAt::Handoff => Instant::now() + HANDOFF,
                StopAt::Delivery => Instant::now() + DELIVERY,
                _ => *tail.get_or_insert_with(|| Instant::now() + TAIL),
            };
            let mut place = Vec::new();
            while let Some(row) = rest.next_if(|r| r.stop_at == at) {
                place.push(row);
            }
            for row in &place {
                row.stop.cancel();
            }
            for row in place {
                stop_row(row, deadline).await;
            }
            match at {
                StopAt::Delivery => tracing::info!("stopping: scheduler stopped"),
                StopAt::Stages => tracing::info!("stopping: stages stopped"),
                _ => {}
            }
        }
    }
}

/// A stage's finish, then its tasks, until `deadline`.
async fn stop_row(row: Row, deadline: Instant) {
    if let Some(finish) = row.finish {
        until(deadline, row.name, finish(deadline)).await;
    }
    for task in row.tasks {
        match task {
            Task::Async(t) => {
                join_until(deadline, row.name, t).await;
            }
            Task::Thread(t) => {
                blocking_until(deadline, row.name, move || {
                    let _ = t.join();
                })
                .await;
            }
        }
    }
}

/// Runs `fut` until `deadline`; `None` (and a warning naming `what`) if it is not done then.
pub async fn until<F: Future>(deadline: Instant, what: &str, fut: F) -> Option<F::Output> {
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
pub async fn join_until<T>(
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
pub async fn blocking_until<T: Send + 'static>(
    deadline: Instant,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    join_until(deadline, what, tokio::task::spawn_blocking(f)).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A stage that records its name when its stop token fires.
    fn recorder(name: &'static str, at: StopAt, log: &Arc<Mutex<Vec<&'static str>>>) -> Started {
        let log = log.clone();
        Started::spawn(name, at, move |stop| async move {
            stop.cancelled().await;
            log.lock().unwrap_or_else(|e| e.into_inner()).push(name);
        })
    }

    #[tokio::test]
    async fn stages_stop_in_stop_order_and_keep_start_order_within_a_place() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut running = Running::default();
        running.add(recorder("leave", StopAt::Leave, &log));
        running.add(recorder("bounce", StopAt::Stages, &log));
        running.add(recorder("scheduler", StopAt::Delivery, &log));
        running.add(recorder("lists", StopAt::Stages, &log));
        running.add(recorder("handoff", StopAt::Handoff, &log));
        running.stop().await;
        let log = log.lock().unwrap_or_else(|e| e.into_inner()).clone();
        // One place's tokens are cancelled together: its stages wake in either order.
        assert_eq!(log[..2], ["handoff", "scheduler"]);
        let mut stages = log[2..4].to_vec();
        stages.sort_unstable();
        assert_eq!(stages, ["bounce", "lists"]);
        assert_eq!(log[4..], ["leave"]);
    }

    #[tokio::test]
    async fn a_child_token_stops_with_its_parent_but_is_waited_for_at_its_own_place() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut running = Running::default();
        let scheduler = recorder("scheduler", StopAt::Delivery, &log);
        let child = scheduler.stop.child_token();
        running.add(scheduler);
        let l = log.clone();
        running.add(Started::spawn_on(
            "knowledge",
            StopAt::Stages,
            child,
            move |stop| async move {
                stop.cancelled().await;
                l.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push("knowledge");
            },
        ));
        running.stop().await;
        let log = log.lock().unwrap_or_else(|e| e.into_inner()).clone();
        assert_eq!(log, ["scheduler", "knowledge"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_task_that_does_not_stop_is_given_up_at_its_limit() {
        let mut running = Running::default();
        running.add(Started::spawn("stuck", StopAt::Handoff, |_stop| async {
            std::future::pending::<()>().await
        }));
        let started = Instant::now();
        running.stop().await;
        assert!(started.elapsed() >= HANDOFF && started.elapsed() < HANDOFF * 2);
    }
}
