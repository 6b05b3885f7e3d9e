//! How many messages a second the simulated receivers take from a pipelining client.
//!
//! The client is strict RFC 2920 pipelining, as Herald's delivery does it: after each `354` it
//! writes the body, the final dot and the next MAIL/RCPT/DATA in one write, then reads four
//! replies — one round trip per message per connection, several connections at once.
//!
//! ```text
//! cargo run --release -p herald-sim --example sink_bench -- \
//!     [--conns 8] [--secs 3] [--size 10240] [--mime-every 100] [--runs 3]
//! ```
//!
//! Prints msgs/s of each run and the median, and the receivers' own CPU time: the receivers run
//! on their own runtime (threads named `sim-srv`), the client on another (`sim-cli`), so
//! "msgs per receiver CPU-second" is the receivers' capacity regardless of what else the
//! machine runs (Linux: read from /proc/self/task/*/stat, assuming 100 clock ticks a second).
//! Checks that the recorder saw every acknowledged message and no duplicates.

use herald_sim::{DomainConfig, Profile, World, WorldConfig};
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::runtime::Runtime;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

struct Args {
    conns: usize,
    secs: u64,
    size: usize,
    mime_every: u32,
    runs: usize,
}

fn parse_args() -> Result<Args, BoxError> {
    let mut a = Args {
        conns: 8,
        secs: 3,
        size: 10 * 1024,
        mime_every: 100,
        runs: 3,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--conns" => a.conns = value.parse()?,
            "--secs" => a.secs = value.parse()?,
            "--size" => a.size = value.parse()?,
            "--mime-every" => a.mime_every = value.parse()?,
            "--runs" => a.runs = value.parse()?,
            other => return Err(format!("unknown flag {other}").into()),
        }
    }
    Ok(a)
}

/// A well-formed text message of about `size` octets with a unique Message-ID.
fn body(conn: usize, i: u64, size: usize) -> Vec<u8> {
    let mut m = format!(
        "From: list@lists.example\r\nTo: m{conn}-{i}@sink.example\r\n\
         Message-ID: <{conn}.{i}@lists.example>\r\nSubject: bench\r\n\r\n"
    )
    .into_bytes();
    let line = b"The quick brown fox jumps over the lazy dog, again and again and again.\r\n";
    while m.len() + line.len() <= size {
        m.extend_from_slice(line);
    }
    m
}

async fn read_reply(r: &mut BufReader<TcpStream>, line: &mut String) -> Result<u16, BoxError> {
    loop {
        line.clear();
        if r.read_line(line).await? == 0 {
            return Err("connection closed".into());
        }
        if line.as_bytes().get(3) != Some(&b'-') {
            return Ok(line.get(..3).ok_or("short reply")?.parse()?);
        }
    }
}

fn envelope(conn: usize, i: u64) -> String {
    format!("MAIL FROM:<bounces+{conn}-{i}@lists.example>\r\nRCPT TO:<m{conn}-{i}@sink.example>\r\nDATA\r\n")
}

/// One connection: returns the messages acknowledged with 250 before `deadline`.
async fn load(
    addr: SocketAddr,
    conn: usize,
    size: usize,
    deadline: Instant,
) -> Result<u64, BoxError> {
    let mut r = BufReader::new(TcpStream::connect(addr).await?);
    r.get_ref().set_nodelay(true)?;
    let mut line = String::new();
    read_reply(&mut r, &mut line).await?;
    r.get_mut().write_all(b"EHLO bench.example\r\n").await?;
    read_reply(&mut r, &mut line).await?;
    r.get_mut().write_all(envelope(conn, 0).as_bytes()).await?;
    for want in [250, 250, 354] {
        if read_reply(&mut r, &mut line).await? != want {
            return Err(format!("unexpected reply {line}").into());
        }
    }
    let mut done = 0u64;
    let mut out = Vec::with_capacity(size + 256);
    while Instant::now() < deadline {
        out.clear();
        out.extend_from_slice(&body(conn, done, size));
        out.extend_from_slice(b".\r\n");
        out.extend_from_slice(envelope(conn, done + 1).as_bytes());
        r.get_mut().write_all(&out).await?;
        for want in [250, 250, 250, 354] {
            if read_reply(&mut r, &mut line).await? != want {
                return Err(format!("unexpected reply {line}").into());
            }
        }
        done += 1;
    }
    Ok(done)
}

