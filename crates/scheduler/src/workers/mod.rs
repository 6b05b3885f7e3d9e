//! A connection worker: opens one SMTP connection for a destination, trying the targets the
//! actor planned from host health (a due probe first, then healthy hosts, then failing ones;
//! down hosts are not in the plan), then asks the actor for batches and sends them, splicing
//! each member's copy just before it goes to the socket, until the actor has no more work for it
//! or the connection's message limit is reached. A batch is spliced only once its bytes are
//! taken from the global copy budget (`budget.rs`, `max_copy_bytes`), and they go back when the
//! batch is sent: the memory of every copy in flight stays under one number. Copies of signed
//! posts are spliced and signed in the signing pool (`signing.rs`, `[delivery]
//! signing_threads`) while the worker's runtime thread serves other connections.
//!
//! A fast-lane worker uses the short first-pass timeouts, a slow-lane worker the RFC 5321 ones:
//! no call holds a worker past its lane's timeout (herald-smtp-client bounds every step of a
//! session, herald-routing every lookup).
//!
//! The unjournaled window: a connection never has more than `max_copies_per_batch` copies
//! sent whose outcomes are not yet durable. Each copy's final state is queued to the journal
//! the moment the reply to its body arrives ([`Spool::try_record`], without waiting, from inside
//! the SMTP exchange), so usually only the copies delivered in the last `commit_interval_ms` are
//! unjournaled; at the end of the batch the worker queues whatever could not be queued then
//! ([`Spool::record_batch`]: one message, group-committed with every other worker's) and,
//! before it sends more than the window allows, waits for the batch to be durable. Batches are half the window, so the commit of one overlaps the sending of the
//! next. Journaling here rather than in the report loop keeps that serial loop (telemetry,
//! bounces, completion) off the path every batch waits on. So copies delivered but not yet
//! journaled — what a `kill -9` would send again — never exceed open connections ×
//! `max_copies_per_batch` (`/metrics`:
//! `herald_unjournaled_copies` and its bound). The same wait pauses fan-out while the journal
//! cannot be written (a full disk): no copy goes out that Herald could not remember.
//!
//! A worker never decides policy: outcomes go to the report loop; each connection attempt and
//! each batch (delivered count, deferred copies with their classification, throttling seen) goes
//! to the actor, which owns host health, lanes and shaping.
//!
//! What a batch's copies come to (`Batch::settle`): copies never tried — after a refused MAIL
//! stopped the batch, after a `421` at MAIL, or after the copy whose body a dropped connection
//! cut off — are handed back untouched (no try charged, no report); a copy refused for rate goes
//! to the actor's pace; the copy cut off by a drop is charged one try and reported apart, so the
//! actor can retry it at once on a new connection.

use crate::classify::classify;
use crate::messages::{BatchDone, Ctrl, Job, OutcomeReport, Report, Target};
use herald_fanout::Stamp;
use herald_routing::{DaneRoute, StsRoute};
use herald_spool::{FinalState, Spool};
use herald_telemetry::Telemetry;
use herald_types::{DeferralKind, EnhancedStatus, LaneKind, RcptOutcome, Reply};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub mod budget;
pub mod connector;
#[cfg(test)]
pub(crate) mod scripted;
pub mod signing;
pub mod smtp;
#[cfg(test)]
mod tests;

use connector::BreakStage;
pub use connector::{Connector, Session};

