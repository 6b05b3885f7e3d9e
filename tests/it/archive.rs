//! End to end for the list archive: posts arrive over SMTP from the simulated
//! world's side, are fanned out and archived once — also when a post is delivered to Herald
//! again and across a restart — and the operator finds them with the real `herald archive`
//! binary: months, a month's messages, the thread with its reply, full-text search; a message
//! removed by the administrator stays removed after the archive is exported and re-imported.

use crate::support;

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

/// A `herald.toml` in `dir` naming `dir` as the data directory, for the CLI to reach the
/// running server's stores.
fn cli_config(dir: &Path) -> std::path::PathBuf {
    let cfg = dir.join("herald.toml");
    std::fs::write(
        &cfg,
        format!("data_dir = {:?}\n", dir.display().to_string()),
    )
    .expect("config");
    cfg
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
    let cfg = cli_config(dir.path());
    let server = TestServer::start(server_config(&world, dir.path().to_path_buf())).await;
    let api = server.api.clone();
    create_list(
        &api,
        LIST,
        json!({"display_name": "Dev", "posting_policy": "anyone"}),
    )
    .await;
    let (status, r) = http_bytes(
        &format!("{api}/api/v1/lists/{LIST}/import"),
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
    let cfg = cli_config(dir.path());
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
            &format!("{api}/api/v1/lists/{l}/import"),
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
    let month = eventually_some(
        Duration::from_secs(20),
        "the post on the month page",
        || async {
            let (status, _, body) = fetch(&month_url).await;
            (status == 200 && body.contains("welcome")).then_some(body)
        },
    )
    .await;
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
    assert!(months.contains("2026-11</a> (one message)"), "{months}");

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
        hits.contains("One result for “quokka”") && hits.contains("welcome"),
        "{hits}"
    );
    let (status, _, _) = fetch(&format!("{base}/{pub_enc}/search?q=%22NEAR(%2A")).await;
    assert_eq!(status, 200);
    // Filters: by sender (with or without words), by date; a bad date is the reader's error.
    for (query, hit) in [
        ("from=eve", true),
        ("q=quokka&from=EVE%40outside", true),
        ("q=quokka&from=nobody", false),
        ("since=2026-11-24&until=2026-11-24", true),
        ("since=2026-11-25", false),
        ("q=quokka&until=2026-11-23", false),
    ] {
        let (status, _, hits) = fetch(&format!("{base}/{pub_enc}/search?{query}")).await;
        assert_eq!(status, 200, "{query}");
        assert_eq!(hits.contains("welcome</a>"), hit, "{query}: {hits}");
    }
    let (status, _, bad) = fetch(&format!("{base}/{pub_enc}/search?since=yesterday")).await;
    assert_eq!(status, 400);
    assert!(bad.contains("not a date"), "{bad}");

    // Addresses are hidden from harvesters on the pages and in the feed, unless shown.
    assert!(
        month.contains("eve at outside.test") && !month.contains("eve@outside.test"),
        "{month}"
    );
    archive_cli(&cfg, &["addresses", PUB, "show"]);
    let (_, _, month_shown) = fetch(&month_url).await;
    assert!(month_shown.contains("eve@outside.test"), "{month_shown}");
    archive_cli(&cfg, &["addresses", PUB, "hide"]);

    // The month and the thread as mbox: mboxrd that reads back to the stored message.
    assert!(month.contains("href=\"mbox\""), "{month}");
    let stored = raw.replace("\r\n", "\n");
    for url in [
        format!("{month_url}mbox"),
        format!("{base}/{pub_enc}/thread/{thread_href}/mbox"),
    ] {
        let r = reqwest::get(&url).await.expect("GET mbox");
        assert_eq!(r.status().as_u16(), 200, "{url}");
        let ctype = r.headers()["content-type"]
            .to_str()
            .unwrap_or("")
            .to_string();
        let disposition = r.headers()["content-disposition"]
            .to_str()
            .unwrap_or("")
            .to_string();
        assert_eq!(ctype, "application/mbox");
        assert!(
            disposition.starts_with("attachment; filename="),
            "{disposition}"
        );
        let mbox = r.bytes().await.expect("mbox body");
        let mut reader = herald_archive::mbox::Reader::new(&mbox[..], 1 << 20);
        let mut n = 0;
        while let Some(entry) = reader.next_entry().expect("read mbox") {
            let herald_archive::mbox::Entry::Message(m) = entry else {
                panic!("{entry:?}")
            };
            assert_eq!(String::from_utf8_lossy(&m).replace("\r\n", "\n"), stored);
            n += 1;
        }
        assert_eq!(n, 1, "{url}");
    }
    let (status, _, _) = fetch(&format!("{base}/{pub_enc}/2019/01/mbox")).await;
    assert_eq!(status, 404, "an empty month has no mbox");

    // The Atom feed, read back as a feed reader would: the subject as text (not markup), the
    // author's address hidden, the entry linking to the message page.
    let (status, ctype, xml) = fetch(&format!("{base}/{pub_enc}/atom.xml")).await;
    assert_eq!(status, 200);
    assert!(ctype.starts_with("application/atom+xml"), "{ctype}");
    let feed: atom_syndication::Feed = xml.parse().expect("the feed parses");
    assert_eq!(feed.entries().len(), 1, "{xml}");
    let e = &feed.entries()[0];
    assert_eq!(e.title().as_str(), "<b>Hi</b> & welcome");
    assert_eq!(e.authors()[0].name(), "Eve <eve at outside.test>");
    assert!(
        e.links()[0].href().ends_with(&format!("/msg/{mid_enc}")),
        "{xml}"
    );
    assert!(!xml.contains("<script"), "{xml}");

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

    // An attachment is a download, never a page of this origin: octet-stream, attachment
    // disposition with a tamed file name, nosniff and a sandbox policy.
    let with_file = format!(
        "From: Eve <eve@outside.test>\r\nTo: {PUB}\r\nSubject: slides\r\n\
         Message-ID: <att@outside.test>\r\nMIME-Version: 1.0\r\n\
         Content-Type: multipart/mixed; boundary=\"b1\"\r\n\r\n\
         --b1\r\nContent-Type: text/plain\r\n\r\nsee attached\r\n\
         --b1\r\nContent-Type: text/html; name=\"x\\\"y.html\"\r\n\
         Content-Disposition: attachment; filename=\"../../evil\\\".html\"\r\n\r\n\
         <script>alert(document.cookie)</script>\r\n--b1--\r\n"
    );
    let id = queued_id(&send_to(&server, with_file.as_bytes(), PUB).await);
    wait_complete(&api, &id, Duration::from_secs(60)).await;
    let page_url = format!("{base}/{pub_enc}/msg/att@outside.test");
    let page = eventually_some(Duration::from_secs(20), "the message page", || async {
        let (status, _, body) = fetch(&page_url).await;
        (status == 200).then_some(body)
    })
    .await;
    assert!(
        page.contains("href=\"att@outside.test/attachment/0\""),
        "{page}"
    );
    let r = reqwest::get(format!("{page_url}/attachment/0"))
        .await
        .expect("GET");
    assert_eq!(r.status().as_u16(), 200);
    let h = |n: &str| r.headers()[n].to_str().unwrap_or("").to_string();
    assert_eq!(h("content-type"), "application/octet-stream");
    assert_eq!(h("x-content-type-options"), "nosniff");
    assert_eq!(h("content-security-policy"), "sandbox");
    let disposition = h("content-disposition");
    assert!(
        disposition.starts_with("attachment; filename=\""),
        "{disposition}"
    );
    assert!(
        !disposition.contains("/") && disposition.matches('"').count() == 2,
        "{disposition}"
    );
    assert!(r.text().await.expect("body").contains("<script>"));
    let (status, _, _) = fetch(&format!("{page_url}/attachment/7")).await;
    assert_eq!(status, 404);
    // The archive on /metrics: three posts archived by the writer, three in the store.
    assert_eq!(metric(&api, "herald_archive_messages").await, 3);
    assert_eq!(
        metric(&api, "herald_archive_posts_total{outcome=\"added\"}").await,
        3
    );
    assert_eq!(metric(&api, "herald_archive_queue").await, 0);
    assert!(metric(&api, "herald_archive_file_bytes").await > 0);
    server.stop().await;
}

