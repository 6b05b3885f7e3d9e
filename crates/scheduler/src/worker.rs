//! A connection worker: opens one SMTP connection for a destination, trying the targets the
//! actor planned from host health (a due probe first, then healthy hosts, then failing ones;
//! down hosts are not in the plan), then asks the actor for batches and sends them, splicing
//! each member's copy just before it goes to the socket, until the actor has no more work for it
//! or the connection's message limit is reached.
//!
//! A fast-lane worker uses the short first-pass timeouts, a slow-lane worker the RFC 5321 ones:
//! no call holds a worker past its lane's timeout (the delivery crate bounds every step).
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

use crate::actor::{BatchDone, Ctrl, FailKind, HostFailure};
use crate::classify::classify;
use crate::health::{HostKey, Target};
use crate::job::Job;
use crate::report::{OutcomeReport, Report};
use herald_fanout::Stamp;
use herald_routing::mta_sts::Mode;
use herald_routing::{Dane, DaneRoute, HostDane, MtaSts, MxResolver, StsRoute};
use herald_smtp_client::{
    ClientConfig, Connection, OutgoingCopy, SessionError, SessionErrorKind, Stage, TlsError,
};
use herald_spool::{FinalState, Spool};
use herald_telemetry::{DaneNote, DeferralKind, LaneKind, MtaStsNote, Telemetry};
use herald_types::{EnhancedStatus, RcptOutcome, Reply};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// What every worker shares.
pub struct WorkerCtx {
    /// First-pass (fast lane) client settings.
    pub client: Arc<ClientConfig>,
    /// Slow-lane client settings (RFC 5321 timeouts).
    pub slow_client: Arc<ClientConfig>,
    pub resolver: Arc<MxResolver>,
    /// MTA-STS policy discovery (None: `delivery.mta_sts.enabled = false`).
    pub mta_sts: Option<Arc<MtaSts>>,
    /// DANE TLSA lookups (None: `delivery.dane.enabled = false`, the default).
    pub dane: Option<Dane>,
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
}

/// How long a worker still waits for its batch to be journaled once shutdown has begun.
const DURABLE_WAIT_AT_SHUTDOWN: Duration = Duration::from_secs(5);

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
}

