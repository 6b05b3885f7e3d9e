//! `herald import` and `herald export herald` as an operator runs them — the real
//! binary, a config file naming the data directory, real files in the real formats — beside a
//! live server (its API sees what the import wrote), and killed mid-apply (`kill -9`) to show a
//! re-run finishes the job.

// Helpers outside #[test] functions unwrap too: a failure there is a test failure.
#![allow(clippy::unwrap_used)]

use crate::support;

use herald_directory::{ConsentSource, Directory, SuppressionSource};
use herald_types::{Address, DeliveryMode, ListSettings, MemberId};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use support::binary::herald_with_config;
use support::{server_config, world_config, TestServer};

fn config_file(dir: &Path, data_dir: &Path) -> PathBuf {
    let path = dir.join("herald.toml");
    std::fs::write(
        &path,
        format!("data_dir = {:?}\n", data_dir.display().to_string()),
    )
    .unwrap();
    path
}

fn run_ok(config: &Path, args: &[&str]) -> String {
    let (ok, out) = herald_with_config(config, args);
    assert!(ok, "herald {args:?} failed:\n{out}");
    out
}

fn a(s: &str) -> Address {
    Address::parse(s).unwrap()
}

/// listmonk's export header and rows exactly as `handleExportSubscribers` writes them (Go's
/// encoding/csv quoting, `time.Time.String()` dates), with every status and broken rows.
const LISTMONK_CSV: &str = "uuid,email,name,attributes,status,created_at,updated_at\n\
0f6a0f1e-5d57-4d0a-9a1b-3e9f7a1c2b01,ann@d0.test,Ann Example,\"{\"\"city\"\": \"\"Oslo\"\", \"\"plan\"\": {\"\"tier\"\": \"\"gold\"\", \"\"seats\"\": 3}, \"\"beta\"\": true}\",enabled,2024-03-01 09:15:02.123456 +0000 UTC,2024-03-02 10:00:00 +0000 UTC\n\
1f6a0f1e-5d57-4d0a-9a1b-3e9f7a1c2b02,bob@d0.test,Bob,{},disabled,2024-03-01 09:15:02 +0000 UTC,2024-03-01 09:15:02 +0000 UTC\n\
2f6a0f1e-5d57-4d0a-9a1b-3e9f7a1c2b03,spam@d0.test,Spammer,{},blocklisted,2024-03-01 09:15:02 +0000 UTC,2024-03-01 09:15:02 +0000 UTC\n\
3f6a0f1e-5d57-4d0a-9a1b-3e9f7a1c2b04,no-at-sign,Nobody,{},enabled,2024-03-01 09:15:02 +0000 UTC,2024-03-01 09:15:02 +0000 UTC\n\
4f6a0f1e-5d57-4d0a-9a1b-3e9f7a1c2b05,short@d0.test,Short,{},enabled\n\
5f6a0f1e-5d57-4d0a-9a1b-3e9f7a1c2b06,badjson@d0.test,X,{not json,enabled,2024-03-01 09:15:02 +0000 UTC,2024-03-01 09:15:02 +0000 UTC\n\
6f6a0f1e-5d57-4d0a-9a1b-3e9f7a1c2b07,odd@d0.test,X,{},unsubscribed,2024-03-01 09:15:02 +0000 UTC,2024-03-01 09:15:02 +0000 UTC\n\
7f6a0f1e-5d57-4d0a-9a1b-3e9f7a1c2b08,gone@d0.test,Gone,{},enabled,2024-03-01 09:15:02 +0000 UTC,2024-03-01 09:15:02 +0000 UTC\n\
8f6a0f1e-5d57-4d0a-9a1b-3e9f7a1c2b09,x@banned.test,Banned,{},enabled,2024-03-01 09:15:02 +0000 UTC,2024-03-01 09:15:02 +0000 UTC\n\
9f6a0f1e-5d57-4d0a-9a1b-3e9f7a1c2b10,ann@d0.test,Ann Again,{},enabled,2024-03-01 09:15:02 +0000 UTC,2024-03-01 09:15:02 +0000 UTC\n\
af6a0f1e-5d57-4d0a-9a1b-3e9f7a1c2b11,evil@d0.test,\"Eve\r\nBcc: all@d0.test\",{},enabled,2024-03-01 09:15:02 +0000 UTC,2024-03-01 09:15:02 +0000 UTC\n\
bf6a0f1e-5d57-4d0a-9a1b-3e9f7a1c2b12,cy@d0.test,Cy,\"{\"\"note\"\": \"\"tab\\there\"\"}\",enabled,2024-03-01 09:15:02 +0000 UTC,2024-03-01 09:15:02 +0000 UTC\n\
cf6a0f1e-5d57-4d0a-9a1b-3e9f7a1c2b13,dee@d0.test,,,enabled,2024-03-01 09:15:02 +0000 UTC,2024-03-01 09:15:02 +0000 UTC\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listmonk_export_dry_run_apply_once_beside_a_live_server_every_row_accounted_for() {
    let world = herald_sim::World::start(world_config(&[Default::default()], false))
        .await
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let server = TestServer::start(server_config(&world, data.clone())).await;
    let cfg = config_file(tmp.path(), &data);
    let csv = tmp.path().join("subscribers.csv");
    std::fs::write(&csv, LISTMONK_CSV).unwrap();
    // What Herald already refuses: a suppressed address and a banned domain.
    let d = Directory::open(&data.join("herald.db")).unwrap();
    d.suppress(
        None,
        &a("gone@d0.test"),
        "erased",
        SuppressionSource::Erasure,
    )
    .unwrap();
    d.add_ban(None, "@banned.test").unwrap();

    let args = [
        "import",
        "listmonk",
        csv.to_str().unwrap(),
        "--list",
        "news@lists.test",
    ];
    let dry = run_ok(&cfg, &args);
    assert!(dry.contains("news@lists.test: create list"), "{dry}");
    assert!(dry.contains("members: 3 to add"), "{dry}");
    assert!(dry.contains("dry run: nothing written"), "{dry}");
    assert!(
        d.list_by_address(&a("news@lists.test")).unwrap().is_none(),
        "dry run wrote"
    );

    let mut apply = args.to_vec();
    apply.push("--apply");
    let out = run_ok(&cfg, &apply);
    assert!(out.contains("3 members added"), "{out}");
    // Every row that did not become a member is in the report, with its reason.
    for (row, why) in [
        ("line 5", "invalid address"),
        ("line 6", "5 columns, the export has 7"),
        ("line 7", "attributes are not a JSON object"),
        ("line 8", "unknown status \"unsubscribed\""),
        ("member gone@d0.test", "suppression list"),
        (
            "member x@banned.test",
            "banned by the global ban @banned.test",
        ),
        ("line 11", "appeared already (line 2)"),
        ("member evil@d0.test", "control character"),
        ("member cy@d0.test", "control character"),
    ] {
        let hit = out.lines().any(|l| l.contains(row) && l.contains(why));
        assert!(hit, "no skip {row} / {why} in:\n{out}");
    }
    let list = d.list_by_address(&a("news@lists.test")).unwrap().unwrap();
    let ann = d.member(list.id, &a("ann@d0.test")).unwrap().unwrap();
    assert_eq!(ann.display_name.as_deref(), Some("Ann Example"));
    assert_eq!(ann.fields["city"], "Oslo");
    assert_eq!(ann.fields["plan.tier"], "gold");
    assert_eq!(ann.fields["plan.seats"], "3");
    assert_eq!(ann.fields["beta"], "true");
    let bob = d.member(list.id, &a("bob@d0.test")).unwrap().unwrap();
    assert!(
        !bob.status.is_enabled(),
        "disabled in listmonk stays disabled"
    );
    assert!(d.member(list.id, &a("dee@d0.test")).unwrap().is_some());
    assert!(d.member(list.id, &a("cy@d0.test")).unwrap().is_none());
    assert_eq!(
        d.member_consent(list.id, &a("ann@d0.test"))
            .unwrap()
            .map(|c| c.source),
        Some(ConsentSource::Import)
    );
    let blocked = d
        .suppression_for(None, &a("spam@d0.test"))
        .unwrap()
        .unwrap();
    assert_eq!(blocked.reason, "blocklisted in listmonk");
    assert!(d.member(list.id, &a("spam@d0.test")).unwrap().is_none());
    assert!(d.member(list.id, &a("gone@d0.test")).unwrap().is_none());
    // The running server sees the import.
    let (status, body) = support::http(
        "GET",
        &format!("{}/api/v1/lists/news@lists.test/members", server.api),
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body.as_array().map(Vec::len), Some(3), "{body}");

    // Idempotent: the same import again plans and writes nothing.
    let again = run_ok(&cfg, &apply);
    assert!(again.contains("news@lists.test: list unchanged"), "{again}");
    assert!(
        again.contains("0 to add, 0 to update, 3 unchanged"),
        "{again}"
    );
    assert!(again.contains("0 members added, 0 updated"), "{again}");
    let dry = run_ok(&cfg, &args);
    assert!(dry.contains("dry run: nothing to change"), "{dry}");
    server.stop().await;
}

