//! Session behaviour for well-behaved and confused peers: every command path, in SMTP and LMTP,
//! one command at a time and pipelined.

mod harness;

use harness::{want, Peer};
use herald_smtp::{replies, BodyType, HeloVerb, Limits, Mode, Session};
use herald_types::{Address, Reply};

fn addr(s: &str) -> Address {
    Address::parse(s).expect("valid test address")
}

const TRANSACTION: &[u8] = b"MAIL FROM:<alice@sender.example> SIZE=60 BODY=8BITMIME\r\n\
RCPT TO:<list@lists.example>\r\n\
DATA\r\n";
const BODY: &[u8] = b"Subject: hi\r\n\r\n..dot line\r\nbye\r\n.\r\n";

#[test]
fn smtp_transaction_one_command_at_a_time() {
    let mut p = Peer::smtp();
    assert_eq!(
        p.session.greeting().to_wire(),
        "220 mx.herald.example ESMTP Herald ready\r\n"
    );
    let ehlo = p.send(b"EHLO client.example\r\n");
    assert_eq!(
        ehlo,
        "250-mx.herald.example\r\n250-PIPELINING\r\n250-SIZE 26214400\r\n250-8BITMIME\r\n250-ENHANCEDSTATUSCODES\r\n250-DSN\r\n250 SMTPUTF8\r\n"
    );
    assert_eq!(
        p.codes(b"MAIL FROM:<alice@sender.example> SIZE=60 BODY=8BITMIME\r\n"),
        want(&["250 2.1.0"])
    );
    assert!(p.session.in_transaction());
    assert_eq!(
        p.codes(b"RCPT TO:<list@lists.example>\r\n"),
        want(&["250 2.1.5"])
    );
    assert_eq!(p.codes(b"DATA\r\n"), want(&["354"]));
    assert_eq!(p.session.read_timeout(), Limits::default().data_timeout());
    assert_eq!(p.codes(BODY), want(&["250 2.0.0"]));
    assert!(!p.session.in_transaction());
    assert_eq!(p.codes(b"QUIT\r\n"), want(&["221 2.0.0"]));
    assert!(p.closed && p.session.is_closed());

    let env = &p.messages[0];
    assert_eq!(env.mode, Mode::Smtp);
    assert_eq!(
        (env.helo.verb, env.helo.domain.as_str()),
        (HeloVerb::Ehlo, "client.example")
    );
    assert_eq!(env.mail_from, Some(addr("alice@sender.example")));
    assert_eq!(env.rcpts, vec![addr("list@lists.example")]);
    assert_eq!(
        (env.params.size, env.params.body),
        (Some(60), Some(BodyType::EightBitMime))
    );
    assert_eq!(&env.body[..], b"Subject: hi\r\n\r\n.dot line\r\nbye\r\n");
}

#[test]
fn pipelined_transaction_gets_every_reply_in_order() {
    let mut p = Peer::smtp();
    let mut all = b"ehlo client.example\r\n".to_vec();
    all.extend_from_slice(TRANSACTION);
    all.extend_from_slice(BODY);
    all.extend_from_slice(b"MAIL FROM:<>\r\nRCPT TO:<list-bounces@lists.example>\r\nDATA\r\n");
    all.extend_from_slice(b"bounce\r\n.\r\nQUIT\r\n");
    let codes = p.codes(&all);
    assert_eq!(
        codes,
        want(&[
            "250",
            "250 2.1.0",
            "250 2.1.5",
            "354",
            "250 2.0.0",
            "250 2.1.0",
            "250 2.1.5",
            "354",
            "250 2.0.0",
            "221 2.0.0"
        ])
    );
    assert_eq!(p.messages.len(), 2);
    assert_eq!(p.messages[1].mail_from, None);
    assert_eq!(&p.messages[1].body[..], b"bounce\r\n");
    assert!(p.buf.is_empty() && p.closed);
}

