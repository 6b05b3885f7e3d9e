//! `herald-bench soak`: the load of a busy site held for hours against a running Herald, sampled
//! at a fixed interval, for `bench/soak.sh`.
//!
//! The load (each part its own task, all stopped at `--duration`):
//! - posts: `--senders` SMTP connections take posts from one ticker at `--rate` posts/s in
//!   total (a share `--lmtp-share` goes over LMTP instead), each to one of the lists chosen by
//!   `--weights`, with a body of 5–200 KB (log-uniform: most posts are small, a few are big);
//!   every post has its own Message-ID, written with its times to `posts.jsonl`;
//! - membership changes: `--churn-rate` adds and removals a second through the HTTP API, from
//!   the lists' members and each list's pool of outsiders (`churn.jsonl`);
//! - bounces: `--bounce-rate` DSNs a second (550 5.1.1, `Final-Recipient`) sent to the VERP
//!   address of a member picked from a reserved share of each list (`bounces.jsonl`);
//! - monitoring: `/api/v1/status` and `/metrics` every `--poll-secs`, as an operator's
//!   dashboard and Prometheus would.
//!
//! Sampling (`samples.jsonl`, one line per `--sample-every`, through the load and then the
//! `--idle` period): the Herald process's RSS, threads and open descriptors (/proc), its queue
//! gauges (/metrics), the spool's and the data directory's bytes on disk, the acceptance
//! latency p50/p99 of the SMTP posts of the interval (end of DATA to `250`) and the copies a
//! second the simulated world accepted in the interval (its `status.json`).
//!
//! `soak-report` turns the samples into the table and slopes; `soak-check` checks the copies
//! the world received against the posts and the membership changes.
//!
//! Limits: every network wait has a timeout; the whole run ends at duration + idle whatever
//! the server does. SECURITY: talks only to the addresses given (a local Herald).

pub mod check;
mod http;
mod load;
mod ops;
pub mod report;
mod sample;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[derive(Args, Clone)]
pub struct SoakArgs {
    /// Herald's SMTP listener.
    #[arg(long)]
    smtp: SocketAddr,
    /// Herald's LMTP listener (posts over LMTP only when given).
    #[arg(long)]
    lmtp: Option<SocketAddr>,
    /// Herald's HTTP listener, e.g. http://127.0.0.1:20025.
    #[arg(long)]
    http: String,
    /// A list and the CSV of its initial members (`email,name`, header row): LIST=FILE.
    /// Repeated, one per list.
    #[arg(long = "list", required = true)]
    lists: Vec<String>,
    /// Outsiders that membership changes add to a list: LIST=FILE, one per list.
    #[arg(long = "pool")]
    pools: Vec<String>,
    /// Relative share of posts per list, in `--list` order (e.g. 2,5,93).
    #[arg(long, value_delimiter = ',')]
    weights: Vec<f64>,
    /// Concurrent SMTP senders (one connection each).
    #[arg(long, default_value_t = 20)]
    senders: usize,
    /// Posts a second, all senders together.
    #[arg(long, default_value_t = 2.9)]
    rate: f64,
    /// Share of the posts sent over LMTP.
    #[arg(long, default_value_t = 0.1)]
    lmtp_share: f64,
    #[arg(long, default_value_t = 5)]
    min_kb: usize,
    #[arg(long, default_value_t = 200)]
    max_kb: usize,
    /// Membership changes a second (half adds, half removals).
    #[arg(long, default_value_t = 3.0)]
    churn_rate: f64,
    /// Bounces (DSNs) a second.
    #[arg(long, default_value_t = 0.4)]
    bounce_rate: f64,
    /// Share of each list's initial members that receive the bounces (and are left out of the
    /// membership changes and of soak-check's expectations).
    #[arg(long, default_value_t = 0.01)]
    bounce_share: f64,
    /// Seconds between polls of the status API and /metrics.
    #[arg(long, default_value_t = 5)]
    poll_secs: u64,
    /// Seconds of load.
    #[arg(long)]
    duration: u64,
    /// Seconds of sampling after the load stopped.
    #[arg(long, default_value_t = 480)]
    idle: u64,
    /// Seconds between samples.
    #[arg(long, default_value_t = 600)]
    sample_every: u64,
    /// The Herald process.
    #[arg(long)]
    pid: u32,
    /// Herald's data directory.
    #[arg(long)]
    data_dir: PathBuf,
    /// Herald's spool directory (default: <data-dir>/spool).
    #[arg(long)]
    spool_dir: Option<PathBuf>,
    /// The simulated world's run directory (its status.json counts the copies).
    #[arg(long)]
    world_dir: PathBuf,
    /// Where to write samples.jsonl, posts.jsonl, churn.jsonl, bounces.jsonl and lists.json.
    #[arg(long)]
    out: PathBuf,
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// One list as the load sees it (written to lists.json for soak-check).
#[derive(Serialize, Deserialize, Clone)]
pub struct ListSpec {
    pub address: String,
    /// Initial members, bounce targets excluded.
    pub members: Vec<String>,
    /// Outsiders the churn adds.
    pub pool: Vec<String>,
    /// Members that receive the bounces.
    pub bouncers: Vec<String>,
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A line-per-record JSON log shared by tasks.
pub struct JsonLog(Mutex<BufWriter<File>>);

impl JsonLog {
    fn create(path: &Path) -> Result<JsonLog> {
        let f = File::create(path).with_context(|| format!("creating {}", path.display()))?;
        Ok(JsonLog(Mutex::new(BufWriter::new(f))))
    }

