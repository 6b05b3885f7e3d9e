//! A connection worker: opens one SMTP connection to a destination (MX hosts in preference order,
//! each address in turn), then asks the actor for batches and sends them, splicing each member's
//! copy just before it goes to the socket, until the actor has no more work for it.
//!
//! A worker never decides policy: outcomes go to the report loop, deferred copies go back to the
//! actor, and connection failures are the actor's to act on.

use crate::actor::Ctrl;
use crate::job::Job;
use crate::report::{OutcomeReport, Report};
use herald_delivery::{ClientConfig, Connection, MxHost, MxResolver, OutgoingCopy, SessionError};
use herald_telemetry::Telemetry;
use herald_types::{EnhancedStatus, RcptOutcome, Reply};
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// What every worker shares.
pub struct WorkerCtx {
    pub client: ClientConfig,
    pub resolver: Arc<MxResolver>,
    pub ctrl: mpsc::Sender<Ctrl>,
    pub reports: mpsc::Sender<Report>,
    pub telemetry: Telemetry,
    pub max_messages_per_connection: usize,
}

/// Runs one worker to completion. Always tells the actor how it ended.
pub async fn run(dest: Arc<str>, hosts: Arc<Vec<MxHost>>, ctx: Arc<WorkerCtx>) {
    let (mut conn, relay) = match connect_any(&hosts, &ctx.client).await {
        Ok(c) => c,
        Err(error) => {
            let _ = ctx.ctrl.send(Ctrl::ConnectFailed { dest, error }).await;
            return;
        }
    };
    let _ = ctx.ctrl.send(Ctrl::Connected { dest: dest.clone() }).await;
    let gauges = ctx.telemetry.gauges();
    gauges.connections_open.fetch_add(1, Relaxed);
    let mut bufs: Vec<Vec<u8>> = Vec::new();
    let mut sent = 0usize;
    loop {
        let (tx, rx) = oneshot::channel();
        if ctx
            .ctrl
            .send(Ctrl::NeedWork {
                dest: dest.clone(),
                reply: tx,
            })
            .await
            .is_err()
        {
            break;
        }
        let jobs = rx.await.unwrap_or_default();
        if jobs.is_empty() {
            break;
        }
        sent += jobs.len();
        let healthy = send_batch(&mut conn, &relay, jobs, &mut bufs, &dest, &ctx).await;
        if !healthy || sent >= ctx.max_messages_per_connection {
            break;
        }
    }
    gauges.connections_open.fetch_sub(1, Relaxed);
    // QUIT politely, but never let a slow peer hold the worker.
    let _ = tokio::time::timeout(Duration::from_secs(5), conn.quit()).await;
    let _ = ctx.ctrl.send(Ctrl::WorkerExit { dest }).await;
}

/// Tries each MX host in preference order and each of its addresses; the first that answers wins.
async fn connect_any(hosts: &[MxHost], cfg: &ClientConfig) -> Result<(Connection, String), String> {
    let mut last = String::from("no MX host has an address");
    for host in hosts {
        for addr in &host.addrs {
            let sa = SocketAddr::new(*addr, cfg.port);
            match Connection::connect(sa, &host.name, cfg).await {
                Ok(conn) => return Ok((conn, format!("{}[{}]:{}", host.name, addr, cfg.port))),
                Err(e) => {
                    last = e.synthetic_reply().text;
                    tracing::debug!(host = %host.name, %addr, error = %e, "connect failed");
                }
            }
        }
    }
    Err(last)
}

/// Sends one batch. Returns false when the connection must not be used again.
async fn send_batch(
    conn: &mut Connection,
    relay: &str,
    jobs: Vec<Job>,
    bufs: &mut Vec<Vec<u8>>,
    dest: &Arc<str>,
    ctx: &WorkerCtx,
) -> bool {
    if bufs.len() < jobs.len() {
        bufs.resize_with(jobs.len(), Vec::new);
    }
    let return_paths: Vec<String> = jobs
        .iter()
        .map(|j| j.post.template.return_path(&j.member))
        .collect();
    let rcpts: Vec<String> = jobs.iter().map(|j| j.member.address.to_string()).collect();
    for (job, buf) in jobs.iter().zip(bufs.iter_mut()) {
        job.post.template.splice(&job.member, buf);
    }
    let mut copies: Vec<OutgoingCopy<'_>> = jobs
        .iter()
        .enumerate()
        .map(|(i, _)| OutgoingCopy::new(&return_paths[i], &rcpts[i], &bufs[i]))
        .collect();
    let gauges = ctx.telemetry.gauges();
    gauges
        .inflight_copies
        .fetch_add(copies.len() as i64, Relaxed);
    let started = Instant::now();
    let result = conn.send(&mut copies).await;
    let xdelay_ms = started.elapsed().as_millis() as u64;
    gauges
        .inflight_copies
        .fetch_sub(copies.len() as i64, Relaxed);
    let outcomes: Vec<(Option<RcptOutcome>, u64)> = copies
        .into_iter()
        .map(|c| {
            (
                c.outcome,
                c.xdelay.map_or(xdelay_ms, |d| d.as_millis() as u64),
            )
        })
        .collect();
    let unknown = match &result {
        Ok(()) => None,
        Err(e) => Some(session_reply(e)),
    };
    let mut deferred = Vec::new();
    for (mut job, (outcome, xdelay_ms)) in jobs.into_iter().zip(outcomes) {
        job.tries += 1;
        let outcome = outcome.unwrap_or_else(|| {
            RcptOutcome::Deferred(unknown.clone().unwrap_or_else(|| {
                Reply::new(
                    451,
                    Some(EnhancedStatus::new(4, 4, 0)),
                    "no reply for this copy",
                )
            }))
        });
        let is_final = outcome.is_final();
        let report = OutcomeReport::new(&job, outcome, relay.to_string(), xdelay_ms);
        let _ = ctx.reports.send(Report::Outcome(Box::new(report))).await;
        if !is_final {
            deferred.push(job);
        }
    }
    if !deferred.is_empty() {
        let _ = ctx
            .ctrl
            .send(Ctrl::Requeue {
                dest: dest.clone(),
                jobs: deferred,
            })
            .await;
    }
    result.is_ok() && conn.is_reusable()
}

/// The reply logged for copies whose fate a broken session left unknown.
fn session_reply(e: &SessionError) -> Reply {
    e.synthetic_reply()
}
