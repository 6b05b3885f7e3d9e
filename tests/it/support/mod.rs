//! Test harness shared by the end-to-end tests: a simulated world (real DNS server and SMTP
//! receivers on 127.x addresses), a real Herald server (in-process or as the `herald` binary),
//! a raw SMTP client and small HTTP helpers. Everything runs on loopback.
#![allow(dead_code)]

pub mod accounts;
pub mod api;
pub mod binary;
pub mod cluster;
pub mod mailman3;

use herald_api_types::PostSummary;
use herald_server::{config::ListenConfig, Config, Listeners, ServerError};
use herald_sim::{DomainConfig, Profile, ReceiverSettings, World, WorldConfig};
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub const SECRET: &str = "test-secret-0123456789abcdef";

/// A world of `domains` domains `d0.test`, `d1.test`, … each with its own MX on 127.1.0.x.
pub fn world_config(profiles: &[Profile], keep_messages: bool) -> WorldConfig {
    let mut cfg = WorldConfig::empty();
    cfg.smtp_port = 0;
    cfg.dns_addr = SocketAddr::from(([127, 0, 0, 1], 0));
    cfg.receiver = ReceiverSettings {
        check_mime_every: 1,
        keep_messages,
        ..ReceiverSettings::default()
    };
    for (i, profile) in profiles.iter().enumerate() {
        let name = format!("d{i}.test");
        cfg.domains.push(DomainConfig {
            mx_host: format!("mx.{name}"),
            name,
            weight: 1.0,
            mx_addr: Ipv4Addr::new(127, 1, 0, 10 + i as u8),
            mx_preference: 10,
            extra_mx: Vec::new(),
            profile: profile.clone(),
            starttls: false,
            dane: Default::default(),
            extensions: Default::default(),
        });
    }
    cfg
}

/// Publishes SPF for the address the tests' SMTP clients come from (127.0.0.1) and a DMARC
/// record for each of `domains`, so a post whose envelope sender and `From:` are in one of them
/// passes DMARC by aligned SPF on arrival, as a real poster's does through its provider. Posting
/// rights need that on `members` and `moderators` lists (`require_aligned_from`, on by default
/// there, since a forged member `From:` is as easy as a forged moderator's).
pub fn authenticate_senders(world: &World, domains: &[&str]) {
    world
        .dns()
        .update_zone(|z| {
            for d in domains {
                z.add_txt(d, "v=spf1 ip4:127.0.0.1 -all");
                z.add_txt(&format!("_dmarc.{d}"), "v=DMARC1; p=none");
            }
        })
        .expect("zone");
}

/// A server configuration pointed at the world, with fast retries for tests.
pub fn server_config(world: &World, data_dir: PathBuf) -> Config {
    let mut c = Config {
        data_dir,
        hostname: "herald.test".into(),
        secret: SECRET.into(),
        ..Config::default()
    };
    c.dns.nameservers = vec![world.dns_addr()];
    c.dns.timeout_ms = 1000;
    c.delivery.port = world.smtp_port();
    c.delivery.connect_timeout = Duration::from_secs(2);
    c.delivery.banner_timeout = Duration::from_secs(2);
    c.scheduler.retry_initial_secs = 1;
    c.scheduler.retry_max_secs = 2;
    c.scheduler.destination_backoff_secs = 1;
    c.scheduler.tick_ms = 50;
    // A fixed node id: the default is the machine's host name, which would make the
    // `/metrics` golden and status output differ between machines.
    c.cluster.node_id = Some("herald-test".into());
    // HERALD_TEST_STORE=postgres runs any end-to-end test on a fresh PostgreSQL directory (the
    // test binary's own server): the same scenarios, the other store.
    if std::env::var("HERALD_TEST_STORE").is_ok_and(|v| v == "postgres") {
        let url = std::thread::spawn(|| herald_pg_harness::PgServer::shared().fresh_database())
            .join()
            .expect("harness thread")
            .expect("test database");
        c.store.url = Some(url);
    }
    c
}

/// A Herald server running in this process.
pub struct TestServer {
    pub smtp: SocketAddr,
    pub lmtp: SocketAddr,
    pub http: SocketAddr,
    /// The implicit-TLS submission listener, when configured.
    pub submissions: Option<SocketAddr>,
    pub api: String,
    pub data_dir: PathBuf,
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), ServerError>>,
}

