//! `herald-bench feed`: a list manager in front of another MTA (what Mailman does in front of
//! Postfix). The post is rendered once with `herald_fanout` using the same list settings,
//! secret and unsubscribe base URL as the Herald under test, and each member's copy is spliced
//! and submitted over SMTP as its own transaction with its VERP return path — the same bytes
//! Herald itself sends. Several connections submit in parallel; each transaction pipelines
//! MAIL/RCPT/DATA (RFC 2920), then sends the body.
//!
//! `--xverp` is Postfix's best case instead: one message per batch of recipients with
//! `MAIL FROM:<list-bounces@domain> XVERP`, so Postfix does the VERP itself — but copies cannot
//! be personalized (one To:, one footer, no per-member unsubscribe link).
//!
//! Limits: every read has a timeout; the whole feed has `--timeout-secs`.
//!
//! SECURITY: talks only to the address given (a local MTA); replies are parsed with bounds.

use anyhow::{bail, Context, Result};
use clap::Args;
use herald_fanout::{render, ListContext, Template};
use herald_types::{Address, List, ListId, ListSettings, Member, MemberId, PostingPolicy};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// Longest reply line accepted.
const MAX_REPLY_LINE: usize = 4096;
/// Time allowed for one reply.
const REPLY_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Args, Clone)]
pub struct FeedArgs {
    /// The list address, e.g. bench@lists.herald.test
    #[arg(long)]
    list: String,
    /// Members CSV (`email,name`), as `herald member import` reads it.
    #[arg(long)]
    members: PathBuf,
    /// The post (RFC 5322).
    #[arg(long)]
    post: PathBuf,
    /// The MTA's SMTP listener.
    #[arg(long)]
    to: SocketAddr,
    /// Parallel SMTP connections.
    #[arg(long, default_value_t = 8)]
    conns: usize,
    /// List display name (as given to `herald list create --name`).
    #[arg(long, default_value = "")]
    name: String,
    /// Subject prefix.
    #[arg(long)]
    prefix: Option<String>,
    /// Footer template.
    #[arg(long)]
    footer: Option<String>,
    /// The unsubscribe secret (Herald's `secret`).
    #[arg(long)]
    secret: String,
    /// The unsubscribe base URL (Herald's `http.public_base_url`).
    #[arg(long)]
    base_url: String,
    /// Postfix's XVERP best case: batches of recipients per message, VERP done by the MTA.
    #[arg(long)]
    xverp: bool,
    /// Recipients per message with --xverp.
    #[arg(long, default_value_t = 500)]
    rcpts_per_msg: usize,
    /// Give up after this long.
    #[arg(long, default_value_t = 3600)]
    timeout_secs: u64,
}

struct Job {
    template: Template,
    members: Vec<Member>,
    args: FeedArgs,
}

#[derive(Default)]
struct Tally {
    accepted: u64,
    refused: u64,
}

pub async fn run(args: FeedArgs) -> Result<()> {
    let job = Arc::new(prepare(args)?);
    let started = Instant::now();
    let conns = job.args.conns.max(1);
    let mut tasks = tokio::task::JoinSet::new();
    for k in 0..conns {
        let job = job.clone();
        tasks.spawn(async move { connection(&job, k, conns).await });
    }
    let deadline = Duration::from_secs(job.args.timeout_secs);
    let mut total = Tally::default();
    let all = async {
        while let Some(r) = tasks.join_next().await {
            let t = r.context("feeder task")??;
            total.accepted += t.accepted;
            total.refused += t.refused;
        }
        anyhow::Ok(())
    };
    tokio::time::timeout(deadline, all)
        .await
        .context("the feed did not finish within --timeout-secs")??;
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{}",
        serde_json::json!({"accepted": total.accepted, "refused": total.refused, "secs": secs})
    );
    Ok(())
}

