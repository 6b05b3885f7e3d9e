//! Importing from the real Mailman 3: the test installs Mailman 3 core from PyPI into
//! a virtual environment under `target/tmp` (kept, so reruns start in seconds), writes a
//! minimal `mailman.cfg` (SQLite, REST on 127.0.0.1 at a free port, no MTA), runs
//! `mailman start`, builds a list through Mailman's REST API and `mailman inject` (members in
//! every delivery mode, owner, moderator, bans, a header match, a held post), imports it into a
//! live Herald with `herald import mailman3 --apply`, compares field by field with what
//! Mailman's REST API says, then posts to the imported list in the simulated world: the
//! regular member gets the post, digest members get it in their digest only, nomail and
//! disabled members get nothing — as in Mailman. `mailman stop` at the end.
//!
//! With `CI` set a failed install fails the test; elsewhere (no network) it prints why and
//! skips.

#![allow(clippy::unwrap_used)]

use crate::support;

use herald_directory::Directory;
use herald_types::{Address, DeliveryMode, MemberStatus, PostingPolicy, ReplyToPolicy};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::binary::herald_with_config;
use support::mailman3::{build_list, mailman_bin, Mailman, LIST, LIST_ID};
use support::{herald_cli, server_config, wait_complete, wait_settled, world_config, TestServer};

fn mode_of(mailman: &str) -> DeliveryMode {
    match mailman {
        "mime_digests" => DeliveryMode::DigestMime,
        "plaintext_digests" => DeliveryMode::DigestPlain,
        _ => DeliveryMode::Regular,
    }
}

