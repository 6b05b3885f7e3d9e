//! The listeners over real sockets on 127.0.0.1: SMTP and LMTP end to end, pipelining, relay
//! refusal, hostile input, session limits, timeouts and graceful shutdown.

mod common;

use common::{start, want, Client, HOSTNAME};
use herald_inbound::{serve, InboundConfig, InboundError, Mode};
use herald_types::Address;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn addr(s: &str) -> Address {
    Address::parse(s).expect("valid test address")
}

const BODY: &[u8] = b"Subject: test\r\nMessage-ID: <1@c.example>\r\n\r\n..dot\r\nline\r\n.\r\n";
const UNSTUFFED: &[u8] = b"Subject: test\r\nMessage-ID: <1@c.example>\r\n\r\n.dot\r\nline\r\n";

#[tokio::test]
async fn smtp_end_to_end_hands_over_exact_bytes_with_a_received_header() {
    let server = start(Mode::Smtp, |_| {}).await;
    let mut c = Client::connect(server.addr).await;
    c.send(b"EHLO client.example\r\n").await;
    let ehlo = c.reply_text().await;
    assert!(ehlo.starts_with(&format!("250-{HOSTNAME}\r\n")));
    assert!(ehlo.contains("250-PIPELINING\r\n") && ehlo.contains("250-SIZE 26214400\r\n"));
    c.send(b"MAIL FROM:<alice@sender.example>\r\n").await;
    assert_eq!(c.reply().await, "250 2.1.0");
    c.send(b"RCPT TO:<list@lists.example>\r\n").await;
    assert_eq!(c.reply().await, "250 2.1.5");
    c.send(b"DATA\r\n").await;
    assert_eq!(c.reply().await, "354");
    c.send(BODY).await;
    assert_eq!(c.reply().await, "250 2.0.0");
    c.send(b"QUIT\r\n").await;
    assert_eq!(c.reply().await, "221 2.0.0");
    assert!(c.closed().await);

    let messages = server.recorder.messages();
    assert_eq!(messages.len(), 1);
    let m = &messages[0];
    assert_eq!(m.envelope.mail_from, Some(addr("alice@sender.example")));
    assert_eq!(m.envelope.rcpts, vec![addr("list@lists.example")]);
    assert_eq!(m.peer.ip().to_string(), "127.0.0.1");
    let body = &m.envelope.body[..];
    let header_end = body
        .windows(2)
        .position(|w| w == b"\r\n")
        .map(|i| i + 2)
        .unwrap_or(0);
    assert!(body.starts_with(b"Received: from client.example ([127.0.0.1])\r\n"));
    assert!(
        body.ends_with(UNSTUFFED),
        "the message itself is exactly what was sent, unstuffed"
    );
    let header_len = body.len() - UNSTUFFED.len();
    assert!(header_end < header_len);
    let header = std::str::from_utf8(&body[..header_len]).unwrap();
    assert!(header.contains(&format!(
        "by {HOSTNAME} (Herald) with ESMTP\r\n\tfor <list@lists.example>;"
    )));
    assert!(header.ends_with(&format!(
        "{}\r\n",
        herald_inbound::received::rfc5322_date(m.received_at_ms)
    )));

    let parsed = mail_parser::MessageParser::default()
        .parse(body)
        .expect("parses as a message");
    let received = parsed.received().expect("a Received header");
    assert_eq!(
        received.from_ip().map(|ip| ip.to_string()),
        Some("127.0.0.1".into())
    );
    assert_eq!(received.with(), Some(mail_parser::Protocol::ESMTP));
    assert_eq!(parsed.message_id(), Some("1@c.example"));
    server.shutdown.cancel();
    assert!(server.task.await.unwrap().is_ok());
}

#[tokio::test]
async fn lmtp_end_to_end_replies_per_recipient() {
    let server = start(Mode::Lmtp, |_| {}).await;
    let mut c = Client::connect(server.addr).await;
    c.send(b"EHLO client.example\r\nLHLO client.example\r\n")
        .await;
    assert_eq!(c.replies(2).await, want(&["500 5.5.1", "250"]));
    c.send(b"MAIL FROM:<>\r\nRCPT TO:<list@lists.example>\r\nRCPT TO:<full@lists.example>\r\nRCPT TO:<list-bounces+bob=x.example@lists.example>\r\nDATA\r\n").await;
    assert_eq!(
        c.replies(5).await,
        want(&["250 2.1.0", "250 2.1.5", "250 2.1.5", "250 2.1.5", "354"])
    );
    c.send(BODY).await;
    assert_eq!(
        c.replies(3).await,
        want(&["250 2.0.0", "452 4.2.2", "250 2.0.0"])
    );
    let m = &server.recorder.messages()[0];
    assert_eq!(m.envelope.mail_from, None);
    assert_eq!(m.envelope.rcpts.len(), 3);
    assert!(m.envelope.body.starts_with(b"Received: from client.example ([127.0.0.1])\r\n\tby mx.herald.test (Herald) with LMTP;\r\n"));
    assert!(m.envelope.body.ends_with(UNSTUFFED));
}

