//! STARTTLS in the state machine (RFC 3207): offered only when available, in SMTP, before TLS;
//! pipelined plaintext after it is discarded (CVE-2011-0411); the session restarts after it.

mod harness;

use harness::{want, Peer};
use herald_smtp::{Limits, Mode, Session};

fn tls_peer(mode: Mode) -> Peer {
    let mut p = Peer::new(mode, Limits::default());
    p.session = Session::new(mode, Limits::default(), "mx.herald.example").with_starttls(true);
    p
}

#[test]
fn ehlo_advertises_starttls_only_when_available_and_before_tls() {
    let mut p = tls_peer(Mode::Smtp);
    let ehlo = p.send(b"EHLO client.example\r\n");
    assert!(
        ehlo.ends_with("250-DSN\r\n250-SMTPUTF8\r\n250 STARTTLS\r\n"),
        "{ehlo}"
    );
    assert_eq!(p.codes(b"STARTTLS\r\n"), want(&["220 2.0.0"]));
    assert!(p.tls_pending);
    p.session.tls_started();
    assert!(p.session.tls_active());
    let ehlo = p.send(b"EHLO client.example\r\n");
    assert!(!ehlo.contains("STARTTLS"), "{ehlo}");
    // Not offered again: a second STARTTLS is not implemented on this connection.
    assert_eq!(p.codes(b"STARTTLS\r\n"), want(&["502 5.5.1"]));

    let mut plain = Peer::smtp();
    assert!(!plain.send(b"EHLO c.example\r\n").contains("STARTTLS"));
    assert_eq!(plain.codes(b"STARTTLS\r\n"), want(&["502 5.5.1"]));
}

#[test]
fn lmtp_never_offers_starttls() {
    let mut p = Peer::lmtp();
    p.session =
        Session::new(Mode::Lmtp, Limits::default(), "mx.herald.example").with_starttls(true);
    assert!(!p.send(b"LHLO c.example\r\n").contains("STARTTLS"));
    assert_eq!(p.codes(b"STARTTLS\r\n"), want(&["502 5.5.1"]));
    assert!(!p.tls_pending);
}

#[test]
fn pipelined_plaintext_after_starttls_is_discarded() {
    let mut p = tls_peer(Mode::Smtp);
    let codes = p.codes(
        b"EHLO c.example\r\nSTARTTLS\r\nMAIL FROM:<evil@x.example>\r\nRCPT TO:<list@l.example>\r\n",
    );
    assert_eq!(codes, want(&["250", "220 2.0.0"]));
    assert!(p.buf.is_empty(), "injected commands are dropped");
    assert!(p.checked.is_empty());
    // Anything else read before the handshake completes is dropped too.
    assert!(p.codes(b"DATA\r\n").is_empty());
    p.session.tls_started();
    // The greeting was forgotten: MAIL needs a new EHLO, and no injected transaction exists.
    assert_eq!(
        p.codes(b"MAIL FROM:<a@c.example>\r\nEHLO c.example\r\nRCPT TO:<list@l.example>\r\n"),
        want(&["503 5.5.1", "250", "503 5.5.1"])
    );
}

#[test]
fn starttls_inside_a_transaction_is_a_bad_sequence() {
    let mut p = tls_peer(Mode::Smtp);
    assert_eq!(
        p.codes(b"EHLO c.example\r\nMAIL FROM:<a@c.example>\r\nSTARTTLS\r\nRSET\r\nSTARTTLS\r\n"),
        want(&["250", "250 2.1.0", "503 5.5.1", "250 2.0.0", "220 2.0.0"])
    );
    assert!(p.tls_pending);
}

#[test]
fn implicit_tls_session_does_not_offer_starttls() {
    let mut p = Peer::smtp();
    p.session = Session::new(Mode::Smtp, Limits::default(), "mx.herald.example")
        .with_starttls(true)
        .with_tls_active();
    assert!(!p.send(b"EHLO c.example\r\n").contains("STARTTLS"));
    assert_eq!(p.codes(b"STARTTLS\r\n"), want(&["502 5.5.1"]));
}