fn copies_for(world: &herald_sim::World, rcpt: &str) -> Vec<Vec<u8>> {
    world
        .recorder()
        .snapshot()
        .copies_for(rcpt)
        .iter()
        .filter_map(|c| c.message.as_ref().map(|m| m.to_vec()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mailman3_list_comes_over_and_its_members_get_what_they_got_in_mailman() {
    let Some(bin) = tokio::task::spawn_blocking(mailman_bin).await.unwrap() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let mm = Mailman::start(bin, tmp.path());
    mm.wait_up().await;
    build_list(&mm, tmp.path()).await;

    let world = herald_sim::World::start(world_config(&[Default::default()], true))
        .await
        .unwrap();
    // The members' own posts pass DMARC as through their provider: the imported list takes
    // posts from members, and Herald counts a member's From: only when it is authenticated.
    support::authenticate_senders(&world, &["d0.test"]);
    let data = tmp.path().join("herald");
    let server = TestServer::start(server_config(&world, data.clone())).await;
    let cfg = tmp.path().join("herald.toml");
    std::fs::write(
        &cfg,
        // The importer hands held posts to this server's API (`[listen] http`).
        format!(
            "data_dir = {:?}\n[listen]\nhttp = \"{}\"\n",
            data.display().to_string(),
            server.http
        ),
    )
    .unwrap();
    // The list's archive as HyperKitty's "download the archive" export gives it: an mbox.
    let mbox = tmp.path().join("dev@lists.test.mbox");
    std::fs::write(
        &mbox,
        "From reg@d0.test Mon Jan  1 00:00:00 2024\nFrom: Reg Ular <reg@d0.test>\n\
         To: dev@lists.test\nSubject: [dev] From the old days\nMessage-ID: <old-1@d0.test>\n\
         Date: Mon, 01 Jan 2024 00:00:00 +0000\n\nHistory.\n\n\
         From dig@d0.test Tue Jan  2 00:00:00 2024\nFrom: dig@d0.test\nTo: dev@lists.test\n\
         Subject: Re: [dev] From the old days\nMessage-ID: <old-2@d0.test>\n\
         In-Reply-To: <old-1@d0.test>\nDate: Tue, 02 Jan 2024 00:00:00 +0000\n\nIndeed.\n",
    )
    .unwrap();
    let mbox_arg = mbox.display().to_string();
    let args = [
        "import",
        "mailman3",
        "--url",
        &mm.rest,
        "--user",
        "restadmin",
        "--password",
        "restpass",
        "--list",
        LIST,
        "--archive",
        &mbox_arg,
        "--apply",
    ];
    let (ok, out) = tokio::task::spawn_blocking({
        let cfg = cfg.clone();
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        move || {
            let a: Vec<&str> = args.iter().map(String::as_str).collect();
            herald_with_config(&cfg, &a)
        }
    })
    .await
    .unwrap();
    assert!(ok, "{out}");
    assert!(out.contains("6 members added"), "{out}");
    assert!(out.contains("archive: 2 messages added"), "{out}");
    for (item, why) in [
        ("header match", "x-spam: yes → discard"),
        ("setting description", "no description"),
    ] {
        assert!(
            out.lines().any(|l| l.contains(item) && l.contains(why)),
            "no {item} / {why}:\n{out}"
        );
    }
    // The held post is held in Herald too, with Mailman's reason, waiting for a moderator.
    assert!(out.contains("held in Herald as post"), "{out}");
    let held: Vec<herald_api_types::HeldView> =
        support::get_view(&format!("{}/api/v1/held", server.api)).await;
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0].list, LIST);
    assert_eq!(held[0].from.as_deref(), Some("stranger@d1.test"));
    assert!(
        held[0]
            .message_id
            .as_deref()
            .unwrap_or("")
            .contains("held-1@d1.test"),
        "{held:?}"
    );
    assert_eq!(
        held[0].reason.as_deref(),
        Some("held in Mailman: The message is not from a list member")
    );

    // Field by field against what Mailman's REST API says.
    let d = Directory::open(&data.join("herald.db")).unwrap();
    // Mailman's owners keep their role: an account each (sign-in by link) with the owner role.
    let accounts = herald_accounts::Accounts::open(
        &data.join("accounts.db"),
        herald_accounts::AccountsConfig::default(),
    )
    .unwrap();
    let role = |who: &str| accounts.principal(who).unwrap().and_then(|p| p.role(LIST));
    assert_eq!(role("own@d0.test"), Some(herald_accounts::Role::Owner));
    assert_eq!(role("mod@d0.test"), None, "a moderator is not an owner");
    let list = d
        .list_by_address(&Address::parse(LIST).unwrap())
        .unwrap()
        .unwrap();
    let config = mm
        .call("GET", &format!("lists/{LIST_ID}/config"), &[])
        .await;
    let s = &list.settings;
    assert_eq!(s.display_name, config["display_name"].as_str().unwrap());
    assert_eq!(
        s.subject_prefix.as_deref(),
        Some(config["subject_prefix"].as_str().unwrap().trim())
    );
    assert_eq!(s.reply_to, ReplyToPolicy::List);
    assert_eq!(
        s.max_message_bytes,
        config["max_message_size"].as_u64().unwrap() * 1024
    );
    assert_eq!(s.posting_policy, PostingPolicy::Members);
    assert_eq!(
        s.bounce_threshold as u64,
        config["bounce_score_threshold"].as_u64().unwrap()
    );
    let mut mods: Vec<String> = s.moderators.iter().map(ToString::to_string).collect();
    mods.sort();
    assert_eq!(
        mods,
        vec!["mod@d0.test".to_string(), "own@d0.test".to_string()]
    );
    let bans: Vec<String> = d
        .bans(Some(list.id))
        .unwrap()
        .into_iter()
        .map(|b| b.pattern)
        .collect();
    assert_eq!(bans, vec!["troll@d0.test".to_string()]);
    let global: Vec<String> = d
        .bans(None)
        .unwrap()
        .into_iter()
        .map(|b| b.pattern)
        .collect();
    assert_eq!(global, vec!["^.*@spam\\.test$".to_string()]);
    let roster = mm
        .call("GET", &format!("lists/{LIST_ID}/roster/member"), &[])
        .await;
    let entries = roster["entries"].as_array().unwrap();
    assert_eq!(
        entries.len() as u64,
        d.member_counts(list.id).unwrap().total
    );
    for e in entries {
        let email = e["email"].as_str().unwrap();
        let a = Address::parse(email).unwrap();
        let m = d
            .member(list.id, &a)
            .unwrap()
            .unwrap_or_else(|| panic!("{email} missing"));
        let name = e["display_name"].as_str().unwrap_or("");
        assert_eq!(
            m.display_name.as_deref().unwrap_or(""),
            name,
            "{email} name"
        );
        let link = e["self_link"].as_str().unwrap();
        let prefs: Value = mm
            .http
            .get(format!("{link}/preferences"))
            .basic_auth("restadmin", Some("restpass"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let status = prefs["delivery_status"].as_str().unwrap_or("enabled");
        let want_mode = match status {
            "by_user" => DeliveryMode::Nomail,
            _ => mode_of(e["delivery_mode"].as_str().unwrap()),
        };
        assert_eq!(
            d.delivery(list.id, &a).unwrap(),
            Some(want_mode),
            "{email} mode"
        );
        let want_moderated = matches!(
            e["moderation_action"].as_str(),
            Some("hold" | "reject" | "discard")
        );
        assert_eq!(
            d.moderated(list.id, &a).unwrap(),
            Some(want_moderated),
            "{email} moderation {:?}",
            e["moderation_action"]
        );
        let want_enabled = matches!(status, "enabled" | "by_user");
        assert_eq!(
            m.status.is_enabled(),
            want_enabled,
            "{email} status {status}"
        );
    }
    assert_eq!(
        d.member(list.id, &Address::parse("off@d0.test").unwrap())
            .unwrap()
            .unwrap()
            .status,
        MemberStatus::Disabled("disabled by a moderator in Mailman".into())
    );

    let archive = herald_archive::Archive::open(&data.join("archive.db")).unwrap();
    assert_eq!(
        archive.privacy(LIST).unwrap(),
        herald_archive::Privacy::Private
    );
    assert!(archive.message(LIST, "old-2@d0.test").unwrap().is_some());
    drop(archive);

    // The same import again changes nothing.
    let dry: Vec<String> = args[..args.len() - 1]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let (ok, again) = tokio::task::spawn_blocking({
        let cfg = cfg.clone();
        move || {
            let a: Vec<&str> = dry.iter().map(String::as_str).collect();
            herald_with_config(&cfg, &a)
        }
    })
    .await
    .unwrap();
    assert!(
        ok && again.contains("dry run: nothing to change"),
        "{again}"
    );
    let held: Vec<herald_api_types::HeldView> =
        support::get_view(&format!("{}/api/v1/held", server.api)).await;
    assert_eq!(held.len(), 1, "still one held post: {held:?}");

    // A post in the simulated world: who gets what, as in Mailman.
    let post =
        "From: Reg Ular <reg@d0.test>\r\nTo: dev@lists.test\r\nSubject: Imported and alive\r\n\
                Message-ID: <alive@d0.test>\r\n\r\nIt works.\r\n";
    // No Date: Herald adds today's, and the digest takes posts newer than the list (older
    // ones are history an import brought).
    let (mut smtp, _) = support::Smtp::connect(server.smtp).await;
    smtp.cmd("EHLO d0.test").await;
    let reply = smtp
        .send_mail("reg@d0.test", &[LIST], post.as_bytes())
        .await;
    assert!(reply.starts_with("250"), "{reply}");
    let id = support::queued_id(&reply);
    wait_complete(&server.api, &id, Duration::from_secs(60)).await;
    let got = |who: &str| copies_for(&world, who).len();
    assert_eq!(got("reg@d0.test"), 1, "regular member gets the post");
    assert_eq!(
        got("held-back@d0.test"),
        1,
        "a moderated member still receives the list"
    );
    // Mailman's per-member `hold` is Herald's moderation flag: their post waits for a moderator.
    let (mut smtp, _) = support::Smtp::connect(server.smtp).await;
    smtp.cmd("EHLO d0.test").await;
    let reply = smtp
        .send_mail(
            "held-back@d0.test",
            &[LIST],
            b"From: held-back@d0.test\r\nTo: dev@lists.test\r\nSubject: mine\r\n\
              Message-ID: <mine@d0.test>\r\n\r\nHeld?\r\n",
        )
        .await;
    assert!(reply.starts_with("250"), "{reply}");
    let held_reason = |v: &serde_json::Value| {
        v.as_array().into_iter().flatten().any(|h| {
            h["message_id"].as_str() == Some("mine@d0.test")
                && h["reason"].as_str() == Some("the member's posts are moderated")
        })
    };
    let started = Instant::now();
    loop {
        let (_, v) = support::http(
            "GET",
            &format!("{}/api/v1/held?list={LIST}", server.api),
            None,
        )
        .await;
        if held_reason(&v) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "not held: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for who in [
        "dig@d0.test",
        "plain@d0.test",
        "away@d0.test",
        "off@d0.test",
    ] {
        assert_eq!(got(who), 0, "{who} got a single post");
    }
    let started = Instant::now();
    loop {
        let out = herald_cli(&server.api, None, &["digest", "send-now", LIST]);
        if out.contains(" sent (") {
            assert!(out.contains("mime, plain"), "{out}");
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no digest: {out}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    wait_settled(&server.api, Duration::from_secs(60)).await;
    let dig = copies_for(&world, "dig@d0.test");
    assert_eq!(dig.len(), 1, "MIME digest member gets one digest");
    assert!(String::from_utf8_lossy(&dig[0]).contains("multipart/digest"));
    let plain = copies_for(&world, "plain@d0.test");
    assert_eq!(plain.len(), 1, "plain digest member gets one digest");
    assert!(!String::from_utf8_lossy(&plain[0]).contains("multipart/digest"));
    assert!(String::from_utf8_lossy(&plain[0]).contains("Imported and alive"));
    assert_eq!(
        got("away@d0.test"),
        0,
        "nomail (by_user in Mailman) gets nothing"
    );
    assert_eq!(
        got("off@d0.test"),
        0,
        "disabled by a moderator gets nothing"
    );
    assert_eq!(got("reg@d0.test"), 1, "regular member gets no digest");
    server.stop().await;
    world.shutdown().await;
    drop(mm);
}

/// A stand-in for a load balancer or a failing Mailman in front of the real one: forwards
/// every GET to Mailman's REST API and answers with what it said, except that a roster page
/// comes back with only its first half of entries (its `total_size` unchanged) — a roster the
/// source reports as N members that comes back with N/2. Answers one request per connection.
async fn cutting_proxy(rest: String) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let http = reqwest::Client::new();
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let (http, rest) = (http.clone(), rest.clone());
            tokio::spawn(async move {
                use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
                let mut stream = tokio::io::BufReader::new(stream);
                let (mut path, mut auth) = (String::new(), String::new());
                let mut line = String::new();
                while stream.read_line(&mut line).await.unwrap_or(0) > 0 && line != "\r\n" {
                    if path.is_empty() {
                        path = line.split(' ').nth(1).unwrap_or("/").to_string();
                    } else if let Some(v) = line
                        .strip_prefix("authorization: ")
                        .or(line.strip_prefix("Authorization: "))
                    {
                        auth = v.trim().to_string();
                    }
                    line.clear();
                }
                let answer = http
                    .get(format!("{rest}{path}"))
                    .header("authorization", auth)
                    .send()
                    .await
                    .unwrap();
                let status = answer.status().as_u16();
                let mut body: Value = answer.json().await.unwrap_or(Value::Null);
                if path.contains("/roster/member") {
                    if let Some(entries) = body["entries"].as_array_mut() {
                        let keep = entries.len() / 2;
                        entries.truncate(keep);
                    }
                }
                let text = body.to_string();
                let head = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n",
                    text.len()
                );
                let s = stream.get_mut();
                let _ = s.write_all(head.as_bytes()).await;
                let _ = s.write_all(text.as_bytes()).await;
                let _ = s.shutdown().await;
            });
        }
    });
    format!("http://{addr}")
}

