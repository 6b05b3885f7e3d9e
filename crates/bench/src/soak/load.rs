//! The posts of a soak: one ticker at the configured rate hands posts to SMTP senders (and LMTP
//! connections), each a long-lived connection that reconnects after an error.
//!
//! A post counts as accepted when the reply after its body is `250` (for LMTP, the one
//! recipient's reply); its latency is from the end of the body to that reply. When every sender
//! is busy the ticker queues up to [`QUEUE`] posts and counts the rest as `skipped` — a server
//! too slow to take the rate shows as skipped posts, not as a slower load.
//!
//! SECURITY: talks only to the listener given; replies are read with bounded lines and timeouts.

use super::{now_ms, Rng, Shared};
use anyhow::{bail, Context, Result};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, Mutex};
use tokio::task::JoinSet;
use tokio::time::Instant as TokioInstant;

/// Longest reply line accepted.
const MAX_REPLY_LINE: usize = 4096;
/// Time allowed for one reply (a fsync'd 250 under load takes well under a second).
const REPLY_TIMEOUT: Duration = Duration::from_secs(60);
/// Posts waiting for a free sender before the ticker skips.
const QUEUE: usize = 64;
/// LMTP connections (the LMTP share is small).
const LMTP_CONNS: usize = 2;

/// One post to send.
struct Job {
    seq: u64,
    list: usize,
    kb: usize,
}

type Queue = Arc<Mutex<mpsc::Receiver<Job>>>;

pub fn spawn(shared: &Arc<Shared>, set: &mut JoinSet<()>, ends: TokioInstant) {
    let a = &shared.args;
    let (smtp_tx, smtp_rx) = mpsc::channel(QUEUE);
    let smtp_rx: Queue = Arc::new(Mutex::new(smtp_rx));
    let smtp_addr = a.smtp;
    for k in 0..a.senders.max(1) {
        let (s, q) = (shared.clone(), smtp_rx.clone());
        set.spawn(async move { sender(s, q, smtp_addr, false, k, ends).await });
    }
    let lmtp_tx = a.lmtp.map(|addr| {
        let (tx, rx) = mpsc::channel(QUEUE);
        let rx: Queue = Arc::new(Mutex::new(rx));
        for k in 0..LMTP_CONNS {
            let (s, q) = (shared.clone(), rx.clone());
            set.spawn(async move { sender(s, q, addr, true, k, ends).await });
        }
        tx
    });
    set.spawn(ticker(shared.clone(), smtp_tx, lmtp_tx, ends));
}

/// Hands out posts at the rate (exponential gaps: arrivals are random, as on a real site).
async fn ticker(
    shared: Arc<Shared>,
    smtp: mpsc::Sender<Job>,
    lmtp: Option<mpsc::Sender<Job>>,
    ends: TokioInstant,
) {
    let a = &shared.args;
    let mut rng = Rng::new(a.seed);
    let weights: Vec<f64> = if a.weights.is_empty() {
        vec![1.0; shared.lists.len()]
    } else {
        a.weights.clone()
    };
    let total: f64 = weights.iter().sum::<f64>().max(f64::MIN_POSITIVE);
    let (lo, hi) = (a.min_kb.max(1) as f64, a.max_kb.max(a.min_kb).max(1) as f64);
    let mut next = TokioInstant::now();
    let mut seq = 0u64;
    while next < ends {
        tokio::time::sleep_until(next).await;
        let gap = -(1.0 - rng.unit()).ln() / a.rate.max(0.001);
        next += Duration::from_secs_f64(gap.min(3600.0));
        let mut pick = rng.unit() * total;
        let list = weights
            .iter()
            .position(|w| {
                pick -= w;
                pick < 0.0
            })
            .unwrap_or(weights.len() - 1);
        // Log-uniform size: as many posts of 5–10 KB as of 100–200 KB.
        let kb = (lo * (hi / lo).powf(rng.unit())).round() as usize;
        seq += 1;
        let job = Job { seq, list, kb };
        let to = match &lmtp {
            Some(l) if rng.unit() < a.lmtp_share => l,
            _ => &smtp,
        };
        if to.try_send(job).is_err() {
            if let Ok(mut iv) = shared.interval.lock() {
                iv.skipped += 1;
            }
        }
    }
}

/// The body text: 72-character lines (no dot-stuffing needed), cut to size per post.
fn body_text(bytes: usize) -> String {
    let line = "Soak test text: a list post of ordinary prose, seventy-two characters.\r\n";
    line.repeat(bytes.div_ceil(line.len()).max(1))
}

pub(super) type Reader = BufReader<tokio::net::tcp::OwnedReadHalf>;
pub(super) type Writer = tokio::net::tcp::OwnedWriteHalf;

/// Reads one (possibly multi-line) reply; returns its code.
pub(super) async fn reply(r: &mut Reader, line: &mut String) -> Result<u16> {
    loop {
        line.clear();
        let read = tokio::time::timeout(REPLY_TIMEOUT, r.read_line(line))
            .await
            .context("reply timeout")??;
        if read == 0 || line.len() > MAX_REPLY_LINE || line.len() < 4 {
            bail!("connection closed or bad reply: {line:?}");
        }
        if line.as_bytes()[3] != b'-' {
            return line[..3].parse().context("reply code");
        }
    }
}

