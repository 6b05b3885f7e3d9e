//! `herald serve` on PostgreSQL (`[store] url = "postgres://…"`): a real
//! PostgreSQL server started by this test (`herald-pg-harness`), Herald in-process on it with
//! the simulated world. A list is created over the API, members are added, a post is fanned
//! out and delivered, a member on a refusing domain gets a bounce score, and a second Herald
//! — a fresh data directory, as another node would have — finds all of it in PostgreSQL.
//! Nothing of the directory is written to the data directory.

use crate::support;

use herald_api_types::MemberDetail;
use herald_pg_harness::PgServer;
use herald_sim::{Profile, World};
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use support::*;

const LIST: &str = "dev@lists.test";

async fn send(server: &TestServer, from: &str, rcpts: &[&str], msg: &str) -> String {
    let (mut c, _) = Smtp::connect(server.smtp).await;
    c.cmd("EHLO client.test").await;
    let r = c.send_mail(from, rcpts, msg.as_bytes()).await;
    c.cmd("QUIT").await;
    r
}

async fn wait_for_http(url: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let (st, v) = http("GET", url, None).await;
        if st == 200 && ok(&v) {
            return v;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "timed out on {url}: {st} {v}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Rows of `table` in the shared database, read with a client of our own (blocking, so off
/// the runtime's threads).
async fn pg_count(url: &str, table: &str) -> i64 {
    let (url, sql) = (url.to_string(), format!("SELECT COUNT(*) FROM {table}"));
    tokio::task::spawn_blocking(move || {
        let mut c = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
        c.query_one(&sql, &[]).expect("count").get::<_, i64>(0)
    })
    .await
    .expect("task")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_on_postgresql_delivers_scores_bounces_and_survives_a_restart() {
    let url = tokio::task::spawn_blocking(|| PgServer::shared().fresh_database())
        .await
        .expect("task")
        .expect("database");
    // d0.test accepts, d1.test answers 550 5.1.1 for zed: zed's copy fails for good.
    let unknown = Profile::UnknownUsers {
        users: vec!["zed".into()],
        fraction: 0.0,
    };
    let world = World::start(world_config(&[Profile::Normal, unknown], true))
        .await
        .expect("world");
    let node1 = tempfile::tempdir().expect("tempdir");
    let mut config = server_config(&world, node1.path().to_path_buf());
    config.store.url = Some(url.clone());
    let server = TestServer::start(config.clone()).await;
    create_list(&server.api, LIST, json!({"posting_policy": "anyone"})).await;
    add_members(
        &server.api,
        LIST,
        &["bob@d0.test", "carol@d0.test", "zed@d1.test"],
    )
    .await;
    assert_eq!(pg_count(&url, "lists").await, 1);
    assert_eq!(pg_count(&url, "members").await, 3);
    assert!(
        !node1.path().join("herald.db").exists(),
        "the directory lives in PostgreSQL, not in the data directory"
    );

    let post = "From: alice@elsewhere.test\r\nTo: dev@lists.test\r\nSubject: hello\r\n\
                Message-ID: <pg1@elsewhere.test>\r\n\r\nbody\r\n";
    let reply = send(&server, "alice@elsewhere.test", &[LIST], post).await;
    assert!(reply.starts_with("250"), "{reply}");
    let rec = world.recorder();
    let start = Instant::now();
    while rec.snapshot().accepted < 2 {
        assert!(start.elapsed() < Duration::from_secs(30), "2 copies");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // zed's refused copy is scored on the list (a hard failure counts 1.0).
    let detail = wait_for_http(
        &format!(
            "{}/api/v1/lists/{LIST}/members/zed@d1.test/detail",
            server.api
        ),
        |v| view::<MemberDetail>("detail", v).bounce_score.is_some(),
    )
    .await;
    let detail: MemberDetail = view("detail", &detail);
    assert_eq!(
        detail.bounce_score.map(|b| b.score),
        Some(1.0),
        "{detail:?}"
    );
    wait_settled(&server.api, Duration::from_secs(30)).await;
    let snap = rec.snapshot();
    assert_eq!(snap.copies_for("bob@d0.test").len(), 1);
    assert_eq!(snap.copies_for("carol@d0.test").len(), 1);
    assert_eq!(snap.duplicates, 0);
    assert_eq!(pg_count(&url, "bounce_scores").await, 1);
    // `herald backup` cannot copy a directory that is not a file here: refused, saying why.
    let (status, body) = http("GET", &format!("{}/api/v1/backup", server.api), None).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.to_string().contains("pg_dump"), "{body}");
    server.stop().await;

    // Another node: its own empty data directory, the same database.
    let node2 = tempfile::tempdir().expect("tempdir");
    let mut config2 = server_config(&world, node2.path().to_path_buf());
    config2.store = config.store.clone();
    let server = TestServer::start(config2).await;
    let members = wait_for_http(
        &format!("{}/api/v1/lists/{LIST}/members", server.api),
        |_| true,
    )
    .await;
    let text = members.to_string();
    for m in ["bob@d0.test", "carol@d0.test", "zed@d1.test"] {
        assert!(text.contains(m), "{m} kept: {text}");
    }
    let detail = wait_for_http(
        &format!(
            "{}/api/v1/lists/{LIST}/members/zed@d1.test/detail",
            server.api
        ),
        |_| true,
    )
    .await;
    let detail: MemberDetail = view("detail", &detail);
    assert_eq!(detail.bounce_score.map(|b| b.score), Some(1.0));
    assert!(!node2.path().join("herald.db").exists());
    server.stop().await;
    world.shutdown().await;
}

/// A PostgreSQL store that cannot be reached stops the start with the reason; Herald never
/// falls back to a local file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_store_stops_the_start_with_the_reason() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let world = World::start(world_config(&[Profile::Normal], false))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = server_config(&world, dir.path().to_path_buf());
    config.store.url = Some(format!(
        "postgres://herald:secret@127.0.0.1:{port}/herald?connect_timeout=2"
    ));
    config.server.user.clear();
    config.server.allow_root = true;
    let listeners = herald_server::Listeners::bind_ephemeral()
        .await
        .expect("bind");
    let shutdown = tokio_util::sync::CancellationToken::new();
    let r = tokio::time::timeout(
        Duration::from_secs(30),
        herald_server::run(config, listeners, shutdown),
    )
    .await
    .expect("the start gives up");
    let e = r.expect_err("no server on an unreachable store");
    assert!(
        matches!(
            e,
            herald_server::ServerError::Directory(herald_directory::DirectoryError::PgOpen { .. })
        ),
        "{e}"
    );
    assert!(!e.to_string().contains("secret"), "{e}");
    assert!(!dir.path().join("herald.db").exists());
    world.shutdown().await;
}

/// `herald export` and `herald import` as an operator runs them, with `[store] url` in the
/// configuration file: the commands are async and the PostgreSQL client blocks, so this is
/// also the check that they keep it off the runtime's threads. One node's directory is
/// exported and imported into another database; the export of that one is the same.
#[test]
fn export_and_import_run_on_postgresql() {
    let server = PgServer::shared();
    let (one, two) = (
        server.fresh_database().expect("db"),
        server.fresh_database().expect("db"),
    );
    let d = herald_directory::Directory::open_postgres(&one, 2).expect("open");
    let list = d
        .create_list(
            &herald_types::Address::parse(LIST).expect("address"),
            &herald_types::ListSettings::default(),
        )
        .expect("list");
    let members: Vec<herald_directory::NewMember> = ["ann@d0.test", "Bob@D0.test", "cy@d1.test"]
        .iter()
        .map(|a| herald_directory::NewMember::new(herald_types::Address::parse(a).expect("a")))
        .collect();
    assert_eq!(d.add_members(list.id, &members).expect("add"), 3);
    drop(d);
    let tmp = tempfile::tempdir().expect("tempdir");
    let config = |name: &str, url: &str| {
        let path = tmp.path().join(format!("{name}.toml"));
        let data = tmp.path().join(name);
        std::fs::write(
            &path,
            format!(
                "data_dir = {:?}\n[store]\nurl = {url:?}\n",
                data.display().to_string()
            ),
        )
        .expect("config");
        path
    };
    let (cfg1, cfg2) = (config("one", &one), config("two", &two));
    let run = |cfg: &std::path::Path, args: &[&str]| {
        let (ok, out) = support::binary::herald_with_config(cfg, args);
        assert!(ok, "herald {args:?} failed:\n{out}");
        out
    };
    let out1 = tmp.path().join("export1");
    let said = run(&cfg1, &["export", "herald", out1.to_str().expect("utf-8")]);
    assert!(said.contains("exported 1 lists, 3 members"), "{said}");
    run(
        &cfg2,
        &["import", "herald", out1.to_str().expect("utf-8"), "--apply"],
    );
    let out2 = tmp.path().join("export2");
    run(&cfg2, &["export", "herald", out2.to_str().expect("utf-8")]);
    let members = |dir: &std::path::Path| {
        std::fs::read_to_string(dir.join("members/0001.jsonl")).expect("members file")
    };
    let first = members(&out1);
    assert_eq!(first.lines().count(), 3, "{first}");
    // Addresses keep their spelling (domains are stored lower-case by `Address`).
    assert!(first.contains("Bob@d0.test"), "{first}");
    assert_eq!(first, members(&out2));
    assert!(!tmp.path().join("two/herald.db").exists());
}

/// `herald doctor` says whether the PostgreSQL directory answers, without creating anything
/// in it, and names an unreachable one as an error (without its password).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_checks_the_store() {
    let url = tokio::task::spawn_blocking(|| PgServer::shared().fresh_database())
        .await
        .expect("task")
        .expect("database");
    let world = World::start(world_config(&[Profile::Normal], false))
        .await
        .expect("world");
    let tmp = tempfile::tempdir().expect("tempdir");
    let dead = format!(
        "postgres://herald:secret@127.0.0.1:{}/herald?connect_timeout=2",
        support::binary::free_port()
    );
    for (name, store, want) in [
        ("up", url.as_str(), "no directory schema yet"),
        ("down", dead.as_str(), "cannot reach the directory"),
    ] {
        let cfg = tmp.path().join(format!("{name}.toml"));
        std::fs::write(
            &cfg,
            format!(
                "data_dir = {:?}\n[dns]\nnameservers = [\"{}\"]\n[store]\nurl = {store:?}\n",
                tmp.path().join(name).display().to_string(),
                world.dns_addr()
            ),
        )
        .expect("config");
        let (_, out) = tokio::task::spawn_blocking(move || {
            support::binary::herald_with_config(
                &cfg,
                &["doctor", "nothing.test", "--ip", "127.0.0.5"],
            )
        })
        .await
        .expect("task");
        let line = out
            .lines()
            .find(|l| l.contains(" store "))
            .unwrap_or_else(|| panic!("no store line:\n{out}"));
        assert!(line.contains(want), "{line}");
        assert!(!out.contains("secret"), "{out}");
    }
    assert_eq!(
        pg_count(&url, "pg_tables WHERE schemaname = 'public'").await,
        0
    );
    world.shutdown().await;
}