/// What every worker shares.
pub struct WorkerCtx {
    /// Opens the SMTP sessions ([`smtp::SmtpConnector`]; scripted ones in tests).
    pub connector: Arc<dyn Connector>,
    /// The SMTP port of the destinations' hosts (25 on the Internet).
    pub port: u16,
    pub ctrl: mpsc::Sender<Ctrl>,
    pub reports: mpsc::Sender<Report>,
    /// Where a batch's final outcomes are journaled before the worker takes more work.
    pub spool: Spool,
    /// Copies a connection may have sent and not yet journaled (`max_copies_per_batch`).
    pub window: usize,
    pub telemetry: Telemetry,
    /// The scheduler's shutdown: a worker waiting for a journal that cannot be written stops
    /// waiting [`DURABLE_WAIT_AT_SHUTDOWN`] after it.
    pub shutdown: CancellationToken,
    /// Where each session's TLS result per recipient domain goes for TLS reporting (RFC 8460;
    /// `None`: off). Sent with `try_send`: a full channel drops a record, never slows delivery.
    pub tls_sessions: Option<mpsc::Sender<herald_types::TlsSessionRecord>>,
    /// The egress pools (`None`: not configured): the actor puts a copy's pool in
    /// its destination key, the connector leases a source address per connection.
    pub egress: Option<herald_egress::Egress>,
    /// Bytes of spliced copies in memory at once, over every worker (`max_copy_bytes`): a batch
    /// takes its bytes before it is spliced and gives them back once sent (`budget.rs`).
    pub copy_budget: budget::CopyBudget,
    /// The signing pool (`[delivery] signing_threads`; `None`: copies are signed inline on the
    /// worker that writes them).
    pub signing: Option<signing::SigningPool>,
}

impl WorkerCtx {
    /// Hands one record to TLS reporting without waiting; counted when dropped.
    pub(crate) fn report_tls(&self, record: herald_types::TlsSessionRecord) {
        if let Some(tx) = &self.tls_sessions {
            if tx.try_send(record).is_err() {
                tracing::debug!("TLS report channel full: a session record was dropped");
            }
        }
    }
}

/// How long a worker still waits for its batch to be journaled once shutdown has begun.
const DURABLE_WAIT_AT_SHUTDOWN: Duration = Duration::from_secs(5);

/// How long a transaction already on the wire may still run once shutdown has begun. Most end
/// in milliseconds; a tarpit or a hung host would hold the stop for its whole timeout (minutes
/// in the slow lane), so past this the worker gives the transaction up: its answered copies are
/// journaled and the unanswered ones stay in the spool for the next start — the same bounded
/// window a crash leaves, and far less than a supervisor's `SIGKILL` after its stop timeout.
pub(crate) const DRAIN_AT_SHUTDOWN: Duration = Duration::from_secs(10);

/// Resolves [`DRAIN_AT_SHUTDOWN`] after shutdown begins; never before it.
async fn drain_expired(shutdown: &CancellationToken) {
    shutdown.cancelled().await;
    tokio::time::sleep(DRAIN_AT_SHUTDOWN).await;
}

/// What the actor asks one worker to do.
pub struct WorkerPlan {
    pub dest: Arc<str>,
    pub lane: LaneKind,
    pub targets: Vec<Target>,
    /// Copies on this connection at most (the destination's shaping budget).
    pub max_messages: usize,
    /// The MTA-STS requirements of the destination's domains, if a policy applies.
    pub sts: Option<Arc<StsRoute>>,
    /// What DANE requires of each host (None: DANE is off).
    pub dane: Option<Arc<DaneRoute>>,
    /// The egress pool the connection leaves from (None: the system chooses the source).
    pub egress_pool: Option<Arc<str>>,
}

