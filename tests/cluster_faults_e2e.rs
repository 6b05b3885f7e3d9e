//! The cluster under faults (issue 17), with the real binary as an operator runs it: `herald
//! serve` nodes on 127.0.0.2/3/4 share one PostgreSQL (`herald-pg-harness`) with `[cluster]
//! shared_fanout = true`; each node sends from its own address, so the simulated world's
//! receivers tell which node delivered each copy.
//!
//! - PostgreSQL stopped as a crash would (`pg_ctl stop -m immediate`) for ~5 s in the middle of
//!   a fan-out, then started again on the same port and data: no node exits, every member gets
//!   the post once (duplicates bounded by the nodes' in-flight window), a post sent over SMTP
//!   during the outage is refused with a 4xx or accepted, and delivered after either way, the
//!   API answers 503 with a problem body (not a hang), `/metrics` counts the store errors, and
//!   heartbeats and shard reports resume.
//! - A node of a newer Herald (this binary) started against a store at the previous schema
//!   version that live nodes of that version still use refuses to migrate it, naming them; once
//!   they have left or died it migrates and starts. The older nodes are simulated: the store is
//!   created only up to `SCHEMA_VERSION - 1` (`herald_directory::migrate_postgres_up_to`, as an
//!   older Herald leaves it) and their rows are written and heartbeaten by the test itself, as
//!   an older binary's heartbeat task would.

mod support;

use herald_pg_harness::PgServer;
use herald_sim::{Profile, World};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::binary::{herald_bin, herald_with_config};
use support::*;

const LIST: &str = "big@lists.test";
const DOMAINS: usize = 4;
const LEASE_SECS: u64 = 3;
const REPORT_MS: u64 = 300;
const SHARD: usize = 250;
/// Per node: connections per destination × destinations × copies per batch — the copies a node
/// can have sent but not yet seen the replies of (its in-flight window).
const CONNS_PER_DEST: usize = 2;
const BATCH: usize = 8;
/// Members read per page and copies of a post queued at most (a fixed window: no growth per
/// domain): a shard is read in several pages as its copies go out, so the fan-out reads the
/// store all along (and during the outage).
const PAGE: usize = 50;

