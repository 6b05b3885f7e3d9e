//! Hung, slow, refusing and garbage-speaking servers: each must cost at most its timeout.

use crate::support::client_config;
use crate::support::smtp::raw;
use herald_smtp_client::{
    ClientConfig, Connection, OutgoingCopy, ProtocolError, SessionError, SessionErrorKind, Stage,
};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn short() -> ClientConfig {
    ClientConfig {
        banner_timeout: Duration::from_millis(300),
        command_timeout: Duration::from_millis(300),
        ..client_config()
    }
}

async fn connect_err(addr: SocketAddr, cfg: &ClientConfig) -> (SessionError, Duration) {
    let started = Instant::now();
    let err = Connection::connect(addr, "mx.test", cfg).await.unwrap_err();
    (err, started.elapsed())
}

#[tokio::test]
async fn hung_server_times_out_at_the_banner_timeout() {
    let addr = raw(|tcp| async move {
        tokio::time::sleep(Duration::from_secs(10)).await;
        drop(tcp);
    })
    .await;
    let (err, took) = connect_err(addr, &short()).await;
    assert!(matches!(err.kind(), SessionErrorKind::Timeout), "{err}");
    assert_eq!(err.stage(), Stage::Banner);
    assert!(err.is_host_problem());
    assert!(
        took >= Duration::from_millis(290) && took < Duration::from_secs(2),
        "{took:?}"
    );
    let reply = err.synthetic_reply();
    assert_eq!(
        reply.to_string(),
        format!(
            "451 4.4.2 conversation with mx.test[127.0.0.1]:{} timed out during initial greeting",
            addr.port()
        )
    );
}