/// Runs one worker to completion. Always tells the actor how it ended.
pub async fn run(plan: WorkerPlan, ctx: Arc<WorkerCtx>) {
    let (dest, lane, max_messages) = (plan.dest.clone(), plan.lane, plan.max_messages);
    // A connection still being opened at shutdown carries no copy yet: it is given up at once
    // (a hung or tarpitting host would otherwise hold the stop for a whole connect timeout).
    let connecting = tokio::select! {
        opened = ctx.connector.connect(&plan) => Some(opened),
        () = ctx.shutdown.cancelled() => None,
    };
    let Some(connecting) = connecting else {
        let _ = ctx.ctrl.send(Ctrl::WorkerExit { dest, lane }).await;
        return;
    };
    let opened = match connecting {
        Ok(o) => o,
        Err(f) => {
            let failed = Ctrl::ConnectFailed {
                dest: dest.clone(),
                failed: f.failed,
                error: f.reply,
                dane_failed: f.dane_failed,
                local: f.local,
            };
            let _ = ctx.ctrl.send(failed).await;
            let _ = ctx.ctrl.send(Ctrl::WorkerExit { dest, lane }).await;
            return;
        }
    };
    drop(plan);
    let connector::Opened {
        mut session,
        host,
        failed,
        timings,
        notes,
    } = opened;
    let connected = Ctrl::Connected {
        dest: dest.clone(),
        host: host.clone(),
        timings,
        failed,
    };
    let _ = ctx.ctrl.send(connected).await;
    let gauges = ctx.telemetry.gauges();
    gauges.connections_open.inc();
    let mut sent = 0usize;
    // Accepted on this connection so far: what a `421` at MAIL says the host allows.
    let mut delivered_here = 0usize;
    // The connection's unjournaled window: copies sent whose outcomes are not yet durable never
    // exceed `window`. Batches are half the window, so one batch's commit overlaps the sending
    // of the next instead of stalling the connection for every fdatasync.
    let window = ctx.window.max(1);
    let half = window.div_ceil(2);
    // Recipient domains this session has carried mail for: TLS reporting counts the session once
    // for each (RFC 8460 reports per policy domain).
    let mut tls_domains: HashSet<String> = HashSet::new();
    let mut pending: Option<Unjournaled> = None;
    loop {
        let mut room = window - pending.as_ref().map_or(0, |p| p.copies);
        if room == 0 {
            if let Some(p) = pending.take() {
                let ((), kept) = watch(session, p.wait(&ctx)).await;
                let Some(kept) = kept else {
                    return leave_closed(&ctx, None, dest, lane).await;
                };
                session = kept;
            }
            room = window;
        }
        // The source address's warm-up volume for today: none left ends the
        // connection; the actor's next one leases another source or defers the copies.
        let want = session.reserve(room.min(half));
        if want == 0 {
            break;
        }
        let (tx, rx) = oneshot::channel();
        let ask = Ctrl::NeedWork {
            dest: dest.clone(),
            lane,
            max: want,
            delivered_here,
            reply: tx,
        };
        if ctx.ctrl.send(ask).await.is_err() {
            session.unreserve(want);
            break;
        }
        // Parked: a server that closes the idle session meanwhile is answered at once (the
        // actor puts back what it would have sent to a worker that left).
        let jobs = tokio::select! {
            biased;
            jobs = rx => jobs.unwrap_or_default(),
            () = session.peer_closed() => Vec::new(),
        };
        session.unreserve(want.saturating_sub(jobs.len()));
        if jobs.is_empty() {
            break;
        }
        sent += jobs.len();
        // With TLS reporting off, no per-copy work at all.
        if let (Some(facts), true) = (&notes.tls_report, ctx.tls_sessions.is_some()) {
            for job in &jobs {
                let domain = job.domain();
                if !tls_domains.contains(domain) {
                    tls_domains.insert(domain.to_string());
                    ctx.report_tls(herald_types::TlsSessionRecord {
                        policy_domain: domain.to_ascii_lowercase(),
                        policy: facts.policy.clone(),
                        mx_host: host.name.to_string(),
                        receiving_ip: host.addr,
                        failure: facts.failure.clone(),
                    });
                }
            }
        }
        let batch = Batch {
            session: &mut *session,
            notes: &notes,
            host: &host,
            dest: &dest,
            delivered_here: &mut delivered_here,
        };
        let Some((healthy, journaled, untried)) = batch.send(jobs, &ctx).await else {
            // Given up at shutdown mid-transaction: the session is in an unknown state, so no
            // QUIT and no reuse; what was answered is journaled, the rest resumes at the next start.
            if let Some(p) = pending.take() {
                p.wait(&ctx).await;
            }
            gauges.connections_open.dec();
            let _ = ctx.ctrl.send(Ctrl::WorkerExit { dest, lane }).await;
            return;
        };
        session.unreserve(untried);
        // Commits complete in order: the older batch is durable first.
        if let Some(p) = pending.take() {
            let ((), kept) = watch(session, p.wait(&ctx)).await;
            let Some(kept) = kept else {
                return leave_closed(&ctx, journaled, dest, lane).await;
            };
            session = kept;
        }
        pending = journaled;
        if !healthy || sent >= max_messages {
            break;
        }
    }
    // QUIT politely, but never let a slow peer hold the worker; before the journal wait, which
    // a paused spool can stretch far past any server's patience, so the socket goes first.
    let _ = tokio::time::timeout(Duration::from_secs(5), session.quit()).await;
    leave_closed(&ctx, pending, dest, lane).await;
}

