//! Digests end to end on the simulated world: members choose their delivery
//! the way real users and operators do — a `set digest plain` mail to `-request` confirmed by
//! replying, `herald member set … delivery=digest-mime` (the real binary), the API's PATCH for
//! `nomail` — posts arrive over SMTP and are archived; `herald digest send-now` sends one
//! digest: MIME members get a multipart/digest with every post in order as message/rfc822
//! (parsed back), plain members an RFC 1153 digest, both personalized (footer, VERP); regular
//! members get the single posts and no digest; the nomail member nothing. A second send-now
//! finds nothing new. With the real binary killed (`kill -9`) in the middle of a digest's
//! fan-out and started again, the digest is finished, never sent as a second issue.

use crate::support;

use herald_sim::{Profile, World};
use mail_parser::{MessageParser, MimeHeaders, PartType};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};
use support::binary::BinaryServer;
use support::*;

const LIST: &str = "dev@lists.test";

/// A post dated now (the digest's cursor starts at the list's creation, by Date).
fn post(n: usize, subject: &str) -> Vec<u8> {
    let date = herald_telemetry::time::rfc5322_date(herald_types::unix_ms_now() / 1000);
    format!(
        "From: Ann <ann@outside.test>\r\nTo: {LIST}\r\nSubject: {subject}\r\n\
         Message-ID: <digest-post-{n}@outside.test>\r\nDate: {date}\r\n\
         MIME-Version: 1.0\r\nContent-Type: text/plain; charset=us-ascii\r\n\r\nBody of post {n}.\r\n"
    )
    .into_bytes()
}

async fn send(smtp: std::net::SocketAddr, from: &str, rcpt: &str, message: &[u8]) -> String {
    let (mut c, _) = Smtp::connect(smtp).await;
    c.cmd("EHLO client.outside.test").await;
    let reply = c.send_mail(from, &[rcpt], message).await;
    c.cmd("QUIT").await;
    reply
}

