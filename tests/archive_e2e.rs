//! End to end for the list archive (issue 14): posts arrive over SMTP from the simulated
//! world's side, are fanned out and archived once — also when a post is delivered to Herald
//! again and across a restart — and the operator finds them with the real `herald archive`
//! binary: months, a month's messages, the thread with its reply, full-text search; a message
//! removed by the administrator stays removed after the archive is exported and re-imported.

mod support;

use herald_sim::{Profile, World};
use serde_json::json;
use std::path::Path;
use std::time::Duration;
use support::*;

const LIST: &str = "dev@lists.test";
const MEMBERS: usize = 20;

fn post(mid: &str, subject: &str, extra: &str, body: &str) -> Vec<u8> {
    format!(
        "From: Ann <ann@outside.test>\r\nTo: {LIST}\r\nSubject: {subject}\r\nMessage-ID: <{mid}>\r\n\
         {extra}Date: Tue, 24 Nov 2026 10:00:00 +0000\r\nMIME-Version: 1.0\r\n\
         Content-Type: text/plain; charset=us-ascii\r\n\r\n{body}\r\n"
    )
    .into_bytes()
}

/// Runs `herald --config <cfg> archive …` and returns stdout (asserting success).
fn archive_cli(cfg: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .arg("--config")
        .arg(cfg)
        .arg("archive")
        .args(args)
        .output()
        .expect("run herald");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "herald archive {args:?}: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// The message count `herald archive ls` shows for the list.
fn archived_count(cfg: &Path) -> u64 {
    let ls = archive_cli(cfg, &["ls"]);
    ls.lines()
        .find(|l| l.starts_with(LIST))
        .and_then(|l| l.split_whitespace().nth(2))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{LIST} not in archive ls:\n{ls}"))
}

async fn send(server: &TestServer, message: &[u8]) -> String {
    let (mut smtp, _) = Smtp::connect(server.smtp).await;
    smtp.cmd("EHLO client.outside.test").await;
    let reply = smtp.send_mail("ann@outside.test", &[LIST], message).await;
    smtp.cmd("QUIT").await;
    reply
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn posts_are_archived_once_listed_threaded_searchable_and_removal_sticks() {
    let world = World::start(world_config(&[Profile::Normal, Profile::Normal], true))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("herald.toml");
    std::fs::write(
        &cfg,
        format!("data_dir = {:?}\n", dir.path().display().to_string()),
    )
    .expect("config");
    let server = TestServer::start(server_config(&world, dir.path().to_path_buf())).await;
    let api = server.api.clone();
    create_list(
        &api,
        LIST,
        json!({"display_name": "Dev", "posting_policy": "anyone"}),
    )
    .await;
    let (status, r) = http_bytes(
        &format!("{api}/api/lists/{LIST}/import"),
        members_csv(MEMBERS, 2).into_bytes(),
    )
    .await;
    assert_eq!(status, 200, "{r}");

    let root = post(
        "root@outside.test",
        "Release plan",
        "",
        "We ship the zanzibar release friday.",
    );
    let reply = post(
        "reply@outside.test",
        "Re: Release plan",
        "In-Reply-To: <root@outside.test>\r\nReferences: <root@outside.test>\r\n",
        "Friday works.\r\nFrom now on we freeze.",
    );
    let other = post("other@outside.test", "Lunch", "", "Pizza at noon.");
    for m in [&root, &reply, &other] {
        let id = queued_id(&send(&server, m).await);
        wait_complete(&api, &id, Duration::from_secs(60)).await;
    }
    // The same post delivered to Herald again (a sender's retry after a lost 250).
    let again = send(&server, &root).await;
    assert!(again.starts_with("250"), "{again}");
    wait_settled(&api, Duration::from_secs(60)).await;
    server.stop().await;

    assert_eq!(archived_count(&cfg), 3);
    let months = archive_cli(&cfg, &["show", LIST]);
    assert!(months.contains("2026-11        3"), "{months}");
    let month = archive_cli(&cfg, &["show", LIST, "--month", "2026-11"]);
    for mid in [
        "root@outside.test",
        "reply@outside.test",
        "other@outside.test",
    ] {
        assert!(month.contains(mid), "{mid} not in month page:\n{month}");
    }
    // The reply is in the root's thread, the lunch post is not.
    let thread_of = |mid: &str| -> String {
        let line = month.lines().find(|l| l.contains(mid)).expect("line");
        line.split("thread ")
            .nth(1)
            .and_then(|t| t.split_whitespace().next())
            .expect("thread")
            .to_string()
    };
    let t = thread_of("root@outside.test");
    assert_eq!(thread_of("reply@outside.test"), t);
    assert_ne!(thread_of("other@outside.test"), t);
    let thread = archive_cli(&cfg, &["show", LIST, "--thread", &t]);
    assert_eq!(thread.lines().count(), 2, "{thread}");
    // Full text: a word of the body, and query syntax taken as text.
    let hits = archive_cli(&cfg, &["search", LIST, "zanzibar"]);
    assert!(
        hits.contains("root@outside.test") && hits.lines().count() == 1,
        "{hits}"
    );
    assert!(archive_cli(&cfg, &["search", LIST, "NEAR( \"*"]).is_empty());
    // Stored as received, with Herald's List-Id in front and no member's personalization.
    let raw = archive_cli(
        &cfg,
        &["show", LIST, "--message-id", "<reply@outside.test>"],
    );
    assert!(raw.starts_with("List-Id: <dev.lists.test>\r\n"), "{raw}");
    assert!(
        raw.contains("Friday works.\r\nFrom now on we freeze."),
        "{raw}"
    );
    assert!(!raw.contains("List-Unsubscribe"), "{raw}");

    // A restart: the archive is still there, and a new post joins it once.
    let server = TestServer::start(server_config(&world, dir.path().to_path_buf())).await;
    let late = post(
        "late@outside.test",
        "Re: Release plan",
        "",
        "Late reply by subject only.",
    );
    let id = queued_id(&send(&server, &late).await);
    wait_complete(&server.api, &id, Duration::from_secs(60)).await;
    server.stop().await;
    assert_eq!(archived_count(&cfg), 4);
    let thread = archive_cli(&cfg, &["show", LIST, "--thread", &t]);
    assert!(
        thread.contains("late@outside.test"),
        "subject fallback:\n{thread}"
    );

    // Export, remove one message, re-import the export: it stays removed.
    let mbox = dir.path().join("dev.mbox");
    archive_cli(
        &cfg,
        &["export", LIST, "--out", mbox.to_str().expect("utf-8")],
    );
    let removed = archive_cli(&cfg, &["rm", LIST, "other@outside.test"]);
    assert!(removed.starts_with("removed"), "{removed}");
    let report = archive_cli(&cfg, &["import", LIST, mbox.to_str().expect("utf-8")]);
    assert!(
        report.contains("0 added, 3 already archived, 1 refused"),
        "{report}"
    );
    assert!(report.contains("tombstone"), "{report}");
    assert_eq!(archived_count(&cfg), 3);
    assert!(archive_cli(&cfg, &["search", LIST, "pizza"]).is_empty());
}

/// GET `url` as an anonymous browser would: status, content type, body.
async fn fetch(url: &str) -> (u16, String, String) {
    let r = reqwest::get(url).await.expect("GET");
    let status = r.status().as_u16();
    let ctype = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    (status, ctype, r.text().await.expect("body"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn public_archive_pages_are_served_safely_and_a_private_one_is_refused() {
    const PUB: &str = "pub@lists.test";
    const PRIV: &str = "priv@lists.test";
    let world = World::start(world_config(&[Profile::Normal], true))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("herald.toml");
    std::fs::write(
        &cfg,
        format!("data_dir = {:?}\n", dir.path().display().to_string()),
    )
    .expect("config");
    let server = TestServer::start(server_config(&world, dir.path().to_path_buf())).await;
    let api = server.api.clone();
    for l in [PUB, PRIV] {
        create_list(
            &api,
            l,
            json!({"display_name": "L", "posting_policy": "anyone"}),
        )
        .await;
        let (status, r) = http_bytes(
            &format!("{api}/api/lists/{l}/import"),
            members_csv(3, 1).into_bytes(),
        )
        .await;
        assert_eq!(status, 200, "{r}");
    }
    // Published while the server runs (the store is shared through SQLite's WAL).
    archive_cli(&cfg, &["privacy", PUB, "public"]);
    let html = format!(
        "From: Eve <eve@outside.test>\r\nTo: {PUB}\r\nSubject: <b>Hi</b> & welcome\r\n\
         Message-ID: <a/../b%2f@outside.test>\r\nDate: Tue, 24 Nov 2026 10:00:00 +0000\r\n\
         Archived-At: <http://forged.test/elsewhere>\r\n\
         MIME-Version: 1.0\r\nContent-Type: text/html; charset=utf-8\r\n\r\n\
         <p>hello quokka</p><script>alert(1)</script><img src=\"http://tracker.test/x.png\">\r\n"
    );
    let secret = format!(
        "From: Ann <ann@outside.test>\r\nTo: {PRIV}\r\nSubject: Secret\r\nMessage-ID: <s@outside.test>\r\n\r\nwombat\r\n"
    );
    for m in [html.as_bytes(), secret.as_bytes()] {
        let id =
            queued_id(&send_to(&server, m, if m == html.as_bytes() { PUB } else { PRIV }).await);
        wait_complete(&api, &id, Duration::from_secs(60)).await;
    }
    let base = format!("{api}/archive");
    let pub_enc = "pub@lists.test";
    // The writer runs beside fan-out: wait (bounded) for the post to be on the month page.
    let month_url = format!("{base}/{pub_enc}/2026/11/");
    let started = std::time::Instant::now();
    let month = loop {
        let (status, _, body) = fetch(&month_url).await;
        if status == 200 && body.contains("welcome") {
            break body;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        month.contains("&lt;b&gt;Hi&lt;/b&gt; &amp; welcome"),
        "{month}"
    );
    let mid_enc = "a%2F..%2Fb%252f@outside.test";
    assert!(
        month.contains(&format!("/archive/{pub_enc}/msg/{mid_enc}")),
        "{month}"
    );

    let (status, _, index) = fetch(&format!("{base}/")).await;
    assert_eq!(status, 200);
    assert!(index.contains(PUB) && !index.contains(PRIV), "{index}");
    let (_, _, months) = fetch(&format!("{base}/{pub_enc}/")).await;
    assert!(months.contains("2026-11</a> (1 messages)"), "{months}");

    let (status, ctype, msg) = fetch(&format!("{base}/{pub_enc}/msg/{mid_enc}")).await;
    assert_eq!(status, 200, "{msg}");
    assert!(ctype.starts_with("text/html"), "{ctype}");
    assert!(msg.contains("hello quokka"), "{msg}");
    assert!(!msg.contains("<script") && !msg.contains("<img"), "{msg}");
    let thread_href = msg
        .split("href=\"../thread/")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .expect("thread link")
        .to_string();
    let (status, _, thread) = fetch(&format!("{base}/{pub_enc}/thread/{thread_href}")).await;
    assert_eq!(status, 200);
    assert!(thread.contains("welcome"), "{thread}");

    let (status, ctype, raw) = fetch(&format!("{base}/{pub_enc}/msg/{mid_enc}/raw")).await;
    assert_eq!(status, 200);
    assert!(ctype.starts_with("text/plain"), "{ctype}");
    assert!(
        raw.contains("<script>alert(1)</script>"),
        "raw is the message as stored"
    );
    assert!(
        raw.contains(&format!(
            "Archived-At: <{api}/archive/{pub_enc}/msg/{mid_enc}>"
        )),
        "{raw}"
    );

    // RFC 5064 in every copy of the public list's post (the poster's own field dropped), and
    // the public archive as List-Archive; the private list's copies name no archive.
    let snap = world.recorder().snapshot();
    for i in 0..3 {
        let copies: Vec<String> = snap
            .copies_for(&format!("m{i}@d0.test"))
            .iter()
            .filter_map(|c| c.message.as_ref())
            .map(|m| String::from_utf8_lossy(m).replace("\r\n ", " "))
            .collect();
        assert_eq!(copies.len(), 2, "one copy per list");
        let public = copies
            .iter()
            .find(|c| c.contains("welcome"))
            .expect("public copy");
        assert!(
            public.contains(&format!(
                "Archived-At: <{api}/archive/{pub_enc}/msg/{mid_enc}>"
            )),
            "{public}"
        );
        assert!(
            public.contains(&format!("List-Archive: <{api}/archive/{pub_enc}/>")),
            "{public}"
        );
        assert!(!public.contains("forged.test"), "{public}");
        let private = copies
            .iter()
            .find(|c| c.contains("Secret"))
            .expect("private copy");
        assert!(
            !private.contains("Archived-At") && !private.contains("List-Archive"),
            "{private}"
        );
    }

    let (status, _, hits) = fetch(&format!("{base}/{pub_enc}/search?q=quokka")).await;
    assert_eq!(status, 200);
    assert!(
        hits.contains("1 results") && hits.contains("welcome"),
        "{hits}"
    );
    let (status, _, _) = fetch(&format!("{base}/{pub_enc}/search?q=%22NEAR(%2A")).await;
    assert_eq!(status, 200);

    // The private list: archived (the CLI sees it) but refused to an anonymous reader.
    assert!(archive_cli(&cfg, &["search", PRIV, "wombat"]).contains("s@outside.test"));
    for path in [
        format!("{PRIV}/"),
        format!("{PRIV}/2026/11/"),
        format!("{PRIV}/msg/s@outside.test"),
        format!("{PRIV}/msg/s@outside.test/raw"),
        format!("{PRIV}/search?q=wombat"),
    ] {
        let (status, _, body) = fetch(&format!("{base}/{path}")).await;
        assert_eq!(status, 404, "{path}: {body}");
        assert!(!body.contains("wombat"), "{path}");
    }
    server.stop().await;
}

async fn send_to(server: &TestServer, message: &[u8], list: &str) -> String {
    let (mut smtp, _) = Smtp::connect(server.smtp).await;
    smtp.cmd("EHLO client.outside.test").await;
    let reply = smtp.send_mail("eve@outside.test", &[list], message).await;
    smtp.cmd("QUIT").await;
    reply
}