/// Runs `wait` to its end while watching the idle session. The session comes back unless its
/// peer closed it meanwhile: then it is dropped at once, so our side closes too instead of
/// holding a descriptor in CLOSE-WAIT for as long as the wait lasts (a full disk pauses the
/// journal, and with it every worker, for minutes).
async fn watch<T>(
    mut session: Box<dyn Session>,
    wait: impl std::future::Future<Output = T>,
) -> (T, Option<Box<dyn Session>>) {
    tokio::pin!(wait);
    let done = tokio::select! {
        biased;
        v = &mut wait => Some(v),
        () = session.peer_closed() => None,
    };
    match done {
        Some(v) => (v, Some(session)),
        None => {
            drop(session);
            (wait.await, None)
        }
    }
}

/// The end of a worker whose session is closed: its last batch made durable, its slot given
/// back.
async fn leave_closed(
    ctx: &WorkerCtx,
    pending: Option<Unjournaled>,
    dest: Arc<str>,
    lane: LaneKind,
) {
    if let Some(p) = pending {
        p.wait(ctx).await;
    }
    ctx.telemetry.gauges().connections_open.dec();
    let _ = ctx.ctrl.send(Ctrl::WorkerExit { dest, lane }).await;
}

/// A copy's DKIM or ARC step for `Metrics::count_copy_auth`.
fn stamp(s: Stamp) -> Option<bool> {
    match s {
        Stamp::NotWanted => None,
        Stamp::Added => Some(true),
        Stamp::Failed => Some(false),
    }
}

/// One batch on an open session.
struct Batch<'a> {
    session: &'a mut dyn Session,
    /// The connection as the delivery log shows it (relay, TLS, MTA-STS, DANE).
    notes: &'a connector::SessionNotes,
    host: &'a crate::messages::HostKey,
    dest: &'a Arc<str>,
    /// Copies accepted on this connection before and during this batch.
    delivered_here: &'a mut usize,
}

/// What a batch's outcomes come to, before they are journaled and reported.
struct Settled {
    done: BatchDone,
    reports: Vec<OutcomeReport>,
    /// Final states not yet queued to the journal as their replies came.
    journal: Vec<(herald_types::PostId, herald_types::MemberId, FinalState)>,
    /// Final outcomes in the batch (journaled as they came or in `journal`).
    finals: i64,
}

