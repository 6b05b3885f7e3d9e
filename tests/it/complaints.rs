//! Against the running server on the simulated world: a member marks a post
//! as spam, their provider sends a feedback-loop report built around the very copy the member
//! received (as Yahoo, AOL or Microsoft do), and Herald takes exactly that member off the list
//! and suppresses them; the other members are untouched; a second report is harmless; garbage
//! and forged reports are counted and kept, never acted on.

use crate::support;

use herald_sim::{Profile, World};
use serde_json::json;
use std::time::{Duration, Instant};
use support::*;

const LIST: &str = "dev@lists.test";
const BOUNCES: &str = "dev-bounces@lists.test";
const COMPLAINTS: &str = "complaints@lists.test";
/// A member's status as the API shows an enabled one.
const ENABLED: &str = "{\"state\":\"enabled\"}";
const MEMBERS: [&str; 3] = ["alice@d0.test", "bob@d1.test", "carol@d0.test"];

async fn setup() -> (World, TestServer, tempfile::TempDir) {
    let world = World::start(world_config(&[Profile::Normal, Profile::Normal], true))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = server_config(&world, dir.path().to_path_buf());
    config.complaints.local_part = "complaints".into();
    let server = TestServer::start(config).await;
    create_list(&server.api, LIST, json!({"posting_policy": "anyone"})).await;
    add_members(&server.api, LIST, &MEMBERS).await;
    (world, server, dir)
}