fn many_members_csv(n: usize) -> String {
    let mut s = String::from("uuid,email,name,attributes,status,created_at,updated_at\n");
    for i in 0..n {
        s.push_str(&format!(
            "u{i},m{i}@d{}.test,Member {i},\"{{\"\"n\"\": {i}}}\",enabled,2024-01-01 00:00:00 +0000 UTC,2024-01-01 00:00:00 +0000 UTC\n",
            i % 7
        ));
    }
    s
}

fn ledger_written(data: &Path) -> u64 {
    let Ok(bytes) = std::fs::read(data.join("import-ledger.json")) else {
        return 0;
    };
    let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    v["under_way"]["members_written"].as_u64().unwrap_or(0)
}

/// `kill -9` in the middle of applying: the batches committed before stay, the ledger says how
/// far it got, and the next run finishes the import (no member lost, none twice).
#[test]
fn an_import_killed_mid_apply_is_finished_by_the_next_run() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let cfg = config_file(tmp.path(), &data);
    let csv = tmp.path().join("subscribers.csv");
    const N: usize = 20_000;
    std::fs::write(&csv, many_members_csv(N)).unwrap();
    let mut child = Command::new(support::binary::herald_bin())
        .arg("--config")
        .arg(&cfg)
        .args(["import", "listmonk"])
        .arg(&csv)
        .args(["--list", "big@lists.test", "--apply", "--batch-rows", "500"])
        .env("HERALD_IMPORT_PAUSE_MS", "40")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while ledger_written(&data) < 2_000 {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "import never got going"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let d = Directory::open(&data.join("herald.db")).unwrap();
    let list = d.list_by_address(&a("big@lists.test")).unwrap().unwrap();
    let partial = d.member_counts(list.id).unwrap().total;
    assert!(
        partial >= 2_000 && partial < N as u64,
        "{partial} members after the kill"
    );
    assert_eq!(partial % 500, 0, "a batch is all or nothing: {partial}");

    let out = run_ok(
        &cfg,
        &[
            "import",
            "listmonk",
            csv.to_str().unwrap(),
            "--list",
            "big@lists.test",
            "--apply",
        ],
    );
    assert!(out.contains("an earlier import"), "{out}");
    assert!(
        out.contains(&format!("{} to add", N as u64 - partial)),
        "{out}"
    );
    assert_eq!(d.member_counts(list.id).unwrap().total, N as u64);
    let page = d
        .members_page(list.id, MemberId(0), MemberId(i64::MAX), N, false)
        .unwrap();
    let mut seen: Vec<_> = page.iter().map(|m| m.address.to_string()).collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), N);
    let again = run_ok(
        &cfg,
        &[
            "import",
            "listmonk",
            csv.to_str().unwrap(),
            "--list",
            "big@lists.test",
        ],
    );
    assert!(!again.contains("an earlier import"), "{again}");
    assert!(again.contains("dry run: nothing to change"), "{again}");
}

