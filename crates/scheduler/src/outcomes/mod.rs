//! The report loop: where delivery outcomes become telemetry and completions. A worker journals
//! its own batch's final outcomes before it reports them (it waits for their commit: see
//! `workers/mod.rs`); the outcomes the scheduler decides without a connection (expiry, an operator's
//! give-up, no route) are journaled here. Every outcome becomes an event; when all of a post's
//! recipients are final the post is completed in the spool — after its outcomes, since they
//! entered the spool's channel before their reports reached this loop.
//!
//! A final failure goes to the bounce stage as a [`FailedCopy`] carrying its
//! [`FailureCause`]: the receiving server's reply for a worker's failure, or the scheduler's own
//! verdict (expired, the operator gave up, no route) as its own variant, so the bounce stage never
//! reads our synthetic replies' text to learn what we decided.

use crate::messages::{OutcomeReport, Report};
use herald_spool::{FinalState, Spool};
use herald_telemetry::{Attempt, Event, StageId, Telemetry};
use herald_types::{FailedCopy, FailureCause, MemberId, PostId, RcptOutcome};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Capacity of the failed-copy channel to the bounce stage. When it is full the report loop
/// waits (backpressure), so no failure is lost while the stage catches up.
pub const FAILED_COPY_CAPACITY: usize = 4096;

/// How long shutdown waits for the last outcomes to be journaled.
const FINAL_FLUSH_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Who else learns of final outcomes: the shared fan-out (`herald-shards`)
/// reports a shard's finished members to the shared store. Called from the report loop, so an
/// implementation must not block (a short std `Mutex` at most).
pub trait FinalSink: Send + Sync {
    /// `member` of `post` is final here. `gave_up`: by the operator's (or a drain's) give-up,
    /// which is this node letting go of the copy, not the copy's end.
    fn finished(&self, post: PostId, member: MemberId, gave_up: bool);
    /// Every recipient of `post` is final here (after its outcomes).
    fn completed(&self, post: PostId);
}

#[derive(Default)]
struct Track {
    expected: Option<u64>,
    finished: u64,
}

/// Runs until `actor_done` is cancelled (or every sender is gone), then drains what is queued and
/// flushes the spool, so every outcome reported before shutdown is journaled.
pub async fn run(
    mut rx: mpsc::Receiver<Report>,
    spool: Spool,
    telemetry: Telemetry,
    failures: Option<mpsc::Sender<FailedCopy>>,
    finals: Option<Arc<dyn FinalSink>>,
    actor_done: CancellationToken,
) {
    let mut book = Book {
        tracks: HashMap::new(),
        spool,
        telemetry,
        failures,
        finals,
    };
    loop {
        tokio::select! {
            biased;
            r = rx.recv() => match r {
                Some(r) => book.apply(r).await,
                None => break,
            },
            _ = actor_done.cancelled() => {
                while let Ok(r) = rx.try_recv() {
                    book.apply(r).await;
                }
                break;
            }
        }
    }
    // Bounded: during a disk outage the flush waits for a repair that may never come before
    // the process exits; what is lost then is only the unjournaled window.
    match tokio::time::timeout(FINAL_FLUSH_WAIT, book.spool.flush()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::error!(error = %e, "final spool flush failed"),
        Err(_) => tracing::error!("final spool flush did not finish: the journal is unwritable"),
    }
}

struct Book {
    tracks: HashMap<PostId, Track>,
    spool: Spool,
    telemetry: Telemetry,
    failures: Option<mpsc::Sender<FailedCopy>>,
    finals: Option<Arc<dyn FinalSink>>,
}

impl Book {
    async fn apply(&mut self, report: Report) {
        let post = match report {
            Report::Expanded {
                post,
                recipients,
                already_done,
            } => {
                self.telemetry.emit(Event::PostExpanded {
                    post,
                    recipients,
                    already_done,
                });
                let t = self.tracks.entry(post).or_default();
                t.expected = Some(recipients);
                t.finished += already_done;
                post
            }
            Report::Outcome(o) => self.outcome(*o).await,
        };
        let complete = self
            .tracks
            .get(&post)
            .is_some_and(|t| t.expected.is_some_and(|e| t.finished >= e));
        if complete {
            self.tracks.remove(&post);
            // Queued, not awaited: one commit wait per post here capped completions at one
            // per commit interval. The final flush below makes the last ones durable.
            if let Err(e) = self.spool.complete_queued(post).await {
                tracing::error!(%post, error = %e, "cannot complete a post in the spool");
            }
            self.telemetry.emit(Event::PostCompleted { post });
            if let Some(f) = &self.finals {
                f.completed(post);
            }
        }
    }

    async fn outcome(&mut self, mut o: OutcomeReport) -> PostId {
        let post = o.post;
        let state = match &o.outcome {
            RcptOutcome::Delivered(_) => Some(FinalState::Delivered),
            RcptOutcome::Failed(_) => Some(FinalState::Failed),
            RcptOutcome::Deferred(_) => None,
        };
        let c = self.telemetry.contention();
        c.stage_wait_since(StageId::ReportQueue, o.queued_at);
        if let Some(state) = state {
            if !o.journaled {
                let t = std::time::Instant::now();
                let r = self.spool.record(post, o.member, state).await;
                c.stage_wait_since(StageId::SpoolRecord, t);
                if let Err(e) = r {
                    // Only a closed spool refuses a record (an unwritable one keeps it in memory).
                    tracing::error!(%post, error = %e, "cannot journal an outcome");
                }
            }
            self.tracks.entry(post).or_default().finished += 1;
            if let Some(f) = &self.finals {
                let gave_up = matches!(o.cause, Some(FailureCause::OperatorGaveUp));
                f.finished(post, o.member, gave_up);
            }
        }
        if let (Some(cause), Some(tx)) = (o.cause.take(), &self.failures) {
            let failed = FailedCopy {
                list: o.list,
                post,
                rcpt: o.rcpt_address.clone(),
                cause,
            };
            if tx.send(failed).await.is_err() {
                tracing::warn!(%post, "bounce stage gone; a permanent failure is not scored");
            }
        }
        self.telemetry.emit(Event::Attempt(Box::new(Attempt {
            post,
            member: o.member,
            rcpt: o.rcpt,
            relay: o.relay,
            accepted_at_ms: o.accepted_at_ms,
            xdelay_ms: o.xdelay_ms,
            tries: o.tries,
            tls: o.tls,
            mta_sts: o.mta_sts,
            dane: o.dane,
            source: o.source,
            outcome: o.outcome,
        })));
        post
    }
}

#[cfg(test)]
mod tests;