async fn send_to(server: &TestServer, message: &[u8], list: &str) -> String {
    let (mut smtp, _) = Smtp::connect(server.smtp).await;
    smtp.cmd("EHLO client.outside.test").await;
    let reply = smtp.send_mail("eve@outside.test", &[list], message).await;
    smtp.cmd("QUIT").await;
    reply
}

/// A list's history imported from a newest-first mbox (as many exporters write it), then
/// searched in the web archive as a reader does: the common word's results come newest first
/// by the messages' dates with the number of matches, and "next page" walks to the oldest
/// match, with a way back. (Ordered by archive row, the first page was the oldest mail, and a
/// ranking window stopped the paging at 2,000 matches with no count.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_imported_newest_first_archive_is_searched_newest_first_to_the_last_page() {
    const PUB: &str = "hist@lists.test";
    const N: usize = 2_250;
    let world = World::start(world_config(&[Profile::Normal], false))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = cli_config(dir.path());
    let mut mbox = String::new();
    // Newest first: message N-1 is dated last, and comes first in the file.
    for i in (0..N).rev() {
        let date = herald_telemetry::time::rfc5322_date(1_600_000_000 + i as u64 * 3_600);
        mbox.push_str(&format!(
            "From ann@outside.test Thu Jan  1 00:00:00 2020\n\
             From: Ann <ann@outside.test>\nTo: {PUB}\nSubject: patch {i}\n\
             Message-ID: <m{i}@outside.test>\nDate: {date}\n\n\
             the kernel patch number {i}\n\n"
        ));
    }
    let mbox_path = dir.path().join("history.mbox");
    std::fs::write(&mbox_path, mbox).expect("mbox");
    let server = TestServer::start(server_config(&world, dir.path().to_path_buf())).await;
    let api = server.api.clone();
    create_list(&api, PUB, json!({"display_name": "History"})).await;
    archive_cli(&cfg, &["import", PUB, &mbox_path.display().to_string()]);
    archive_cli(&cfg, &["privacy", PUB, "public"]);
    let search = format!("{api}/archive/{PUB}/search?q=kernel");
    let (status, _, first) = fetch(&search).await;
    assert_eq!(status, 200, "{}", tail(&first));
    assert!(first.contains(&format!("{N} results")), "{}", tail(&first));
    assert!(first.contains("page 1 of 23"), "{}", tail(&first));
    let newest = format!("m{}@outside.test", N - 1);
    let top = first.find("/msg/").map(|i| &first[i..i + 40]).unwrap_or("");
    assert!(top.contains(&newest), "newest first, got {top}");
    let (status, _, last) = fetch(&format!("{search}&page=22")).await;
    assert_eq!(status, 200, "{}", tail(&last));
    assert!(last.contains("page 23 of 23"), "{}", tail(&last));
    assert!(
        last.contains("m0@outside.test"),
        "the oldest match on the last page"
    );
    assert!(last.contains("rel=\"prev\""), "a way back");
    assert!(
        !last.contains("rel=\"next\""),
        "nothing after the last page"
    );
    assert_eq!(last.matches("/msg/").count(), N - 22 * 100);
    let cli = std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .arg("--config")
        .arg(&cfg)
        .args(["archive", "search", PUB, "kernel", "--limit", "5"])
        .output()
        .expect("run herald");
    let rows = String::from_utf8_lossy(&cli.stdout);
    assert!(
        rows.lines().next().unwrap_or("").contains(&newest),
        "{rows}"
    );
    assert!(
        String::from_utf8_lossy(&cli.stderr).contains(&format!("{N} matching, page 1 of 450")),
        "{}",
        String::from_utf8_lossy(&cli.stderr)
    );
}

/// The end of a page, where the counts and paging links are (a whole page is too long for a
/// failure message).
fn tail(page: &str) -> &str {
    let at = page.len().saturating_sub(600);
    let at = (at..page.len())
        .find(|&i| page.is_char_boundary(i))
        .unwrap_or(0);
    &page[at..]
}