/// `herald import mailman3` with `url` and `extra` arguments against the config `cfg`.
async fn import_mm3(cfg: &Path, url: &str, extra: &[&str]) -> (bool, String) {
    let mut args: Vec<String> = [
        "import",
        "mailman3",
        "--url",
        url,
        "--user",
        "restadmin",
        "--password",
        "restpass",
        "--list",
        LIST,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    let cfg = cfg.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        herald_with_config(&cfg, &a)
    })
    .await
    .unwrap()
}

/// What an import left in the data directory `data`: `None` when no list, member or ban of
/// the import is there, else what is.
fn written(data: &Path) -> Option<String> {
    let path = data.join("herald.db");
    if !path.exists() {
        return None;
    }
    let d = Directory::open(&path).unwrap();
    let list = d.list_by_address(&Address::parse(LIST).unwrap()).unwrap();
    let bans = d.bans(None).unwrap().len();
    match list {
        None if bans == 0 => None,
        None => Some(format!("{bans} global bans")),
        Some(l) => Some(format!(
            "the list with {} members, {bans} global bans",
            d.member_counts(l.id).unwrap().total
        )),
    }
}

/// A config file naming a data directory of its own, with the server's API when given.
fn config_for(dir: &Path, name: &str, http: Option<std::net::SocketAddr>) -> (PathBuf, PathBuf) {
    let data = dir.join(name);
    let cfg = dir.join(format!("{name}.toml"));
    let listen = http
        .map(|h| format!("[listen]\nhttp = \"{h}\"\n"))
        .unwrap_or_default();
    std::fs::write(
        &cfg,
        format!("data_dir = {:?}\n{listen}", data.display().to_string()),
    )
    .unwrap();
    (cfg, data)
}