/// Runs one worker to completion. Always tells the actor how it ended.
pub async fn run(plan: WorkerPlan, ctx: Arc<WorkerCtx>) {
    let WorkerPlan {
        dest,
        lane,
        targets,
        max_messages,
        sts,
        dane,
    } = plan;
    let cfg = match lane {
        LaneKind::Fast => ctx.client.clone(),
        LaneKind::Slow => ctx.slow_client.clone(),
    };
    let enforce = sts.as_ref().is_some_and(|r| r.mode == Mode::Enforce);
    let (mut conn, host, failed) = match connect_any(&targets, &cfg, enforce, dane.as_deref()).await
    {
        Ok(c) => c,
        Err(ConnectFailure {
            failed,
            reply,
            dane_failed,
        }) => {
            let _ = ctx
                .ctrl
                .send(Ctrl::ConnectFailed {
                    dest: dest.clone(),
                    failed,
                    error: reply,
                    dane_failed,
                })
                .await;
            let _ = ctx.ctrl.send(Ctrl::WorkerExit { dest, lane }).await;
            return;
        }
    };
    let timings = conn.timings();
    let connected = Ctrl::Connected {
        dest: dest.clone(),
        host: host.clone(),
        timings,
        failed,
    };
    let _ = ctx.ctrl.send(connected).await;
    let relay = format!("{}[{}]:{}", host.name, host.addr, cfg.port);
    let tls = tls_summary(conn.tls_info());
    let mta_sts = sts_note(sts.as_deref(), &dest, &host, conn.tls_info());
    let dane = dane.as_deref().map(|r| dane_note(r, &host.name));
    let gauges = ctx.telemetry.gauges();
    gauges.connections_open.fetch_add(1, Relaxed);
    let mut bufs: Vec<Vec<u8>> = Vec::new();
    let mut sent = 0usize;
    // The connection's unjournaled window: copies sent whose outcomes are not yet durable never
    // exceed `window`. Batches are half the window, so one batch's commit overlaps the sending
    // of the next instead of stalling the connection for every fdatasync.
    let window = ctx.window.max(1);
    let half = window.div_ceil(2);
    let mut pending: Option<Unjournaled> = None;
    loop {
        let mut room = window - pending.as_ref().map_or(0, |p| p.copies);
        if room == 0 {
            if let Some(p) = pending.take() {
                p.wait(&ctx).await;
            }
            room = window;
        }
        let (tx, rx) = oneshot::channel();
        let ask = Ctrl::NeedWork {
            dest: dest.clone(),
            lane,
            max: room.min(half),
            reply: tx,
        };
        if ctx.ctrl.send(ask).await.is_err() {
            break;
        }
        let jobs = rx.await.unwrap_or_default();
        if jobs.is_empty() {
            break;
        }
        sent += jobs.len();
        let batch = Batch {
            conn: &mut conn,
            relay: &relay,
            tls: &tls,
            mta_sts,
            dane,
            host: &host,
            dest: &dest,
        };
        let (healthy, journaled) = batch.send(jobs, &mut bufs, &ctx).await;
        // Commits complete in order: the older batch is durable first.
        if let Some(p) = pending.take() {
            p.wait(&ctx).await;
        }
        pending = journaled;
        if !healthy || sent >= max_messages {
            break;
        }
    }
    if let Some(p) = pending.take() {
        p.wait(&ctx).await;
    }
    gauges.connections_open.fetch_sub(1, Relaxed);
    // QUIT politely, but never let a slow peer hold the worker.
    let _ = tokio::time::timeout(Duration::from_secs(5), conn.quit()).await;
    let _ = ctx.ctrl.send(Ctrl::WorkerExit { dest, lane }).await;
}

/// The delivery log's `tls=`: `TLSv1.3/verified`, `TLSv1.3/unverified` or `none` (plaintext).
fn tls_summary(info: Option<&herald_smtp_client::TlsInfo>) -> String {
    match info {
        Some(t) if t.verified => format!("{}/verified", t.version),
        Some(t) => format!("{}/unverified", t.version),
        None => "none".to_string(),
    }
}

/// How the destination's MTA-STS policy applies to copies sent over this connection. Under a
/// testing policy, a connection that enforcement would have refused (host outside the policy,
/// TLS missing or unverified) is logged here and counted per copy (`testing-failed`).
fn sts_note(
    sts: Option<&StsRoute>,
    dest: &str,
    host: &HostKey,
    tls: Option<&herald_smtp_client::TlsInfo>,
) -> Option<MtaStsNote> {
    let sts = sts?;
    if sts.mode == Mode::Enforce {
        // connect_with refused anything else.
        return Some(MtaStsNote::Enforce);
    }
    let verified = tls.is_some_and(|t| t.verified);
    if sts.satisfied_by(&host.name, verified) {
        return Some(MtaStsNote::Testing);
    }
    let why = match tls {
        _ if !sts.satisfied_by(&host.name, true) => "MX host not in the policy".to_string(),
        None => "no TLS".to_string(),
        Some(t) => format!(
            "certificate not verified: {}",
            t.verify_error.as_deref().unwrap_or("unknown reason")
        ),
    };
    tracing::warn!(%dest, host = %host.name, reason = %why, "MTA-STS testing policy: enforcement would refuse this connection");
    Some(MtaStsNote::TestingFailed)
}

/// What DANE concluded for a connection to `host` that succeeded: a host with usable records
/// was authenticated by them (`connect_dane` refuses anything else).
fn dane_note(route: &DaneRoute, host: &str) -> DaneNote {
    match route.host(host) {
        HostDane::Required(_) => DaneNote::Verified,
        HostDane::NoRecords => DaneNote::None,
        HostDane::Insecure => DaneNote::Insecure,
        // Not kept in a route; named for totality.
        HostDane::Failed(_) => DaneNote::Failed,
    }
}

