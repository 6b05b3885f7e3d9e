//! No listener can exhaust the process's file descriptors, end to end through the real
//! `herald serve`:
//!
//! 1. At an open-file limit of 1,024 (soft and hard, the common default), 1,100 idle HTTP
//!    connections and 100 slow-header clients (a header byte a second, never finishing) must
//!    not make SMTP or `/healthz` unreachable: a post over SMTP is answered in under a second,
//!    `/healthz` answers every probe throughout, and the slow clients are gone once the header
//!    timeout has passed. Before the listener had caps and timeouts, the idle connections took
//!    every descriptor and kept them.
//! 2. A connect that fails for want of a descriptor on this machine (EMFILE) is no verdict on
//!    the receiver: no host is marked down, and once descriptors are back the copies go out
//!    within seconds, not after a host-down backoff and a retry schedule. The test starves the
//!    running server with `prlimit` (its soft limit below every descriptor number it holds), so
//!    every new socket fails with EMFILE, while it talks to it over connections opened before.
//!
//! Everything runs on 127.0.0.0/8; the flood's clients are bound to their own loopback
//! addresses (127.0.2.x, 127.0.3.x), the probes come from 127.0.0.1. Every wait is bounded;
//! the file takes about 30 s. `-- --nocapture` prints the figures.

use crate::support;

use herald_sim::{Profile, World};
use serde_json::json;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::binary::BinaryServer;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

const LIST: &str = "fds@lists.test";
/// The open-file limit the server runs under (soft and hard).
const LIMIT: u64 = 1024;
const IDLE: usize = 1100;
const SLOW: usize = 100;
/// `http.header_read_timeout_secs`, the default.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Small enough that the budget fits under 1,024: 100 x 2 + 512 + 100 + 64 + 128 = 1,004.
const SMALL: &str = "[smtp_in]\nmax_sessions = 100\n[scheduler]\nmax_connections = 100\nslow_lane_max_connections = 20\n";