impl TestServer {
    pub async fn start(mut config: Config) -> TestServer {
        let listeners = Listeners::bind_ephemeral().await.expect("bind");
        let (smtp, lmtp, http) = listeners.addrs().expect("addrs");
        config.listen = ListenConfig {
            smtp,
            lmtp,
            http,
            submissions: config.listen.submissions,
        };
        // The server runs inside the test process, which must never change its user (CI runs
        // as root): dropping root is tested with the binary (`tests/it/privileges.rs`).
        config.server.user.clear();
        config.server.allow_root = true;
        let data_dir = config.data_dir.clone();
        let submissions = config.listen.submissions;
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(herald_server::run(config, listeners, shutdown.clone()));
        let api = format!("http://{http}");
        wait_healthy(&api).await;
        TestServer {
            smtp,
            lmtp,
            http,
            submissions,
            api,
            data_dir,
            shutdown,
            task,
        }
    }

    pub async fn stop(self) {
        self.shutdown.cancel();
        let r = tokio::time::timeout(Duration::from_secs(60), self.task)
            .await
            .expect("server stops within 60 s");
        r.expect("server task").expect("server ran cleanly");
    }
}

/// Whether the server at `api` answers its health check now.
/// Bounded in time: a port taken by something that accepts and never answers must not hang
/// the caller.
pub async fn healthy(api: &str) -> bool {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .expect("http client");
    client.get(format!("{api}/healthz")).send().await.is_ok()
}

