//! Transactions against well-behaved scripted servers: pipelining, lock-step, refusals.

use crate::support::client_config;
use crate::support::smtp::{serve, Script};
use herald_smtp_client::{Connection, OutgoingCopy, SessionErrorKind, Stage};
use herald_types::RcptOutcome;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

const BODY: &[u8] = b"Subject: hi\r\n\r\nhello\r\n..dot-stuffed line\r\n";

fn outcome_code(c: &OutgoingCopy<'_>) -> Option<(&'static str, u16)> {
    c.outcome
        .as_ref()
        .map(|o| (o.status_word(), o.reply().code))
}

#[tokio::test]
async fn pipelined_copies_cost_one_round_trip_each() {
    let (addr, server) = serve(Script::default()).await;
    let mut conn = Connection::connect(addr, "mx.test", &client_config())
        .await
        .unwrap();
    assert!(conn.extensions().pipelining);
    let rcpts = ["a@example.test", "b@example.test", "c@example.test"];
    let mut copies: Vec<_> = rcpts
        .iter()
        .map(|r| OutgoingCopy::new("list-bounces+x@herald.test", r, BODY))
        .collect();
    conn.send(&mut copies).await.unwrap();
    assert!(conn.is_reusable());
    assert_eq!(conn.transactions(), 3);
    for c in &copies {
        assert!(
            matches!(c.outcome, Some(RcptOutcome::Delivered(_))),
            "{c:?}"
        );
        assert!(c.xdelay.is_some());
    }
    conn.quit().await;

    let rec = server.await.unwrap();
    let reads = rec.transaction_reads();
    // MAIL/RCPT/DATA in one read; then body+dot+next group; …; the last body alone.
    assert_eq!(reads.len(), copies.len() + 1, "{reads:#?}");
    let mail = format!(
        "MAIL FROM:<list-bounces+x@herald.test> SIZE={}\r\n",
        BODY.len() + 3
    );
    assert!(reads[0].starts_with(&mail), "{}", reads[0]);
    assert!(
        reads[0].ends_with("RCPT TO:<a@example.test>\r\nDATA\r\n"),
        "{}",
        reads[0]
    );
    assert!(reads[1].starts_with("Subject: hi"));
    assert!(reads[1].contains("\r\n.\r\nMAIL FROM:"));
    assert!(reads[1].ends_with("RCPT TO:<b@example.test>\r\nDATA\r\n"));
    assert!(reads[3].ends_with("dot-stuffed line\r\n.\r\n"));
    assert_eq!(rec.accepted.len(), 3);
    assert_eq!(rec.accepted[2].rcpts, vec!["c@example.test".to_string()]);
    assert_eq!(rec.accepted[0].body, BODY);
    assert!(rec.commands.iter().all(|c| c != "RSET"));
}

#[tokio::test]
async fn without_pipelining_commands_go_in_lock_step() {
    let script = Script {
        extensions: Some(vec!["8BITMIME"]),
        ..Script::default()
    };
    let (addr, server) = serve(script).await;
    let mut conn = Connection::connect(addr, "mx.test", &client_config())
        .await
        .unwrap();
    let body = "Subject: caf\u{e9}\r\n\r\n8bit\r\n".as_bytes();
    let mut copies = vec![
        OutgoingCopy::new("", "a@example.test", body),
        OutgoingCopy::new("", "b@example.test", body),
    ];
    conn.send(&mut copies).await.unwrap();
    assert!(copies
        .iter()
        .all(|c| outcome_code(c) == Some(("sent", 250))));
    conn.quit().await;
    let rec = server.await.unwrap();
    let reads = rec.transaction_reads();
    // MAIL, RCPT, DATA, body for each copy: one read each.
    assert_eq!(reads.len(), 8, "{reads:#?}");
    assert_eq!(reads[0], "MAIL FROM:<> BODY=8BITMIME\r\n");
    assert_eq!(reads[1], "RCPT TO:<a@example.test>\r\n");
}

#[tokio::test]
async fn helo_fallback_when_ehlo_is_refused() {
    let script = Script {
        extensions: None,
        ..Script::default()
    };
    let (addr, server) = serve(script).await;
    let mut conn = Connection::connect(addr, "mx.test", &client_config())
        .await
        .unwrap();
    assert!(!conn.extensions().esmtp);
    let mut copies = vec![OutgoingCopy::new("a@herald.test", "u@example.test", BODY)];
    conn.send(&mut copies).await.unwrap();
    assert_eq!(outcome_code(&copies[0]), Some(("sent", 250)));
    conn.quit().await;
    let rec = server.await.unwrap();
    assert_eq!(rec.commands[..2], ["EHLO herald.test", "HELO herald.test"]);
}