    pub fn write(&self, v: &serde_json::Value) {
        if let Ok(mut w) = self.0.lock() {
            let _ = writeln!(w, "{v}");
        }
    }

    fn flush(&self) {
        if let Ok(mut w) = self.0.lock() {
            let _ = w.flush();
        }
    }
}

/// A small deterministic generator (xorshift64*), so runs with one seed make the same choices.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in 0..n (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

/// Reads a members CSV (`email,name` with a header row): the addresses.
fn read_addresses(path: &Path) -> Result<Vec<String>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(text
        .lines()
        .skip(1)
        .filter_map(|l| l.split(',').next())
        .map(|a| a.trim().to_string())
        .filter(|a| a.contains('@'))
        .collect())
}

fn split_pair(s: &str, what: &str) -> Result<(String, PathBuf)> {
    match s.split_once('=') {
        Some((l, f)) if !l.is_empty() && !f.is_empty() => Ok((l.to_string(), PathBuf::from(f))),
        _ => bail!("--{what} {s:?}: expected LIST=FILE"),
    }
}

fn lists(args: &SoakArgs) -> Result<Vec<ListSpec>> {
    let mut out = Vec::new();
    for s in &args.lists {
        let (address, file) = split_pair(s, "list")?;
        let mut members = read_addresses(&file)?;
        let n_bounce = ((members.len() as f64) * args.bounce_share).ceil() as usize;
        let bouncers = members.split_off(members.len().saturating_sub(n_bounce));
        out.push(ListSpec {
            address,
            members,
            pool: Vec::new(),
            bouncers,
        });
    }
    for s in &args.pools {
        let (address, file) = split_pair(s, "pool")?;
        let Some(l) = out.iter_mut().find(|l| l.address == address) else {
            bail!("--pool {s}: {address} is not given with --list");
        };
        l.pool = read_addresses(&file)?;
    }
    if !args.weights.is_empty() && args.weights.len() != out.len() {
        bail!("--weights: one weight per --list ({} lists)", out.len());
    }
    Ok(out)
}

/// What the load tasks share with the sampler.
pub struct Shared {
    pub args: SoakArgs,
    pub lists: Vec<ListSpec>,
    pub interval: Mutex<sample::Interval>,
    pub metrics: Mutex<std::collections::BTreeMap<String, f64>>,
    pub posts: JsonLog,
    pub churn: JsonLog,
    pub bounces: JsonLog,
}

pub async fn run(args: SoakArgs) -> Result<()> {
    std::fs::create_dir_all(&args.out).with_context(|| format!("{}", args.out.display()))?;
    let lists = lists(&args)?;
    let lists_json = args.out.join("lists.json");
    std::fs::write(&lists_json, serde_json::to_vec(&lists)?)
        .with_context(|| format!("writing {}", lists_json.display()))?;
    let shared = Arc::new(Shared {
        posts: JsonLog::create(&args.out.join("posts.jsonl"))?,
        churn: JsonLog::create(&args.out.join("churn.jsonl"))?,
        bounces: JsonLog::create(&args.out.join("bounces.jsonl"))?,
        interval: Mutex::new(sample::Interval::default()),
        metrics: Mutex::default(),
        lists,
        args,
    });
    let load_ends = tokio::time::Instant::now() + Duration::from_secs(shared.args.duration);
    let mut load = tokio::task::JoinSet::new();
    load::spawn(&shared, &mut load, load_ends);
    ops::spawn(&shared, &mut load, load_ends);
    // The monitoring polls run through the idle period too: an operator's dashboard does not stop.
    let poller = tokio::spawn(ops::poll_loop(shared.clone()));
    let sampler = sample::run(shared.clone(), load_ends);
    let stopper = async {
        tokio::time::sleep_until(load_ends).await;
        // Bounded: a task still in a reply wait gets at most its timeout, then is dropped.
        let grace = tokio::time::sleep(Duration::from_secs(30));
        tokio::pin!(grace);
        loop {
            tokio::select! {
                r = load.join_next() => if r.is_none() { break },
                _ = &mut grace => { load.abort_all(); break }
            }
        }
        eprintln!("soak: load stopped; idle for {} s", shared.args.idle);
    };
    let (sampled, ()) = tokio::join!(sampler, stopper);
    poller.abort();
    for log in [&shared.posts, &shared.churn, &shared.bounces] {
        log.flush();
    }
    sampled
}
