//! Cluster nodes as an operator runs them: `herald serve` child processes on
//! 127.0.0.x that share one PostgreSQL (`herald-pg-harness`), the simulated world's DNS and
//! receivers, and the shared store read straight with the `postgres` client. One harness for
//! `cluster_e2e`, `shards_e2e`, `knowledge_e2e` and `cluster_faults_e2e`; what differs between
//! them (an admin token, an egress source per node, `[scheduler]` and `[cluster]` keys, the
//! log filter) is a [`NodeOptions`] field.
//!
//! Each node's stderr goes to `<dir>/<id>.log`, appended across restarts so a `kill -9` round
//! keeps every life's log; a node dropped while its test panics prints the end of its log.

use super::binary::{base_config, free_port_on, herald_bin};
use super::{create_list, http_bytes, members_csv, view, wait_healthy, Smtp};
use herald_pg_harness::PgServer;
use herald_sim::World;
use serde_json::json;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};

/// What differs between the cluster test files' nodes.
#[derive(Clone, Debug)]
pub struct NodeOptions {
    /// `[http] admin_token`; none: the tests' loopback client is the administrator.
    pub admin_token: Option<String>,
    /// The node sends from its own address (an egress source), so the world's receivers tell
    /// which node delivered each copy.
    pub own_egress: bool,
    /// The egress source's connection budget (`max_connections`), as an egress IP's is.
    pub egress_max_connections: Option<u32>,
    /// Lines under `[scheduler]`.
    pub scheduler: String,
    /// Lines under `[cluster]`, after `node_id` and `heartbeat_interval_secs = 1`.
    pub cluster: String,
    /// No `[store]` and no `[cluster]`: the node's own SQLite directory (the embedded default,
    /// to measure the cluster against).
    pub embedded: bool,
    /// The child's `RUST_LOG`.
    pub rust_log: String,
    /// `secret` in the node's config; `None`: no `secret` at all (the node takes the
    /// cluster's from the shared store).
    pub secret: Option<String>,
}

impl Default for NodeOptions {
    fn default() -> Self {
        NodeOptions {
            admin_token: None,
            own_egress: true,
            egress_max_connections: None,
            scheduler: String::new(),
            cluster: "dead_after_intervals = 2\n".into(),
            embedded: false,
            rust_log: "warn".into(),
            secret: Some(super::SECRET.into()),
        }
    }
}

/// One `herald serve` node: its config file, addresses, log, the child process.
pub struct Node {
    pub id: String,
    pub ip: IpAddr,
    pub config: PathBuf,
    pub log: PathBuf,
    pub http: SocketAddr,
    pub smtp: SocketAddr,
    rust_log: String,
    child: Option<Child>,
}

impl Node {
    /// Writes `<dir>/<id>.toml` for a node on `ip` with its data in `<dir>/<id>`.
    pub fn configure(
        dir: &Path,
        ip: &str,
        id: &str,
        url: &str,
        world: &World,
        opts: &NodeOptions,
    ) -> Node {
        let http: SocketAddr = format!("{ip}:{}", free_port_on(ip)).parse().expect("addr");
        let smtp: SocketAddr = format!("{ip}:{}", free_port_on(ip)).parse().expect("addr");
        let mut toml = base_config(&dir.join(id), ip, smtp, http, world);
        let secret_line = format!("secret = \"{}\"\n", super::SECRET);
        toml = toml.replace(
            &secret_line,
            &opts
                .secret
                .as_ref()
                .map(|s| format!("secret = \"{s}\"\n"))
                .unwrap_or_default(),
        );
        if opts.own_egress {
            toml.push_str(&format!(
                "default_egress_pool = \"own\"\n[[delivery.egress]]\nname = \"self\"\n\
                 source = \"{ip}\"\n"
            ));
            if let Some(max) = opts.egress_max_connections {
                toml.push_str(&format!("max_connections = {max}\n"));
            }
            toml.push_str("[[delivery.egress_pool]]\nname = \"own\"\nsources = [\"self\"]\n");
        }
        if let Some(token) = &opts.admin_token {
            toml.push_str(&format!("[http]\nadmin_token = \"{token}\"\n"));
        }
        toml.push_str(&format!("[scheduler]\n{}\n", opts.scheduler));
        if !opts.embedded {
            toml.push_str(&format!(
                "[store]\nurl = \"{url}\"\n[cluster]\nnode_id = \"{id}\"\n\
                 heartbeat_interval_secs = 1\n{}\n",
                opts.cluster
            ));
        }
        let config = dir.join(format!("{id}.toml"));
        std::fs::write(&config, toml).expect("write config");
        Node {
            id: id.into(),
            ip: ip.parse().expect("ip"),
            config,
            log: dir.join(format!("{id}.log")),
            http,
            smtp,
            rust_log: opts.rust_log.clone(),
            child: None,
        }
    }

    pub fn api(&self) -> String {
        format!("http://{}", self.http)
    }