#[test]
fn relay_attempts_are_refused_and_data_then_has_no_recipients() {
    let mut p = Peer::smtp();
    p.send(b"EHLO c.example\r\nMAIL FROM:<a@c.example>\r\n");
    let codes = p.codes(b"RCPT TO:<victim@elsewhere.example>\r\nDATA\r\n");
    assert_eq!(codes, want(&["550 5.1.1", "554 5.5.1"]));
    assert!(p.messages.is_empty());
}

#[test]
fn commands_out_of_order_get_503() {
    let mut p = Peer::smtp();
    assert_eq!(
        p.codes(b"MAIL FROM:<a@c.example>\r\n"),
        want(&["503 5.5.1"])
    );
    assert_eq!(
        p.codes(b"RCPT TO:<list@l.example>\r\n"),
        want(&["503 5.5.1"])
    );
    assert_eq!(p.codes(b"DATA\r\n"), want(&["503 5.5.1"]));
    p.send(b"HELO c.example\r\n");
    assert_eq!(
        p.codes(b"RCPT TO:<list@l.example>\r\n"),
        want(&["503 5.5.1"])
    );
    assert_eq!(p.codes(b"DATA\r\n"), want(&["503 5.5.1"]));
    p.send(b"MAIL FROM:<a@c.example>\r\n");
    assert_eq!(
        p.codes(b"DATA\r\n"),
        want(&["503 5.5.1"]),
        "DATA before RCPT"
    );
    assert_eq!(
        p.codes(b"MAIL FROM:<a@c.example>\r\n"),
        want(&["503 5.5.1"]),
        "nested MAIL"
    );
    assert!(p.checked.is_empty());
}

#[test]
fn syntax_errors_and_unknown_commands() {
    let mut p = Peer::smtp();
    let codes = p.codes(
        b"FOO\r\nEHLO\r\nehlo c.example\r\nMAIL FROM:a@c.example\r\nmail from:<a@c.example>\r\n\
RCPT TO:list@l.example\r\nRCPT TO:<bad address@l.example>\r\nrcpt to:<list@l.example> XFOO=NEVER\r\n\
EXPN list\r\nSTARTTLS\r\nLHLO c.example\r\n",
    );
    assert_eq!(
        codes,
        want(&[
            "500 5.5.1",
            "501 5.5.4",
            "250",
            "501 5.5.4",
            "250 2.1.0",
            "501 5.5.4",
            "501 5.1.3",
            "555 5.5.4",
            "502 5.5.1",
            "502 5.5.1",
            "500 5.5.1"
        ])
    );
    assert!(!p.closed, "nine errors are tolerated");
    // The tenth error closes the session (default max_errors = 10).
    assert_eq!(
        p.codes(b"BAD\r\nNOOP\r\n"),
        want(&["500 5.5.1", "421 4.7.0"])
    );
    assert!(p.closed);
}

#[test]
fn other_commands_and_resets() {
    let mut p = Peer::smtp();
    let codes = p.codes(b"NOOP\r\nVRFY someone\r\nHELP\r\nNOOP anything at all\r\n");
    assert_eq!(
        codes,
        want(&["250 2.0.0", "252 2.5.0", "214 2.0.0", "250 2.0.0"])
    );
    p.send(b"EHLO c.example\r\nMAIL FROM:<a@c.example>\r\nRCPT TO:<list@l.example>\r\n");
    assert_eq!(
        p.codes(b"RSET\r\nDATA\r\n"),
        want(&["250 2.0.0", "503 5.5.1"])
    );
    p.send(b"MAIL FROM:<a@c.example>\r\n");
    // A new EHLO aborts the transaction too.
    assert_eq!(
        p.codes(b"EHLO c.example\r\nRCPT TO:<list@l.example>\r\n"),
        want(&["250", "503 5.5.1"])
    );
    assert_eq!(p.codes(b"RSET now\r\n"), want(&["501 5.5.4"]));
}