async fn wait_for<T>(limit: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Kept messages delivered to `rcpt`, as text.
fn messages_for(world: &World, rcpt: &str) -> Vec<Vec<u8>> {
    world
        .recorder()
        .snapshot()
        .copies_for(rcpt)
        .iter()
        .filter_map(|c| c.message.as_ref().map(|m| m.to_vec()))
        .collect()
}

fn subject_of(raw: &[u8]) -> String {
    MessageParser::new()
        .parse_headers(raw)
        .and_then(|m| m.subject().map(str::to_string))
        .unwrap_or_default()
}

/// Messages archived for the list, by `herald archive ls` on the data directory.
fn archived(cfg: &Path) -> u64 {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .arg("--config")
        .arg(cfg)
        .args(["archive", "ls"])
        .output()
        .expect("herald archive ls");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.starts_with(LIST))
        .and_then(|l| l.split_whitespace().nth(2))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digest_members_get_one_digest_regular_members_the_posts_nomail_nothing() {
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
    // Only send-now sends: no size trigger, no schedule (the timer must not race the test).
    create_list(
        &api,
        LIST,
        json!({"display_name": "Dev", "posting_policy": "anyone",
               "footer": "Sent to {{email}}",
               "digest_size_threshold_kb": 0, "digest_schedule": "none"}),
    )
    .await;
    let (reg, mime, plain, off) = (
        "reg@d0.test",
        "mime@d0.test",
        "plain@d1.test",
        "off@d1.test",
    );
    add_members(&api, LIST, &[reg, mime, plain, off]).await;
    // The operator's CLI.
    let out = herald_cli(
        &api,
        None,
        &["member", "set", LIST, mime, "delivery=digest-mime"],
    );
    assert!(out.contains("delivery digest-mime"), "{out}");
    // The API, with a hostile value first: refused, nothing changed.
    let url = format!("{api}/api/v1/lists/{LIST}/members/{off}");
    let (st, _) = http("PATCH", &url, Some(json!({"delivery": "digest"}))).await;
    assert!(st == 400 || st == 422, "unknown mode accepted: {st}");
    let (st, _) = http(
        "PATCH",
        &url,
        Some(json!({"delivery": "nomail", "admin": true})),
    )
    .await;
    assert!(st == 400 || st == 422, "unknown field accepted: {st}");
    let (st, b) = http("PATCH", &url, Some(json!({"delivery": "nomail"}))).await;
    assert_eq!(st, 200, "{b}");
    assert_eq!(b["delivery"], "nomail");
    // The member by mail: the command, then a reply to the confirmation.
    let cmd = format!(
        "From: {plain}\r\nTo: dev-request@lists.test\r\nSubject: hi\r\n\r\nset digest plain\r\n"
    );
    assert!(
        send(server.smtp, plain, "dev-request@lists.test", cmd.as_bytes())
            .await
            .starts_with("250")
    );
    let token = wait_for(Duration::from_secs(30), "delivery confirmation", || {
        messages_for(&world, plain).iter().find_map(|m| {
            subject_of(m)
                .strip_prefix("confirm ")
                .map(|t| t.trim().to_string())
        })
    })
    .await;
    let reply = format!(
        "From: {plain}\r\nTo: dev-request@lists.test\r\nSubject: Re: confirm {token}\r\n\r\n"
    );
    send(
        server.smtp,
        plain,
        "dev-request@lists.test",
        reply.as_bytes(),
    )
    .await;
    wait_for(Duration::from_secs(30), "plain digest mode", || {
        let out = herald_cli(&api, None, &["member", "show", LIST, plain]);
        out.contains("delivery:     digest-plain").then_some(())
    })
    .await;
    let before_posts = |who: &str| messages_for(&world, who).len();
    let plain_before = before_posts(plain);

    let subjects = ["First news", "Second news", "Third news"];
    for (i, s) in subjects.iter().enumerate() {
        let id = queued_id(&send(server.smtp, "ann@outside.test", LIST, &post(i + 1, s)).await);
        wait_complete(&api, &id, Duration::from_secs(60)).await;
    }
    wait_for(Duration::from_secs(30), "the posts archived", || {
        (archived(&cfg) == 3).then_some(())
    })
    .await;
    // Single posts: the regular member only.
    assert_eq!(before_posts(reg), 3);
    assert_eq!(before_posts(mime), 0);
    assert_eq!(before_posts(plain), plain_before);
    assert_eq!(before_posts(off), 0, "nomail gets nothing");
    // nomail is still a member.
    assert_eq!(http("GET", &url, None).await.0, 200);

    let out = herald_cli(&api, None, &["digest", "send-now", LIST]);
    assert!(
        out.contains("vol 1 issue 1 sent (3 posts; mime, plain)"),
        "{out}"
    );
    wait_settled(&api, Duration::from_secs(60)).await;

    // The MIME digest, parsed back.
    let got = messages_for(&world, mime);
    assert_eq!(got.len(), 1, "one digest");
    let m = MessageParser::new()
        .parse(&got[0])
        .expect("MIME digest parses");
    assert!(
        m.subject()
            .unwrap_or_default()
            .contains("Dev Digest, Vol 1, Issue 1"),
        "{:?}",
        m.subject()
    );
    let digest = m
        .parts
        .iter()
        .find(|p| {
            p.content_type()
                .is_some_and(|c| c.ctype() == "multipart" && c.subtype() == Some("digest"))
        })
        .expect("a multipart/digest part");
    let PartType::Multipart(children) = &digest.body else {
        panic!("not multipart")
    };
    let inner: Vec<String> = children
        .iter()
        .map(|&i| match &m.parts[i as usize].body {
            PartType::Message(msg) => msg.subject().unwrap_or_default().to_string(),
            other => panic!("a digest part that is not message/rfc822: {other:?}"),
        })
        .collect();
    assert_eq!(inner.len(), 3);
    for (got, want) in inner.iter().zip(subjects) {
        assert!(got.ends_with(want), "{got} vs {want}: {inner:?}");
    }
    let text = String::from_utf8_lossy(&got[0]);
    assert!(
        text.contains(&format!("Sent to {mime}")),
        "personalized footer:\n{text}"
    );
    let rec = world.recorder().snapshot();
    let copy = rec.copies_for(mime)[0];
    assert!(
        copy.sender.contains("mime=d0.test"),
        "VERP sender: {}",
        copy.sender
    );
    assert!(text.contains("List-Unsubscribe"), "unsubscribe header");

    // The plain digest, parsed back.
    let got = messages_for(&world, plain);
    assert_eq!(got.len(), plain_before + 1, "one digest");
    let p = MessageParser::new()
        .parse(got.last().expect("digest"))
        .expect("plain digest parses");
    let body = p.body_text(0).expect("text").replace("\r\n", "\n");
    assert!(body.contains("Today's Topics:"), "{body}");
    let at: Vec<usize> = subjects
        .iter()
        .map(|s| {
            body.find(&format!("Subject: {s}"))
                .unwrap_or_else(|| panic!("{s} in {body}"))
        })
        .collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "posts in order");
    assert!(body.contains("End of Dev Digest, Vol 1, Issue 1"));
    assert!(body.contains(&format!("Sent to {plain}")));

    // Regular members never get a digest; nomail nothing at all.
    assert_eq!(messages_for(&world, reg).len(), 3);
    assert!(messages_for(&world, reg)
        .iter()
        .all(|m| !subject_of(m).contains("Digest")));
    assert_eq!(messages_for(&world, off).len(), 0);
    // Nothing new: nothing sent.
    let out = herald_cli(&api, None, &["digest", "send-now", LIST]);
    assert!(out.contains("none sent"), "{out}");
    let metrics = reqwest::get(format!("{api}/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(
        metrics.contains(&format!("herald_digests_sent_total{{list=\"{LIST}\"}} 1")),
        "{metrics}"
    );
    assert_eq!(messages_for(&world, mime).len(), 1);
    server.stop().await;
    world.shutdown().await;
}

const DIGEST_MEMBERS: usize = 600;
const DOMAINS: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_digest_killed_mid_send_is_finished_after_restart_never_sent_again() {
    let slow = Profile::Slow {
        delay: Duration::from_millis(5),
    };
    let mut world_cfg = world_config(&vec![slow; DOMAINS], false);
    world_cfg.receiver.check_mime_every = 0;
    let world = World::start(world_cfg).await.expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let extra = "[scheduler]\nmax_connections_per_destination = 1\nmax_copies_per_batch = 8\n\
                 retry_initial_secs = 1\nretry_max_secs = 2\ndestination_backoff_secs = 1\ntick_ms = 50\n";
    let mut server = BinaryServer::configure(dir.path(), &dir.path().join("data"), &world, extra);
    let api = server.api.clone();
    server.start().await;
    create_list(
        &api,
        LIST,
        json!({"posting_policy": "anyone", "digest_size_threshold_kb": 0, "digest_schedule": "none"}),
    )
    .await;
    let (st, r) = http_bytes(
        &format!("{api}/api/v1/lists/{LIST}/import"),
        members_csv(DIGEST_MEMBERS, DOMAINS).into_bytes(),
    )
    .await;
    assert_eq!(st, 200, "{r}");
    for i in 0..DIGEST_MEMBERS {
        let url = format!(
            "{api}/api/v1/lists/{LIST}/members/m{i}@d{}.test",
            i % DOMAINS
        );
        let (st, b) = http("PATCH", &url, Some(json!({"delivery": "digest-mime"}))).await;
        assert_eq!(st, 200, "{b}");
    }
    for n in 1..=2 {
        let (st, r) = http_bytes(
            &format!("{api}/api/v1/lists/{LIST}/posts"),
            post(n, "crash news"),
        )
        .await;
        assert_eq!(st, 202, "{r}");
    }
    wait_settled(&api, Duration::from_secs(60)).await;
    assert_eq!(
        world.recorder().accepted(),
        0,
        "digest members got single posts"
    );
    // The archive writer stores in batches; send-now until both posts are in one digest.
    let sent = eventually_some(
        Duration::from_secs(30),
        "the post in the digest",
        || async {
            let (st, b) = http(
                "POST",
                &format!("{api}/api/v1/lists/{LIST}/digest/send-now"),
                None,
            )
            .await;
            assert_eq!(st, 200, "{b}");
            (b["sent"] == true).then_some(b)
        },
    )
    .await;
    assert_eq!(sent["posts"], 2, "{sent}");
    assert!(
        world
            .recorder()
            .wait_for(DIGEST_MEMBERS as u64 / 5, Duration::from_secs(60))
            .await,
        "the digest fan-out did not start"
    );
    server.kill9();
    let at_kill = world.recorder().accepted();
    assert!(
        at_kill < DIGEST_MEMBERS as u64,
        "sent in full before the kill ({at_kill}): make the world slower"
    );

    server.start().await;
    wait_settled(&api, Duration::from_secs(120)).await;
    // Nothing new since the digest: the stage must not build issue 2 (or issue 1 again).
    let (st, b) = http(
        "POST",
        &format!("{api}/api/v1/lists/{LIST}/digest/send-now"),
        None,
    )
    .await;
    assert_eq!(st, 200, "{b}");
    assert_eq!(b["sent"], false, "{b}");
    let snap = world.recorder().snapshot();
    let mut missing = 0;
    for i in 0..DIGEST_MEMBERS {
        let copies = snap.copies_for(&format!("m{i}@d{}.test", i % DOMAINS));
        if copies.is_empty() {
            missing += 1;
        }
        for c in copies {
            let mid = c.message_id.as_deref().unwrap_or_default();
            assert!(
                mid.starts_with("<digest.1.1.mime."),
                "not the one digest: {mid}"
            );
        }
    }
    assert_eq!(missing, 0, "digest members left without the digest");
    // Only copies in flight at the kill can go twice (1 connection × 8 per domain).
    let bound = (DOMAINS * 8) as u64;
    assert!(
        snap.duplicates <= bound,
        "{} duplicate copies > {bound}",
        snap.duplicates
    );
    eprintln!(
        "killed at {at_kill} digest copies; after restart {} accepted, {} duplicates",
        snap.accepted, snap.duplicates
    );
    server.stop().await;
    world.shutdown().await;
}

/// A crash between the ledger's phase 1 (digest recorded, cursor moved) and the spool's accept
/// leaves an `enqueuing` row with nothing in the spool: the next start must send that digest
/// (rebuilt from the same archive rows, same Message-ID) once, and a later start nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_digest_recorded_but_not_spooled_at_a_crash_is_sent_once_at_restart() {
    let members = ["a@d0.test", "b@d0.test", "c@d0.test"];
    let Started {
        world,
        dir: _dir,
        data,
        mut server,
        api,
    } = started_with_digest_list(&members, "digest-mime").await;
    for n in 1..=2 {
        let (st, r) = http_bytes(
            &format!("{api}/api/v1/lists/{LIST}/posts"),
            post(n, "kept news"),
        )
        .await;
        assert_eq!(st, 202, "{r}");
    }
    wait_settled(&api, Duration::from_secs(60)).await;
    server.stop().await;
    assert_eq!(archived(&server.config), 2);
    // What phase 1 leaves when the process dies before the spool accepts the digest.
    let now = herald_types::unix_ms_now() as i64;
    let mid = "digest.1.1.mime.dev.lists.test@herald.test".to_string();
    {
        let mut ledger =
            herald_digest::state::Ledger::open(&data.join("digest.db")).expect("ledger");
        ledger.state(LIST, 0, now).expect("state");
        let taken = herald_digest::state::Taken {
            list: LIST.into(),
            volume: 1,
            issue: 1,
            format: "mime".into(),
            from_id: 0,
            upto_id: 2,
            message_id: mid.clone(),
        };
        assert!(ledger.take(&[taken], false, now).expect("take"));
    }
    server.start().await;
    let rec = world.recorder();
    wait_for(Duration::from_secs(30), "the recovered digest", || {
        members
            .iter()
            .all(|m| !rec.snapshot().copies_for(m).is_empty())
            .then_some(())
    })
    .await;
    wait_settled(&api, Duration::from_secs(60)).await;
    server.stop().await;
    server.start().await;
    let (st, b) = http(
        "POST",
        &format!("{api}/api/v1/lists/{LIST}/digest/send-now"),
        None,
    )
    .await;
    assert_eq!((st, &b["sent"]), (200, &json!(false)), "{b}");
    wait_settled(&api, Duration::from_secs(60)).await;
    for m in members {
        let got = messages_for(&world, m);
        assert_eq!(got.len(), 1, "{m}: one digest");
        let parsed = MessageParser::new().parse(&got[0]).expect("parses");
        assert_eq!(parsed.message_id(), Some(mid.as_str()));
        let text = String::from_utf8_lossy(&got[0]);
        assert!(
            text.contains("1. kept news") && text.contains("2. kept news"),
            "{text}"
        );
    }
    server.stop().await;
    world.shutdown().await;
}

