//! The bounce stage task: consumes spooled bounces (`PostKind::Bounce`) and the copies the
//! scheduler failed for good ([`FailedCopy`], with their [`herald_types::FailureCause`]), classifies them and
//! records them in the directory, then completes the spooled bounce.
//!
//! A failed copy is classified by its cause ([`crate::classify_failure`]): a copy that expired
//! after the list's retry period is recorded as an `expired` event (source `expiry`) that counts
//! like a soft bounce; the operator's give-up says nothing about the mailbox and is logged, not
//! recorded, so it never moves a member's score.
//!
//! Named states: a spooled bounce is `pending` (live in the spool, not yet seen), `recorded`
//! (an event is in the directory and the post is completed in the spool) or `kept` (an
//! unrecognized bounce: its event says `unrecognized`, the post stays live in the spool for an
//! administrator, who lists it with `herald bounces --kind unrecognized` and dismisses it with
//! `DELETE /api/v1/bounces/<post>`). A crash between recording and completing replays the bounce
//! at the next start; the once-per-day rule makes that harmless.
//!
//! Whom a bounce concerns: the member decoded from the VERP address it was sent to
//! (`PostMeta::recipients`); for the plain `-bounces` address, the report's final recipient.
//! Policy rejections are recorded against the list (no address). A bounce for an address that
//! is not a member is recorded (for the administrator) and counts against nobody.
//!
//! A member this stage disables is reported on `disabled` (when set) so that the server can
//! notify them (the list's `bounce_notify`); the report is sent after the directory commit, so a
//! crash in between loses at most that notice, never the disable.
//!
//! Limits: both input channels are bounded (the senders wait); each bounce is one directory
//! transaction.

use crate::complaint::{self, ComplaintContext, ComplaintOutcome};
pub use crate::error::StageError;
use crate::{classify_failure, classify_message, BounceKind, Verdict};
use herald_directory::{Directory, DirectoryError, NewBounce};
use herald_lists::Membership;
use herald_spool::{PostKind, Spool, SpooledPost};
use herald_types::{Address, DisabledMember, FailedCopy, FailureCause, ListId, PostId};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// What processing did with one input.
#[derive(Debug, Clone, PartialEq)]
pub struct Processed {
    pub kind: BounceKind,
    /// Whom it was recorded against (`None`: the list's reputation or nobody).
    pub address: Option<Address>,
    pub counted: bool,
    /// The member was disabled by this bounce.
    pub disabled: bool,
}

/// The stage's dependencies.
#[derive(Clone)]
pub struct BounceStage {
    pub directory: Directory,
    pub spool: Spool,
    /// Where newly disabled members are reported (`None`: nobody is told).
    pub disabled: Option<mpsc::Sender<DisabledMember>>,
    /// Feedback-loop complaints are recognised and acted on (`complaint.rs`); `None`: every
    /// report is classified as a bounce.
    pub complaints: Option<ComplaintContext>,
}

/// Capacity of the spooled-bounce channel from the enqueue path.
pub const BOUNCE_QUEUE_CAPACITY: usize = 1024;

