//! Cluster nodes (issue 17 item 2), with the real binary as an operator runs it: two `herald
//! serve` processes on 127.0.0.2 and 127.0.0.3 share one PostgreSQL (`herald-pg-harness`);
//! both list themselves and each other in `herald status` (the CLI, with the admin token, as
//! an operator outside the machine would); a post accepted over SMTP by the second node is
//! delivered; after `kill -9` of one, its heartbeat goes stale and status shows it dead, and
//! `/metrics` counts it; a graceful stop marks the other `left`. A node whose binary's schema
//! version differs from the store's refuses to start, saying so.

mod support;

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