fn sink_world(mime_every: u32) -> WorldConfig {
    let mut cfg = WorldConfig::empty();
    cfg.smtp_port = 0;
    cfg.receiver.check_mime_every = mime_every;
    cfg.domains.push(DomainConfig {
        name: "sink.example".into(),
        weight: 1.0,
        mx_host: "mx.sink.example".into(),
        mx_addr: SINK,
        mx_preference: 10,
        extra_mx: vec![],
        profile: Profile::Normal,
        starttls: false,
        dane: Default::default(),
        extensions: Default::default(),
    });
    cfg
}

const SINK: Ipv4Addr = Ipv4Addr::new(127, 1, 200, 1);

/// CPU seconds used so far by this process's threads whose name starts with `prefix`.
fn thread_cpu_secs(prefix: &str) -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    let mut ticks = 0u64;
    for t in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(t.path().join("stat")) else {
            continue;
        };
        // "pid (comm) state ppid ..."; utime and stime are fields 14 and 15.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        if !stat[open + 1..close].starts_with(prefix) {
            continue;
        }
        let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
        let get = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<u64>().ok())
                .unwrap_or(0)
        };
        ticks += get(11) + get(12);
    }
    ticks as f64 / 100.0
}

struct RunResult {
    msgs_per_sec: f64,
    msgs_per_server_cpu_sec: f64,
}

fn run_once(args: &Args, srv: &Runtime, cli: &Runtime) -> Result<RunResult, BoxError> {
    let world = srv.block_on(World::start(sink_world(args.mime_every)))?;
    let target = SocketAddr::from((SINK, world.smtp_port()));
    let cpu0 = thread_cpu_secs("sim-srv");
    let start = Instant::now();
    let deadline = start + Duration::from_secs(args.secs);
    let (conns, size) = (args.conns, args.size);
    let total = cli.block_on(async move {
        let tasks: Vec<_> = (0..conns)
            .map(|c| tokio::spawn(load(target, c, size, deadline)))
            .collect();
        let mut total = 0u64;
        for t in tasks {
            total += t.await??;
        }
        Ok::<u64, BoxError>(total)
    })?;
    let elapsed = start.elapsed().as_secs_f64();
    let server_cpu = (thread_cpu_secs("sim-srv") - cpu0).max(0.01);
    let snap = world.recorder().snapshot();
    srv.block_on(world.shutdown());
    if snap.accepted != total || snap.duplicates != 0 || snap.mime_malformed != 0 {
        return Err(format!(
            "recorder disagrees: acked {total}, recorded {}, duplicates {}, malformed {}",
            snap.accepted, snap.duplicates, snap.mime_malformed
        )
        .into());
    }
    Ok(RunResult {
        msgs_per_sec: total as f64 / elapsed,
        msgs_per_server_cpu_sec: total as f64 / server_cpu,
    })
}

fn runtime(name: &str) -> std::io::Result<Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(name)
        .enable_all()
        .build()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn main() -> Result<(), BoxError> {
    let args = parse_args()?;
    let srv = runtime("sim-srv")?;
    let cli = runtime("sim-cli")?;
    let (mut rates, mut per_cpu) = (Vec::new(), Vec::new());
    for run in 1..=args.runs.max(1) {
        let r = run_once(&args, &srv, &cli)?;
        println!(
            "run {run}: {:.0} msgs/s, {:.0} msgs per receiver CPU-second \
             ({} conns, {} B messages, full MIME check 1/{})",
            r.msgs_per_sec, r.msgs_per_server_cpu_sec, args.conns, args.size, args.mime_every
        );
        rates.push(r.msgs_per_sec);
        per_cpu.push(r.msgs_per_server_cpu_sec);
    }
    println!(
        "median: {:.0} msgs/s, {:.0} msgs per receiver CPU-second",
        median(rates),
        median(per_cpu)
    );
    Ok(())
}
