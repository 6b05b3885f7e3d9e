//! `herald-bench intake`: many SMTP senders posting to one address at once, to measure an MTA's
//! durable intake. Each sender is one connection that sends `--posts` small
//! posts one after the other, each its own transaction (MAIL, RCPT and DATA pipelined, then the
//! body); a post counts as accepted when the reply after its body is `250` — for Herald and for
//! Postfix that reply comes only after the post is on disk and fsync'd. The latency measured is
//! from the end of the body (`.`) to that reply: the time the server takes to make a post
//! durable, group commit included.
//!
//! Every post has its own Message-ID (`<intake-<run>-<sender>-<n>@herald-bench.test>`), so a
//! server that drops repeated Message-IDs (Herald's dedup store) keeps them all.
//!
//! Prints one JSON object: accepted, refused, secs, posts_per_sec, p50_ms, p99_ms, max_ms.
//!
//! Limits: every reply has a timeout; the whole run has `--timeout-secs`; replies are read with a
//! bounded line length. SECURITY: talks only to the address given (a local MTA).

use anyhow::{bail, Context, Result};
use clap::Args;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// Longest reply line accepted.
const MAX_REPLY_LINE: usize = 4096;
/// Time allowed for one reply.
const REPLY_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Args, Clone)]
pub struct IntakeArgs {
    /// The MTA's SMTP listener.
    #[arg(long)]
    to: SocketAddr,
    /// The recipient of every post (a list address).
    #[arg(long)]
    rcpt: String,
    /// Concurrent senders (one SMTP connection each).
    #[arg(long, default_value_t = 100)]
    senders: usize,
    /// Posts each sender sends.
    #[arg(long, default_value_t = 100)]
    posts: usize,
    /// Body size of each post in KB.
    #[arg(long, default_value_t = 2)]
    kb: usize,
    /// Give up after this long.
    #[arg(long, default_value_t = 600)]
    timeout_secs: u64,
}

/// What one sender saw.
#[derive(Default)]
struct Tally {
    accepted: u64,
    refused: u64,
    /// End of body to the final reply, in microseconds, for each accepted post.
    latencies_us: Vec<u32>,
}

pub async fn run(args: IntakeArgs) -> Result<()> {
    if args.rcpt.contains(['<', '>', '\r', '\n']) {
        bail!("--rcpt: give the bare address, e.g. list@example.org");
    }
    let run_id = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis();
    let body = Arc::new(body_text(args.kb));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for k in 0..args.senders.max(1) {
        let (args, body) = (args.clone(), body.clone());
        tasks.spawn(async move { sender(&args, &body, run_id, k).await });
    }
    let mut total = Tally::default();
    let all = async {
        while let Some(r) = tasks.join_next().await {
            let t = r.context("sender task")??;
            total.accepted += t.accepted;
            total.refused += t.refused;
            total.latencies_us.extend(t.latencies_us);
        }
        anyhow::Ok(())
    };
    tokio::time::timeout(Duration::from_secs(args.timeout_secs), all)
        .await
        .context("the intake did not finish within --timeout-secs")??;
    let secs = started.elapsed().as_secs_f64();
    let lat = &mut total.latencies_us;
    lat.sort_unstable();
    let ms = |q: f64| percentile(lat, q) as f64 / 1000.0;
    println!(
        "{}",
        serde_json::json!({
            "senders": args.senders, "posts_per_sender": args.posts, "kb": args.kb,
            "accepted": total.accepted, "refused": total.refused, "secs": secs,
            "posts_per_sec": total.accepted as f64 / secs,
            "p50_ms": ms(0.50), "p99_ms": ms(0.99), "max_ms": ms(1.0),
        })
    );
    Ok(())
}

/// The `q` quantile of sorted `v` (nearest rank); 0 when empty.
fn percentile(v: &[u32], q: f64) -> u32 {
    if v.is_empty() {
        return 0;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// A text body of about `kb` KB in 72-character lines (dot-stuffing never needed).
fn body_text(kb: usize) -> String {
    let line = "The quick brown fox jumps over the lazy dog; intake benchmark text line.\r\n";
    line.repeat((kb * 1024).div_ceil(line.len()).max(1))
}

type Reader = BufReader<tokio::net::tcp::OwnedReadHalf>;

/// Reads one (possibly multi-line) reply; returns its code.
async fn reply(r: &mut Reader, line: &mut String) -> Result<u16> {
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

/// One sender: a connection, `posts` transactions, QUIT.
async fn sender(args: &IntakeArgs, body: &str, run_id: u128, k: usize) -> Result<Tally> {
    let stream = TcpStream::connect(args.to).await.context("connect")?;
    stream.set_nodelay(true)?;
    let (rd, mut wr) = stream.into_split();
    let mut rd = BufReader::new(rd);
    let mut line = String::new();
    if reply(&mut rd, &mut line).await? != 220 {
        bail!("banner: {line}");
    }
    wr.write_all(b"EHLO intake.herald-bench.test\r\n").await?;
    if reply(&mut rd, &mut line).await? != 250 {
        bail!("EHLO: {line}");
    }
    let from = format!("poster{k}@herald-bench.test");
    let envelope = format!("MAIL FROM:<{from}>\r\nRCPT TO:<{}>\r\nDATA\r\n", args.rcpt);
    let mut tally = Tally::default();
    let mut msg = Vec::with_capacity(body.len() + 512);
    for n in 0..args.posts {
        wr.write_all(envelope.as_bytes()).await?;
        let codes = [
            reply(&mut rd, &mut line).await?,
            reply(&mut rd, &mut line).await?,
            reply(&mut rd, &mut line).await?,
        ];
        if codes != [250, 250, 354] {
            tally.refused += 1;
            if codes[2] == 354 {
                wr.write_all(b".\r\n").await?;
                reply(&mut rd, &mut line).await?;
            }
            wr.write_all(b"RSET\r\n").await?;
            reply(&mut rd, &mut line).await?;
            continue;
        }
        msg.clear();
        msg.extend_from_slice(
            format!(
                "From: Poster {k} <{from}>\r\nTo: <{}>\r\nSubject: intake {k}/{n}\r\n\
                 Message-ID: <intake-{run_id}-{k}-{n}@herald-bench.test>\r\n\
                 Date: Wed, 25 Nov 2026 12:00:00 +0000\r\nMIME-Version: 1.0\r\n\
                 Content-Type: text/plain; charset=us-ascii\r\n\r\n",
                args.rcpt
            )
            .as_bytes(),
        );
        msg.extend_from_slice(body.as_bytes());
        msg.extend_from_slice(b".\r\n");
        wr.write_all(&msg).await?;
        let sent = Instant::now();
        if reply(&mut rd, &mut line).await? == 250 {
            tally.accepted += 1;
            let us = sent.elapsed().as_micros();
            tally
                .latencies_us
                .push(u32::try_from(us).unwrap_or(u32::MAX));
        } else {
            tally.refused += 1;
        }
    }
    wr.write_all(b"QUIT\r\n").await?;
    let _ = reply(&mut rd, &mut line).await;
    Ok(tally)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let v: Vec<u32> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.5), 50);
        assert_eq!(percentile(&v, 0.99), 99);
        assert_eq!(percentile(&v, 1.0), 100);
        assert_eq!(percentile(&[], 0.5), 0);
        assert_eq!(percentile(&[7], 0.99), 7);
    }

    #[test]
    fn body_has_crlf_lines_and_no_lone_dot() {
        let b = body_text(2);
        assert!(b.len() >= 2048);
        assert!(b
            .split("\r\n")
            .all(|l| l.len() < 100 && !l.starts_with('.')));
    }
}