fn free_port_on(ip: &str) -> u16 {
    std::net::TcpListener::bind(format!("{ip}:0"))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// One node: its config, addresses, the child process and where its log goes.
struct Node {
    id: String,
    config: PathBuf,
    log: PathBuf,
    http: SocketAddr,
    smtp: SocketAddr,
    child: Option<Child>,
}

impl Node {
    fn configure(dir: &Path, ip: &str, id: &str, url: &str, world: &World) -> Node {
        let http: SocketAddr = format!("{ip}:{}", free_port_on(ip)).parse().expect("addr");
        let smtp: SocketAddr = format!("{ip}:{}", free_port_on(ip)).parse().expect("addr");
        let toml = format!(
            r#"data_dir = "{data}"
hostname = "herald.test"
secret = "{SECRET}"
[server]
allow_root = true
[listen]
smtp = "{smtp}"
lmtp = "{ip}:{lmtp}"
http = "{http}"
[dns]
nameservers = ["{dns}"]
timeout_ms = 1000
[delivery]
port = {port}
connect_timeout_secs = 2
banner_timeout_secs = 2
default_egress_pool = "own"
[[delivery.egress]]
name = "self"
source = "{ip}"
[[delivery.egress_pool]]
name = "own"
sources = ["self"]
[scheduler]
max_connections_per_destination = {CONNS_PER_DEST}
max_copies_per_batch = {BATCH}
max_queued_copies_per_post = {PAGE}
queued_copies_per_domain = 0
expansion_page = {PAGE}
[store]
url = "{url}"
[cluster]
node_id = "{id}"
heartbeat_interval_secs = 1
dead_after_intervals = 2
shared_fanout = true
shard_members = {SHARD}
lease_secs = {LEASE_SECS}
shard_report_ms = {REPORT_MS}
max_shards_per_node = 2
"#,
            data = dir.join(id).display(),
            lmtp = free_port_on(ip),
            dns = world.dns_addr(),
            port = world.smtp_port(),
        );
        let config = dir.join(format!("{id}.toml"));
        std::fs::write(&config, toml).expect("write config");
        Node {
            id: id.into(),
            config,
            log: dir.join(format!("{id}.log")),
            http,
            smtp,
            child: None,
        }
    }

    fn api(&self) -> String {
        format!("http://{}", self.http)
    }

    async fn start(&mut self) {
        let log = std::fs::File::create(&self.log).expect("log file");
        let child = Command::new(herald_bin())
            .args(["serve", "--config"])
            .arg(&self.config)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn herald serve");
        self.child = Some(child);
        wait_healthy(&self.api()).await;
    }

    /// The process's exit status if it has exited (a crash, a refusal), None while it runs.
    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Runs `sql` on the shared store and returns the rows as text columns.
async fn pg_rows(url: &str, sql: &'static str) -> Vec<Vec<Option<String>>> {
    let url = url.to_string();
    tokio::task::spawn_blocking(move || {
        let mut c = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
        c.simple_query(sql)
            .expect("query")
            .into_iter()
            .filter_map(|m| match m {
                postgres::SimpleQueryMessage::Row(r) => {
                    Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
                }
                _ => None,
            })
            .collect()
    })
    .await
    .expect("task")
}

/// Nodes on one store, a list of `members` members made through the first node.
async fn cluster(dir: &Path, url: &str, world: &World, members: usize, ips: &[&str]) -> Vec<Node> {
    let mut nodes = Vec::new();
    for (i, ip) in ips.iter().enumerate() {
        let mut n = Node::configure(dir, ip, &format!("node-{i}"), url, world);
        n.start().await;
        nodes.push(n);
    }
    let api = nodes[0].api();
    create_list(&api, LIST, json!({"posting_policy": "anyone"})).await;
    let (status, report) = http_bytes(
        &format!("{api}/api/v1/lists/{LIST}/import"),
        members_csv(members, DOMAINS).into_bytes(),
    )
    .await;
    assert_eq!(status, 200, "{report}");
    nodes
}

fn message(subject: &str, id: &str) -> String {
    format!(
        "From: alice@client.test\r\nTo: {LIST}\r\nSubject: {subject}\r\nMessage-ID: <{id}>\r\n\r\nhello all\r\n"
    )
}

/// One SMTP transaction to `node`; the reply to its end (or the first refusal).
async fn try_post(node: SocketAddr, subject: &str, id: &str) -> String {
    let (mut c, _) = Smtp::connect(node).await;
    c.cmd("EHLO client.test").await;
    c.send_mail(
        "alice@client.test",
        &[LIST],
        message(subject, id).as_bytes(),
    )
    .await
}

/// Distinct recipients and total copies of the post with Message-ID `id`.
fn delivered(world: &World, id: &str) -> (usize, usize) {
    let snap = world.recorder().snapshot();
    let copies: Vec<_> = snap
        .copies
        .iter()
        .filter(|c| c.message_id.as_deref() == Some(&format!("<{id}>")))
        .collect();
    let unique: BTreeSet<&str> = copies.iter().map(|c| &*c.recipient).collect();
    (unique.len(), copies.len())
}

async fn wait_delivered(
    world: &World,
    id: &str,
    members: usize,
    limit: Duration,
) -> (usize, usize) {
    let started = Instant::now();
    loop {
        let (unique, copies) = delivered(world, id);
        if unique >= members || started.elapsed() > limit {
            return (unique, copies);
        }
        world
            .recorder()
            .wait_for(world.recorder().accepted() + 1, Duration::from_millis(500))
            .await;
    }
}

/// Each node's row: (state, heartbeat age in ms on the store's clock).
async fn node_rows(url: &str) -> BTreeMap<String, (String, i64)> {
    pg_rows(
        url,
        "SELECT node_id, state,
                ((extract(epoch FROM clock_timestamp()) * 1000)::BIGINT - heartbeat_at_ms)::TEXT
         FROM nodes",
    )
    .await
    .into_iter()
    .map(|r| {
        let age = r[2].as_deref().unwrap_or("0").parse().expect("age");
        (
            r[0].clone().expect("id"),
            (r[1].clone().expect("state"), age),
        )
    })
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_down_for_seconds_mid_fan_out_pauses_the_nodes_and_loses_nothing() {
    const MEMBERS: usize = 3000;
    const OUTAGE: Duration = Duration::from_secs(5);
    let pg = Arc::new(
        tokio::task::spawn_blocking(PgServer::start_crash_safe)
            .await
            .expect("task")
            .expect("a PostgreSQL server of this test's own"),
    );
    let url = {
        let pg = pg.clone();
        tokio::task::spawn_blocking(move || pg.fresh_database())
            .await
            .expect("task")
            .expect("database")
    };
    let profile = Profile::Slow {
        delay: Duration::from_millis(25),
    };
    let world = World::start(world_config(&vec![profile; DOMAINS], false))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let ips = ["127.0.0.2", "127.0.0.3", "127.0.0.4"];
    let mut nodes = cluster(dir.path(), &url, &world, MEMBERS, &ips).await;

    let started = Instant::now();
    let reply = try_post(nodes[0].smtp, "before the outage", "first@client.test").await;
    assert!(reply.starts_with("250"), "{reply}");
    // Mid fan-out: some copies out, shards leased.
    while world.recorder().accepted() < (MEMBERS / 6) as u64 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "fan-out never got going"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let reports_before = metric(&nodes[0].api(), "herald_shards_reports_total").await;
    {
        let pg = pg.clone();
        tokio::task::spawn_blocking(move || pg.stop_immediate())
            .await
            .expect("task")
            .expect("stop PostgreSQL");
    }
    let stopped_at = Instant::now();
    let at_stop = world.recorder().accepted();

    // A post during the outage: refused for now with a 4xx (the list cannot be looked up), or
    // accepted (then the spool holds it until the store is back); never a 5xx.
    let during = try_post(nodes[1].smtp, "during the outage", "second@client.test").await;
    assert!(
        during.starts_with("250") || during.starts_with('4'),
        "a post during the outage got {during}"
    );
    // The API answers at once, 503 with a problem body.
    let t = Instant::now();
    let resp = reqwest::Client::builder()
        .timeout(Duration::from_secs(15))
        .build()
        .expect("client")
        .get(format!("{}/api/v1/lists/{LIST}", nodes[2].api()))
        .send()
        .await
        .expect("the API answered during the outage");
    let api_wait = t.elapsed();
    assert_eq!(resp.status().as_u16(), 503, "during the outage");
    assert_eq!(
        resp.headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("application/problem+json")
    );
    let problem: herald_api_types::Problem =
        serde_json::from_str(&resp.text().await.expect("body")).expect("a problem body");
    assert_eq!(problem.status, 503);
    assert!(
        api_wait < Duration::from_secs(5),
        "the API took {api_wait:?}"
    );
    // /metrics answers and counts the failures.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for n in &nodes {
        let api = n.api();
        assert!(
            metric(&api, "herald_cluster_heartbeat_failures_total").await >= 1,
            "{}: no failed heartbeat counted",
            n.id
        );
        assert!(
            metric(&api, "herald_store_errors_total").await >= 1,
            "{}: no store error counted",
            n.id
        );
    }
    let elapsed = stopped_at.elapsed();
    if elapsed < OUTAGE {
        tokio::time::sleep(OUTAGE - elapsed).await;
    }
    let during_outage = world.recorder().accepted() - at_stop;
    for n in nodes.iter_mut() {
        assert_eq!(n.exited(), None, "{} exited during the outage", n.id);
    }
    {
        let pg = pg.clone();
        tokio::task::spawn_blocking(move || pg.restart())
            .await
            .expect("task")
            .expect("start PostgreSQL again");
    }
    let restarted_at = Instant::now();

    // A refused post is sent again, as the sending MTA would.
    let mut second = during.clone();
    while !second.starts_with("250") {
        assert!(
            restarted_at.elapsed() < Duration::from_secs(30),
            "the post is still refused after the outage: {second}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
        second = try_post(nodes[1].smtp, "during the outage", "second@client.test").await;
    }

    // Heartbeats resume: every node's row is running with a fresh heartbeat.
    loop {
        let rows = node_rows(&url).await;
        if rows.len() == nodes.len() && rows.values().all(|(s, age)| s == "running" && *age < 1500)
        {
            break;
        }
        assert!(
            restarted_at.elapsed() < Duration::from_secs(15),
            "heartbeats did not resume: {rows:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Nothing lost: both posts reach every member.
    let (first, first_copies) = wait_delivered(
        &world,
        "first@client.test",
        MEMBERS,
        Duration::from_secs(120),
    )
    .await;
    assert_eq!(
        first, MEMBERS,
        "members lost from the post fanned out across the outage"
    );
    let (second_n, second_copies) = wait_delivered(
        &world,
        "second@client.test",
        MEMBERS,
        Duration::from_secs(120),
    )
    .await;
    assert_eq!(
        second_n, MEMBERS,
        "members lost from the post sent during the outage"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (_, first_copies_late) = delivered(&world, "first@client.test");
    let (_, second_copies_late) = delivered(&world, "second@client.test");
    let dups = (first_copies_late - first) + (second_copies_late - second_n);
    // Shard reports resumed: every shard done, and node 0 wrote reports after the restart.
    let shards = pg_rows(
        &url,
        "SELECT state, COUNT(*)::TEXT, SUM(reclaimed_count)::TEXT FROM shards GROUP BY state",
    )
    .await;
    assert_eq!(shards.len(), 1, "{shards:?}");
    assert_eq!(shards[0][0].as_deref(), Some("done"), "{shards:?}");
    assert!(metric(&nodes[0].api(), "herald_shards_reports_total").await > reports_before + 1);
    // The bound: at most every node's in-flight window (connections × batch), sent while a
    // lease changed hands. With the nodes holding back reclaims after an outage (they renew
    // their own leases first), none is expected.
    let window = ips.len() * CONNS_PER_DEST * DOMAINS * BATCH;
    eprintln!(
        "PostgreSQL down {:?}: {during_outage} copies delivered during the outage, the post sent \
         then got {during:?}, the API answered 503 in {api_wait:?}; after: {first} + {second_n} \
         members, {dups} duplicates (window {window}), copies {first_copies}/{second_copies} at \
         first count, shards {shards:?}",
        restarted_at - stopped_at
    );
    assert!(
        dups <= window,
        "{dups} duplicates, beyond the window {window}"
    );
    // No crash loop: every node still runs, none panicked.
    for n in nodes.iter_mut() {
        assert_eq!(n.exited(), None, "{} exited", n.id);
        let log = n.log_text();
        assert!(!log.contains("panicked"), "{} panicked:\n{log}", n.id);
    }
    drop(nodes);
    world.shutdown().await;
}

/// Writes a node row as an older Herald's `Cluster::join` would (running, heartbeat now).
fn old_node(c: &mut postgres::Client, id: &str, schema: i64, state: &str, age_ms: i64) {
    c.execute(
        "INSERT INTO nodes (node_id, address, version, schema_version, started_at_ms,
                            heartbeat_at_ms, state)
         VALUES ($1, $2, '0.0.9', $3, (extract(epoch FROM clock_timestamp()) * 1000)::BIGINT - $4,
                 (extract(epoch FROM clock_timestamp()) * 1000)::BIGINT - $4, $5)",
        &[
            &id,
            &format!("127.0.0.9:{}", 8000 + id.len()),
            &schema,
            &age_ms,
            &state,
        ],
    )
    .expect("node row");
}

fn store_version(url: &str) -> i64 {
    let mut c = postgres::Client::connect(url, postgres::NoTls).expect("connect");
    c.query_one("SELECT version FROM directory_schema", &[])
        .expect("version")
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_node_does_not_migrate_the_store_under_live_older_nodes() {
    let older = herald_directory::SCHEMA_VERSION - 1;
    let url = tokio::task::spawn_blocking(|| PgServer::shared().fresh_database())
        .await
        .expect("task")
        .expect("database");
    // The store as the older Herald left it, used by two live nodes of that version; one
    // dead and one left node of that version too, which must not hold anything up.
    let stop_beating = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let beating = {
        let (url, stop) = (url.clone(), stop_beating.clone());
        tokio::task::spawn_blocking(move || {
            herald_directory::migrate_postgres_up_to(&url, older).expect("older schema");
            let mut c = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
            old_node(&mut c, "old-a", older, "running", 0);
            old_node(&mut c, "old-b", older, "running", 0);
            old_node(&mut c, "old-dead", older, "running", 3_600_000);
            old_node(&mut c, "old-left", older, "left", 0);
            // Their heartbeat tasks: old-a until told to stop (it dies), old-b until it leaves.
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                c.execute(
                    "UPDATE nodes SET heartbeat_at_ms =
                        (extract(epoch FROM clock_timestamp()) * 1000)::BIGINT
                     WHERE node_id IN ('old-a', 'old-b') AND state = 'running'",
                    &[],
                )
                .expect("heartbeat");
                std::thread::sleep(Duration::from_millis(200));
            }
            c.execute(
                "UPDATE nodes SET state = 'left' WHERE node_id = 'old-b'",
                &[],
            )
            .expect("leave");
        })
    };
    let world = World::start(world_config(&[Profile::Normal], false))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut new = Node::configure(dir.path(), "127.0.0.2", "new", &url, &world);
    tokio::time::sleep(Duration::from_millis(500)).await; // the rows are written
    let config = new.config.clone();
    let (ok, out) = tokio::task::spawn_blocking(move || herald_with_config(&config, &["serve"]))
        .await
        .expect("task");
    assert!(!ok, "migrated under live older nodes: {out}");
    eprintln!("the newer node says: {}", out.trim());
    assert!(out.contains("refusing to migrate"), "{out}");
    assert!(
        out.contains(&format!(
            "from schema {older} to schema {}",
            herald_directory::SCHEMA_VERSION
        )),
        "{out}"
    );
    for live in ["old-a (Herald 0.0.9", "old-b (Herald 0.0.9"] {
        assert!(out.contains(live), "{live} not named: {out}");
    }
    assert!(
        out.contains(&format!("schema {older}, at 127.0.0.9:")),
        "{out}"
    );
    assert!(
        !out.contains("old-dead") && !out.contains("old-left"),
        "{out}"
    );
    let u = url.clone();
    let version = tokio::task::spawn_blocking(move || store_version(&u))
        .await
        .expect("task");
    assert_eq!(version, older, "the store was migrated anyway");

    // old-b leaves (a graceful stop), old-a dies (its heartbeat stops): after old-a's dead
    // window (the new node's: 1 s heartbeats, dead after 2) the new node migrates and starts.
    stop_beating.store(true, std::sync::atomic::Ordering::Relaxed);
    beating.await.expect("heartbeat task");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    new.start().await;
    let u = url.clone();
    let version = tokio::task::spawn_blocking(move || store_version(&u))
        .await
        .expect("task");
    assert_eq!(version, herald_directory::SCHEMA_VERSION);
    let rows = node_rows(&url).await;
    assert_eq!(
        rows.get("new").map(|r| r.0.as_str()),
        Some("running"),
        "{rows:?}"
    );
    assert_eq!(new.exited(), None);
    world.shutdown().await;
}
