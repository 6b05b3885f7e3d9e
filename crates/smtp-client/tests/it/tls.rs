//! STARTTLS against a scripted server with a self-signed (rcgen) certificate.

use crate::support::client_config;
use crate::support::smtp::{self_signed_tls, serve, Script};
use herald_routing::TlsMode;
use herald_smtp_client::{
    ClientConfig, Connection, OutgoingCopy, SessionErrorKind, Stage, TlsError,
};
use herald_types::RcptOutcome;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

fn with_tls(tls: TlsMode) -> ClientConfig {
    ClientConfig {
        tls,
        ..client_config()
    }
}

#[tokio::test]
async fn opportunistic_starttls_accepts_a_self_signed_certificate() {
    let script = Script {
        tls: Some(self_signed_tls()),
        ..Script::default()
    };
    let (addr, server) = serve(script).await;
    let cfg = ClientConfig {
        // No trust anchors that could vouch for the test certificate.
        tls_ca_file: Some("/nonexistent/ca.pem".into()),
        ..with_tls(TlsMode::Opportunistic)
    };
    let mut conn = Connection::connect(addr, "mx.test", &cfg).await.unwrap();
    let info = conn.tls_info().expect("TLS negotiated").clone();
    assert_eq!(info.version, "TLSv1.3");
    assert!(info.cipher.starts_with("TLS13_"), "{}", info.cipher);
    assert!(!info.verified);
    assert!(info.verify_error.is_some());
    assert!(conn.timings().tls.is_some());
    // The second EHLO's answer (no STARTTLS any more) is what counts.
    assert!(!conn.extensions().starttls && conn.extensions().pipelining);
    let mut copies = vec![OutgoingCopy::new("r@herald.test", "a@x.test", b"hi\r\n")];
    conn.send(&mut copies).await.unwrap();
    assert!(matches!(copies[0].outcome, Some(RcptOutcome::Delivered(_))));
    conn.quit().await;
    let rec = server.await.unwrap();
    assert!(rec.tls);
    let ehlos = rec
        .commands
        .iter()
        .filter(|c| c.starts_with("EHLO"))
        .count();
    assert_eq!(ehlos, 2);
}

#[tokio::test]
async fn certificate_that_chains_to_a_configured_anchor_is_recorded_as_verified() {
    let ck = rcgen::generate_simple_self_signed(vec!["mx.test".to_string()]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, ck.cert.pem()).unwrap();
    let script = Script {
        tls: Some(crate::support::smtp::tls_config_for(&ck)),
        ..Script::default()
    };
    let (addr, _server) = serve(script).await;
    let cfg = ClientConfig {
        tls_ca_file: Some(ca),
        ..with_tls(TlsMode::Required)
    };
    let conn = Connection::connect(addr, "mx.test", &cfg).await.unwrap();
    let info = conn.tls_info().expect("TLS negotiated");
    assert!(info.verified, "{:?}", info.verify_error);
}

#[tokio::test]
async fn required_tls_without_starttls_fails() {
    let (addr, _server) = serve(Script::default()).await;
    let err = Connection::connect(addr, "mx.test", &with_tls(TlsMode::Required))
        .await
        .unwrap_err();
    assert!(
        matches!(err.kind(), SessionErrorKind::Tls(TlsError::NotOffered)),
        "{err}"
    );
    assert_eq!(err.stage(), Stage::StartTls);
    assert!(err.is_host_problem());
}

#[tokio::test]
async fn disabled_tls_never_sends_starttls() {
    let script = Script {
        tls: Some(self_signed_tls()),
        ..Script::default()
    };
    let (addr, server) = serve(script).await;
    let conn = Connection::connect(addr, "mx.test", &with_tls(TlsMode::Disabled))
        .await
        .unwrap();
    assert!(conn.tls_info().is_none());
    assert!(conn.extensions().starttls);
    conn.quit().await;
    let rec = server.await.unwrap();
    assert!(!rec.commands.iter().any(|c| c == "STARTTLS"));
}