/// The narrowest crash window: the spool took the digest, its fan-out finished and completed,
/// and the process died before the ledger's phase 3 (`enqueued`) committed. The ledger still
/// says `enqueuing` and the spool holds no live digest; the spool's journal shows it completed,
/// so the next start settles it and no member gets it twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_digest_delivered_before_the_ledger_recorded_it_is_not_sent_again() {
    let members = ["a@d0.test", "b@d0.test"];
    let Started {
        world,
        dir: _dir,
        data,
        mut server,
        api,
    } = started_with_digest_list(&members, "digest-plain").await;
    let (st, r) = http_bytes(
        &format!("{api}/api/v1/lists/{LIST}/posts"),
        post(1, "quick news"),
    )
    .await;
    assert_eq!(st, 202, "{r}");
    wait_settled(&api, Duration::from_secs(60)).await;
    // The archive writer stores after fan-out (a post with digest members only settles at
    // once): send-now until the post is in the digest.
    eventually_some(
        Duration::from_secs(30),
        "the post in the digest",
        || async {
            let (st, b) = http(
                "POST",
                &format!("{api}/api/v1/lists/{LIST}/digest/send-now"),
                None,
            )
            .await;
            assert_eq!(st, 200, "{b}");
            (b["sent"] == true).then_some(b)
        },
    )
    .await;
    let rec = world.recorder();
    wait_for(Duration::from_secs(30), "the digest", || {
        members
            .iter()
            .all(|m| !rec.snapshot().copies_for(m).is_empty())
            .then_some(())
    })
    .await;
    wait_settled(&api, Duration::from_secs(60)).await;
    server.kill9();
    // What the crash leaves if it comes before phase 3 commits.
    let db = rusqlite::Connection::open(data.join("digest.db")).expect("ledger");
    let changed = db
        .execute("UPDATE digests SET state = 'enqueuing'", [])
        .expect("rewind the ledger");
    assert_eq!(changed, 1, "one digest recorded");
    drop(db);

    server.start().await;
    let (st, b) = http(
        "POST",
        &format!("{api}/api/v1/lists/{LIST}/digest/send-now"),
        None,
    )
    .await;
    assert_eq!((st, &b["sent"]), (200, &json!(false)), "{b}");
    wait_settled(&api, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    for m in members {
        assert_eq!(messages_for(&world, m).len(), 1, "{m}: the digest once");
    }
    let db = rusqlite::Connection::open(data.join("digest.db")).expect("ledger");
    let state: String = db
        .query_row("SELECT state FROM digests", [], |r| r.get(0))
        .expect("state");
    assert_eq!(state, "enqueued", "the restart settled the ledger");
    server.stop().await;
    world.shutdown().await;
}