#[tokio::test]
async fn pipelined_transaction_in_one_write_gets_every_reply() {
    let server = start(Mode::Smtp, |_| {}).await;
    let mut c = Client::connect(server.addr).await;
    let mut all = b"EHLO client.example\r\nMAIL FROM:<a@c.example> SIZE=100\r\nRCPT TO:<victim@elsewhere.example>\r\n\
RCPT TO:<list@lists.example>\r\nRCPT TO:<list-request@lists.example>\r\nDATA\r\n".to_vec();
    all.extend_from_slice(BODY);
    all.extend_from_slice(b"RSET\r\nQUIT\r\n");
    c.send(&all).await;
    let got = c.replies(9).await;
    assert_eq!(
        got,
        want(&[
            "250",
            "250 2.1.0",
            "550 5.1.1",
            "250 2.1.5",
            "250 2.1.5",
            "354",
            "250 2.0.0",
            "250 2.0.0",
            "221 2.0.0"
        ])
    );
    assert!(c.closed().await);
    let messages = server.recorder.messages();
    assert_eq!(messages.len(), 1);
    assert_eq!(
        messages[0].envelope.rcpts,
        vec![
            addr("list@lists.example"),
            addr("list-request@lists.example")
        ]
    );
    assert!(messages[0].envelope.body.ends_with(UNSTUFFED));
}

#[tokio::test]
async fn relay_attempts_are_refused() {
    let server = start(Mode::Smtp, |_| {}).await;
    let mut c = Client::connect(server.addr).await;
    c.send(b"EHLO c.example\r\nMAIL FROM:<a@c.example>\r\nRCPT TO:<someone@gmail.example>\r\nRCPT TO:<list@lists.example.evil>\r\nDATA\r\n").await;
    assert_eq!(
        c.replies(5).await,
        want(&["250", "250 2.1.0", "550 5.1.1", "550 5.1.1", "554 5.5.1"])
    );
    assert_eq!(server.recorder.checked().len(), 2);
    assert!(server.recorder.messages().is_empty());
}

#[tokio::test]
async fn oversize_messages_are_refused_at_mail_and_at_end_of_data() {
    let server = start(Mode::Smtp, |c| c.limits.max_message_octets = 1000).await;
    let mut c = Client::connect(server.addr).await;
    c.send(b"EHLO c.example\r\nMAIL FROM:<a@c.example> SIZE=1001\r\nMAIL FROM:<a@c.example>\r\nRCPT TO:<list@lists.example>\r\nDATA\r\n").await;
    assert_eq!(
        c.replies(5).await,
        want(&["250", "552 5.3.4", "250 2.1.0", "250 2.1.5", "354"])
    );
    let line = [b'x'; 98];
    for _ in 0..30 {
        c.send(&line).await;
        c.send(b"\r\n").await;
    }
    c.send(b".\r\nMAIL FROM:<a@c.example>\r\nRCPT TO:<list@lists.example>\r\nDATA\r\n")
        .await;
    assert_eq!(
        c.replies(4).await,
        want(&["552 5.3.4", "250 2.1.0", "250 2.1.5", "354"])
    );
    c.send(b"small\r\n.\r\n").await;
    assert_eq!(c.reply().await, "250 2.0.0");
    let messages = server.recorder.messages();
    assert_eq!(messages.len(), 1);
    assert!(messages[0].envelope.body.ends_with(b"\r\nsmall\r\n"));
}

#[tokio::test]
async fn over_long_command_line_gets_500_and_the_session_continues() {
    let server = start(Mode::Smtp, |_| {}).await;
    let mut c = Client::connect(server.addr).await;
    let mut long = b"EHLO ".to_vec();
    long.extend_from_slice(&[b'a'; 100_000]);
    long.extend_from_slice(b"\r\nNOOP\r\n");
    c.send(&long).await;
    assert_eq!(c.replies(2).await, want(&["500 5.5.2", "250 2.0.0"]));
}

#[tokio::test]
async fn bare_lf_in_data_is_refused_and_never_split() {
    let server = start(Mode::Smtp, |_| {}).await;
    let mut c = Client::connect(server.addr).await;
    c.send(
        b"EHLO c.example\r\nMAIL FROM:<a@c.example>\r\nRCPT TO:<list@lists.example>\r\nDATA\r\n",
    )
    .await;
    assert_eq!(
        c.replies(4).await,
        want(&["250", "250 2.1.0", "250 2.1.5", "354"])
    );
    c.send(b"Subject: x\r\n\r\nhello\n.\nMAIL FROM:<ceo@victim.example>\r\nRCPT TO:<list-bounces@lists.example>\r\nDATA\r\nforged\r\n.\r\nNOOP\r\n").await;
    assert_eq!(c.replies(2).await, want(&["550 5.6.0", "250 2.0.0"]));
    assert!(server.recorder.messages().is_empty());
    assert_eq!(server.recorder.checked(), vec![addr("list@lists.example")]);
}