#[tokio::test]
async fn trickling_reply_is_cut_off_at_the_deadline_for_the_whole_reply() {
    // One byte every 50 ms: every read succeeds well within 300 ms, the reply never completes.
    let trickle = || {
        raw(|mut tcp| async move {
            for b in b"220 mx.test ".iter().chain([b'x'; 1000].iter()) {
                if tcp.write_all(&[*b]).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    // The first pass: cut off at the total all the same, but as a tarpit (bytes kept coming),
    // which is not a host problem (the slow lane serves it).
    let (err, took) = connect_err(trickle().await, &short()).await;
    assert!(matches!(err.kind(), SessionErrorKind::TooSlow), "{err}");
    assert!(err.is_tarpit() && !err.is_host_problem());
    assert!(took < Duration::from_secs(1), "{took:?}");
    // A patient lane (tarpit_after = 0) reads on to its total, where endless slow bytes end as
    // a timeout.
    let patient = ClientConfig {
        tarpit_after: Duration::ZERO,
        ..short()
    };
    let (err, took) = connect_err(trickle().await, &patient).await;
    assert!(matches!(err.kind(), SessionErrorKind::Timeout), "{err}");
    assert!(took < Duration::from_secs(1), "{took:?}");
}

#[tokio::test]
async fn endless_banner_line_is_refused() {
    let addr = raw(|mut tcp| async move {
        let _ = tcp.write_all(b"220 ").await;
        let chunk = [b'x'; 1024];
        while tcp.write_all(&chunk).await.is_ok() {}
    })
    .await;
    let (err, took) = connect_err(addr, &short()).await;
    assert!(
        matches!(
            err.kind(),
            SessionErrorKind::Protocol(ProtocolError::LineTooLong)
        ),
        "{err}"
    );
    assert!(took < Duration::from_millis(300), "{took:?}");
}

#[tokio::test]
async fn endless_multiline_reply_is_refused() {
    let addr = raw(|mut tcp| async move {
        while tcp.write_all(b"220-still greeting\r\n").await.is_ok() {}
    })
    .await;
    let (err, _) = connect_err(addr, &short()).await;
    assert!(
        matches!(
            err.kind(),
            SessionErrorKind::Protocol(ProtocolError::TooManyLines)
        ),
        "{err}"
    );
}

#[tokio::test]
async fn invalid_reply_code_is_a_protocol_error() {
    let addr = raw(|mut tcp| async move {
        let _ = tcp.write_all(b"HTTP/1.1 400 Bad Request\r\n").await;
        tokio::time::sleep(Duration::from_secs(2)).await;
    })
    .await;
    let (err, _) = connect_err(addr, &short()).await;
    assert!(
        matches!(
            err.kind(),
            SessionErrorKind::Protocol(ProtocolError::Malformed(_))
        ),
        "{err}"
    );
    assert_eq!(
        err.synthetic_reply().enhanced.map(|e| e.to_string()),
        Some("4.5.0".into())
    );
}

#[tokio::test]
async fn refusing_banners_are_typed() {
    for banner in ["554 5.7.1 go away", "421 4.3.2 too busy"] {
        let addr = raw(move |mut tcp| async move {
            let _ = tcp.write_all(format!("{banner}\r\n").as_bytes()).await;
            tokio::time::sleep(Duration::from_secs(1)).await;
        })
        .await;
        let (err, _) = connect_err(addr, &short()).await;
        let SessionErrorKind::Rejected(reply) = err.kind() else {
            panic!("{err}");
        };
        assert_eq!(reply.to_string(), banner);
        assert!(err.is_host_problem());
        assert!(err.synthetic_reply().is_transient());
    }
}

#[tokio::test]
async fn refused_connection_is_a_connect_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let (err, _) = connect_err(addr, &short()).await;
    assert!(matches!(err.kind(), SessionErrorKind::Connect(_)), "{err}");
    assert_eq!(err.stage(), Stage::Connect);
    assert!(err
        .synthetic_reply()
        .to_string()
        .starts_with("451 4.4.1 connect to mx.test[127.0.0.1]"));
}

/// Greets and answers EHLO, then reads forever without answering.
async fn mute_after_ehlo(mut tcp: TcpStream) {
    let _ = tcp.write_all(b"220 mx.test\r\n").await;
    let mut buf = [0u8; 1024];
    let _ = tcp.read(&mut buf).await;
    let _ = tcp.write_all(b"250-mx.test\r\n250 PIPELINING\r\n").await;
    while matches!(tcp.read(&mut buf).await, Ok(n) if n > 0) {}
}

#[tokio::test]
async fn silent_server_mid_session_times_out_and_leaves_copies_unknown() {
    let addr = raw(mute_after_ehlo).await;
    let mut conn = Connection::connect(addr, "mx.test", &short())
        .await
        .unwrap();
    let mut copies = vec![OutgoingCopy::new("r@herald.test", "a@x.test", b"x\r\n")];
    let started = Instant::now();
    let err = conn.send(&mut copies).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(1));
    assert!(matches!(err.kind(), SessionErrorKind::Timeout), "{err}");
    assert_eq!(err.stage(), Stage::Mail);
    assert!(copies[0].outcome.is_none());
    assert!(!conn.is_reusable());
}

#[tokio::test]
async fn data_accepted_after_a_refused_recipient_closes_without_a_body() {
    let (after_tx, after_rx) = tokio::sync::oneshot::channel();
    let addr = raw(|mut tcp| async move {
        let _ = tcp.write_all(b"220 mx.test\r\n").await;
        let mut buf = [0u8; 4096];
        let _ = tcp.read(&mut buf).await;
        let _ = tcp.write_all(b"250-mx.test\r\n250 PIPELINING\r\n").await;
        let _ = tcp.read(&mut buf).await;
        let _ = tcp
            .write_all(b"250 ok\r\n550 5.1.1 no such user\r\n354 go ahead\r\n")
            .await;
        // What the client sends next (nothing: it must hang up).
        let n = tcp.read(&mut buf).await.unwrap_or(0);
        let _ = after_tx.send(buf[..n].to_vec());
    })
    .await;
    let mut conn = Connection::connect(addr, "mx.test", &short())
        .await
        .unwrap();
    let mut copies = vec![OutgoingCopy::new("r@herald.test", "bad@x.test", b"x\r\n")];
    let err = conn.send(&mut copies).await.unwrap_err();
    assert!(
        matches!(
            err.kind(),
            SessionErrorKind::Protocol(ProtocolError::DataAfterFailure(_))
        ),
        "{err}"
    );
    assert_eq!(
        copies[0].outcome.as_ref().map(|o| o.reply().code),
        Some(550)
    );
    assert!(!conn.is_reusable());
    conn.quit().await;
    assert_eq!(after_rx.await.unwrap(), b"");
}