/// The copy `member` received, as their mailbox has it: the receiving MTA's `Return-Path`
/// (the envelope sender, our VERP address) on top.
async fn delivered_copy(world: &World, member: &str) -> String {
    let started = Instant::now();
    loop {
        let snap = world.recorder().snapshot();
        if let Some(c) = snap.copies.iter().find(|c| &*c.recipient == member) {
            let msg = c.message.as_ref().expect("keep_messages");
            return format!(
                "Return-Path: <{}>\r\n{}",
                c.sender,
                String::from_utf8_lossy(msg)
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no copy for {member}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// An RFC 5965 report around `original` (`message/rfc822`, or `text/rfc822-headers` with the
/// header block only), as a provider's feedback loop sends it.
fn arf_report(original: &str, headers_only: bool, user_agent: &str) -> Vec<u8> {
    let (ctype, quoted) = if headers_only {
        let end = original.find("\r\n\r\n").unwrap_or(original.len());
        ("text/rfc822-headers", &original[..end])
    } else {
        ("message/rfc822", original)
    };
    format!(
        "From: feedback@fbl.provider.test\r\nTo: {BOUNCES}\r\nSubject: Abuse report\r\n\
Message-ID: <fbl-{}@provider.test>\r\nMIME-Version: 1.0\r\n\
Content-Type: multipart/report; report-type=feedback-report; boundary=\"arf\"\r\n\r\n\
--arf\r\nContent-Type: text/plain\r\n\r\nThis is an email abuse report.\r\n\
--arf\r\nContent-Type: message/feedback-report\r\n\r\n\
Feedback-Type: abuse\r\nUser-Agent: {user_agent}\r\nVersion: 1\r\n\r\n\
--arf\r\nContent-Type: {ctype}\r\n\r\n{quoted}\r\n--arf--\r\n",
        quoted.len()
    )
    .into_bytes()
}

async fn member_status(api: &str, member: &str) -> Option<String> {
    let (status, body) = http(
        "GET",
        &format!("{api}/api/v1/lists/{LIST}/members/{member}"),
        None,
    )
    .await;
    match status {
        404 => None,
        200 => Some(body["status"].to_string()),
        s => panic!("{s}: {body}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_arf_report_unsubscribes_exactly_the_member_who_complained() {
    let (world, server, _dir) = setup().await;
    let api = &server.api;
    let (mut s, _) = Smtp::connect(server.smtp).await;
    assert!(s.cmd("EHLO poster.test").await.starts_with("250"));
    let r = s
        .send_mail(
            "dave@d1.test",
            &[LIST],
            b"From: dave@d1.test\r\nSubject: weekly news\r\nMessage-ID: <n1@d1.test>\r\n\r\nnews\r\n",
        )
        .await;
    wait_complete(api, &queued_id(&r), Duration::from_secs(30)).await;
    let alice_copy = delivered_copy(&world, "alice@d0.test").await;
    let bob_copy = delivered_copy(&world, "bob@d1.test").await;

    // Alice's provider reports her copy to -bounces (the copy's Return-Path is VERP, the
    // report goes to the plain address as many FBLs send it): she is unsubscribed and
    // suppressed on this list; bob and carol are untouched.
    let complaints = "herald_complaints_total{list=\"dev@lists.test\"}";
    let report = arf_report(&alice_copy, false, "Yahoo!-Mail-Feedback/2.0");
    assert!(s
        .send_mail("", &[BOUNCES], &report)
        .await
        .starts_with("250"));
    wait_metric(api, complaints, 1).await;
    assert_eq!(
        member_status(api, "alice@d0.test").await,
        None,
        "unsubscribed"
    );
    for m in ["bob@d1.test", "carol@d0.test"] {
        assert_eq!(member_status(api, m).await.as_deref(), Some(ENABLED), "{m}");
    }
    let supp: Vec<herald_api_types::SuppressionView> =
        get_view(&format!("{api}/api/v1/suppressions?list={LIST}")).await;
    assert_eq!(supp.len(), 1);
    assert_eq!(supp[0].address, "alice@d0.test");
    assert_eq!(supp[0].source, "complaint");
    assert!(
        supp[0]
            .reason
            .contains("abuse complaint via Yahoo!-Mail-Feedback/2.0"),
        "{:?}",
        supp[0]
    );
    // She cannot be added back by mistake.
    let (status, body) = http(
        "POST",
        &format!("{api}/api/v1/lists/{LIST}/members"),
        Some(json!({"address": "alice@d0.test"})),
    )
    .await;
    assert_eq!(status, 403, "{body}");

    // The same report again (providers resend): harmless, not counted twice.
    assert!(s
        .send_mail("", &[BOUNCES], &report)
        .await
        .starts_with("250"));
    // Bob's provider sends headers only, without List-Unsubscribe (VERP + List-Id), to the
    // complaints address, on a list set to disable rather than unsubscribe.
    let (status, body) = http(
        "PATCH",
        &format!("{api}/api/v1/lists/{LIST}"),
        Some(json!({"complaint_action": "disable"})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let stripped: String = bob_copy
        .split("\r\n")
        .filter(|l| !l.starts_with("List-Unsubscribe") && !l.starts_with(" <mailto:"))
        .collect::<Vec<_>>()
        .join("\r\n");
    assert!(stripped.contains("List-Id:"));
    let report = arf_report(&stripped, true, "AOL SComp");
    assert!(s
        .send_mail("", &[COMPLAINTS], &report)
        .await
        .starts_with("250"));
    wait_metric(api, complaints, 2).await;
    let bob = member_status(api, "bob@d1.test")
        .await
        .expect("kept, disabled");
    assert!(bob.contains("complaint"), "{bob}");

    // Garbage and forgeries: a report with no original, one naming carol by VERP but
    // without our List-Id, plain junk to the complaints address. Counted, kept, no action.
    let unmatched = "herald_complaints_unmatched_total";
    let no_original = arf_report("", false, "x");
    assert!(s
        .send_mail("", &[BOUNCES], &no_original)
        .await
        .starts_with("250"));
    let forged = "Return-Path: <dev-bounces+carol=d0.test@lists.test>\r\nList-Id: <other.list.test>\r\nSubject: x\r\n\r\nx";
    assert!(s
        .send_mail("", &[COMPLAINTS], &arf_report(forged, false, "evil"))
        .await
        .starts_with("250"));
    assert!(s
        .send_mail(
            "x@d1.test",
            &[COMPLAINTS],
            b"Subject: hi\r\n\r\nnot a report\r\n"
        )
        .await
        .starts_with("250"));
    wait_metric(api, unmatched, 3).await;
    assert_eq!(metric(api, complaints).await, 2, "the repeat was harmless");
    let view: herald_api_types::ListView = get_view(&format!("{api}/api/v1/lists/{LIST}")).await;
    assert_eq!(
        view.complaints, 2,
        "the list view (and the dashboard's table) shows them"
    );
    assert_eq!(
        member_status(api, "carol@d0.test").await.as_deref(),
        Some(ENABLED)
    );
    let kept: Vec<herald_api_types::BounceEvent> = get_view(&format!(
        "{api}/api/v1/bounces?list={LIST}&kind=unrecognized"
    ))
    .await;
    assert_eq!(
        kept.len(),
        1,
        "the report to -bounces is kept for an administrator: {kept:?}"
    );
    assert_eq!(kept[0].source, "complaint");
    // A complaint is not a bounce: nobody's bounce score moved.
    s.cmd("QUIT").await;
    server.stop().await;
}