/// An import sends no mail, refuses a roster that comes back shorter than the source reports,
/// and checks its inputs before it writes anything (each part in a data directory of its own,
/// and every failure reported at the end, so one run shows every defect):
/// - a missing `--archive` fails the dry run and `--apply` alike, before anything is written;
/// - a roster cut to half its reported `total_size` fails, nothing written;
/// - the real import (a held post from a non-member, an owner and a moderator, six members)
///   beside a running server: the simulated world receives nothing at all — no "your post is
///   held" notice to the non-member, no notice to the moderators, no welcome. The barrier is a
///   member's post sent after the import: once it is delivered, anything the import had set
///   off would have been delivered too, and the world has that post only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_sends_nothing_checks_its_inputs_and_refuses_a_short_roster() {
    let Some(bin) = tokio::task::spawn_blocking(mailman_bin).await.unwrap() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let mm = Mailman::start(bin, tmp.path());
    mm.wait_up().await;
    build_list(&mm, tmp.path()).await;
    let mut failures: Vec<String> = Vec::new();

    let missing = tmp.path().join("no-such-archive.mbox");
    let missing_arg = missing.display().to_string();
    for apply in [false, true] {
        let (cfg, data) = config_for(tmp.path(), &format!("missing-{apply}"), None);
        let mut extra = vec!["--archive", missing_arg.as_str()];
        if apply {
            extra.push("--apply");
        }
        let (ok, out) = import_mm3(&cfg, &mm.rest, &extra).await;
        if ok || !out.contains("no-such-archive.mbox") {
            failures.push(format!(
                "a missing archive was not refused (apply: {apply}):\n{out}"
            ));
        }
        if let Some(w) = written(&data) {
            failures.push(format!("a missing archive, apply {apply}: {w} written"));
        }
    }

    let proxy = cutting_proxy(mm.rest.clone()).await;
    let (cfg, data) = config_for(tmp.path(), "short", None);
    let (ok, out) = import_mm3(&cfg, &proxy, &["--apply"]).await;
    if ok || !(out.contains("reports 6") && out.contains("3 were read")) {
        failures.push(format!("a roster cut in half was not refused:\n{out}"));
    }
    if let Some(w) = written(&data) {
        failures.push(format!("a roster cut in half: {w} written"));
    }

    let world = herald_sim::World::start(world_config(
        &[Default::default(), Default::default()],
        true,
    ))
    .await
    .unwrap();
    support::authenticate_senders(&world, &["d0.test", "d1.test"]);
    let data = tmp.path().join("herald");
    let server = TestServer::start(server_config(&world, data.clone())).await;
    let (cfg, _) = config_for(tmp.path(), "herald", Some(server.http));
    // The archive of a live list: its last post is minutes old.
    let mbox = tmp.path().join("recent.mbox");
    let now = herald_types::unix_ms_now() / 1000;
    std::fs::write(
        &mbox,
        format!(
            "From reg@d0.test Mon Jan  1 00:00:00 2024\nFrom: Reg Ular <reg@d0.test>\n\
             To: dev@lists.test\nSubject: Fresh from Mailman\nMessage-ID: <fresh@d0.test>\n\
             Date: {}\n\nHistory, if recent.\n",
            herald_telemetry::time::rfc5322_date(now.saturating_sub(300))
        ),
    )
    .unwrap();
    let mbox_arg = mbox.display().to_string();
    let (ok, out) = import_mm3(&cfg, &mm.rest, &["--archive", &mbox_arg, "--apply"]).await;
    assert!(ok, "{out}");
    assert!(out.contains("6 members added"), "{out}");
    assert!(out.contains("held in Herald as post"), "{out}");
    let held: Vec<herald_api_types::HeldView> =
        support::get_view(&format!("{}/api/v1/held", server.api)).await;
    assert_eq!(
        held.len(),
        1,
        "the held post waits for a moderator: {held:?}"
    );

    let (mut smtp, _) = support::Smtp::connect(server.smtp).await;
    smtp.cmd("EHLO d0.test").await;
    let reply = smtp
        .send_mail(
            "reg@d0.test",
            &[LIST],
            b"From: Reg Ular <reg@d0.test>\r\nTo: dev@lists.test\r\nSubject: after\r\n\
              Message-ID: <after-import@d0.test>\r\n\r\nStill quiet?\r\n",
        )
        .await;
    assert!(reply.starts_with("250"), "{reply}");
    wait_complete(
        &server.api,
        &support::queued_id(&reply),
        Duration::from_secs(60),
    )
    .await;
    wait_settled(&server.api, Duration::from_secs(60)).await;
    let snap = world.recorder().snapshot();
    let other: Vec<String> = snap
        .copies
        .iter()
        .filter(|c| c.message_id.as_deref() != Some("<after-import@d0.test>"))
        .map(|c| format!("{} {:?}", c.recipient, c.message_id))
        .collect();
    eprintln!("messages the import sent: {}", other.len());
    if !other.is_empty() {
        failures.push(format!(
            "the import sent {} messages: {other:?}",
            other.len()
        ));
    }
    assert!(
        !snap.copies.is_empty(),
        "the member's post after the import was delivered"
    );
    // The next digest carries the post after the import, not the imported history.
    let out = herald_cli(&server.api, None, &["digest", "send-now", LIST]);
    assert!(out.contains(" sent ("), "{out}");
    wait_settled(&server.api, Duration::from_secs(60)).await;
    for who in ["dig@d0.test", "plain@d0.test"] {
        let digests = copies_for(&world, who);
        assert_eq!(digests.len(), 1, "{who}: one digest");
        let text = String::from_utf8_lossy(&digests[0]);
        assert!(text.contains("Still quiet?"), "{who}: {text}");
        if text.contains("Fresh from Mailman") {
            failures.push(format!("{who}'s digest mailed imported history"));
        }
    }
    server.stop().await;
    world.shutdown().await;
    drop(mm);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