impl Batch<'_> {
    /// Sends the copies, journals the final outcomes (see the module docs), reports every
    /// outcome and the batch. Returns false when the connection must not be used again, and the
    /// batch's copies still waiting to be durable.
    ///
    /// The copies are spliced only once their bytes are taken from the copy budget, into
    /// buffers that live as long as the exchange: bytes and buffers go back before the batch
    /// is journaled and reported, so a worker never holds copy bytes while it waits on the
    /// journal, the report loop or the actor (see `budget.rs`).
    ///
    /// `None`: the transaction outlived [`DRAIN_AT_SHUTDOWN`] and was given up. The final
    /// outcomes that had arrived are journaled (durable before this returns, within
    /// [`DURABLE_WAIT_AT_SHUTDOWN`]); nothing is reported, as the stages are stopping.
    async fn send(
        mut self,
        jobs: Vec<Job>,
        ctx: &WorkerCtx,
    ) -> Option<(bool, Option<Unjournaled>, usize)> {
        let estimate: usize = jobs.iter().map(|j| j.post.template.size_hint()).sum();
        let mut bytes = ctx.copy_budget.acquire(estimate).await;
        let bufs: Vec<Vec<u8>> = jobs
            .iter()
            .map(|j| Vec::with_capacity(j.post.template.size_hint()))
            .collect();
        let return_paths: Vec<String> = jobs
            .iter()
            .map(|j| j.post.template.return_path(&j.member))
            .collect();
        let rcpts: Vec<String> = jobs.iter().map(|j| j.member.address.to_string()).collect();
        // Signed posts go to the signing pool when it is on (`signing.rs`): this task waits
        // without holding its runtime thread, which serves the other connections meanwhile.
        let bufs = signing::splice_batch(&jobs, bufs, ctx).await;
        bytes.settle(bufs.iter().map(Vec::capacity).sum());
        let copies: Vec<connector::OutCopy<'_>> = (0..jobs.len())
            .map(|i| connector::OutCopy {
                return_path: &return_paths[i],
                rcpt: &rcpts[i],
                body: &bufs[i],
                dsn: jobs[i].post.dsn.as_ref(),
            })
            .collect();
        let gauges = ctx.telemetry.gauges();
        let handed = copies.len() as i64;
        gauges.unjournaled_copies.inc_by(handed);
        gauges.inflight_copies.inc_by(handed);
        // Each delivered copy is journaled the moment its reply arrives (see the module docs);
        // `streamed[i]` says it was, so the end of the batch records only the rest.
        let ids: Vec<(herald_types::PostId, herald_types::MemberId)> =
            jobs.iter().map(|j| (j.post.id, j.member.id)).collect();
        let mut streamed = vec![false; jobs.len()];
        // Final states that arrived but could not be queued at once (the journal's channel was
        // full): only a transaction given up at shutdown needs them, as it has no `Sent`.
        let mut unqueued: Vec<(herald_types::PostId, herald_types::MemberId, FinalState)> =
            Vec::new();
        let spool = &ctx.spool;
        let mut journal_now = |i: usize, outcome: &RcptOutcome| {
            if let (Some(state), Some(&(post, member))) =
                (FinalState::from_outcome(outcome), ids.get(i))
            {
                streamed[i] = spool.try_record(post, member, state);
                if !streamed[i] {
                    unqueued.push((post, member, state));
                }
            }
        };
        let started = Instant::now();
        let sent = tokio::select! {
            sent = self.session.send(&copies, &mut journal_now) => Some(sent),
            () = drain_expired(&ctx.shutdown) => None,
        };
        let Some(sent) = sent else {
            gauges.inflight_copies.dec_by(handed);
            tracing::warn!(
                dest = %self.dest,
                copies = handed,
                "shutting down: gave up a transaction still running; unanswered copies resume at the next start"
            );
            let answered = unqueued.len() + streamed.iter().filter(|s| **s).count();
            gauges
                .unjournaled_copies
                .dec_by(handed - i64::try_from(answered).unwrap_or(handed));
            if answered > 0 {
                // Commits complete in order: this one's durability covers the copies queued
                // as their replies came, too.
                match ctx.spool.record_batch(unqueued).await {
                    Ok(durable) => {
                        let copies = answered;
                        Unjournaled { durable, copies }.wait(ctx).await
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "cannot journal a given-up transaction's outcomes");
                        gauges
                            .unjournaled_copies
                            .dec_by(i64::try_from(answered).unwrap_or(0));
                    }
                }
            }
            return None;
        };
        let elapsed = started.elapsed();
        gauges.inflight_copies.dec_by(handed);
        // Written and answered: the copies' memory goes back to the budget.
        drop(copies);
        drop(bufs);
        drop(bytes);
        let broke = sent.broke.is_some();
        let settled = self.settle(jobs, rcpts, sent, &streamed, elapsed);
        // After a refusal for rate the connection ends: the RCPT and DATA pipelined after a
        // refused MAIL count as errors at the server, and enough of them make it hang up.
        let healthy = !broke && self.session.is_reusable() && settled.done.paced.is_empty();
        gauges.unjournaled_copies.dec_by(handed - settled.finals);
        // Copies never tried do not count against the source's warm-up volume.
        let untried = settled.done.unsent.len();
        Some((healthy, hand_over(settled, ctx).await, untried))
    }

    /// Each copy's outcome (a deferral classified, a copy left without a reply deferred with
    /// the session's reply), its report, and the batch's summary for the actor.
    fn settle(
        &mut self,
        jobs: Vec<Job>,
        rcpts: Vec<String>,
        sent: connector::Sent,
        streamed: &[bool],
        elapsed: Duration,
    ) -> Settled {
        let n = u32::try_from(jobs.len().max(1)).unwrap_or(u32::MAX);
        let session_reply = sent.broke.as_ref().map(|b| b.reply.clone());
        let stage = sent.broke.as_ref().map(|b| b.stage);
        let mut done = BatchDone {
            dest: self.dest.clone(),
            host: self.host.clone(),
            delivered: 0,
            per_copy: elapsed / n,
            deferred: Vec::new(),
            // A 421 at MAIL (a per-connection cap) and a drop mid-DATA are judged by the actor.
            throttled: sent.broke.as_ref().is_some_and(|b| {
                b.throttled && !matches!(b.stage, BreakStage::Mail | BreakStage::Body)
            }),
            finished_slow: Vec::new(),
            unsent: Vec::new(),
            paced: Vec::new(),
            dropped: Vec::new(),
            conn_cap: None,
            greylist_passed: Vec::new(),
            tarpit: sent.broke.as_ref().is_some_and(|b| b.tarpit),
        };
        let mut results = sent.copies.into_iter();
        let (mut reports, mut journal) = (Vec::with_capacity(jobs.len()), Vec::new());
        let mut finals = 0i64;
        // Copies without a reply: after a clean stop or a 421 at MAIL none was tried; after a
        // drop mid-DATA only the first (its body was in flight); otherwise all are uncertain.
        let mut unreplied = 0usize;
        let now = Instant::now();
        for (i, (mut job, rcpt)) in jobs.into_iter().zip(rcpts).enumerate() {
            let result = results.next().unwrap_or_default();
            if result.outcome.is_none() {
                unreplied += 1;
                let untried = match stage {
                    None | Some(BreakStage::Mail) => true,
                    Some(BreakStage::Body) => unreplied > 1,
                    Some(BreakStage::Other) => false,
                };
                if untried {
                    done.unsent.push(job);
                    continue;
                }
            }
            let xdelay_ms = result.xdelay.unwrap_or(elapsed).as_millis() as u64;
            job.tries += 1;
            let cut_off = result.outcome.is_none() && stage == Some(BreakStage::Body);
            let outcome = result.outcome.unwrap_or_else(|| {
                RcptOutcome::Deferred(session_reply.clone().unwrap_or_else(no_reply))
            });
            let mut route = Route::Deferred;
            match &outcome {
                RcptOutcome::Delivered(_) => {
                    done.delivered += 1;
                    *self.delivered_here += 1;
                    if let Some(at) = job.greylisted_at {
                        done.greylist_passed.push(now.saturating_duration_since(at));
                    }
                }
                RcptOutcome::Deferred(r) => {
                    let kind = classify(r);
                    let closing_at_mail = r.code == 421 && stage == Some(BreakStage::Mail);
                    if closing_at_mail && *self.delivered_here > 0 {
                        // The host's messages-per-connection cap, not a verdict on the copy.
                        done.conn_cap = Some(*self.delivered_here);
                        route = Route::Unsent;
                    } else if kind == DeferralKind::Throttle && r.code != 421 {
                        route = Route::Paced;
                    } else if cut_off {
                        route = Route::Dropped;
                    } else {
                        done.throttled |= kind == DeferralKind::Throttle;
                    }
                    job.deferral = Some((kind, Box::new(r.clone())));
                }
                RcptOutcome::Failed(_) => {}
            }
            if let Some(state) = FinalState::from_outcome(&outcome) {
                finals += 1;
                if !streamed.get(i).copied().unwrap_or(false) {
                    journal.push((job.post.id, job.member.id, state));
                }
            }
            let mut report = OutcomeReport::new(&job, outcome, self.notes.relay.clone(), xdelay_ms);
            report.tls = Some(self.notes.tls.clone());
            report.source = self.notes.source;
            report.mta_sts = self.notes.mta_sts;
            report.dane = self.notes.dane;
            report.journaled = true;
            let is_final = report.outcome.is_final();
            reports.push(report);
            if is_final {
                if job.lane == LaneKind::Slow {
                    done.finished_slow.push(rcpt.into_boxed_str());
                }
                continue;
            }
            match route {
                Route::Deferred => done.deferred.push(job),
                Route::Unsent => {
                    job.tries = job.tries.saturating_sub(1);
                    done.unsent.push(job);
                }
                Route::Paced => done.paced.push(job),
                Route::Dropped => done.dropped.push(job),
            }
        }
        Settled {
            done,
            reports,
            journal,
            finals,
        }
    }
}

