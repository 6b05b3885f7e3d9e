//! Cluster nodes, with the real binary as an operator runs it: two `herald
//! serve` processes on 127.0.0.2 and 127.0.0.3 share one PostgreSQL (`herald-pg-harness`);
//! both list themselves and each other in `herald status` (the CLI, with the admin token, as
//! an operator outside the machine would); a post accepted over SMTP by the second node is
//! delivered; after `kill -9` of one, its heartbeat goes stale and status shows it dead, and
//! `/metrics` counts it; a graceful stop marks the other `left`. A node whose binary's schema
//! version differs from the store's refuses to start, saying so.

use crate::support;

use herald_sim::{Profile, World};
use serde_json::json;
use std::time::{Duration, Instant};
use support::binary::herald_with_config;
use support::cluster::{pg_url, Node, NodeOptions};
use support::*;

const TOKEN: &str = "cluster-admin-token-0123456789";

/// Two nodes of this file: an admin token, no egress source of their own.
fn options() -> NodeOptions {
    NodeOptions {
        admin_token: Some(TOKEN.into()),
        own_egress: false,
        ..NodeOptions::default()
    }
}

/// `herald status` against `api` with the admin token: the node lines, by node id.
fn status_lines(api: &str) -> Vec<String> {
    let out = herald_cli(api, Some(TOKEN), &["status"]);
    out.lines()
        .skip_while(|l| *l != "nodes:")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(|l| l.trim().to_string())
        .collect()
}

fn line_of<'a>(lines: &'a [String], id: &str) -> &'a str {
    lines
        .iter()
        .find(|l| l.split_whitespace().next() == Some(id))
        .unwrap_or_else(|| panic!("{id} not in status: {lines:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_share_a_store_see_each_other_and_a_killed_one_goes_dead() {
    let url = pg_url().await;
    let world = World::start(world_config(&[Profile::Normal], true))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut a = Node::configure(dir.path(), "127.0.0.2", "node-a", &url, &world, &options());
    let mut b = Node::configure(dir.path(), "127.0.0.3", "node-b", &url, &world, &options());
    a.start().await;
    b.start().await;

    let lines = status_lines(&a.api());
    assert_eq!(lines.len(), 2, "{lines:?}");
    let la = line_of(&lines, "node-a");
    assert!(
        la.contains("127.0.0.2:") && la.contains(" alive ") && la.contains("(this node)"),
        "{la}"
    );
    let lb = line_of(&lines, "node-b");
    assert!(
        lb.contains(&b.http.to_string()) && lb.contains(" alive "),
        "{lb}"
    );
    assert!(!lb.contains("(this node)"), "{lb}");
    // The other node says the same of itself.
    assert!(line_of(&status_lines(&b.api()), "node-b").contains("(this node)"));

    // Either node accepts posts: a list made through node A, a post sent to node B over SMTP.
    let list = "team@lists.test";
    let admin = reqwest::Client::new();
    let r = admin
        .post(format!("{}/api/v1/lists", a.api()))
        .bearer_auth(TOKEN)
        .json(&json!({"address": list, "settings": {"posting_policy": "anyone"}}))
        .send()
        .await
        .expect("create list");
    assert_eq!(r.status(), 201);
    for m in ["bob@d0.test", "carol@d0.test"] {
        let r = admin
            .post(format!("{}/api/v1/lists/{list}/members", a.api()))
            .bearer_auth(TOKEN)
            .json(&json!({ "address": m }))
            .send()
            .await
            .expect("add member");
        assert_eq!(r.status(), 201);
    }
    let (mut c, _) = Smtp::connect(b.smtp).await;
    c.cmd("EHLO client.test").await;
    let reply = c
        .send_mail(
            "alice@client.test",
            &[list],
            b"From: alice@client.test\r\nTo: team@lists.test\r\nSubject: hi\r\n\r\nhello\r\n",
        )
        .await;
    assert!(reply.starts_with("250"), "{reply}");
    assert!(
        world.recorder().wait_for(2, Duration::from_secs(30)).await,
        "the post accepted by node B was not delivered"
    );

    // kill -9 node B: its row stays `running`, its heartbeat goes stale, node A calls it dead.
    b.kill9();
    let started = Instant::now();
    loop {
        let lines = status_lines(&a.api());
        let lb = line_of(&lines, "node-b").to_string();
        if lb.contains(" dead ") {
            assert!(line_of(&lines, "node-a").contains(" alive "), "{lines:?}");
            break;
        }
        assert!(lb.contains(" alive "), "{lb}");
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "B never went dead: {lb}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let m = |s: &str| format!("herald_cluster_nodes{{state=\"{s}\"}}");
    let metrics = reqwest::Client::new()
        .get(format!("{}/metrics", a.api()))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("body");
    assert!(metrics.contains(&format!("{} 1", m("alive"))), "{metrics}");
    assert!(metrics.contains(&format!("{} 1", m("dead"))), "{metrics}");

    // A graceful stop marks the row left; the status read straight from the store says so.
    a.stop();
    let rows = tokio::task::spawn_blocking(move || {
        let mut c = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
        c.query("SELECT node_id, state FROM nodes ORDER BY node_id", &[])
            .expect("rows")
            .iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1)))
            .collect::<Vec<_>>()
    })
    .await
    .expect("task");
    assert_eq!(
        rows,
        [
            ("node-a".to_string(), "left".to_string()),
            ("node-b".to_string(), "running".to_string())
        ]
    );
    world.shutdown().await;
}