/// What the flood run measured.
#[derive(Debug)]
struct Flood {
    /// Idle connections the server let the client open (connect returned).
    idle_opened: usize,
    /// Probes of `/healthz` sent and answered with 200 within 2 s.
    probes: usize,
    answered: usize,
    /// The longest time without an answered probe.
    longest_gap: Duration,
    /// Connect to 250 after DATA, or why not.
    post: Result<Duration, String>,
    /// Slow clients still open a header timeout (+ 3 s) after they started.
    slow_left: usize,
    /// `herald_http_refusals_total` by reason, after the flood.
    refusals: Vec<(String, u64)>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_and_slow_http_clients_leave_smtp_and_healthz_reachable_at_1024_files() {
    let _alone = crate::alone().await;
    raise_fd_limit(8192);
    let world = World::start(world_config(&[Profile::Normal], false))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = BinaryServer::configure(dir.path(), &dir.path().join("data"), &world, SMALL);
    server.nofile = Some(LIMIT);
    server.start().await;
    create_list(&server.api, LIST, json!({})).await;
    let f = flood(&server).await;
    println!(
        "descriptors ({IDLE} idle + {SLOW} slow HTTP clients, limit {LIMIT}): {} idle opened; \
         /healthz {}/{} probes answered, longest unanswered {:?}; SMTP post {:?}; \
         slow clients left after {:?}+3s: {}; refusals {:?}",
        f.idle_opened,
        f.answered,
        f.probes,
        f.longest_gap,
        f.post,
        HEADER_TIMEOUT,
        f.slow_left,
        f.refusals
    );
    let post = f.post.clone().expect("the post over SMTP was answered");
    assert!(post < Duration::from_secs(1), "post answered in {post:?}");
    assert_eq!(f.answered, f.probes, "/healthz answered every probe: {f:?}");
    assert_eq!(
        f.slow_left, 0,
        "slow clients gone after the header timeout: {f:?}"
    );
    let closed: u64 = f.refusals.iter().map(|(_, n)| n).sum();
    assert!(
        closed > 0,
        "the caps and timeouts are counted in /metrics: {f:?}"
    );
    server.stop().await;
}

async fn flood(server: &BinaryServer) -> Flood {
    let stop = CancellationToken::new();
    let prober = tokio::spawn(probe(server.api.clone(), stop.clone()));
    let tried = Arc::new(AtomicUsize::new(0));
    let opened = Arc::new(AtomicUsize::new(0));
    let mut idle = JoinSet::new();
    for i in 0..IDLE {
        // 22 addresses of 50 connections: each under the per-client cap, together far over
        // the server's total.
        let from = Ipv4Addr::new(127, 0, 2, 1 + (i / 50) as u8);
        let (stop, target) = (stop.clone(), server.http);
        let count = (tried.clone(), opened.clone());
        idle.spawn(async move { hold_idle(from, target, count, stop).await });
    }
    let started_slow = Instant::now();
    let mut slow = JoinSet::new();
    for i in 0..SLOW {
        let from = Ipv4Addr::new(127, 0, 3, 1 + (i / 25) as u8);
        let (stop, target) = (stop.clone(), server.http);
        slow.spawn(async move { slowloris(from, target, stop).await });
    }
    // Let every idle connection be tried (each connect waits 3 s at most), then post while
    // they are held.
    let settle = Instant::now() + Duration::from_secs(5);
    while tried.load(Relaxed) < IDLE && Instant::now() < settle {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let post = tokio::time::timeout(Duration::from_secs(10), post(server.smtp))
        .await
        .unwrap_or_else(|_| Err("no answer within 10 s".into()));
    // The slow clients must be gone a header timeout after they started (3 s of slack).
    let deadline = started_slow + HEADER_TIMEOUT + Duration::from_secs(3);
    let mut slow_left = SLOW;
    while let Ok(Some(_)) = tokio::time::timeout_at(deadline.into(), slow.join_next()).await {
        slow_left -= 1;
    }
    stop.cancel();
    while idle.join_next().await.is_some() {}
    slow.abort_all();
    let (probes, answered, longest_gap) = prober.await.expect("prober");
    let refusals = refusals(&server.api).await;
    Flood {
        idle_opened: opened.load(Relaxed),
        probes,
        answered,
        longest_gap,
        post,
        slow_left,
        refusals,
    }
}

/// Opens a connection from `from` and holds it without a byte until the server closes it or
/// the test stops; counts the attempt and, when the connect succeeded, the connection.
async fn hold_idle(
    from: Ipv4Addr,
    target: SocketAddr,
    (tried, opened): (Arc<AtomicUsize>, Arc<AtomicUsize>),
    stop: CancellationToken,
) {
    let connected = connect_from(from, target).await;
    tried.fetch_add(1, Relaxed);
    let Some(mut s) = connected else {
        return;
    };
    opened.fetch_add(1, Relaxed);
    let mut buf = [0u8; 256];
    tokio::select! {
        () = stop.cancelled() => {}
        _ = s.read(&mut buf) => {}
    }
}

/// A slow-header client: a request line, then one header byte a second, never the blank line.
/// Returns when the server closes the connection (or it was never opened).
async fn slowloris(from: Ipv4Addr, target: SocketAddr, stop: CancellationToken) {
    let Some(mut s) = connect_from(from, target).await else {
        return;
    };
    if s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .is_err()
    {
        return;
    }
    let mut buf = [0u8; 256];
    for _ in 0..120 {
        tokio::select! {
            () = stop.cancelled() => return,
            r = s.read(&mut buf) => if matches!(r, Ok(0) | Err(_)) { return },
            () = tokio::time::sleep(Duration::from_secs(1)) => {
                if s.write_all(b"X").await.is_err() {
                    return;
                }
            }
        }
    }
}

async fn connect_from(from: Ipv4Addr, target: SocketAddr) -> Option<TcpStream> {
    let socket = TcpSocket::new_v4().ok()?;
    socket.bind(SocketAddr::new(IpAddr::V4(from), 0)).ok()?;
    tokio::time::timeout(Duration::from_secs(3), socket.connect(target))
        .await
        .ok()?
        .ok()
}

/// Probes `/healthz` every 100 ms on a fresh connection (as a monitor does) until `stop`:
/// probes sent, probes answered with 200 within 2 s, the longest time without an answer.
async fn probe(api: String, stop: CancellationToken) -> (usize, usize, Duration) {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .pool_max_idle_per_host(0)
        .build()
        .expect("client");
    let (mut sent, mut answered) = (0, 0);
    let mut last_answer = Instant::now();
    let mut longest = Duration::ZERO;
    while !stop.is_cancelled() {
        sent += 1;
        let ok = client
            .get(format!("{api}/healthz"))
            .send()
            .await
            .is_ok_and(|r| r.status().as_u16() == 200);
        // The time since the last answer, up to this one (or to now, unanswered).
        longest = longest.max(last_answer.elapsed());
        if ok {
            answered += 1;
            last_answer = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (sent, answered, longest)
}

/// One post over SMTP from 127.0.0.1: the time from connect to the 250 after DATA.
async fn post(smtp: SocketAddr) -> Result<Duration, String> {
    let started = Instant::now();
    let (mut s, banner) = Smtp::connect(smtp).await;
    if !banner.starts_with("220") {
        return Err(banner);
    }
    let r = s.cmd("EHLO legit.example").await;
    if !r.starts_with("250") {
        return Err(r);
    }
    let body = "From: alice@d0.test\r\nSubject: during the flood\r\nMessage-ID: <fds-flood@d0.test>\r\n\r\nhi\r\n";
    let r = s.send_mail("alice@d0.test", &[LIST], body.as_bytes()).await;
    let took = started.elapsed();
    s.cmd("QUIT").await;
    r.starts_with("250").then_some(took).ok_or(r)
}

/// `herald_http_refusals_total` samples, by reason.
async fn refusals(api: &str) -> Vec<(String, u64)> {
    let Ok(resp) = reqwest::get(format!("{api}/metrics")).await else {
        return Vec::new();
    };
    let text = resp.text().await.unwrap_or_default();
    text.lines()
        .filter_map(|l| l.strip_prefix("herald_http_refusals_total{reason=\""))
        .filter_map(|l| {
            let (reason, value) = l.split_once("\"} ")?;
            Some((reason.to_string(), value.trim().parse().ok()?))
        })
        .collect()
}

/// Lifts this test process's soft limit on open files (it holds some 1,300 sockets).
fn raise_fd_limit(want: u64) {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current.unwrap_or(u64::MAX) >= want {
        return;
    }
    limit.current = Some(want.min(limit.maximum.unwrap_or(u64::MAX)));
    if let Err(e) = setrlimit(Resource::Nofile, limit) {
        println!("could not raise RLIMIT_NOFILE: {e}");
    }
}

/// Config for the starvation run: the first attempt is greylisted (retried only when the test
/// says so), idle connections close at once, and two failed connects mark a host down.
const STARVED: &str = "[scheduler]\nidle_connection_ms = 100\ngreylist_first_retry_secs = 600\ngreylist_retry_secs = 600\nhost_down_after_failures = 2\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_descriptors_marks_no_host_down_and_delivers_once_they_are_back() {
    let _alone = crate::alone().await;
    let greylist = Profile::Greylist {
        retry_after: Duration::from_millis(500),
        announce: false,
    };
    let world = World::start(world_config(&[greylist], false))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = BinaryServer::configure(dir.path(), &dir.path().join("data"), &world, STARVED);
    server.start().await;
    let api = server.api.clone();
    setup_personalized_list(&api, LIST, spread_csv(3, &["d0.test"])).await;
    inject_post(&api, LIST, "starved").await;
    // The first attempt is greylisted; its connection is closed before the starvation.
    wait_metric(&api, "herald_copies_total{outcome=\"deferred\"}", 3).await;
    wait_gauge(&api, "herald_connections_open", 0).await;

    // Opened while descriptors are free, and answered once (so the server has accepted it,
    // not left it in the listen backlog): the test's line to the starved server.
    let mut line = ApiLine::open(server.http).await;
    assert!(
        line.request("GET", "/healthz", "").await.is_some(),
        "the line is served"
    );
    let pid = server.pid().expect("pid");
    let before = starve(pid);
    let starved = Instant::now();
    let first = line
        .request(
            "POST",
            "/api/v1/stragglers/retry",
            r#"{"domain":"d0.test"}"#,
        )
        .await;
    // Wait for the retry to meet the shortage (counted by the fixed server; the old one has
    // no such series, so this waits its 5 s out).
    let met = wait_line_metric(
        &mut line,
        "herald_local_shortages_total{resource=\"process_files\"}",
        2,
    )
    .await;
    let second = line
        .request(
            "POST",
            "/api/v1/stragglers/retry",
            r#"{"domain":"d0.test"}"#,
        )
        .await;
    // Another failed connect (the old server: a second host failure, which marks it down).
    let series = "herald_local_shortages_total{resource=\"process_files\"}";
    let met = wait_line_metric(&mut line, series, met + 1).await;
    let down_while_starved = line.metric("herald_hosts_down").await;
    let answered = first.is_some() && second.is_some() && line.0.is_some();
    restore(pid, before);
    let short_for = starved.elapsed();
    let restored = Instant::now();
    let delivered = wait_delivered(&api, 3, Duration::from_secs(20)).await;
    let down_after = metric(&api, "herald_hosts_down").await;
    println!(
        "starved of descriptors for {short_for:?} (shortages counted: {met}; the API answered \
         on its open line: {answered}); hosts down while starved: {down_while_starved}, after: \
         {down_after}; 3 copies delivered {:?} after the descriptors came back",
        delivered.map(|_| restored.elapsed())
    );
    assert!(answered, "the API answered on the connection it had");
    assert!(met >= 2, "the shortage is counted in /metrics");
    assert_eq!(
        (down_while_starved, down_after),
        (0, 0),
        "no host is marked down"
    );
    let took = delivered.expect("delivered once descriptors are back");
    assert!(took < Duration::from_secs(15), "delivered {took:?} after");
    server.stop().await;
}

/// Lowers the server's soft open-file limit below every descriptor number it holds: each new
/// socket or file now fails with EMFILE, what it holds keeps working. Returns the old limit.
fn starve(pid: u32) -> rustix::process::Rlimit {
    use rustix::process::{prlimit, Pid, Resource, Rlimit};
    let pid = Pid::from_raw(pid as i32).expect("pid");
    let now = rustix::process::getrlimit(Resource::Nofile);
    let low = Rlimit {
        current: Some(3),
        maximum: now.maximum,
    };
    prlimit(Some(pid), Resource::Nofile, low).expect("prlimit")
}

fn restore(pid: u32, old: rustix::process::Rlimit) {
    use rustix::process::{prlimit, Pid, Resource};
    let pid = Pid::from_raw(pid as i32).expect("pid");
    prlimit(Some(pid), Resource::Nofile, old).expect("prlimit");
}

/// Time until `want` copies are delivered, `None` past `limit`.
async fn wait_delivered(api: &str, want: u64, limit: Duration) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < limit {
        if metric(api, "herald_copies_total{outcome=\"delivered\"}").await >= want {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// Waits (30 s at most) until an unlabelled gauge reads `want`.
async fn wait_gauge(api: &str, gauge: &str, want: u64) {
    let started = Instant::now();
    while metric(api, gauge).await != want {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{gauge} never {want}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits (5 s at most) on `line` until `series` reaches `want`; returns the last value.
async fn wait_line_metric(line: &mut ApiLine, series: &str, want: u64) -> u64 {
    let started = Instant::now();
    loop {
        let v = line.metric(series).await;
        if v >= want || started.elapsed() > Duration::from_secs(5) {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One kept-alive HTTP/1.1 connection to the API, for a server that cannot accept new ones.
/// A request unanswered within 5 s leaves the line dead (`None` from then on).
struct ApiLine(Option<TcpStream>);

impl ApiLine {
    async fn open(addr: SocketAddr) -> ApiLine {
        ApiLine(Some(TcpStream::connect(addr).await.expect("connect API")))
    }

    /// Sends a request and returns the response body (Content-Length framed).
    async fn request(&mut self, method: &str, path: &str, body: &str) -> Option<String> {
        let mut stream = self.0.take()?;
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: herald\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(req.as_bytes()).await.ok()?;
        let mut buf = Vec::new();
        let mut chunk = [0u8; 16384];
        let read = async {
            loop {
                let n = stream.read(&mut chunk).await.ok()?;
                if n == 0 {
                    return None;
                }
                buf.extend_from_slice(&chunk[..n]);
                let text = String::from_utf8_lossy(&buf);
                if let Some((head, rest)) = text.split_once("\r\n\r\n") {
                    let len = head
                        .lines()
                        .find_map(|l| {
                            let (k, v) = l.split_once(':')?;
                            k.eq_ignore_ascii_case("content-length")
                                .then(|| v.trim().parse::<usize>().ok())?
                        })
                        .unwrap_or(0);
                    if rest.len() >= len {
                        return Some(rest[..len].to_string());
                    }
                }
            }
        };
        let answer = tokio::time::timeout(Duration::from_secs(5), read)
            .await
            .ok()??;
        self.0 = Some(stream);
        Some(answer)
    }

    /// `series` on the line (0 when absent or unanswered).
    async fn metric(&mut self, series: &str) -> u64 {
        let text = self
            .request("GET", "/metrics", "")
            .await
            .unwrap_or_default();
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or(0)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_connection_the_receiver_closed_is_closed_at_once() {
    let _alone = crate::alone().await;
    let mut wc = world_config(&[Profile::Normal], false);
    // The receiver hangs up on a connection idle for a second; Herald keeps an idle connection
    // for 30 s (more copies may come), so only noticing the receiver's close frees it.
    wc.receiver.idle_timeout_secs = 1;
    let world = World::start(wc).await.expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let extra = "[scheduler]\nidle_connection_ms = 30000\n";
    let mut server = BinaryServer::configure(dir.path(), &dir.path().join("data"), &world, extra);
    server.start().await;
    let api = server.api.clone();
    setup_personalized_list(&api, LIST, spread_csv(3, &["d0.test"])).await;
    inject_post(&api, LIST, "pooled").await;
    wait_delivered(&api, 3, Duration::from_secs(20))
        .await
        .expect("delivered");
    let delivered = Instant::now();
    // Watch for 6 s: the receiver closes after 1 s; how long does our side stay in CLOSE-WAIT?
    let (mut close_wait_for, mut closed_after) = (Duration::ZERO, None);
    let mut seen_since: Option<Instant> = None;
    while delivered.elapsed() < Duration::from_secs(6) {
        match (close_wait_sockets(world.smtp_port()) > 0, seen_since) {
            (true, None) => seen_since = Some(Instant::now()),
            (true, Some(t)) => close_wait_for = close_wait_for.max(t.elapsed()),
            (false, _) => seen_since = None,
        }
        if closed_after.is_none() && metric(&api, "herald_connections_open").await == 0 {
            closed_after = Some(delivered.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "receiver closed an idle pooled connection: ours stayed in CLOSE-WAIT for {close_wait_for:?}; \
         herald_connections_open was 0 {closed_after:?} after the delivery"
    );
    assert!(
        close_wait_for < Duration::from_millis(500),
        "{close_wait_for:?} in CLOSE-WAIT"
    );
    let closed = closed_after.expect("the connection closed within 6 s");
    assert!(
        closed < Duration::from_secs(3),
        "closed {closed:?} after delivery"
    );
    server.stop().await;
}

/// Sockets on this host in CLOSE-WAIT towards `port` (the simulated receivers' SMTP port):
/// Herald's side of a connection the receiver closed and Herald did not.
fn close_wait_sockets(port: u16) -> usize {
    let remote = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .flat_map(|t| t.lines().skip(1).map(str::to_string).collect::<Vec<_>>())
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3 && f[2].ends_with(&remote) && f[3] == "08"
        })
        .count()
}