#[test]
fn helo_sessions_get_no_extension_parameters() {
    let mut p = Peer::smtp();
    assert_eq!(p.send(b"HELO c.example\r\n"), "250 mx.herald.example\r\n");
    assert_eq!(
        p.codes(b"MAIL FROM:<a@c.example> SIZE=10\r\n"),
        want(&["555 5.5.4"])
    );
    p.send(b"MAIL FROM:<a@c.example>\r\nRCPT TO:<list@l.example>\r\nDATA\r\nx\r\n.\r\n");
    assert_eq!(p.messages[0].helo.verb.protocol(), "SMTP");
}

#[test]
fn duplicate_recipients_are_checked_once_and_handed_over_once() {
    let mut p = Peer::smtp();
    p.send(b"EHLO c.example\r\nMAIL FROM:<a@c.example>\r\n");
    let codes =
        p.codes(b"RCPT TO:<list@l.example>\r\nRCPT TO:<list@L.EXAMPLE>\r\nDATA\r\nx\r\n.\r\n");
    assert_eq!(codes, want(&["250 2.1.5", "250 2.1.5", "354", "250 2.0.0"]));
    assert_eq!(p.checked.len(), 1);
    assert_eq!(p.messages[0].rcpts, vec![addr("list@l.example")]);
}

#[test]
fn postmaster_without_domain_is_ours() {
    let mut p = Peer::smtp();
    p.send(b"EHLO c.example\r\nMAIL FROM:<a@c.example>\r\n");
    assert_eq!(p.codes(b"RCPT TO:<Postmaster>\r\n"), want(&["550 5.1.1"]));
    assert_eq!(p.checked, vec![addr("postmaster@mx.herald.example")]);
}

#[test]
fn smtp_aggregates_per_recipient_verdicts_preferring_retry() {
    let mut p = Peer::smtp();
    p.message_verdict = |rcpt| match rcpt.local() {
        "list-a" => replies::MESSAGE_ACCEPTED.reply(),
        "list-b" => replies::LOCAL_ERROR.reply(),
        _ => Reply::new(554, None, "no"),
    };
    p.send(b"EHLO c.example\r\nMAIL FROM:<a@c.example>\r\n");
    let codes = p.codes(
        b"RCPT TO:<list-a@l.example>\r\nRCPT TO:<list-c@l.example>\r\nRCPT TO:<list-b@l.example>\r\nDATA\r\nx\r\n.\r\n",
    );
    assert_eq!(
        codes,
        want(&["250 2.1.5", "250 2.1.5", "250 2.1.5", "354", "451 4.3.0"])
    );
}

#[test]
fn a_positive_reply_given_as_refusal_is_a_local_error() {
    let mut p = Peer::smtp();
    p.rcpt_verdict = |_| Err(replies::OK.reply());
    p.send(b"EHLO c.example\r\nMAIL FROM:<a@c.example>\r\n");
    assert_eq!(
        p.codes(b"RCPT TO:<list@l.example>\r\nDATA\r\n"),
        want(&["451 4.3.0", "554 5.5.1"])
    );
}

#[test]
fn driver_calls_out_of_turn_are_ignored() {
    let mut s = Session::new(Mode::Smtp, Limits::default(), "mx.herald.example");
    assert!(s.recipient_checked(Ok(())).is_empty());
    assert!(s.message_done(vec![]).is_empty());
    assert!(!s.in_transaction());
    assert_eq!(s.read_timeout(), Limits::default().command_timeout());
}