fn prepare(args: FeedArgs) -> Result<Job> {
    let address = Address::parse(&args.list).with_context(|| format!("--list {}", args.list))?;
    let list = List {
        id: ListId(1),
        address,
        settings: ListSettings {
            display_name: args.name.clone(),
            posting_policy: PostingPolicy::Anyone,
            subject_prefix: args.prefix.clone(),
            footer: args.footer.clone(),
            // XVERP cannot personalize: one message goes to many recipients.
            personalize: !args.xverp,
            ..ListSettings::default()
        },
        created_at_ms: 0,
    };
    let ctx = ListContext {
        unsubscribe_base_url: args.base_url.clone(),
        archive_url: None,
        archived_at: None,
        secret: args.secret.as_bytes().to_vec(),
        // The comparison feeds Postfix unsigned copies; Herald's bench runs sign nothing either.
        dkim: Default::default(),
        authserv_id: "herald-bench".into(),
    };
    let raw = std::fs::read(&args.post).with_context(|| format!("{}", args.post.display()))?;
    let template = render(&list, &ctx, &raw).context("rendering the post")?;
    let text = std::fs::read_to_string(&args.members)
        .with_context(|| format!("{}", args.members.display()))?;
    let mut members = Vec::new();
    for (i, line) in text.lines().skip(1).enumerate() {
        let (email, name) = line.split_once(',').unwrap_or((line, ""));
        let Ok(address) = Address::parse(email.trim()) else {
            bail!(
                "{}: line {}: bad address {email:?}",
                args.members.display(),
                i + 2
            );
        };
        members.push(Member {
            id: MemberId(i as i64 + 1),
            list_id: ListId(1),
            address,
            display_name: (!name.is_empty()).then(|| name.to_string()),
            status: Default::default(),
            fields: Default::default(),
        });
    }
    Ok(Job {
        template,
        members,
        args,
    })
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

/// One SMTP connection submitting members k, k + n, k + 2n, ...
async fn connection(job: &Job, k: usize, n: usize) -> Result<Tally> {
    let stream = TcpStream::connect(job.args.to).await.context("connect")?;
    stream.set_nodelay(true)?;
    let (rd, mut wr) = stream.into_split();
    let mut rd = BufReader::new(rd);
    let mut line = String::new();
    if reply(&mut rd, &mut line).await? != 220 {
        bail!("banner: {line}");
    }
    wr.write_all(b"EHLO feeder.herald.test\r\n").await?;
    reply(&mut rd, &mut line).await?;
    let mine: Vec<&Member> = job.members.iter().skip(k).step_by(n).collect();
    let mut tally = Tally::default();
    let mut buf = Vec::with_capacity(job.template.size_hint() + 4096);
    let batch = if job.args.xverp {
        job.args.rcpts_per_msg.max(1)
    } else {
        1
    };
    for group in mine.chunks(batch) {
        let mut cmds = String::new();
        if job.args.xverp {
            let l = job.template.list_address();
            cmds.push_str(&format!(
                "MAIL FROM:<{}-bounces@{}> XVERP\r\n",
                l.local(),
                l.domain()
            ));
        } else {
            let rp = job.template.return_path(group[0]);
            cmds.push_str(&format!("MAIL FROM:<{rp}>\r\n"));
        }
        for m in group {
            cmds.push_str(&format!("RCPT TO:<{}>\r\n", m.address));
        }
        cmds.push_str("DATA\r\n");
        wr.write_all(cmds.as_bytes()).await?;
        let mail = reply(&mut rd, &mut line).await?;
        let mut ok_rcpts = 0u64;
        for _ in group {
            ok_rcpts += u64::from(reply(&mut rd, &mut line).await? == 250);
        }
        let data = reply(&mut rd, &mut line).await?;
        if mail != 250 || data != 354 {
            tally.refused += group.len() as u64;
            wr.write_all(b"RSET\r\n").await?;
            reply(&mut rd, &mut line).await?;
            continue;
        }
        job.template.splice(group[0], &mut buf);
        if !buf.ends_with(b"\r\n") {
            buf.extend_from_slice(b"\r\n");
        }
        buf.extend_from_slice(b".\r\n");
        wr.write_all(&buf).await?;
        if reply(&mut rd, &mut line).await? == 250 {
            tally.accepted += ok_rcpts;
            tally.refused += group.len() as u64 - ok_rcpts;
        } else {
            tally.refused += group.len() as u64;
        }
    }
    wr.write_all(b"QUIT\r\n").await?;
    let _ = reply(&mut rd, &mut line).await;
    Ok(tally)
}