/// Why no planned target could be used.
struct ConnectFailure {
    /// Every attempt with its classification.
    failed: Vec<HostFailure>,
    /// The reply recorded for the destination's copies (the last attempt's).
    reply: Reply,
    /// Some attempt failed because of DANE (`dane=failed` for the copies).
    dane_failed: bool,
}

/// Tries each planned target in order; the first that answers wins. `enforce`: the domains'
/// MTA-STS policy is enforced (verified TLS or nothing); `dane`: hosts with usable TLSA records
/// are reached with DANE-authenticated TLS or not at all.
async fn connect_any(
    targets: &[Target],
    cfg: &ClientConfig,
    enforce: bool,
    dane: Option<&DaneRoute>,
) -> Result<(Connection, HostKey, Vec<HostFailure>), ConnectFailure> {
    let mut failed = Vec::new();
    let mut dane_failed = false;
    let mut last = Reply::new(
        451,
        Some(EnhancedStatus::new(4, 4, 1)),
        "no MX host is reachable now",
    );
    for t in targets {
        let attempt = match dane.and_then(|r| r.tlsa_for(&t.key.name)) {
            Some(tlsa) => Connection::connect_dane(t.addr, &t.key.name, cfg, tlsa).await,
            None => Connection::connect_with(t.addr, &t.key.name, cfg, enforce).await,
        };
        match attempt {
            Ok(conn) => return Ok((conn, t.key.clone(), failed)),
            Err(e) => {
                dane_failed |= matches!(e.kind(), SessionErrorKind::Tls(TlsError::Dane(_)));
                last = e.synthetic_reply();
                tracing::debug!(host = %t.key.name, addr = %t.key.addr, probe = t.probe, error = %e, "connect failed");
                failed.push(HostFailure {
                    key: t.key.clone(),
                    kind: fail_kind(&e),
                    reason: last.text.clone(),
                });
            }
        }
    }
    Err(ConnectFailure {
        failed,
        reply: last,
        dane_failed,
    })
}

/// A copy's DKIM or ARC step for `Metrics::count_copy_auth`.
fn stamp(s: Stamp) -> Option<bool> {
    match s {
        Stamp::NotWanted => None,
        Stamp::Added => Some(true),
        Stamp::Failed => Some(false),
    }
}

/// How a failed connection attempt counts: a 421 (or a rate-limit reply) before the first
/// transaction is the host saying "not so fast", not the host being down.
fn fail_kind(e: &SessionError) -> FailKind {
    if let SessionErrorKind::Rejected(r) = e.kind() {
        if classify(r) == DeferralKind::Throttle {
            return FailKind::Throttle;
        }
    }
    if e.is_host_problem() {
        FailKind::Host
    } else {
        FailKind::Other
    }
}

/// One batch on an open connection.
struct Batch<'a> {
    conn: &'a mut Connection,
    relay: &'a str,
    /// The connection's TLS for the delivery log (see [`tls_summary`]).
    tls: &'a str,
    /// How MTA-STS applied (see [`sts_note`]).
    mta_sts: Option<MtaStsNote>,
    /// What DANE concluded (see [`dane_note`]).
    dane: Option<DaneNote>,
    host: &'a HostKey,
    dest: &'a Arc<str>,
}