#[tokio::test]
async fn opportunistic_tls_falls_back_to_plaintext_after_a_failed_handshake() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = [0u8; 4096];
        // First connection: offers STARTTLS, then answers the ClientHello with garbage.
        let (mut tcp, _) = listener.accept().await.unwrap();
        tcp.write_all(b"220 mx.test\r\n").await.unwrap();
        let _ = tcp.read(&mut buf).await;
        tcp.write_all(b"250-mx.test\r\n250 STARTTLS\r\n")
            .await
            .unwrap();
        let _ = tcp.read(&mut buf).await;
        tcp.write_all(b"220 go ahead\r\n").await.unwrap();
        let _ = tcp.read(&mut buf).await; // the ClientHello
        let _ = tcp.write_all(b"this is not TLS\r\n").await;
        drop(tcp);
        // Second connection: the client must not try STARTTLS again.
        let (mut tcp, _) = listener.accept().await.unwrap();
        tcp.write_all(b"220 mx.test\r\n").await.unwrap();
        let _ = tcp.read(&mut buf).await;
        tcp.write_all(b"250-mx.test\r\n250 STARTTLS\r\n")
            .await
            .unwrap();
        let n = tcp.read(&mut buf).await.unwrap_or(0);
        assert_eq!(&buf[..n], b"QUIT\r\n");
        let _ = tcp.write_all(b"221 bye\r\n").await;
    });
    let conn = Connection::connect(addr, "mx.test", &with_tls(TlsMode::Opportunistic))
        .await
        .unwrap();
    assert!(conn.tls_info().is_none());
    conn.quit().await;
}

#[tokio::test]
async fn required_tls_does_not_fall_back() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = [0u8; 4096];
        let (mut tcp, _) = listener.accept().await.unwrap();
        tcp.write_all(b"220 mx.test\r\n").await.unwrap();
        let _ = tcp.read(&mut buf).await;
        tcp.write_all(b"250-mx.test\r\n250 STARTTLS\r\n")
            .await
            .unwrap();
        let _ = tcp.read(&mut buf).await;
        tcp.write_all(b"220 go ahead\r\n").await.unwrap();
        let _ = tcp.read(&mut buf).await;
        let _ = tcp.write_all(b"this is not TLS\r\n").await;
    });
    let err = Connection::connect(addr, "mx.test", &with_tls(TlsMode::Required))
        .await
        .unwrap_err();
    assert!(
        matches!(err.kind(), SessionErrorKind::Tls(TlsError::Handshake(_))),
        "{err}"
    );
    assert_eq!(err.stage(), Stage::TlsHandshake);
}

/// An enforced MTA-STS policy overrides a configured `disabled` rule and demands a verified
/// certificate; its failures name MTA-STS and do not count against the host.
#[tokio::test]
async fn mta_sts_enforcement_requires_verified_tls_whatever_the_config_says() {
    let rule = herald_routing::TlsPolicyRule {
        mx_suffix: "mx.test".into(),
        mode: TlsMode::Disabled,
        verify: false,
    };
    let cfg = ClientConfig {
        tls_ca_file: Some("/nonexistent/ca.pem".into()),
        tls_policy: vec![rule],
        ..with_tls(TlsMode::Opportunistic)
    };
    // A self-signed certificate nothing vouches for: refused before any mail command.
    let script = Script {
        tls: Some(self_signed_tls()),
        ..Script::default()
    };
    let (addr, server) = serve(script).await;
    let err = Connection::connect_with(addr, "mx.test", &cfg, true)
        .await
        .unwrap_err();
    assert!(
        matches!(err.kind(), SessionErrorKind::Tls(TlsError::MtaSts(inner)) if matches!(**inner, TlsError::NotVerified(_))),
        "{err}"
    );
    assert!(!err.is_host_problem());
    let reply = err.synthetic_reply();
    assert_eq!(
        reply.enhanced.map(|e| e.to_string()).as_deref(),
        Some("4.7.5")
    );
    assert!(reply.text.contains("MTA-STS"), "{reply}");
    let rec = server.await.unwrap();
    assert!(!rec.commands.iter().any(|c| c.starts_with("MAIL")));

    // No STARTTLS at all: refused, not sent in plaintext.
    let (addr, _server) = serve(Script::default()).await;
    let err = Connection::connect_with(addr, "mx.test", &cfg, true)
        .await
        .unwrap_err();
    assert!(
        matches!(err.kind(), SessionErrorKind::Tls(TlsError::MtaSts(inner)) if matches!(**inner, TlsError::NotOffered)),
        "{err}"
    );

    // Without enforcement the same rule keeps the session in plaintext.
    let (addr, _server) = serve(Script::default()).await;
    let conn = Connection::connect_with(addr, "mx.test", &cfg, false)
        .await
        .unwrap();
    assert!(conn.tls_info().is_none());
}

#[tokio::test]
async fn mta_sts_enforcement_accepts_a_certificate_that_verifies() {
    let ck = rcgen::generate_simple_self_signed(vec!["mx.test".to_string()]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, ck.cert.pem()).unwrap();
    let script = Script {
        tls: Some(crate::support::smtp::tls_config_for(&ck)),
        ..Script::default()
    };
    let (addr, _server) = serve(script).await;
    let cfg = ClientConfig {
        tls_ca_file: Some(ca),
        ..with_tls(TlsMode::Opportunistic)
    };
    let conn = Connection::connect_with(addr, "mx.test", &cfg, true)
        .await
        .unwrap();
    assert!(conn.tls_info().is_some_and(|t| t.verified));
}