/// `LIST` with digests sent only on demand (no size threshold, no schedule), and `members`
/// added through the API with delivery `mode`.
/// A running server on a one-domain world, with the digest list and `members` in `mode`: the
/// start of the restart tests (their data directory is kept for the ledger checks).
struct Started {
    world: World,
    dir: tempfile::TempDir,
    data: std::path::PathBuf,
    server: BinaryServer,
    api: String,
}

async fn started_with_digest_list(members: &[&str], mode: &str) -> Started {
    let world = World::start(world_config(&[Profile::Normal], true))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let mut server = BinaryServer::configure(dir.path(), &data, &world, "");
    let api = server.api.clone();
    server.start().await;
    digest_list(&api, members, mode).await;
    Started {
        world,
        dir,
        data,
        server,
        api,
    }
}

async fn digest_list(api: &str, members: &[&str], mode: &str) {
    create_list(
        api,
        LIST,
        json!({"posting_policy": "anyone", "digest_size_threshold_kb": 0, "digest_schedule": "none"}),
    )
    .await;
    add_members(api, LIST, members).await;
    for m in members {
        let url = format!("{api}/api/v1/lists/{LIST}/members/{m}");
        assert_eq!(
            http("PATCH", &url, Some(json!({"delivery": mode}))).await.0,
            200
        );
    }
}
