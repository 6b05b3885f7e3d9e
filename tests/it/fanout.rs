//! End to end over real sockets: posts arrive over SMTP and the HTTP API, and every member's
//! mailbox in the simulated world gets exactly one personalized copy of each, with the VERP
//! return path, the List-* headers, a valid signed unsubscribe link, the footer filled with
//! its own fields, and MIME that parses.

use crate::support;

use herald_sim::{Profile, World};
use herald_types::Address;
use mail_parser::MessageParser;
use serde_json::json;
use std::time::Duration;
use support::*;

const LIST: &str = "news@lists.test";
const MEMBERS: usize = 2400;
const DOMAINS: usize = 12;

fn plain_post() -> Vec<u8> {
    let body = "Dear members,\r\n.starts with a dot\r\nThe quarterly news.\r\n".repeat(40);
    format!(
        "From: Poster <poster@outside.test>\r\nTo: {LIST}\r\nSubject: Quarterly news\r\n\
         Message-ID: <plain-1@outside.test>\r\nList-Id: <forged.list>\r\nMIME-Version: 1.0\r\n\
         Content-Type: text/plain; charset=us-ascii\r\n\r\n{body}"
    )
    .into_bytes()
}

fn multipart_post() -> Vec<u8> {
    format!(
        "From: Poster <poster@outside.test>\r\nTo: {LIST}\r\nSubject: Re: [news] HTML edition\r\n\
         Message-ID: <multi-1@outside.test>\r\nMIME-Version: 1.0\r\n\
         Content-Type: multipart/alternative; boundary=\"b1\"\r\n\r\n\
         --b1\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nPlain edition.\r\n\
         --b1\r\nContent-Type: text/html; charset=utf-8\r\n\r\n<p>HTML edition.</p>\r\n\
         --b1--\r\n"
    )
    .into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_member_gets_exactly_one_personalized_copy_of_each_post() {
    let world = World::start(world_config(&vec![Profile::Normal; DOMAINS], true))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let server = TestServer::start(server_config(&world, dir.path().to_path_buf())).await;
    let api = server.api.clone();
    create_list(
        &api,
        LIST,
        json!({
            "display_name": "Quarterly News",
            "posting_policy": "anyone",
            "subject_prefix": "[news]",
            "footer": "--\nHello {{name}} from {{city}} <{{email}}>\nLeave: {{unsubscribe_url}}\n",
            "personalize": true,
        }),
    )
    .await;
    let (status, report) = http_bytes(
        &format!("{api}/api/v1/lists/{LIST}/import"),
        members_csv(MEMBERS, DOMAINS).into_bytes(),
    )
    .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(
        view::<herald_api_types::ImportReport>("import", &report).added,
        MEMBERS as u64
    );

    // Post 1 over SMTP, post 2 through the HTTP API.
    let (mut smtp, banner) = Smtp::connect(server.smtp).await;
    assert!(banner.starts_with("220"), "{banner}");
    assert!(smtp
        .cmd("EHLO client.outside.test")
        .await
        .starts_with("250"));
    let reply = smtp
        .send_mail("poster@outside.test", &[LIST], &plain_post())
        .await;
    let post1 = queued_id(&reply);
    smtp.cmd("QUIT").await;
    let (status, r) = http_bytes(
        &format!("{api}/api/v1/lists/{LIST}/posts"),
        multipart_post(),
    )
    .await;
    assert_eq!(status, 202, "{r}");
    let post2 = view::<herald_api_types::Injected>("inject", &r).post;

    for post in [&post1, &post2] {
        let p = wait_complete(&api, post, Duration::from_secs(120)).await;
        assert_eq!(p.recipients, Some(MEMBERS as u64), "{p:?}");
        assert_eq!(p.delivered, MEMBERS as u64, "{p:?}");
        assert_eq!(p.failed, 0, "{p:?}");
    }

    let snap = world.recorder().snapshot();
    assert_eq!(snap.accepted, 2 * MEMBERS as u64);
    assert_eq!(snap.duplicates, 0);
    assert_eq!(snap.mime_malformed, 0);
    assert_eq!(snap.mime_checked, 2 * MEMBERS as u64);
    let list = Address::parse(LIST).expect("list");
    for i in 0..MEMBERS {
        let addr = format!("m{i}@d{}.test", i % DOMAINS);
        let copies = snap.copies_for(&addr);
        assert_eq!(copies.len(), 2, "{addr} got {} copies", copies.len());
        let member = Address::parse(&addr).expect("member");
        for copy in copies {
            assert_eq!(
                &*copy.sender,
                herald_types::verp::verp_return_path(&list, &member)
            );
            let raw = copy.message.as_ref().expect("kept message");
            check_copy(raw, i, &member, &list);
        }
    }
    // /metrics counts the same outcomes.
    let metrics = reqwest::get(format!("{api}/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    let delivered_line = format!(
        "herald_copies_total{{outcome=\"delivered\"}} {}",
        2 * MEMBERS
    );
    assert!(metrics.contains(&delivered_line), "{metrics}");
    assert!(
        metrics.contains("herald_posts_completed_total 2\n"),
        "{metrics}"
    );
    assert!(metrics.contains("herald_spool_commits_total"), "{metrics}");

    let data_dir = server.data_dir.clone();
    server.stop().await;
    world.shutdown().await;

    // One delivery log line per attempt, greppable in the classic fields.
    let log = std::fs::read_to_string(data_dir.join("log/delivery.log")).expect("delivery log");
    let sent: Vec<&str> = log.lines().filter(|l| l.contains("status=sent")).collect();
    assert_eq!(sent.len(), 2 * MEMBERS);
    let line = sent[0];
    for field in [
        ": to=<",
        ", relay=mx.d",
        ", delay=",
        ", xdelay=",
        ", tries=1",
        ", dsn=2.",
    ] {
        assert!(line.contains(field), "{field} missing: {line}");
    }
    assert_eq!(
        log.lines().filter(|l| l.ends_with(": completed")).count(),
        2
    );
}

/// One copy's headers and footer are this member's and nobody else's.
fn check_copy(raw: &[u8], i: usize, member: &Address, list: &Address) {
    let text = String::from_utf8_lossy(raw);
    let msg = MessageParser::new().parse(raw).expect("copy parses");
    let head = text.split("\r\n\r\n").next().expect("header block");
    let count = |name: &str| head.lines().filter(|l| l.starts_with(name)).count();
    assert_eq!(count("List-Id:"), 1, "List-Id replaced, not duplicated");
    assert_eq!(count("List-Unsubscribe:"), 1);
    assert_eq!(count("Precedence:"), 1);
    assert!(
        text.contains("List-Id: Quarterly News <news.lists.test>"),
        "{text}"
    );
    assert!(text.contains("List-Post: <mailto:news@lists.test>"));
    assert!(text.contains("List-Unsubscribe-Post: List-Unsubscribe=One-Click"));
    assert!(text.contains("Precedence: list"));
    let subject = msg.subject().expect("subject");
    assert!(
        subject.starts_with("[news] ") || subject.starts_with("Re: [news] "),
        "{subject}"
    );
    assert_eq!(
        subject.matches("[news]").count(),
        1,
        "prefix not doubled: {subject}"
    );
    let to = msg
        .to()
        .and_then(|t| t.first())
        .and_then(|a| a.address())
        .expect("To");
    assert_eq!(to, member.to_string());

    // The unsubscribe URL carries a token that verifies for this member only.
    let unsub = text
        .lines()
        .find(|l| l.starts_with("List-Unsubscribe:"))
        .expect("List-Unsubscribe");
    let url = unsub
        .split('<')
        .nth(1)
        .and_then(|s| s.split('>').next())
        .expect("url");
    let token = url.rsplit('/').next().expect("token");
    let secret = SECRET.as_bytes();
    assert!(herald_fanout::verify_unsubscribe_token(
        secret, list, member, token
    ));
    let other = Address::parse("someone@else.test").expect("addr");
    assert!(!herald_fanout::verify_unsubscribe_token(
        secret, list, &other, token
    ));

    // The footer is filled with this member's fields, in a text/plain part.
    let footer = format!("Hello Member {i} from City{} <{member}>", i % 7);
    let found = msg.text_bodies().any(|p| {
        p.text_contents()
            .is_some_and(|t| t.contains(&footer) && t.contains("Leave: http"))
    });
    assert!(found, "footer for member {i} missing:\n{text}");
}