impl BounceStage {
    /// Runs until `shutdown`: first the bounces that were live at start (`recovered`), then
    /// whatever arrives. Each input is handled to completion before the next.
    pub async fn run(
        self,
        recovered: Vec<SpooledPost>,
        mut posts: mpsc::Receiver<SpooledPost>,
        mut failures: mpsc::Receiver<FailedCopy>,
        shutdown: CancellationToken,
    ) {
        let kept = self.kept_posts().await;
        for post in recovered {
            if post.meta.kind == PostKind::Bounce && !kept.contains(&post.id) {
                self.handle_post(post).await;
            }
        }
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                Some(p) = posts.recv() => self.handle_post(p).await,
                Some(f) = failures.recv() => self.handle_failure(f).await,
                else => break,
            }
        }
        // Drain what is already queued so nothing reported before shutdown is lost.
        while let Ok(f) = failures.try_recv() {
            self.handle_failure(f).await;
        }
    }

    async fn handle_post(&self, post: SpooledPost) {
        let id = post.id;
        match self.process_post(&post).await {
            Ok(p) => {
                tracing::info!(post = %id, kind = p.kind.as_str(), address = ?p.address.map(|a| a.to_string()), counted = p.counted, disabled = p.disabled, "bounce processed")
            }
            Err(e) => {
                tracing::error!(post = %id, error = %e, "bounce not processed; it stays in the spool")
            }
        }
    }

    async fn handle_failure(&self, f: FailedCopy) {
        let post = f.post;
        match self.process_failure(f).await {
            Ok(Some(p)) => {
                tracing::debug!(%post, kind = p.kind.as_str(), counted = p.counted, disabled = p.disabled, "permanent failure scored")
            }
            Ok(None) => {}
            Err(e) => tracing::error!(%post, error = %e, "permanent failure not scored"),
        }
    }

    /// Posts already kept for an administrator (so a restart does not record them again).
    async fn kept_posts(&self) -> Vec<PostId> {
        let d = self.directory.clone();
        let found = tokio::task::spawn_blocking(move || {
            d.bounce_events(None, None, Some(BounceKind::Unrecognized.as_str()), 1000)
        })
        .await;
        match found {
            Ok(Ok(events)) => events.into_iter().filter_map(|e| e.post).collect(),
            _ => Vec::new(),
        }
    }

    /// Classifies and records one spooled bounce; completes it unless it is unrecognized.
    /// A feedback-loop report is handled as a complaint first.
    pub async fn process_post(&self, post: &SpooledPost) -> Result<Processed, StageError> {
        if let Some(ctx) = &self.complaints {
            let b = post.body.clone();
            if let Some(c) =
                tokio::task::spawn_blocking(move || herald_complaints::parse(&b)).await?
            {
                return self.process_complaint(ctx, post, &c).await;
            }
        }
        if post.meta.list_id == ListId::NONE {
            // Mail to the complaints address that is no report: nothing to score it against,
            // so it stays live in the spool (never lost) and is counted.
            if let Some(ctx) = &self.complaints {
                ctx.telemetry.metrics().count_complaint_unmatched();
            }
            tracing::warn!(post = %post.id, "mail to the complaints address is not a feedback report; kept in the spool");
            return Ok(unmatched());
        }
        let body = post.body.clone();
        let verdict = tokio::task::spawn_blocking(move || classify_message(&body)).await?;
        let verp = post.meta.recipients.first().cloned();
        let list = post.meta.list_id;
        let candidate = verp.or_else(|| verdict.recipient.clone());
        let processed = match self
            .record(list, candidate, &verdict, "dsn", Some(post.id))
            .await
        {
            Err(StageError::Directory(DirectoryError::NoSuchList(_))) => {
                // The list is gone: nobody left to score. Complete it so it does not linger.
                self.spool.complete(post.id).await?;
                return Ok(Processed {
                    kind: verdict.kind,
                    address: None,
                    counted: false,
                    disabled: false,
                });
            }
            r => r?,
        };
        if verdict.kind != BounceKind::Unrecognized {
            self.spool.complete(post.id).await?;
        }
        Ok(processed)
    }

    /// Acts on one complaint report; an unmatched one is kept (an unrecognized bounce of its
    /// list, listed for an administrator; or live in the spool for the complaints address).
    async fn process_complaint(
        &self,
        ctx: &ComplaintContext,
        post: &SpooledPost,
        c: &herald_complaints::Complaint,
    ) -> Result<Processed, StageError> {
        let verp = post.meta.recipients.first().cloned();
        let list = post.meta.list_id;
        let outcome = complaint::handle(ctx, &self.directory, list, verp, c).await?;
        tracing::info!(post = %post.id, outcome = ?outcome, format = c.format.word(), "complaint report processed");
        match outcome {
            ComplaintOutcome::Unmatched if list == ListId::NONE => Ok(unmatched()),
            ComplaintOutcome::Unmatched => {
                let v = Verdict {
                    kind: BounceKind::Unrecognized,
                    recipient: None,
                    status: None,
                    diagnostic: crate::kind::excerpt(&format!(
                        "{} report via {} naming no verifiable member",
                        c.format.word(),
                        c.reporter
                    )),
                };
                match self
                    .record(list, None, &v, "complaint", Some(post.id))
                    .await
                {
                    Err(StageError::Directory(DirectoryError::NoSuchList(_))) => {
                        self.spool.complete(post.id).await?;
                        Ok(unmatched())
                    }
                    r => r,
                }
            }
            ComplaintOutcome::Acted { member, .. }
            | ComplaintOutcome::AlreadyHandled { member, .. } => {
                self.spool.complete(post.id).await?;
                Ok(Processed {
                    kind: BounceKind::Informational,
                    address: Some(member),
                    counted: false,
                    disabled: false,
                })
            }
            ComplaintOutcome::NotSpam => {
                self.spool.complete(post.id).await?;
                Ok(Processed {
                    kind: BounceKind::Informational,
                    address: None,
                    counted: false,
                    disabled: false,
                })
            }
        }
    }

    /// Scores one copy that failed for good, by its cause. `None`: the cause is not a bounce
    /// (the operator gave up) and nothing was recorded: the member's score is as it was.
    pub async fn process_failure(&self, f: FailedCopy) -> Result<Option<Processed>, StageError> {
        let reply = f.cause.reply();
        let Some(kind) = classify_failure(&f.cause) else {
            tracing::info!(post = %f.post, rcpt = %f.rcpt, cause = f.cause.as_str(), reply = %reply, "final failure is Herald's own verdict; not scored");
            return Ok(None);
        };
        if f.list == ListId::NONE {
            // Server mail (a postmaster forward) has no list to score a member on; the failure
            // is in the delivery log, and the forwarded message stays stored for the operator.
            tracing::warn!(post = %f.post, rcpt = %f.rcpt, reply = %reply, "server mail failed permanently");
            return Ok(Some(Processed {
                kind,
                address: None,
                counted: false,
                disabled: false,
            }));
        }
        let verdict = Verdict {
            kind,
            recipient: Some(f.rcpt.clone()),
            status: reply.enhanced,
            diagnostic: crate::kind::excerpt(&reply.to_wire()),
        };
        let source = match f.cause {
            FailureCause::Expired { .. } => "expiry",
            _ => "smtp",
        };
        let processed = self
            .record(f.list, Some(f.rcpt), &verdict, source, Some(f.post))
            .await?;
        Ok(Some(processed))
    }

    async fn record(
        &self,
        list: ListId,
        address: Option<Address>,
        v: &Verdict,
        source: &'static str,
        post: Option<PostId>,
    ) -> Result<Processed, StageError> {
        // Policy rejections say nothing about the mailbox: they go to the list's reputation.
        let address = if v.kind == BounceKind::Policy {
            None
        } else {
            address
        };
        let event = NewBounce {
            kind: v.kind.as_str().to_string(),
            weight: v.kind.weight(),
            status: v.status.map(|s| s.to_string()),
            diagnostic: v.diagnostic.clone(),
            source,
            post,
            at_ms: herald_types::unix_ms_now(),
        };
        let m = Membership::new(&self.directory);
        let who = address.clone();
        let applied = tokio::task::spawn_blocking(move || {
            m.record_bounce(list, who.as_ref(), &event, crate::score)
        })
        .await??;
        if let (true, Some(tx), Some(a)) = (applied.disabled, &self.disabled, &address) {
            let report = DisabledMember {
                list,
                address: a.clone(),
            };
            if tx.send(report).await.is_err() {
                tracing::warn!(%list, address = %a, "nobody listens for disabled members; not notified");
            }
        }
        Ok(Processed {
            kind: v.kind,
            address,
            counted: applied.counted,
            disabled: applied.disabled,
        })
    }
}

/// What an unmatched, kept report reads as in the stage's log.
fn unmatched() -> Processed {
    Processed {
        kind: BounceKind::Unrecognized,
        address: None,
        counted: false,
        disabled: false,
    }
}

/// Starts the bounce stage as a row of the running table: the bounces the spool recovered
/// first, then spooled bounces from `posts` and our own failed copies from `failures`; newly
/// disabled members go to `disabled`. Stopped with the other stages, after delivery, whose
/// report loop has handed it every failure.
pub fn start(
    cx: &herald_stage::StartCx,
    posts: mpsc::Receiver<SpooledPost>,
    failures: mpsc::Receiver<FailedCopy>,
    disabled: mpsc::Sender<DisabledMember>,
) -> herald_stage::Started {
    let stage = BounceStage {
        directory: cx.directory.clone(),
        spool: cx.spool.clone(),
        disabled: Some(disabled),
        complaints: Some(ComplaintContext {
            secret: cx.secret.clone(),
            telemetry: cx.telemetry.clone(),
        }),
    };
    let recovered = cx.recovered(PostKind::Bounce);
    herald_stage::Started::spawn("bounce", herald_stage::StopAt::Stages, |stop| {
        stage.run(recovered, posts, failures, stop)
    })
}
