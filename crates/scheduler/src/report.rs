//! The report loop: where delivery outcomes become telemetry and completions. A worker journals
//! its own batch's final outcomes before it reports them (it waits for their commit: see
//! `worker.rs`); the outcomes the scheduler decides without a connection (expiry, an operator's
//! give-up, no route) are journaled here. Every outcome becomes an event; when all of a post's
//! recipients are final the post is completed in the spool — after its outcomes, since they
//! entered the spool's channel before their reports reached this loop.
//!
//! A final failure goes to the bounce stage as a [`FailedCopy`] carrying its
//! [`FailureCause`]: the receiving server's reply for a worker's failure, or the scheduler's own
//! verdict (expired, the operator gave up, no route) as its own variant, so the bounce stage never
//! reads our synthetic replies' text to learn what we decided.

use crate::job::Job;
use herald_spool::{FinalState, Spool};
use herald_telemetry::{Attempt, DaneNote, Event, MtaStsNote, StageId, Telemetry};
use herald_types::{Address, FailedCopy, FailureCause, ListId, MemberId, PostId, RcptOutcome};
use std::collections::HashMap;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Capacity of the failed-copy channel to the bounce stage. When it is full the report loop
/// waits (backpressure), so no failure is lost while the stage catches up.
pub const FAILED_COPY_CAPACITY: usize = 4096;

/// How long shutdown waits for the last outcomes to be journaled.
const FINAL_FLUSH_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// One attempt's result, detached from the job so the job can go back to its queue.
pub struct OutcomeReport {
    pub post: PostId,
    /// The list the copy was for (the bounce stage scores the member on it).
    pub list: ListId,
    /// The recipient as an address (`rcpt` is its text for the log).
    pub rcpt_address: Address,
    pub accepted_at_ms: u64,
    pub member: MemberId,
    pub rcpt: String,
    pub relay: String,
    pub xdelay_ms: u64,
    pub tries: u32,
    pub outcome: RcptOutcome,
    /// Why a `Failed` outcome failed (`None` otherwise): what the bounce stage scores. Set by
    /// the constructor that made the report (see [`OutcomeReport::new`] and
    /// [`OutcomeReport::failed`]), never read back from the reply.
    pub cause: Option<FailureCause>,
    /// The connection's TLS for the delivery log (`TLSv1.3/verified`, `TLSv1.3/unverified`,
    /// `none` for plaintext); `None` when no connection was made.
    pub tls: Option<String>,
    /// How the recipient domain's MTA-STS policy applied (`mta-sts=` in the log).
    pub mta_sts: Option<MtaStsNote>,
    /// What DANE concluded (`dane=` in the log).
    pub dane: Option<DaneNote>,
    /// When the report was made: the report loop measures how long it waited in the channel.
    pub queued_at: std::time::Instant,
    /// The worker journaled the final state itself (see `worker.rs`); the report loop only
    /// journals outcomes the scheduler decided without a connection (expiry, give-up, no route).
    pub journaled: bool,
}

impl OutcomeReport {
    /// A report of what a receiving server said: a `Failed` outcome here is its permanent
    /// reply ([`FailureCause::Remote`]). The scheduler's own final verdicts use
    /// [`OutcomeReport::failed`].
    pub fn new(job: &Job, outcome: RcptOutcome, relay: String, xdelay_ms: u64) -> OutcomeReport {
        let cause = match &outcome {
            RcptOutcome::Failed(reply) => Some(FailureCause::Remote(reply.clone())),
            RcptOutcome::Delivered(_) | RcptOutcome::Deferred(_) => None,
        };
        OutcomeReport {
            post: job.post.id,
            list: job.post.list_id,
            rcpt_address: job.member.address.clone(),
            accepted_at_ms: job.post.accepted_at_ms,
            member: job.member.id,
            rcpt: job.member.address.to_string(),
            relay,
            xdelay_ms,
            tries: job.tries,
            outcome,
            cause,
            tls: None,
            mta_sts: None,
            dane: None,
            queued_at: std::time::Instant::now(),
            journaled: false,
        }
    }

    /// A final failure the scheduler decided without a connection (expiry, the operator's
    /// give-up, no route): the outcome carries the cause's reply for the log and the journal.
    pub fn failed(job: &Job, cause: FailureCause) -> OutcomeReport {
        let mut report =
            OutcomeReport::new(job, RcptOutcome::Failed(cause.reply()), "none".into(), 0);
        report.cause = Some(cause);
        report
    }
}

/// How a recipient domain's TLS policies applied to an attempt (`mta-sts=`, `dane=`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PolicyNotes {
    pub mta_sts: Option<MtaStsNote>,
    pub dane: Option<DaneNote>,
}

/// What stages tell the report loop.
pub enum Report {
    /// Expansion finished: `recipients` in all, of which `already_done` were final before a
    /// restart.
    Expanded {
        post: PostId,
        recipients: u64,
        already_done: u64,
    },
    Outcome(Box<OutcomeReport>),
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
    actor_done: CancellationToken,
) {
    let mut book = Book {
        tracks: HashMap::new(),
        spool,
        telemetry,
        failures,
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
            if let Err(e) = self.spool.complete(post).await {
                tracing::error!(%post, error = %e, "cannot complete a post in the spool");
            }
            self.telemetry.emit(Event::PostCompleted { post });
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
            outcome: o.outcome,
        })));
        post
    }
}