/// A NUL before the dot (`\r\n\0.\r\n`) was accepted with the NUL intact; a
/// receiver that strips NULs would then read the dot as the end of data.
#[tokio::test]
async fn nul_octet_in_data_is_refused_over_a_real_socket() {
    let server = start(Mode::Smtp, |_| {}).await;
    let mut c = Client::connect(server.addr).await;
    c.send(
        b"EHLO c.example\r\nMAIL FROM:<a@c.example>\r\nRCPT TO:<list@lists.example>\r\nDATA\r\n",
    )
    .await;
    assert_eq!(
        c.replies(4).await,
        want(&["250", "250 2.1.0", "250 2.1.5", "354"])
    );
    c.send(b"Subject: x\r\n\r\nhello\r\n\0.\r\nMAIL FROM:<ceo@victim.example>\r\n.\r\nNOOP\r\n")
        .await;
    assert_eq!(c.replies(2).await, want(&["550 5.6.0", "250 2.0.0"]));
    assert!(server.recorder.messages().is_empty());
}

#[tokio::test]
async fn session_limit_refuses_the_next_connection_with_421() {
    // Shedding off: the plain limit, as before idle sessions could be shed (see limits.rs).
    let server = start(Mode::Smtp, |c| {
        c.max_sessions = 2;
        c.shed_idle_sessions = false;
    })
    .await;
    let first = Client::connect(server.addr).await;
    let _second = Client::connect(server.addr).await;
    let mut third = Client::connect_raw(server.addr).await;
    assert_eq!(third.reply().await, "421 4.3.2");
    assert!(third.closed().await);
    // A slot frees up when a session ends.
    drop(first);
    let started = Instant::now();
    loop {
        let mut c = Client::connect_raw(server.addr).await;
        if c.reply().await == "220" {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "slot never released"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn silent_peers_time_out_with_421() {
    let server = start(Mode::Smtp, |c| {
        c.limits.command_timeout_secs = 1;
        c.limits.data_timeout_secs = 1;
    })
    .await;
    let mut idle = Client::connect(server.addr).await;
    let mut in_data = Client::connect(server.addr).await;
    in_data.send(b"EHLO c.example\r\nMAIL FROM:<a@c.example>\r\nRCPT TO:<list@lists.example>\r\nDATA\r\npartial line").await;
    assert_eq!(
        in_data.replies(4).await,
        want(&["250", "250 2.1.0", "250 2.1.5", "354"])
    );
    let started = Instant::now();
    assert_eq!(idle.reply().await, "421 4.4.2");
    assert_eq!(in_data.reply().await, "421 4.4.2");
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(idle.closed().await);
    assert!(in_data.closed().await);
    assert!(server.recorder.messages().is_empty());
}

#[tokio::test]
async fn graceful_shutdown_lets_transactions_finish_within_the_grace_period() {
    let server = start(Mode::Smtp, |c| c.shutdown_grace_secs = 1).await;
    let mut idle = Client::connect(server.addr).await;
    let mut finishing = Client::connect(server.addr).await;
    let mut stalled = Client::connect(server.addr).await;
    let open = b"EHLO c.example\r\nMAIL FROM:<a@c.example>\r\nRCPT TO:<list@lists.example>\r\n";
    finishing.send(open).await;
    stalled.send(open).await;
    stalled.send(b"DATA\r\n").await;
    assert_eq!(
        finishing.replies(3).await,
        want(&["250", "250 2.1.0", "250 2.1.5"])
    );
    assert_eq!(
        stalled.replies(4).await,
        want(&["250", "250 2.1.0", "250 2.1.5", "354"])
    );

    server.shutdown.cancel();
    assert_eq!(
        idle.reply().await,
        "421 4.3.2",
        "idle sessions are closed at once"
    );
    assert!(idle.closed().await);
    finishing.send(b"DATA\r\n").await;
    assert_eq!(finishing.reply().await, "354");
    finishing.send(BODY).await;
    assert_eq!(
        finishing.replies(2).await,
        want(&["250 2.0.0", "421 4.3.2"])
    );
    assert!(finishing.closed().await);
    assert_eq!(
        stalled.reply().await,
        "421 4.3.2",
        "the grace period ends stalled transactions"
    );
    assert!(stalled.closed().await);

    let result = tokio::time::timeout(Duration::from_secs(5), server.task).await;
    assert!(
        matches!(result, Ok(Ok(Ok(())))),
        "serve returns once every session ended"
    );
    assert_eq!(
        server.recorder.messages().len(),
        1,
        "the finished transaction was delivered"
    );
    assert!(
        tokio::net::TcpStream::connect(server.addr).await.is_err(),
        "no longer listening"
    );
}

#[tokio::test]
async fn invalid_configuration_is_refused_before_serving() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let recorder = Arc::new(common::Recorder::new());
    let result = serve(
        listener,
        Mode::Smtp,
        InboundConfig::new("bad host\r\n"),
        recorder,
        tokio_util::sync::CancellationToken::new(),
    )
    .await;
    assert!(matches!(result, Err(InboundError::InvalidHostname(_))));
}