#[tokio::test]
async fn refused_recipient_sends_no_body_and_resets_before_the_next_copy() {
    let script = Script {
        rcpt: Box::new(|r| match r {
            "bad@example.test" => "550 5.1.1 no such user".into(),
            _ => "250 2.1.5 ok".into(),
        }),
        ..Script::default()
    };
    let (addr, server) = serve(script).await;
    let mut conn = Connection::connect(addr, "mx.test", &client_config())
        .await
        .unwrap();
    let mut copies = vec![
        OutgoingCopy::new("r@herald.test", "bad@example.test", BODY),
        OutgoingCopy::new("r@herald.test", "good@example.test", BODY),
    ];
    conn.send(&mut copies).await.unwrap();
    assert_eq!(outcome_code(&copies[0]), Some(("bounced", 550)));
    assert_eq!(outcome_code(&copies[1]), Some(("sent", 250)));
    conn.quit().await;
    let rec = server.await.unwrap();
    let reads = rec.transaction_reads();
    assert!(reads[1].starts_with("RSET\r\nMAIL FROM:"), "{reads:#?}");
    assert_eq!(rec.accepted.len(), 1);
    assert_eq!(rec.accepted[0].rcpts, vec!["good@example.test".to_string()]);
}

#[tokio::test]
async fn transient_refusals_defer_and_keep_the_connection() {
    let script = Script {
        rcpt: Box::new(|r| match r {
            "full@example.test" => "452 4.2.2 mailbox full".into(),
            _ => "250 2.1.5 ok".into(),
        }),
        final_reply: Box::new(|i| {
            Some(
                if i == 1 {
                    "451 4.3.0 try later"
                } else {
                    "250 ok"
                }
                .into(),
            )
        }),
        ..Script::default()
    };
    let (addr, server) = serve(script).await;
    let mut conn = Connection::connect(addr, "mx.test", &client_config())
        .await
        .unwrap();
    let mut copies = vec![
        OutgoingCopy::new("r@herald.test", "full@example.test", BODY),
        OutgoingCopy::new("r@herald.test", "one@example.test", BODY),
        OutgoingCopy::new("r@herald.test", "two@example.test", BODY),
    ];
    conn.send(&mut copies).await.unwrap();
    let got: Vec<_> = copies.iter().map(outcome_code).collect();
    assert_eq!(
        got,
        vec![
            Some(("deferred", 452)),
            Some(("sent", 250)),
            Some(("deferred", 451))
        ]
    );
    assert!(conn.is_reusable());
    // The connection still works after the deferrals.
    let mut more = vec![OutgoingCopy::new(
        "r@herald.test",
        "three@example.test",
        BODY,
    )];
    conn.send(&mut more).await.unwrap();
    assert_eq!(outcome_code(&more[0]), Some(("sent", 250)));
    conn.quit().await;
    assert_eq!(server.await.unwrap().accepted.len(), 2);
}

#[tokio::test]
async fn a_rate_limit_at_mail_stops_the_batch_and_keeps_the_connection() {
    let script = Script {
        mail: Box::new(|n| match n {
            1 => "451 4.7.28 unusual rate of mail, try again later".into(),
            _ => "250 2.1.0 ok".into(),
        }),
        ..Script::default()
    };
    let (addr, server) = serve(script).await;
    let mut conn = Connection::connect(addr, "mx.test", &client_config())
        .await
        .unwrap();
    let rcpts = [
        "a@example.test",
        "b@example.test",
        "c@example.test",
        "d@example.test",
    ];
    let mut copies: Vec<_> = rcpts
        .iter()
        .map(|r| OutgoingCopy::new("r@herald.test", r, BODY))
        .collect();
    conn.send(&mut copies).await.unwrap();
    let got: Vec<_> = copies.iter().map(outcome_code).collect();
    // The refused MAIL ends the batch: the rest were never tried (no MAIL sent for them).
    assert_eq!(
        got,
        vec![Some(("sent", 250)), Some(("deferred", 451)), None, None]
    );
    assert!(conn.is_reusable());
    let mut more = vec![OutgoingCopy::new("r@herald.test", "c@example.test", BODY)];
    conn.send(&mut more).await.unwrap();
    assert_eq!(outcome_code(&more[0]), Some(("sent", 250)));
    conn.quit().await;
    let rec = server.await.unwrap();
    assert_eq!(rec.accepted.len(), 2);
    let mails = rec
        .commands
        .iter()
        .filter(|c| c.starts_with("MAIL"))
        .count();
    assert_eq!(mails, 3, "{:?}", rec.commands);
}