/// A store migrated by a newer Herald (schema version above this binary's): `herald serve`
/// refuses to start, naming both versions, and writes no node row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_another_schema_version_refuses_to_join() {
    let url = pg_url().await;
    let world = World::start(world_config(&[Profile::Normal], false))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut a = Node::configure(dir.path(), "127.0.0.2", "node-a", &url, &world, &options());
    a.start().await;
    a.stop();
    let newer = herald_directory::SCHEMA_VERSION + 1;
    let u = url.clone();
    tokio::task::spawn_blocking(move || {
        let mut c = postgres::Client::connect(&u, postgres::NoTls).expect("connect");
        c.execute("UPDATE directory_schema SET version = $1", &[&newer])
            .expect("bump");
        c.execute("DELETE FROM nodes", &[]).expect("clear");
    })
    .await
    .expect("task");
    let b = Node::configure(dir.path(), "127.0.0.3", "node-b", &url, &world, &options());
    let (ok, out) = tokio::task::spawn_blocking(move || herald_with_config(&b.config, &["serve"]))
        .await
        .expect("task");
    assert!(!ok, "started on a newer store: {out}");
    assert!(out.contains(&format!("schema version {newer}")), "{out}");
    assert!(
        out.contains(&herald_directory::SCHEMA_VERSION.to_string()),
        "{out}"
    );
    let rows = tokio::task::spawn_blocking(move || {
        let mut c = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
        c.query_one("SELECT COUNT(*) FROM nodes", &[])
            .expect("count")
            .get::<_, i64>(0)
    })
    .await
    .expect("task");
    assert_eq!(rows, 0, "a refused node wrote its row");
    world.shutdown().await;
}

/// The nodes of the two tests below: no admin token (the loopback client administers), each
/// node sending from its own address.
fn plain_options(secret: Option<&str>) -> NodeOptions {
    NodeOptions {
        secret: secret.map(str::to_string),
        ..NodeOptions::default()
    }
}

const RACE_LIST: &str = "race@lists.test";
const RACE_MEMBERS: usize = 12;
const RACE_ROUNDS: usize = 12;

/// One message handed to `node` with its DATA's end sent once `barrier` opens, as a sending
/// MTA that delivers to every MX of the list domain at once (or retries on another MX the
/// moment its first connection stalled) would; the reply to the end of DATA.
async fn post_at_barrier(
    smtp: std::net::SocketAddr,
    message_id: String,
    barrier: std::sync::Arc<tokio::sync::Barrier>,
) -> String {
    let (mut c, _) = Smtp::connect(smtp).await;
    c.cmd("EHLO client.test").await;
    assert!(c
        .cmd("MAIL FROM:<alice@client.test>")
        .await
        .starts_with("250"));
    assert!(c
        .cmd(&format!("RCPT TO:<{RACE_LIST}>"))
        .await
        .starts_with("250"));
    assert!(c.cmd("DATA").await.starts_with("354"));
    let body = format!(
        "From: alice@client.test\r\nTo: {RACE_LIST}\r\nSubject: once\r\n\
         Message-ID: <{message_id}>\r\n\r\nhello all\r\n.\r\n"
    );
    barrier.wait().await;
    c.send_raw(body.as_bytes()).await;
    c.reply().await
}