/// Where a copy that is not final goes (see `Batch::settle`).
enum Route {
    Deferred,
    Unsent,
    Paced,
    Dropped,
}

/// Journals a settled batch, then reports it: its records enter the spool's channel before its
/// reports reach the report loop, so a post's completion (which the report loop sends) is
/// always journaled after its outcomes. Even when every final state was journaled as it came,
/// the batch needs its commit point: an empty batch request is a commit of what is queued
/// (after the 1 ms linger). Returns what is still waiting to be durable.
async fn hand_over(s: Settled, ctx: &WorkerCtx) -> Option<Unjournaled> {
    let durable = if s.finals == 0 {
        None
    } else {
        match ctx.spool.record_batch(s.journal).await {
            Ok(d) => Some(d),
            Err(e) => {
                tracing::error!(error = %e, "cannot journal a batch's outcomes");
                None
            }
        }
    };
    for report in s.reports {
        let _ = ctx.reports.send(Report::Outcome(Box::new(report))).await;
    }
    let _ = ctx.ctrl.send(Ctrl::BatchDone(Box::new(s.done))).await;
    match durable {
        Some(durable) => Some(Unjournaled {
            durable,
            copies: usize::try_from(s.finals).unwrap_or(0),
        }),
        None => {
            let gauges = ctx.telemetry.gauges();
            gauges.unjournaled_copies.dec_by(s.finals);
            None
        }
    }
}

/// A batch's final outcomes, queued to the journal and not yet known to be durable.
struct Unjournaled {
    durable: herald_spool::Durable,
    copies: usize,
}

impl Unjournaled {
    /// Waits until they are durable; during shutdown, for [`DURABLE_WAIT_AT_SHUTDOWN`] at most.
    async fn wait(self, ctx: &WorkerCtx) {
        let durable = async {
            if let Err(e) = self.durable.wait().await {
                tracing::warn!(error = %e, "a batch's outcomes may not be journaled");
            }
        };
        let stopping = async {
            ctx.shutdown.cancelled().await;
            tokio::time::sleep(DURABLE_WAIT_AT_SHUTDOWN).await;
        };
        tokio::select! {
            () = durable => {}
            () = stopping => tracing::warn!("shutting down before a batch's outcomes were journaled"),
        }
        let copies = i64::try_from(self.copies).unwrap_or(i64::MAX);
        ctx.telemetry.gauges().unjournaled_copies.dec_by(copies);
    }
}

fn no_reply() -> Reply {
    Reply::new(
        451,
        Some(EnhancedStatus::new(4, 4, 0)),
        "no reply for this copy",
    )
}