pub async fn wait_healthy(api: &str) {
    let started = Instant::now();
    while !healthy(api).await {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "server did not come up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Sends a request and returns (status, JSON or text body).
pub async fn http(method: &str, url: &str, body: Option<Value>) -> (u16, Value) {
    let client = reqwest::Client::new();
    let req = match method {
        "GET" => client.get(url),
        "POST" => client.post(url),
        "DELETE" => client.delete(url),
        "PATCH" => client.patch(url),
        other => panic!("method {other}"),
    };
    let req = match body {
        Some(v) => req.json(&v),
        None => req,
    };
    let resp = req.send().await.expect("request");
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, value)
}

pub async fn http_bytes(url: &str, body: Vec<u8>) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .post(url)
        .body(body)
        .send()
        .await
        .expect("request");
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// An answer read through its `herald-api-types` view (the typed wire contract); fails the
/// test with the body when it does not decode, so a moved key is a clear failure, not a
/// silent `null`.
pub fn view<T: DeserializeOwned>(what: &str, body: &Value) -> T {
    serde_json::from_value(body.clone())
        .unwrap_or_else(|e| panic!("{what}: answer does not decode ({e}): {body}"))
}

/// GET decoded into its view: (status, view). A non-200 answer fails the test with its body.
pub async fn get_view<T: DeserializeOwned>(url: &str) -> T {
    let (status, body) = http("GET", url, None).await;
    assert_eq!(status, 200, "GET {url}: {body}");
    view(url, &body)
}

/// A post's progress; `None` while the server answers anything but 200 (not known yet).
pub async fn post_progress(api: &str, post: &str) -> Option<PostSummary> {
    let (status, body) = http("GET", &format!("{api}/api/v1/posts/{post}"), None).await;
    (status == 200).then(|| view("post progress", &body))
}

/// Creates a list through the API.
pub async fn create_list(api: &str, address: &str, settings: Value) {
    let (status, body) = http(
        "POST",
        &format!("{api}/api/v1/lists"),
        Some(serde_json::json!({"address": address, "settings": settings})),
    )
    .await;
    assert_eq!(status, 201, "create list: {body}");
}

/// Waits until every recipient of `post` has a final outcome; returns the progress.
pub async fn wait_complete(api: &str, post: &str, limit: Duration) -> PostSummary {
    let started = Instant::now();
    loop {
        let (status, body) = http("GET", &format!("{api}/api/v1/posts/{post}"), None).await;
        if status == 200 {
            let p: PostSummary = view("post progress", &body);
            if p.complete {
                return p;
            }
        }
        assert!(
            started.elapsed() < limit,
            "post {post} not complete after {limit:?}: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the server is settled: every post it knows has a final outcome for every
/// recipient and the scheduler holds no copy. Tests that assert "nothing more arrives" wait for
/// this instead of sleeping: a wrongly accepted or duplicated post is a known, incomplete post
/// (or a queued copy) until its copies are out, so the check after this sees them.
pub async fn wait_settled(api: &str, limit: Duration) {
    let started = Instant::now();
    loop {
        let (status, body) = http("GET", &format!("{api}/api/v1/status"), None).await;
        if status == 200 {
            let s: herald_api_types::Status = view("status", &body);
            if s.queued == 0 && s.posts.iter().all(|p| p.complete) {
                return;
            }
        }
        assert!(
            started.elapsed() < limit,
            "server not settled after {limit:?}: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A minimal SMTP client: one line at a time, replies read in full.
pub struct Smtp {
    reader: BufReader<tokio::net::tcp::OwnedReadHalf>,
    writer: tokio::net::tcp::OwnedWriteHalf,
}

impl Smtp {
    pub async fn connect(addr: SocketAddr) -> (Smtp, String) {
        let stream = TcpStream::connect(addr).await.expect("connect");
        let (r, w) = stream.into_split();
        let mut s = Smtp {
            reader: BufReader::new(r),
            writer: w,
        };
        let banner = s.reply().await;
        (s, banner)
    }

    /// Reads one complete (possibly multi-line) reply; returns its last line.
    pub async fn reply(&mut self) -> String {
        loop {
            let mut line = String::new();
            let n = tokio::time::timeout(Duration::from_secs(30), self.reader.read_line(&mut line))
                .await
                .expect("reply within 30 s")
                .expect("read");
            if n == 0 {
                return String::from("<closed>");
            }
            if line.as_bytes().get(3) != Some(&b'-') {
                return line.trim_end().to_string();
            }
        }
    }

    pub async fn send_raw(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).await.expect("write");
    }

    pub async fn cmd(&mut self, line: &str) -> String {
        self.send_raw(format!("{line}\r\n").as_bytes()).await;
        self.reply().await
    }

    /// A whole transaction; returns the reply to the end of DATA (or the first refusal).
    pub async fn send_mail(&mut self, from: &str, rcpts: &[&str], message: &[u8]) -> String {
        let r = self.cmd(&format!("MAIL FROM:<{from}>")).await;
        if !r.starts_with('2') {
            return r;
        }
        for rcpt in rcpts {
            let r = self.cmd(&format!("RCPT TO:<{rcpt}>")).await;
            if !r.starts_with('2') {
                self.cmd("RSET").await;
                return r;
            }
        }
        let r = self.cmd("DATA").await;
        if !r.starts_with("354") {
            return r;
        }
        let mut data = Vec::with_capacity(message.len() + 16);
        for line in message.split_inclusive(|&b| b == b'\n') {
            if line.starts_with(b".") {
                data.push(b'.');
            }
            data.extend_from_slice(line);
        }
        if !data.ends_with(b"\r\n") {
            data.extend_from_slice(b"\r\n");
        }
        data.extend_from_slice(b".\r\n");
        self.send_raw(&data).await;
        self.reply().await
    }
}

/// Runs the `herald` binary against `api` the way an operator does (with `HERALD_ADMIN_TOKEN`
/// when given); asserts it succeeded and returns its stdout.
pub fn herald_cli(api: &str, token: Option<&str>, args: &[&str]) -> String {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_herald"));
    cmd.args(args).env("HERALD_SERVER", api);
    if let Some(t) = token {
        cmd.env("HERALD_ADMIN_TOKEN", t);
    }
    let out = cmd.output().expect("run herald");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "herald {args:?}: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// The post id from a `250 2.0.0 queued as <id>` reply.
pub fn queued_id(reply: &str) -> String {
    reply
        .rsplit(' ')
        .next()
        .map(str::to_string)
        .filter(|_| reply.starts_with("250"))
        .unwrap_or_else(|| panic!("not a queued reply: {reply}"))
}

/// Adds each address to `list` over the API (201 expected).
pub async fn add_members(api: &str, list: &str, members: &[&str]) {
    for m in members {
        let (status, body) = http(
            "POST",
            &format!("{api}/api/v1/lists/{list}/members"),
            Some(serde_json::json!({ "address": m })),
        )
        .await;
        assert_eq!(status, 201, "{body}");
    }
}

/// One `/metrics` sample's value (the line starting with `series`, labels included), 0 when
/// absent.
pub async fn metric(api: &str, series: &str) -> u64 {
    let text = reqwest::get(format!("{api}/metrics"))
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("metrics body");
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0)
}

/// Waits until `series` reaches `want`, and fails if it passes it (or after 30 s).
pub async fn wait_metric(api: &str, series: &str, want: u64) {
    let started = Instant::now();
    loop {
        let got = metric(api, series).await;
        if got >= want {
            assert_eq!(got, want, "{series}");
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{series} is {got}, want {want}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A CSV of `n` members spread over `domains` test domains, with a custom field.
pub fn members_csv(n: usize, domains: usize) -> String {
    let mut csv = String::from("email,name,city\n");
    for i in 0..n {
        csv.push_str(&format!(
            "m{i}@d{}.test,Member {i},City{}\n",
            i % domains,
            i % 7
        ));
    }
    csv
}

/// A DER certificate as PEM, for a trust-anchor file (`delivery.tls_ca_file`).
pub fn der_to_pem(der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut pem = String::from("-----BEGIN CERTIFICATE-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        pem.push_str(std::str::from_utf8(chunk).expect("base64 is ASCII"));
        pem.push('\n');
    }
    pem.push_str("-----END CERTIFICATE-----\n");
    pem
}

/// Creates `list` (anyone may post, personalized copies) and imports the members in `csv`.
pub async fn setup_personalized_list(api: &str, list: &str, csv: String) {
    create_list(
        api,
        list,
        serde_json::json!({"posting_policy": "anyone", "personalize": true}),
    )
    .await;
    let (status, report) = http_bytes(
        &format!("{api}/api/v1/lists/{list}/import"),
        csv.into_bytes(),
    )
    .await;
    assert_eq!(status, 200, "{report}");
}

/// Injects a short post into `list` through the API (`tag` is its subject and Message-ID);
/// returns the post's id.
pub async fn inject_post(api: &str, list: &str, tag: &str) -> String {
    let msg = format!(
        "From: p@outside.test\r\nTo: {list}\r\nSubject: {tag}\r\nMessage-ID: <{tag}@outside.test>\r\n\r\nHello.\r\n"
    );
    let (status, r) = http_bytes(
        &format!("{api}/api/v1/lists/{list}/posts"),
        msg.into_bytes(),
    )
    .await;
    assert!(status == 200 || status == 201 || status == 202, "{r}");
    view::<herald_api_types::Injected>("inject", &r).post
}

/// An import CSV of `n` members spread over `domains` in turn, `u{i}@{domain}`.
pub fn spread_csv(n: usize, domains: &[&str]) -> String {
    spread_csv_range(0..n, domains)
}

/// As [`spread_csv`], members numbered `range`.
pub fn spread_csv_range(range: std::ops::Range<usize>, domains: &[&str]) -> String {
    let mut out = String::from("email,name\n");
    for i in range {
        out.push_str(&format!("u{i}@{},U {i}\n", domains[i % domains.len()]));
    }
    out
}

/// Polls `check` every 100 ms until it holds; fails naming `what` once `limit` has passed.
pub async fn eventually<F, Fut>(limit: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = std::time::Instant::now();
    while !check().await {
        assert!(started.elapsed() < limit, "not within {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Polls `check` every 50 ms until it gives a value; fails naming `what` after 30 s.
pub async fn wait_until_some<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let started = std::time::Instant::now();
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls the async `check` every 50 ms until it gives a value; fails naming `what` (and the
/// last answer `check` described through `last`, when it set one) once `limit` has passed.
/// For conditions read over HTTP or from a store, where [`wait_until_some`] cannot await.
pub async fn eventually_some<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let started = std::time::Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(started.elapsed() < limit, "not within {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The messages the simulated world received for `rcpt` (kept when `keep_messages` is set).
pub fn delivered(world: &herald_sim::World, rcpt: &str) -> Vec<Vec<u8>> {
    world
        .recorder()
        .snapshot()
        .copies_for(rcpt)
        .iter()
        .filter_map(|c| c.message.clone())
        .map(|m| m.to_vec())
        .collect()
}