/// The same Message-ID posted to three nodes at the same instant, round after round: every
/// node answers 250 (the losers as for a retry), and each member receives each round's post
/// exactly once. Before the claim in the shared store, two or three nodes each fanned it out.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_same_post_at_three_nodes_at_once_reaches_each_member_once() {
    let url = pg_url().await;
    let world = World::start(world_config(&[Profile::Normal, Profile::Normal], false))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let ips = ["127.0.0.2", "127.0.0.3", "127.0.0.4"];
    let nodes =
        support::cluster::start_nodes(dir.path(), &url, &world, &ips, &plain_options(None)).await;
    support::cluster::list_with_members(&nodes[0].api(), RACE_LIST, RACE_MEMBERS, 2).await;
    for round in 0..RACE_ROUNDS {
        let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(nodes.len()));
        let tasks: Vec<_> = nodes
            .iter()
            .map(|n| {
                let mid = format!("race-{round}@client.test");
                tokio::spawn(post_at_barrier(n.smtp, mid, barrier.clone()))
            })
            .collect();
        for t in tasks {
            let reply = t.await.expect("task");
            assert!(reply.starts_with("250"), "round {round}: {reply}");
        }
    }
    // Every member has every round's post, then every node is idle: nothing more will come.
    let started = Instant::now();
    loop {
        let snap = world.recorder().snapshot();
        let mut have = std::collections::BTreeSet::new();
        for c in &snap.copies {
            have.insert((c.recipient.to_string(), c.message_id.clone()));
        }
        if have.len() >= RACE_MEMBERS * RACE_ROUNDS {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "only {} of {} (member, post) pairs delivered",
            have.len(),
            RACE_MEMBERS * RACE_ROUNDS
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for n in &nodes {
        wait_settled(&n.api(), Duration::from_secs(60)).await;
    }
    let snap = world.recorder().snapshot();
    let mut per_round = vec![0usize; RACE_ROUNDS];
    let mut seen = std::collections::BTreeSet::new();
    for c in &snap.copies {
        let mid = c.message_id.as_deref().unwrap_or("");
        let round: usize = mid
            .trim_start_matches("<race-")
            .split('@')
            .next()
            .and_then(|r| r.parse().ok())
            .unwrap_or_else(|| panic!("a copy of something else: {mid}"));
        if !seen.insert((c.recipient.to_string(), round)) {
            per_round[round] += 1;
        }
    }
    let total: usize = per_round.iter().sum();
    eprintln!("duplicate copies per round: {per_round:?} (total {total})");
    assert_eq!(total, 0, "duplicate copies per round: {per_round:?}");
    world.shutdown().await;
}

/// The path of the one-click unsubscribe link in `member`'s copy.
fn unsubscribe_path(world: &World, member: &str) -> String {
    let snap = world.recorder().snapshot();
    let copy = snap.copies_for(member);
    let raw = copy
        .first()
        .and_then(|c| c.message.clone())
        .unwrap_or_else(|| panic!("no copy for {member}"));
    let text = String::from_utf8_lossy(&raw).to_string();
    let url = text
        .lines()
        .find(|l| l.starts_with("List-Unsubscribe:"))
        .and_then(|l| l.split('<').nth(1))
        .and_then(|s| s.split('>').next())
        .unwrap_or_else(|| panic!("no List-Unsubscribe in {text}"));
    let path = url.splitn(4, '/').nth(3).expect("url path");
    format!("/{path}")
}

/// Nodes configured without a `secret` share the cluster's (kept in the store by the first
/// node): an unsubscribe link minted by one node works at every node, as it must behind one
/// address. A node configured with another secret refuses to start, saying why, and joins
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_minted_by_one_node_works_on_every_node() {
    let url = pg_url().await;
    let world = World::start(world_config(&[Profile::Normal], true))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let ips = ["127.0.0.2", "127.0.0.3", "127.0.0.4"];
    let nodes =
        support::cluster::start_nodes(dir.path(), &url, &world, &ips, &plain_options(None)).await;
    let list = "links@lists.test";
    support::cluster::list_with_members(&nodes[0].api(), list, 3, 1).await;
    // Node 0 fans this post out itself: every link in it is node 0's.
    support::cluster::post(&nodes[0], list, "links", Some("links-1@client.test")).await;
    wait_complete_all(&world, 3).await;
    for (i, n) in nodes.iter().enumerate() {
        let member = format!("m{i}@d0.test");
        let path = unsubscribe_path(&world, &member);
        let (status, page) = http_form(&format!("{}{path}", n.api())).await;
        assert_eq!(status, 200, "{member}'s link at {}: {page}", n.id);
    }
    let (_, members) = http(
        "GET",
        &format!("{}/api/v1/lists/{list}/members", nodes[1].api()),
        None,
    )
    .await;
    assert_eq!(
        members.as_array().map(Vec::len).unwrap_or(usize::MAX),
        0,
        "every member left: {members}"
    );

    let odd = Node::configure(
        dir.path(),
        "127.0.0.5",
        "node-odd",
        &url,
        &world,
        &plain_options(Some("another-secret-0123456789abcdef")),
    );
    let (ok, out) =
        tokio::task::spawn_blocking(move || herald_with_config(&odd.config, &["serve"]))
            .await
            .expect("task");
    assert!(!ok, "started with another secret: {out}");
    assert!(out.contains("differs from the cluster's"), "{out}");
    let rows =
        support::cluster::pg_rows(&url, "SELECT node_id FROM nodes WHERE node_id = 'node-odd'")
            .await;
    assert!(rows.is_empty(), "a refused node joined: {rows:?}");
    world.shutdown().await;
}

/// Waits until the world accepted at least `n` copies.
async fn wait_complete_all(world: &World, n: usize) {
    let started = Instant::now();
    while world.recorder().snapshot().copies.len() < n {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "fewer than {n} copies delivered"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A one-click unsubscribe (RFC 8058): POST `List-Unsubscribe=One-Click` to `url`.
async fn http_form(url: &str) -> (u16, String) {
    let resp = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("List-Unsubscribe=One-Click")
        .send()
        .await
        .expect("request");
    let status = resp.status().as_u16();
    (status, resp.text().await.unwrap_or_default())
}