fn files_under(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(root).unwrap().display().to_string();
                out.push((rel, std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// Export → import into a fresh data directory → export again gives the same files.
#[test]
fn herald_export_import_round_trip_is_identical() {
    let tmp = tempfile::tempdir().unwrap();
    let data1 = tmp.path().join("one");
    let data2 = tmp.path().join("two");
    std::fs::create_dir_all(&data1).unwrap();
    std::fs::create_dir_all(&data2).unwrap();
    let (cfg1, cfg2) = (
        config_file(&data1, &data1.join("data")),
        config_file(&data2, &data2.join("data")),
    );
    std::fs::create_dir_all(data1.join("data")).unwrap();
    let d = Directory::open(&data1.join("data/herald.db")).unwrap();
    let settings = ListSettings {
        display_name: "Developers".into(),
        subject_prefix: Some("[dev]".into()),
        moderators: vec![a("mod@d0.test")],
        max_message_bytes: 123_456,
        ..ListSettings::default()
    };
    let dev = d.create_list(&a("dev@lists.test"), &settings).unwrap();
    let ann = d
        .create_list(&a("announce@lists.test"), &ListSettings::default())
        .unwrap();
    let c = herald_directory::Consent::now(ConsentSource::Web, Some("192.0.2.7"));
    for (i, mode) in DeliveryMode::ALL.into_iter().enumerate() {
        let mut m = herald_directory::NewMember::new(a(&format!("m{i}@d0.test")));
        m.display_name = Some(format!("Member {i}"));
        m.fields.insert("team".into(), format!("t{i}"));
        d.add_member_consented(dev.id, &m, &c).unwrap();
        d.set_delivery(dev.id, &m.address, mode).unwrap();
    }
    d.set_member_status(
        dev.id,
        &a("m1@d0.test"),
        &herald_types::MemberStatus::Disabled("admin".into()),
    )
    .unwrap();
    d.set_moderated(dev.id, &a("m2@d0.test"), true).unwrap();
    d.add_members(
        ann.id,
        &[herald_directory::NewMember::new(a("solo@d1.test"))],
    )
    .unwrap();
    d.add_member(
        ann.id,
        &herald_directory::NewMember::new(a("later-gone@d1.test")),
    )
    .unwrap();
    d.add_ban(None, "@spam.test").unwrap();
    d.add_ban(Some(dev.id), "^troll[0-9]+@").unwrap();
    d.suppress(
        None,
        &a("erased@d0.test"),
        "erasure request",
        SuppressionSource::Erasure,
    )
    .unwrap();
    d.suppress(
        Some(ann.id),
        &a("later-gone@d1.test"),
        "complaint",
        SuppressionSource::Complaint,
    )
    .unwrap();
    // An archive with two messages, private.
    let mbox = tmp.path().join("dev.mbox");
    std::fs::write(
        &mbox,
        "From a@d0.test Mon Jan  1 00:00:00 2024\nFrom: a@d0.test\nSubject: one\nMessage-ID: <1@d0.test>\nDate: Mon, 1 Jan 2024 00:00:00 +0000\n\nbody one\n\nFrom b@d0.test Tue Jan  2 00:00:00 2024\nFrom: b@d0.test\nSubject: two\nMessage-ID: <2@d0.test>\nDate: Tue, 2 Jan 2024 00:00:00 +0000\n\n>From the start\nbody two\n",
    )
    .unwrap();
    run_ok(
        &cfg1,
        &[
            "archive",
            "import",
            "dev@lists.test",
            mbox.to_str().unwrap(),
        ],
    );

    let out1 = tmp.path().join("export1");
    let said = run_ok(&cfg1, &["export", "herald", out1.to_str().unwrap()]);
    assert!(
        said.contains("exported 2 lists, 5 members, 2 archived messages"),
        "{said}"
    );
    assert!(
        said.contains("left out 1 members whose address is suppressed"),
        "{said}"
    );
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out1.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["format"], "herald-export");
    assert_eq!(manifest["version"], 1);

    let out = run_ok(
        &cfg2,
        &["import", "herald", out1.to_str().unwrap(), "--apply"],
    );
    assert!(out.contains("2 lists created"), "{out}");
    assert!(out.contains("5 members added"), "{out}");
    assert!(out.contains("skipped: nothing"), "{out}");
    let again = run_ok(&cfg2, &["import", "herald", out1.to_str().unwrap()]);
    assert!(again.contains("dry run: nothing to change"), "{again}");
    let out2 = tmp.path().join("export2");
    run_ok(&cfg2, &["export", "herald", out2.to_str().unwrap()]);
    let (f1, f2) = (files_under(&out1), files_under(&out2));
    assert_eq!(
        f1.iter().map(|f| &f.0).collect::<Vec<_>>(),
        f2.iter().map(|f| &f.0).collect::<Vec<_>>()
    );
    for ((name, b1), (_, b2)) in f1.iter().zip(f2.iter()) {
        assert!(
            b1 == b2,
            "{name} differs:\n{}\n---\n{}",
            String::from_utf8_lossy(b1),
            String::from_utf8_lossy(b2)
        );
    }
    // The consent came along as given, not as "import".
    let d2 = Directory::open(&data2.join("data/herald.db")).unwrap();
    let dev2 = d2.list_by_address(&a("dev@lists.test")).unwrap().unwrap();
    assert_eq!(
        d2.member_consent(dev2.id, &a("m0@d0.test")).unwrap(),
        Some(c)
    );
    assert_eq!(dev2.settings, settings);
    // The moderation flag came along, on that member only.
    assert_eq!(d2.moderated(dev2.id, &a("m2@d0.test")).unwrap(), Some(true));
    assert_eq!(
        d2.moderated(dev2.id, &a("m0@d0.test")).unwrap(),
        Some(false)
    );
    let members: String = f1
        .iter()
        .filter(|f| f.0.ends_with(".jsonl"))
        .map(|f| String::from_utf8_lossy(&f.1).into_owned())
        .collect();
    assert_eq!(
        members.matches("\"moderated\":true").count(),
        1,
        "{members}"
    );
}

/// A newer format, a file name escaping the export directory, a truncated manifest, a
/// members file with fewer members than the manifest counts and an archive file that is not
/// there are each refused with one clear line, in the dry run as with `--apply`, and nothing
/// is written.
#[test]
fn hostile_or_newer_exports_are_refused_clearly() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let cfg = config_file(tmp.path(), &data);
    let exp = tmp.path().join("exp");
    std::fs::create_dir_all(exp.join("members")).unwrap();
    std::fs::write(
        exp.join("members/0001.jsonl"),
        "{\"address\":\"a@d0.test\"}\n{\"address\":\"b@d0.test\"}\n",
    )
    .unwrap();
    let cases = [
        (
            r#"{"format":"herald-export","version":1,"lists":[{"address":"x@l.test","settings":{},"members":"members/0001.jsonl","member_count":4}]}"#,
            "the source reports 4 but 2 were read",
        ),
        (
            r#"{"format":"herald-export","version":1,"lists":[{"address":"x@l.test","settings":{},"members":"members/0001.jsonl","member_count":2,"archive":"archive/0001.mbox"}]}"#,
            "archive/0001.mbox",
        ),
        (
            r#"{"format":"herald-export","version":2,"lists":[],"something_new":1}"#,
            "export format version 2; this Herald reads up to version 1",
        ),
        (
            r#"{"format":"herald-export","version":1,"lists":[{"address":"x@l.test","settings":{},"members":"../../etc/passwd","member_count":0}]}"#,
            "leaves the export directory",
        ),
        (r#"{"format":"herald-export","vers"#, "is not readable"),
        (
            r#"{"format":"mailman","version":1,"lists":[]}"#,
            "not \"herald-export\"",
        ),
    ];
    for (manifest, want) in cases {
        std::fs::write(exp.join("manifest.json"), manifest).unwrap();
        for apply in [false, true] {
            let mut args = vec!["import", "herald", exp.to_str().unwrap()];
            if apply {
                args.push("--apply");
            }
            let (ok, out) = herald_with_config(&cfg, &args);
            assert!(!ok, "accepted {manifest} (apply: {apply}): {out}");
            assert!(out.contains(want), "{manifest}: {out}");
            assert!(!out.contains("panicked"), "{out}");
        }
    }
    if data.join("herald.db").exists() {
        let d = Directory::open(&data.join("herald.db")).unwrap();
        assert!(d.lists().unwrap().is_empty());
    }
}

/// `POST /api/v1/lists/<list>/held` (how an import hands over a post held elsewhere) with hostile
/// input: each refused with a 4xx and nothing held, control characters kept out of the reason
/// moderators read, and the same message twice held once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_held_import_endpoint_refuses_hostile_input_and_keeps_one_per_message() {
    let world = herald_sim::World::start(world_config(&[Default::default()], false))
        .await
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let server = TestServer::start(server_config(&world, tmp.path().join("data"))).await;
    let api = &server.api;
    support::create_list(api, "dev@lists.test", serde_json::json!({})).await;
    let msg =
        b"From: x@d1.test\r\nSubject: held\r\nMessage-ID: <h1@d1.test>\r\n\r\nbody\r\n".to_vec();
    let url = |q: &str| format!("{api}/api/v1/lists/dev@lists.test/held?{q}");
    for (q, body, want) in [
        ("reason=r&from=not-an-address", msg.clone(), 400),
        ("reason=r&admin=1", msg.clone(), 400),
        ("from=x@d1.test", msg.clone(), 400),
        ("reason=r", Vec::new(), 400),
    ] {
        let (st, b) = support::http_bytes(&url(q), body).await;
        assert_eq!(st, want, "{q}: {b}");
    }
    let (st, _) = support::http_bytes(
        &format!("{api}/api/v1/lists/nope@lists.test/held?reason=r"),
        msg.clone(),
    )
    .await;
    assert_eq!(st, 404);
    let held: Vec<herald_api_types::HeldView> =
        support::get_view(&format!("{api}/api/v1/held")).await;
    assert!(held.is_empty(), "{held:?}");
    for _ in 0..2 {
        let (st, b) = support::http_bytes(
            &url("reason=held%20in%20Mailman%3A%0D%0ABcc%3A%20evil&from=x%40d1.test"),
            msg.clone(),
        )
        .await;
        assert_eq!(st, 202, "{b}");
    }
    let held: Vec<herald_api_types::HeldView> =
        support::get_view(&format!("{api}/api/v1/held")).await;
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0].reason.as_deref(), Some("held in Mailman:Bcc: evil"));
    assert_eq!(held[0].from.as_deref(), Some("x@d1.test"));
    server.stop().await;
}