#[tokio::test]
async fn service_closing_mid_session_defers_and_leaves_the_rest_unknown() {
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    let script = Script {
        rcpt: Box::new(move |_| match counter.fetch_add(1, Ordering::SeqCst) {
            1 => "421 4.3.2 shutting down".into(),
            _ => "250 2.1.5 ok".into(),
        }),
        ..Script::default()
    };
    let (addr, _server) = serve(script).await;
    let mut conn = Connection::connect(addr, "mx.test", &client_config())
        .await
        .unwrap();
    let mut copies: Vec<_> = ["a@x.test", "b@x.test", "c@x.test"]
        .iter()
        .map(|r| OutgoingCopy::new("r@herald.test", r, BODY))
        .collect();
    let err = conn.send(&mut copies).await.unwrap_err();
    assert!(
        matches!(err.kind(), SessionErrorKind::Rejected(r) if r.code == 421),
        "{err}"
    );
    assert_eq!(err.stage(), Stage::Rcpt);
    assert!(!err.is_host_problem());
    assert_eq!(outcome_code(&copies[0]), Some(("sent", 250)));
    assert_eq!(outcome_code(&copies[1]), Some(("deferred", 421)));
    assert!(copies[2].outcome.is_none());
    assert!(!conn.is_reusable());
    let again = conn.send(&mut copies[2..]).await.unwrap_err();
    assert!(matches!(again.kind(), SessionErrorKind::Unusable));
}

#[tokio::test]
async fn server_closing_before_the_final_reply_leaves_the_copy_unknown() {
    let script = Script {
        final_reply: Box::new(|i| (i == 0).then(|| "250 ok".to_string())),
        ..Script::default()
    };
    let (addr, _server) = serve(script).await;
    let mut conn = Connection::connect(addr, "mx.test", &client_config())
        .await
        .unwrap();
    let mut copies = vec![
        OutgoingCopy::new("r@herald.test", "a@x.test", BODY),
        OutgoingCopy::new("r@herald.test", "b@x.test", BODY),
    ];
    let err = conn.send(&mut copies).await.unwrap_err();
    assert!(
        matches!(err.kind(), SessionErrorKind::ServerClosed),
        "{err}"
    );
    assert_eq!(err.stage(), Stage::DataEnd);
    assert!(err.is_host_problem());
    let reply = err.synthetic_reply();
    assert_eq!(reply.code, 451);
    assert!(
        reply
            .text
            .starts_with("lost connection with mx.test[127.0.0.1]"),
        "{reply}"
    );
    assert_eq!(outcome_code(&copies[0]), Some(("sent", 250)));
    assert!(copies[1].outcome.is_none());
}

#[tokio::test]
async fn local_checks_fail_copies_without_sending_them() {
    let script = Script {
        extensions: Some(vec!["PIPELINING", "SIZE 100"]),
        ..Script::default()
    };
    let (addr, server) = serve(script).await;
    let mut conn = Connection::connect(addr, "mx.test", &client_config())
        .await
        .unwrap();
    let big = vec![b'x'; 200];
    let mut copies = vec![
        OutgoingCopy::new("r@herald.test", "big@x.test", &big),
        OutgoingCopy::new(
            "r@herald.test",
            "evil@x.test>\r\nRCPT TO:<other@x.test",
            BODY,
        ),
        OutgoingCopy::new("r@herald.test", "fine@x.test", BODY),
    ];
    conn.send(&mut copies).await.unwrap();
    assert_eq!(outcome_code(&copies[0]), Some(("bounced", 552)));
    assert_eq!(outcome_code(&copies[1]), Some(("bounced", 553)));
    assert_eq!(outcome_code(&copies[2]), Some(("sent", 250)));
    conn.quit().await;
    let rec = server.await.unwrap();
    let rcpts: Vec<_> = rec
        .commands
        .iter()
        .filter(|c| c.starts_with("RCPT"))
        .collect();
    assert_eq!(rcpts, vec!["RCPT TO:<fine@x.test>"]);
}