impl Batch<'_> {
    /// Sends the copies, journals the final outcomes (see the module docs), reports every
    /// outcome and the batch. Returns false when the connection must not be used again, and the
    /// batch's copies still waiting to be durable.
    async fn send(
        self,
        jobs: Vec<Job>,
        bufs: &mut Vec<Vec<u8>>,
        ctx: &WorkerCtx,
    ) -> (bool, Option<Unjournaled>) {
        if bufs.len() < jobs.len() {
            bufs.resize_with(jobs.len(), Vec::new);
        }
        let return_paths: Vec<String> = jobs
            .iter()
            .map(|j| j.post.template.return_path(&j.member))
            .collect();
        let rcpts: Vec<String> = jobs.iter().map(|j| j.member.address.to_string()).collect();
        let metrics = ctx.telemetry.metrics();
        for (job, buf) in jobs.iter().zip(bufs.iter_mut()) {
            let auth = job.post.template.splice(&job.member, buf);
            metrics.count_copy_auth(stamp(auth.dkim), stamp(auth.arc));
        }
        let mut copies: Vec<OutgoingCopy<'_>> = (0..jobs.len())
            .map(|i| OutgoingCopy::new(&return_paths[i], &rcpts[i], &bufs[i]))
            .collect();
        let gauges = ctx.telemetry.gauges();
        let handed = copies.len() as i64;
        gauges.unjournaled_copies.fetch_add(handed, Relaxed);
        gauges.inflight_copies.fetch_add(handed, Relaxed);
        // Each delivered copy is journaled the moment its reply arrives (see the module docs);
        // `streamed[i]` says it was, so the end of the batch records only the rest.
        let ids: Vec<(herald_types::PostId, herald_types::MemberId)> =
            jobs.iter().map(|j| (j.post.id, j.member.id)).collect();
        let mut streamed = vec![false; jobs.len()];
        let spool = &ctx.spool;
        let mut journal_now = |i: usize, outcome: &RcptOutcome| {
            if let (Some(state), Some(&(post, member))) =
                (FinalState::from_outcome(outcome), ids.get(i))
            {
                streamed[i] = spool.try_record(post, member, state);
            }
        };
        let started = Instant::now();
        let result = self
            .conn
            .send_reporting(&mut copies, &mut journal_now)
            .await;
        let elapsed = started.elapsed();
        gauges
            .inflight_copies
            .fetch_sub(copies.len() as i64, Relaxed);
        let n = copies.len().max(1) as u32;
        let outcomes: Vec<(Option<RcptOutcome>, u64)> = copies
            .into_iter()
            .map(|c| {
                (
                    c.outcome,
                    c.xdelay
                        .map_or(elapsed.as_millis() as u64, |d| d.as_millis() as u64),
                )
            })
            .collect();
        // A broken session: its reply for copies left without one, and whether it was a drop or
        // a 421 (both throttling signals for the destination's budget).
        let (session_reply, session_throttled) = match &result {
            Ok(()) => (None, false),
            Err(e) => {
                let throttled = matches!(e.kind(), SessionErrorKind::Rejected(r) if classify(r) == DeferralKind::Throttle)
                    || (matches!(
                        e.kind(),
                        SessionErrorKind::ServerClosed | SessionErrorKind::Io(_)
                    ) && e.stage() != Stage::Quit);
                (Some(e.synthetic_reply()), throttled)
            }
        };
        let mut done = BatchDone {
            dest: self.dest.clone(),
            host: self.host.clone(),
            delivered: 0,
            per_copy: elapsed / n,
            deferred: Vec::new(),
            throttled: session_throttled,
            finished_slow: Vec::new(),
        };
        let mut reports = Vec::with_capacity(jobs.len());
        let mut journal = Vec::with_capacity(jobs.len());
        let mut finals = 0i64;
        for (i, ((mut job, (outcome, xdelay_ms)), rcpt)) in
            jobs.into_iter().zip(outcomes).zip(rcpts).enumerate()
        {
            job.tries += 1;
            let outcome = outcome.unwrap_or_else(|| {
                RcptOutcome::Deferred(session_reply.clone().unwrap_or_else(no_reply))
            });
            match &outcome {
                RcptOutcome::Delivered(_) => done.delivered += 1,
                RcptOutcome::Deferred(r) => {
                    let kind = classify(r);
                    done.throttled |= kind == DeferralKind::Throttle;
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
            let mut report = OutcomeReport::new(&job, outcome, self.relay.to_string(), xdelay_ms);
            report.tls = Some(self.tls.to_string());
            report.mta_sts = self.mta_sts;
            report.dane = self.dane;
            report.journaled = true;
            let is_final = report.outcome.is_final();
            reports.push(report);
            if !is_final {
                done.deferred.push(job);
            } else if job.lane == LaneKind::Slow {
                done.finished_slow.push(rcpt.into_boxed_str());
            }
        }
        gauges
            .unjournaled_copies
            .fetch_sub(handed - finals, Relaxed);
        // Into the spool's channel before the reports reach the report loop, so a post's
        // completion (which the report loop sends) is always journaled after its outcomes.
        // Even when every final state was journaled as it came, the batch needs its commit
        // point: an empty batch request is a commit of what is queued (after the 1 ms linger).
        let durable = if finals == 0 {
            None
        } else {
            match ctx.spool.record_batch(journal).await {
                Ok(d) => Some(d),
                Err(e) => {
                    tracing::error!(error = %e, "cannot journal a batch's outcomes");
                    None
                }
            }
        };
        for report in reports {
            let _ = ctx.reports.send(Report::Outcome(Box::new(report))).await;
        }
        let _ = ctx.ctrl.send(Ctrl::BatchDone(Box::new(done))).await;
        let healthy = result.is_ok() && self.conn.is_reusable();
        match durable {
            Some(durable) => (
                healthy,
                Some(Unjournaled {
                    durable,
                    copies: finals as usize,
                }),
            ),
            None => {
                gauges.unjournaled_copies.fetch_sub(finals, Relaxed);
                (healthy, None)
            }
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
        ctx.telemetry
            .gauges()
            .unjournaled_copies
            .fetch_sub(copies, Relaxed);
    }
}

fn no_reply() -> Reply {
    Reply::new(
        451,
        Some(EnhancedStatus::new(4, 4, 0)),
        "no reply for this copy",
    )
}

/// A worker context for unit tests: default client settings, a resolver pointed at a closed
/// port (nothing is resolved), no MTA-STS, telemetry without a log.
#[cfg(test)]
pub(crate) fn test_ctx(ctrl: mpsc::Sender<Ctrl>, reports: mpsc::Sender<Report>) -> Arc<WorkerCtx> {
    let resolver = MxResolver::new(&herald_routing::ResolverConfig {
        nameservers: vec![std::net::SocketAddr::from(([127, 0, 0, 1], 9))],
        ..herald_routing::ResolverConfig::default()
    })
    .expect("resolver");
    Arc::new(WorkerCtx {
        client: Arc::new(ClientConfig::default()),
        slow_client: Arc::new(ClientConfig::default()),
        resolver: Arc::new(resolver),
        mta_sts: None,
        dane: None,
        ctrl,
        reports,
        spool: test_spool(),
        window: 16,
        telemetry: Telemetry::disabled_log(),
        shutdown: CancellationToken::new(),
    })
}

/// A spool in a directory kept for the rest of the test process.
#[cfg(test)]
fn test_spool() -> Spool {
    let dir = tempfile::tempdir().expect("tempdir").keep();
    Spool::open(herald_spool::SpoolConfig::new(dir))
        .expect("spool")
        .0
}

/// A one-line post of list 1 (`l@lists.test`), unsigned, with no window, for unit tests.
#[cfg(test)]
pub(crate) fn test_post() -> Arc<crate::job::PostCtx> {
    use herald_types::{Address, List, ListId, ListSettings, PostId};
    let list = List {
        id: ListId(1),
        address: Address::parse("l@lists.test").expect("addr"),
        settings: ListSettings::default(),
        created_at_ms: 0,
    };
    let lctx = herald_fanout::ListContext {
        unsubscribe_base_url: "http://x".into(),
        archive_url: None,
        secret: b"0123456789abcdef".to_vec(),
        dkim: Default::default(),
        authserv_id: "herald.test".into(),
    };
    let template =
        herald_fanout::render(&list, &lctx, b"Subject: x\r\n\r\nbody\r\n").expect("render");
    Arc::new(crate::job::PostCtx {
        id: PostId(1),
        list_id: ListId(1),
        template,
        accepted_at_ms: herald_types::unix_ms_now(),
        max_age_ms: u64::MAX,
        window: Arc::new(tokio::sync::Semaphore::new(0)),
    })
}