#[test]
fn lmtp_needs_lhlo_and_answers_per_recipient() {
    let mut p = Peer::lmtp();
    assert_eq!(
        p.session.greeting().to_wire(),
        "220 mx.herald.example LMTP Herald ready\r\n"
    );
    assert_eq!(
        p.codes(b"EHLO c.example\r\nHELO c.example\r\n"),
        want(&["500 5.5.1", "500 5.5.1"])
    );
    assert_eq!(
        p.codes(b"MAIL FROM:<a@c.example>\r\n"),
        want(&["503 5.5.1"])
    );
    p.message_verdict = |rcpt| match rcpt.local() {
        "list-full" => Reply::new(
            452,
            Some(herald_types::EnhancedStatus::new(4, 2, 2)),
            "full",
        ),
        _ => replies::MESSAGE_ACCEPTED.reply(),
    };
    let codes = p.codes(
        b"LHLO c.example\r\nMAIL FROM:<a@c.example>\r\nRCPT TO:<list-a@l.example>\r\n\
RCPT TO:<nobody@l.example>\r\nRCPT TO:<list-full@l.example>\r\nRCPT TO:<list-a@l.example>\r\nDATA\r\nhello\r\n.\r\n",
    );
    assert_eq!(
        codes,
        want(&[
            "250",
            "250 2.1.0",
            "250 2.1.5",
            "550 5.1.1",
            "250 2.1.5",
            "250 2.1.5",
            "354",
            "250 2.0.0",
            "452 4.2.2",
            "250 2.0.0"
        ]),
        "one reply per successful RCPT, duplicates included, in RCPT order"
    );
    let env = &p.messages[0];
    assert_eq!(env.mode, Mode::Lmtp);
    assert_eq!(env.helo.verb, HeloVerb::Lhlo);
    assert_eq!(
        env.rcpts,
        vec![addr("list-a@l.example"), addr("list-full@l.example")]
    );
}

#[test]
fn lmtp_data_without_accepted_recipients_is_503() {
    let mut p = Peer::lmtp();
    let codes =
        p.codes(b"LHLO c.example\r\nMAIL FROM:<a@c.example>\r\nRCPT TO:<x@l.example>\r\nDATA\r\n");
    assert_eq!(codes, want(&["250", "250 2.1.0", "550 5.1.1", "503 5.5.1"]));
}

#[test]
fn lmtp_missing_handler_replies_become_local_errors() {
    let mut s = Session::new(Mode::Lmtp, Limits::default(), "mx.herald.example");
    let mut buf = bytes::BytesMut::from(
        &b"LHLO c.example\r\nMAIL FROM:<a@c.example>\r\nRCPT TO:<list-a@l.example>\r\n"[..],
    );
    s.feed(&mut buf);
    s.recipient_checked(Ok(()));
    buf.extend_from_slice(b"RCPT TO:<list-b@l.example>\r\nDATA\r\nx\r\n.\r\n");
    s.feed(&mut buf);
    s.recipient_checked(Ok(()));
    let actions = s.feed(&mut buf);
    assert!(matches!(
        actions.last(),
        Some(herald_smtp::Action::Message(_))
    ));
    let done = s.message_done(vec![replies::MESSAGE_ACCEPTED.reply()]);
    let codes: Vec<u16> = done
        .iter()
        .filter_map(|a| match a {
            herald_smtp::Action::Reply(r) => Some(r.code),
            _ => None,
        })
        .collect();
    assert_eq!(codes, vec![250, 451]);
}

#[test]
fn a_421_from_the_handler_closes_the_session() {
    let mut p = Peer::smtp();
    p.rcpt_verdict = |_| Err(replies::SERVICE_UNAVAILABLE.reply());
    p.send(b"EHLO c.example\r\nMAIL FROM:<a@c.example>\r\n");
    assert_eq!(
        p.codes(b"RCPT TO:<list@l.example>\r\nNOOP\r\n"),
        want(&["421 4.3.2"])
    );
    assert!(p.closed);

    let mut p = Peer::lmtp();
    p.message_verdict = |_| replies::SERVICE_UNAVAILABLE.reply();
    let codes = p.codes(
        b"LHLO c.example\r\nMAIL FROM:<a@c.example>\r\nRCPT TO:<list@l.example>\r\nDATA\r\nx\r\n.\r\nNOOP\r\n",
    );
    assert_eq!(
        codes,
        want(&["250", "250 2.1.0", "250 2.1.5", "354", "421 4.3.2"])
    );
    assert!(p.closed);
}