#[tokio::test]
async fn utf8_envelopes_go_only_to_servers_that_offer_smtputf8() {
    let rp = "l-bounces+j\u{f6}rg=x.test@herald.test";
    for (offered, want) in [(true, ("sent", 250)), (false, ("bounced", 553))] {
        let mut extensions = vec!["PIPELINING"];
        if offered {
            extensions.push("SMTPUTF8");
        }
        let script = Script {
            extensions: Some(extensions),
            ..Script::default()
        };
        let (addr, server) = serve(script).await;
        let mut conn = Connection::connect(addr, "mx.test", &client_config())
            .await
            .unwrap();
        let mut copies = vec![
            OutgoingCopy::new(rp, "j\u{f6}rg@x.test", BODY),
            // An IDN domain is an A-label: no SMTPUTF8 needed.
            OutgoingCopy::new("r@herald.test", "info@xn--mnchen-3ya.test", BODY),
        ];
        conn.send(&mut copies).await.unwrap();
        assert_eq!(outcome_code(&copies[0]), Some(want), "offered: {offered}");
        assert_eq!(outcome_code(&copies[1]), Some(("sent", 250)));
        if let Some(RcptOutcome::Failed(r)) = &copies[0].outcome {
            assert_eq!(r.enhanced.map(|e| e.to_string()).as_deref(), Some("5.6.7"));
            assert!(r.text.contains("SMTPUTF8"), "{}", r.text);
        }
        conn.quit().await;
        let rec = server.await.unwrap();
        let mails: Vec<_> = rec
            .commands
            .iter()
            .filter(|c| c.starts_with("MAIL"))
            .cloned()
            .collect();
        let want_mails = if offered {
            vec![
                format!("MAIL FROM:<{rp}> SMTPUTF8"),
                "MAIL FROM:<r@herald.test>".to_string(),
            ]
        } else {
            vec!["MAIL FROM:<r@herald.test>".to_string()]
        };
        assert_eq!(mails, want_mails);
    }
}

#[tokio::test]
async fn large_bodies_are_written_in_place_and_arrive_intact() {
    let (addr, server) = serve(Script::default()).await;
    let mut conn = Connection::connect(addr, "mx.test", &client_config())
        .await
        .unwrap();
    let line = b"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde\r\n";
    let big: Vec<u8> = line
        .iter()
        .copied()
        .cycle()
        .take(line.len() * 5000)
        .collect();
    assert!(big.len() > herald_smtp_client::transaction::INLINE_BODY_MAX);
    let mut copies = vec![
        OutgoingCopy::new("r@herald.test", "a@x.test", &big),
        OutgoingCopy::new("r@herald.test", "b@x.test", BODY),
    ];
    conn.send(&mut copies).await.unwrap();
    assert!(copies
        .iter()
        .all(|c| outcome_code(c) == Some(("sent", 250))));
    conn.quit().await;
    let rec = server.await.unwrap();
    assert_eq!(rec.accepted[0].body, big);
    assert_eq!(rec.accepted[1].body, BODY);
}

/// A connection from an egress source leaves from that local address: the server
/// sees it as the peer. A source of the other address family is refused before any socket is
/// opened, as a local problem, never the host's.
#[tokio::test]
async fn connections_leave_from_the_source_address_they_are_given() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let (peer_tx, peer_rx) = tokio::sync::oneshot::channel();
    let addr = crate::support::smtp::raw(|tcp| async move {
        let _ = peer_tx.send(tcp.peer_addr().unwrap());
        let mut tcp = BufReader::new(tcp);
        tcp.get_mut().write_all(b"220 mx.test\r\n").await.unwrap();
        let mut line = String::new();
        while tcp.read_line(&mut line).await.unwrap_or(0) > 0 {
            let reply: &[u8] = if line.starts_with("QUIT") {
                b"221 bye\r\n"
            } else {
                b"250 mx.test\r\n"
            };
            tcp.get_mut().write_all(reply).await.unwrap();
            line.clear();
        }
    })
    .await;
    let source: std::net::IpAddr = "127.0.0.5".parse().unwrap();
    let conn = Connection::connect_from(Some(source), addr, "mx.test", &client_config(), false)
        .await
        .unwrap();
    assert_eq!(peer_rx.await.unwrap().ip(), source);
    conn.quit().await;

    let v6: std::net::IpAddr = "::1".parse().unwrap();
    let err = Connection::connect_from(Some(v6), addr, "mx.test", &client_config(), false)
        .await
        .expect_err("mixed families");
    assert!(matches!(err.kind(), SessionErrorKind::Bind { .. }), "{err}");
    assert!(!err.is_host_problem());
    assert_eq!(err.stage(), Stage::Connect);
    assert!(err.to_string().contains("from ::1"), "{err}");
}
