//! DSN parameters inbound (RFC 3461) end to end over real sockets: a front MTA
//! that sends `RET`, `ENVID`, `NOTIFY` and `ORCPT` is not refused (a raw SMTP session); a
//! message to postmaster keeps them and its forward arrives at an operator host that offers DSN
//! with the parameters intact, and at one that does not without them (RFC 3461 §4); a list
//! post does not pass the poster's parameters to members (the list is the new originator);
//! malformed parameters get `501 5.5.4` and lose nothing else of the session.

use crate::support;

use herald_sim::{Profile, World};
use serde_json::json;
use std::time::{Duration, Instant};
use support::*;

const LIST: &str = "dev@lists.test";
const MEMBER: &str = "alice@d0.test";
const OPS_DSN: &str = "ops@d1.test";
const OPS_PLAIN: &str = "ops@d2.test";

/// d0 (the member) and d1 offer DSN; d2 does not.
async fn start() -> (World, TestServer, tempfile::TempDir) {
    let mut cfg = world_config(&[const { Profile::Normal }; 3], true);
    cfg.domains[0].extensions.dsn = true;
    cfg.domains[1].extensions.dsn = true;
    let world = World::start(cfg).await.expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = server_config(&world, dir.path().to_path_buf());
    config.postmaster.forward = vec![OPS_DSN.into(), OPS_PLAIN.into()];
    let server = TestServer::start(config).await;
    create_list(&server.api, LIST, json!({"posting_policy": "anyone"})).await;
    add_members(&server.api, LIST, &[MEMBER]).await;
    (world, server, dir)
}

/// One transaction with parameters, as a front MTA writes it; returns the reply to the end of
/// DATA and every reply before it.
async fn send(server: &TestServer, mail: &str, rcpt: &str, msg: &str) -> Vec<String> {
    let (mut c, _) = Smtp::connect(server.smtp).await;
    let ehlo = c.cmd("EHLO front.d0.test").await;
    assert!(ehlo.starts_with("250"), "{ehlo}");
    let mut replies = vec![c.cmd(mail).await, c.cmd(rcpt).await, c.cmd("DATA").await];
    c.send_raw(format!("{msg}.\r\n").as_bytes()).await;
    replies.push(c.reply().await);
    c.cmd("QUIT").await;
    replies
}

/// The lines of the EHLO reply, read off a raw socket.
async fn ehlo_lines(server: &TestServer) -> Vec<String> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let stream = tokio::net::TcpStream::connect(server.smtp)
        .await
        .expect("connect");
    let mut s = BufReader::new(stream);
    let mut line = String::new();
    s.read_line(&mut line).await.expect("banner");
    s.get_mut()
        .write_all(b"EHLO front.d0.test\r\n")
        .await
        .expect("write");
    let mut lines = Vec::new();
    loop {
        line.clear();
        s.read_line(&mut line).await.expect("ehlo");
        lines.push(line.trim_end().to_string());
        if !line.starts_with("250-") {
            return lines;
        }
    }
}

fn wait_copies(world: &World, rcpt: &str) -> Vec<herald_sim::CopyRecord> {
    world
        .recorder()
        .snapshot()
        .copies_for(rcpt)
        .into_iter()
        .cloned()
        .collect()
}

async fn wait_copy(world: &World, rcpt: &str) -> herald_sim::CopyRecord {
    let started = Instant::now();
    loop {
        if let Some(c) = wait_copies(world, rcpt).pop() {
            return c;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no copy for {rcpt}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dsn_parameters_are_accepted_and_passed_on_where_herald_relays() {
    let (world, server, _dir) = start().await;

    // The EHLO offers DSN (every line of the reply read).
    let ehlo = ehlo_lines(&server).await;
    assert!(ehlo.iter().any(|l| l == "250-DSN"), "{ehlo:?}");

    // A list post with all four parameters is accepted.
    let post = "From: alice@d0.test\r\nTo: dev@lists.test\r\nSubject: with dsn\r\n\
                Message-ID: <dsn-post@d0.test>\r\n\r\nhello\r\n";
    let r = send(
        &server,
        "MAIL FROM:<alice@d0.test> RET=HDRS ENVID=QQ314159+2Bpost",
        "RCPT TO:<dev@lists.test> NOTIFY=SUCCESS,FAILURE ORCPT=rfc822;dev+40lists.test",
        post,
    )
    .await;
    assert!(r[0].starts_with("250") && r[1].starts_with("250"), "{r:?}");
    assert!(r[3].starts_with("250"), "{r:?}");
    // The member's host offers DSN, yet the copy carries none: the list is the originator.
    let copy = wait_copy(&world, MEMBER).await;
    assert_eq!(
        &*copy.dsn, "",
        "list posts do not relay the poster's DSN request"
    );

    // Mail to postmaster with all four: the forward carries them to the host that offers DSN.
    let pm = "From: someone@d0.test\r\nTo: postmaster@herald.test\r\nSubject: your server\r\n\
              Message-ID: <pm-dsn@d0.test>\r\n\r\nplease look\r\n";
    let r = send(
        &server,
        "MAIL FROM:<someone@d0.test> RET=FULL ENVID=pm-1",
        "RCPT TO:<postmaster@herald.test> NOTIFY=FAILURE,DELAY ORCPT=rfc822;postmaster+40herald.test",
        pm,
    )
    .await;
    assert!(r[3].starts_with("250"), "{r:?}");
    let fwd = wait_copy(&world, OPS_DSN).await;
    assert_eq!(
        &*fwd.dsn,
        "RET=FULL ENVID=pm-1 NOTIFY=FAILURE,DELAY ORCPT=rfc822;postmaster+40herald.test"
    );
    assert_eq!(&*fwd.sender, "", "forwards go out from <>");
    // The host without DSN gets the forward without them (RFC 3461 §4), not a refusal.
    let plain = wait_copy(&world, OPS_PLAIN).await;
    assert_eq!(&*plain.dsn, "");

    // Hostile parameters: 501 each, and the session carries on.
    let (mut c, _) = Smtp::connect(server.smtp).await;
    c.cmd("EHLO front.d0.test").await;
    for (line, want) in [
        ("MAIL FROM:<a@d0.test> RET=EVERYTHING", "501 5.5.4"),
        ("MAIL FROM:<a@d0.test> ENVID=a+0D+0AQUIT", "501 5.5.4"),
        ("MAIL FROM:<a@d0.test> ENVID=bad=xtext", "501 5.5.4"),
        ("MAIL FROM:<a@d0.test> RET=FULL RET=HDRS", "501 5.5.4"),
        ("MAIL FROM:<a@d0.test>", "250"),
        ("RCPT TO:<dev@lists.test> NOTIFY=NEVER,SUCCESS", "501 5.5.4"),
        ("RCPT TO:<dev@lists.test> NOTIFY=DELAY,DELAY", "501 5.5.4"),
        (
            "RCPT TO:<dev@lists.test> ORCPT=rfc822;a+0D+0Ab",
            "501 5.5.4",
        ),
        ("RCPT TO:<dev@lists.test> NOTIFY=NEVER", "250"),
    ] {
        let r = c.cmd(line).await;
        assert!(r.starts_with(want), "{line}: {r}");
    }
    c.cmd("QUIT").await;

    server.stop().await;
    world.shutdown().await;
}