pub(super) async fn connect(to: SocketAddr, lmtp: bool) -> Result<(Reader, Writer)> {
    let stream = tokio::time::timeout(REPLY_TIMEOUT, TcpStream::connect(to))
        .await
        .context("connect timeout")??;
    stream.set_nodelay(true)?;
    let (rd, mut wr) = stream.into_split();
    let mut rd = BufReader::new(rd);
    let mut line = String::new();
    if reply(&mut rd, &mut line).await? != 220 {
        bail!("banner: {line}");
    }
    let hello = if lmtp { "LHLO" } else { "EHLO" };
    wr.write_all(format!("{hello} soak.herald-bench.test\r\n").as_bytes())
        .await?;
    if reply(&mut rd, &mut line).await? != 250 {
        bail!("{hello}: {line}");
    }
    Ok((rd, wr))
}

/// One connection's life: posts from the queue until the load ends; reconnects after errors.
async fn sender(
    shared: Arc<Shared>,
    queue: Queue,
    to: SocketAddr,
    lmtp: bool,
    k: usize,
    ends: TokioInstant,
) {
    let body = body_text(shared.args.max_kb.max(1) * 1024);
    let run = shared.args.seed;
    while TokioInstant::now() < ends {
        let (mut rd, mut wr) = match connect(to, lmtp).await {
            Ok(c) => c,
            Err(e) => {
                note_error(&shared, &format!("connect: {e:#}"));
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        loop {
            let job = {
                let mut q = queue.lock().await;
                tokio::select! {
                    j = q.recv() => j,
                    _ = tokio::time::sleep_until(ends) => None,
                }
            };
            let Some(job) = job else { break };
            if let Err(e) = post(&shared, &mut rd, &mut wr, &body, &job, lmtp, k, run).await {
                note_error(&shared, &format!("post {}: {e:#}", job.seq));
                break;
            }
        }
        let mut line = String::new();
        let _ = wr.write_all(b"QUIT\r\n").await;
        let _ = reply(&mut rd, &mut line).await;
    }
}

fn note_error(shared: &Shared, what: &str) {
    if let Ok(mut iv) = shared.interval.lock() {
        iv.send_errors += 1;
        iv.last_error = Some(what.to_string());
    }
}

/// One transaction (MAIL, RCPT and DATA pipelined, then the body); logs the post.
#[allow(clippy::too_many_arguments)]
async fn post(
    shared: &Shared,
    rd: &mut Reader,
    wr: &mut Writer,
    body: &str,
    job: &Job,
    lmtp: bool,
    k: usize,
    run: u64,
) -> Result<()> {
    let list = &shared.lists[job.list].address;
    let from = format!("poster{k}@soak.herald-bench.test");
    let start_ms = now_ms();
    wr.write_all(format!("MAIL FROM:<{from}>\r\nRCPT TO:<{list}>\r\nDATA\r\n").as_bytes())
        .await?;
    let mut line = String::new();
    let mut codes = [0u16; 3];
    for c in &mut codes {
        *c = reply(rd, &mut line).await?;
    }
    let via = if lmtp { "lmtp" } else { "smtp" };
    let id = format!("<soak-{run}-{}-{via}@herald-bench.test>", job.seq);
    if codes != [250, 250, 354] {
        if codes[2] == 354 {
            wr.write_all(b".\r\n").await?;
            reply(rd, &mut line).await?;
        }
        wr.write_all(b"RSET\r\n").await?;
        reply(rd, &mut line).await?;
        log_post(
            shared,
            &id,
            job,
            via,
            start_ms,
            codes[1].max(codes[2]),
            None,
        );
        return Ok(());
    }
    let cut = (job.kb * 1024).min(body.len());
    let cut = body[..cut].rfind("\r\n").map_or(cut, |i| i + 2);
    let mut msg = format!(
        "From: Poster {k} <{from}>\r\nTo: <{list}>\r\nSubject: soak post {} ({} KB)\r\n\
         Message-ID: {id}\r\nDate: Fri, 27 Nov 2026 12:00:00 +0000\r\nMIME-Version: 1.0\r\n\
         Content-Type: text/plain; charset=us-ascii\r\n\r\n",
        job.seq, job.kb
    )
    .into_bytes();
    msg.extend_from_slice(&body.as_bytes()[..cut]);
    msg.extend_from_slice(b".\r\n");
    wr.write_all(&msg).await?;
    let sent = Instant::now();
    let code = reply(rd, &mut line).await?;
    let us = u32::try_from(sent.elapsed().as_micros()).unwrap_or(u32::MAX);
    log_post(shared, &id, job, via, start_ms, code, Some(us));
    Ok(())
}

fn log_post(
    shared: &Shared,
    id: &str,
    job: &Job,
    via: &str,
    start_ms: u64,
    code: u16,
    us: Option<u32>,
) {
    let accepted = code == 250 && us.is_some();
    shared.posts.write(&serde_json::json!({
        "id": id, "list": job.list, "via": via, "kb": job.kb, "start_ms": start_ms,
        "end_ms": now_ms(), "code": code, "latency_us": us,
    }));
    if let Ok(mut iv) = shared.interval.lock() {
        if !accepted {
            iv.refused += 1;
            return;
        }
        iv.accepted += 1;
        if let Some(us) = us {
            match via {
                "smtp" => iv.smtp_latency_us.push(us),
                _ => iv.lmtp_latency_us.push(us),
            }
        }
    }
}
