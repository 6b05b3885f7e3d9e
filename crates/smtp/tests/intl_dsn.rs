//! International addresses (RFC 6531) and DSN parameters (RFC 3461) through the session: what a
//! peer gets for each, and what reaches the handler with the message.

mod harness;

use harness::{want, Peer};
use herald_smtp::RcptParams;
use herald_types::dsn::Ret;
use herald_types::Address;

fn accept_everyone(_: &Address) -> Result<(), herald_types::Reply> {
    Ok(())
}

#[test]
fn utf8_addresses_need_the_smtputf8_parameter() {
    let mut p = Peer::smtp();
    p.rcpt_verdict = accept_everyone;
    p.send(b"EHLO c.example\r\n");
    // A UTF-8 reverse path without SMTPUTF8: 553 5.6.7 (RFC 6531 §3.5).
    assert_eq!(
        p.codes("MAIL FROM:<jörg@münchen.example>\r\n".as_bytes()),
        want(&["553 5.6.7"])
    );
    // An ASCII transaction cannot name a UTF-8 recipient; an A-label or U-label domain with an
    // ASCII local part is fine without it (stored as the A-label).
    p.send(b"MAIL FROM:<a@c.example>\r\n");
    assert_eq!(
        p.codes("RCPT TO:<用户@例子.example>\r\n".as_bytes()),
        want(&["553 5.6.7"])
    );
    assert_eq!(
        p.codes("RCPT TO:<info@münchen.example>\r\n".as_bytes()),
        want(&["250 2.1.5"])
    );
    assert_eq!(
        p.checked,
        vec![Address::parse("info@xn--mnchen-3ya.example").expect("valid")]
    );
    p.send(b"RSET\r\n");
    let codes = p.codes(
        "MAIL FROM:<jörg@münchen.example> SMTPUTF8\r\nRCPT TO:<用户@例子.example>\r\n\
RCPT TO:<jo\u{308}rg@xn--mnchen-3ya.example>\r\nRCPT TO:<j\u{f6}rg@MÜNCHEN.example>\r\nDATA\r\n"
            .as_bytes(),
    );
    assert_eq!(
        codes,
        want(&["250 2.1.0", "250 2.1.5", "250 2.1.5", "250 2.1.5", "354"])
    );
    p.send("From: Jörg <jörg@münchen.example>\r\nSubject: grüße\r\n\r\nhallo\r\n.\r\n".as_bytes());
    let env = &p.messages[0];
    assert!(env.params.smtputf8);
    // NFD and NFC, A-label and upper-case U-label: one recipient, handed over once.
    assert_eq!(env.rcpts.len(), 2, "{:?}", env.rcpts);
    assert_eq!(env.rcpts[1].to_string(), "jörg@xn--mnchen-3ya.example");
    // RFC 6532: UTF-8 header fields arrive intact.
    assert!(env
        .body
        .starts_with("From: Jörg <jörg@münchen.example>".as_bytes()));
}

#[test]
fn hostile_utf8_in_commands_is_refused_and_counted() {
    let mut p = Peer::smtp();
    p.rcpt_verdict = accept_everyone;
    p.send(b"EHLO c.example\r\nMAIL FROM:<a@c.example> SMTPUTF8\r\n");
    let codes = p.codes(
        b"RCPT TO:<a\xc0\xafb@x.example>\r\nRCPT TO:<a\xc2\x85b@x.example>\r\n\
RCPT TO:<a\xe2\x80\xa8b@x.example>\r\nRCPT TO:<ok@x.example>\r\n",
    );
    // Overlong UTF-8 is no UTF-8 (500); NEL (C1) and U+2028 are no address characters (501).
    assert_eq!(
        codes,
        want(&["500 5.5.2", "501 5.1.3", "501 5.1.3", "250 2.1.5"])
    );
    assert_eq!(p.checked.len(), 1);
}

#[test]
fn dsn_parameters_reach_the_handler_with_their_recipient() {
    let mut p = Peer::smtp();
    let codes = p.codes(
        b"EHLO front.example\r\n\
MAIL FROM:<a@c.example> RET=HDRS ENVID=QQ314159\r\n\
RCPT TO:<list@l.example> NOTIFY=SUCCESS,FAILURE ORCPT=rfc822;list+40l.example\r\n\
RCPT TO:<list2@l.example>\r\n\
RCPT TO:<list@l.example> NOTIFY=NEVER\r\n\
DATA\r\nSubject: x\r\n\r\nbody\r\n.\r\n",
    );
    assert_eq!(
        codes,
        want(&[
            "250",
            "250 2.1.0",
            "250 2.1.5",
            "250 2.1.5",
            "250 2.1.5",
            "354",
            "250 2.0.0"
        ])
    );
    let env = &p.messages[0];
    assert_eq!(env.params.ret, Some(Ret::Hdrs));
    assert_eq!(
        env.params.envid.as_ref().map(|e| e.as_str()),
        Some("QQ314159")
    );
    assert_eq!(env.rcpt_params.len(), env.rcpts.len());
    let first = &env.rcpt_params[0];
    assert_eq!(
        first.notify.map(|n| n.to_string()).as_deref(),
        Some("SUCCESS,FAILURE")
    );
    assert_eq!(
        first.orcpt.as_ref().map(|o| o.as_str()),
        Some("rfc822;list+40l.example")
    );
    assert_eq!(env.rcpt_params[1], RcptParams::default());
}

#[test]
fn dsn_and_smtputf8_parameters_need_ehlo() {
    let mut p = Peer::smtp();
    let codes = p.codes(
        b"HELO c.example\r\nMAIL FROM:<a@c.example> RET=FULL\r\nMAIL FROM:<a@c.example> SMTPUTF8\r\n\
MAIL FROM:<a@c.example>\r\nRCPT TO:<list@l.example> NOTIFY=NEVER\r\nRCPT TO:<list@l.example>\r\n",
    );
    assert_eq!(
        codes,
        want(&[
            "250",
            "555 5.5.4",
            "555 5.5.4",
            "250 2.1.0",
            "555 5.5.4",
            "250 2.1.5"
        ])
    );
}

#[test]
fn lmtp_takes_utf8_recipients_too() {
    let mut p = Peer::lmtp();
    p.rcpt_verdict = accept_everyone;
    let codes = p.codes(
        "LHLO front.example\r\nMAIL FROM:<> SMTPUTF8\r\nRCPT TO:<用户@例子.example>\r\n\
DATA\r\nSubject: x\r\n\r\nbody\r\n.\r\n"
            .as_bytes(),
    );
    assert_eq!(
        codes,
        want(&["250", "250 2.1.0", "250 2.1.5", "354", "250 2.0.0"])
    );
    assert_eq!(
        p.messages[0].rcpts[0].to_string(),
        "用户@xn--fsqu00a.example"
    );
}