    /// Starts `herald serve` and waits until it answers its health check.
    pub async fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log file");
        let child = Command::new(herald_bin())
            .args(["serve", "--config"])
            .arg(&self.config)
            .env("RUST_LOG", &self.rust_log)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn herald serve");
        self.child = Some(child);
        wait_healthy(&self.api()).await;
    }

    /// SIGKILL, as a crash or the OOM killer would: no drain, no goodbye to the store.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().expect("SIGKILL");
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait: a graceful stop must exit 0.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
            let status = c.wait().expect("wait");
            assert!(status.success(), "graceful stop: {status:?}");
        }
    }

    /// The process's exit status if it has exited (a crash, a refusal), None while it runs.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Lines of its log that contain `needle`.
    pub fn log_lines(&self, needle: &str) -> Vec<String> {
        self.log_text()
            .lines()
            .filter(|l| l.contains(needle))
            .map(str::to_string)
            .collect()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill9();
        if std::thread::panicking() {
            let log = self.log_text();
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            eprintln!("--- end of {}'s log ---", self.id);
            for l in tail.into_iter().rev() {
                eprintln!("{l}");
            }
        }
    }
}

/// Starts one node per address of `ips` (ids node-0, node-1, …) on the store at `url`.
pub async fn start_nodes(
    dir: &Path,
    url: &str,
    world: &World,
    ips: &[&str],
    opts: &NodeOptions,
) -> Vec<Node> {
    let mut nodes = Vec::new();
    for (i, ip) in ips.iter().enumerate() {
        let mut n = Node::configure(dir, ip, &format!("node-{i}"), url, world, opts);
        n.start().await;
        nodes.push(n);
    }
    nodes
}

/// Makes `list` (anyone may post) through `api` and imports `members` members spread over
/// `domains` of the world's domains.
pub async fn list_with_members(api: &str, list: &str, members: usize, domains: usize) {
    create_list(api, list, json!({"posting_policy": "anyone"})).await;
    let (status, report) = http_bytes(
        &format!("{api}/api/v1/lists/{list}/import"),
        members_csv(members, domains).into_bytes(),
    )
    .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(
        view::<herald_api_types::ImportReport>("import", &report).added,
        members as u64
    );
}

/// A fresh database on the shared test PostgreSQL server.
pub async fn pg_url() -> String {
    tokio::task::spawn_blocking(|| PgServer::shared().fresh_database())
        .await
        .expect("task")
        .expect("database")
}

/// Runs `sql` on the shared store and returns the rows as text columns.
pub async fn pg_rows(url: &str, sql: &str) -> Vec<Vec<Option<String>>> {
    let (url, sql) = (url.to_string(), sql.to_string());
    tokio::task::spawn_blocking(move || {
        let mut c = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
        c.simple_query(&sql)
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

/// Runs the statements `sql` on the shared store.
pub async fn pg_exec(url: &str, sql: &str) {
    let (url, sql) = (url.to_string(), sql.to_string());
    tokio::task::spawn_blocking(move || {
        let mut c = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
        c.batch_execute(&sql).expect("statement");
    })
    .await
    .expect("task")
}

/// A post to `list` over SMTP at `node`, with a Message-ID when given; asserts the 250.
pub async fn post(node: &Node, list: &str, subject: &str, message_id: Option<&str>) {
    let (mut c, _) = Smtp::connect(node.smtp).await;
    c.cmd("EHLO client.test").await;
    let id = message_id
        .map(|m| format!("Message-ID: <{m}>\r\n"))
        .unwrap_or_default();
    let body = format!(
        "From: alice@client.test\r\nTo: {list}\r\nSubject: {subject}\r\n{id}\r\nhello all\r\n"
    );
    let reply = c
        .send_mail("alice@client.test", &[list], body.as_bytes())
        .await;
    assert!(reply.starts_with("250"), "{reply}");
}

/// Copies accepted by the world, per sending node address.
pub fn copies_by_peer(world: &World) -> BTreeMap<IpAddr, u64> {
    let mut out = BTreeMap::new();
    for c in world.recorder().snapshot().copies {
        if let Some(p) = c.peer {
            *out.entry(p).or_default() += 1;
        }
    }
    out
}

/// Shards held (leased) per node id, and the copies reported done for each owner.
pub async fn leases(url: &str) -> (BTreeMap<String, u64>, BTreeMap<String, u64>) {
    leases_where(url, "TRUE").await
}

/// [`leases`] of the shards that satisfy the SQL condition `cond` (e.g. one post's).
pub async fn leases_where(url: &str, cond: &str) -> (BTreeMap<String, u64>, BTreeMap<String, u64>) {
    let rows = pg_rows(
        url,
        &format!(
            "SELECT owner_node, state, copies_done::TEXT FROM shards
             WHERE owner_node IS NOT NULL AND ({cond})"
        ),
    )
    .await;
    let (mut leased, mut reported) = (BTreeMap::new(), BTreeMap::new());
    for r in rows {
        let owner = r[0].clone().expect("owner");
        if r[1].as_deref() == Some("leased") {
            *leased.entry(owner.clone()).or_default() += 1;
        }
        *reported.entry(owner).or_default() +=
            r[2].as_deref().unwrap_or("0").parse::<u64>().expect("n");
    }
    (leased, reported)
}