/// `herald import … --send-welcome` (an import mails nobody unless asked): the
/// members an import adds get the list's welcome once, through the running server; a member the
/// import only updates gets none. With no server reachable the welcomes wait in the ledger and
/// the next `--apply` run sends them; a third run sends nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_welcome_mails_each_added_member_once_even_across_a_missing_server() {
    let world = herald_sim::World::start(world_config(&[Default::default()], true))
        .await
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let cfg = config_file(tmp.path(), &data);
    let d = Directory::open(&data.join("herald.db")).unwrap();
    let settings = ListSettings {
        display_name: "Club".into(),
        welcome_message: Some("Hello {{email}}, welcome to {{list_name}}!".into()),
        ..ListSettings::default()
    };
    let list = d.create_list(&a("club@lists.test"), &settings).unwrap();
    d.add_members(
        list.id,
        &[herald_directory::NewMember::new(a("pre@d0.test"))],
    )
    .unwrap();
    let csv = tmp.path().join("subscribers.csv");
    std::fs::write(
        &csv,
        "uuid,email,name,attributes,status,created_at,updated_at\n\
         u1,pre@d0.test,Pre Existing,{},enabled,2024-03-01 09:15:02 +0000 UTC,2024-03-01 09:15:02 +0000 UTC\n\
         u2,new1@d0.test,One,{},enabled,2024-03-01 09:15:02 +0000 UTC,2024-03-01 09:15:02 +0000 UTC\n\
         u3,new2@d0.test,Two,{},enabled,2024-03-01 09:15:02 +0000 UTC,2024-03-01 09:15:02 +0000 UTC\n\
         u4,new3@d0.test,Three,{},enabled,2024-03-01 09:15:02 +0000 UTC,2024-03-01 09:15:02 +0000 UTC\n",
    )
    .unwrap();
    let run = |server: &str, extra: &[&str]| {
        let mut args = vec![
            "import",
            "listmonk",
            csv.to_str().unwrap(),
            "--list",
            "club@lists.test",
            "--apply",
        ];
        args.extend_from_slice(extra);
        let out = Command::new(support::binary::herald_bin())
            .arg("--config")
            .arg(&cfg)
            .args(&args)
            .env("HERALD_SERVER", server)
            .output()
            .unwrap();
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    };
    // No server: the members are written, the welcomes wait (and the run says so, failing).
    let nobody = format!("http://127.0.0.1:{}", support::binary::free_port());
    let (ok, out) = run(&nobody, &["--send-welcome"]);
    assert!(
        !ok,
        "a welcome that could not be sent must not pass silently:\n{out}"
    );
    assert!(out.contains("3 members added, 1 updated"), "{out}");
    assert!(out.contains("kept for the next run"), "{out}");
    assert_eq!(d.member_counts(list.id).unwrap().total, 4);

    // The server is up: the next run (the same import, nothing left to write) sends them.
    let server = TestServer::start(server_config(&world, data.clone())).await;
    let (ok, out) = run(&server.api, &[]);
    assert!(ok, "{out}");
    assert!(out.contains("0 members added"), "{out}");
    assert!(out.contains("welcome: 3 sent"), "{out}");
    let rec = world.recorder();
    let started = Instant::now();
    loop {
        let s = rec.snapshot();
        if ["new1@d0.test", "new2@d0.test", "new3@d0.test"]
            .iter()
            .all(|m| !s.copies_for(m).is_empty())
        {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "no welcome");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A third run sends nothing more.
    let (ok, out) = run(&server.api, &["--send-welcome"]);
    assert!(ok, "{out}");
    assert!(out.contains("welcome: 0 added members"), "{out}");
    assert!(!out.contains("sent to"), "{out}");
    support::wait_settled(&server.api, Duration::from_secs(30)).await;
    let s = rec.snapshot();
    for m in ["new1@d0.test", "new2@d0.test", "new3@d0.test"] {
        let copies = s.copies_for(m);
        assert_eq!(copies.len(), 1, "{m} welcomed once");
        let text = String::from_utf8_lossy(copies[0].message.as_ref().unwrap()).into_owned();
        assert!(text.contains("Subject: Welcome to Club"), "{text}");
        assert!(
            text.contains(&format!("Hello {m}, welcome to Club!")),
            "{text}"
        );
        assert!(text.contains("/manage"), "{text}");
    }
    assert!(
        s.copies_for("pre@d0.test").is_empty(),
        "an updated member is not welcomed"
    );
    server.stop().await;
    world.shutdown().await;
}
