//! Hostile peers: every limit, garbage in pipelines, and the SMTP smuggling sequences.

mod harness;

use harness::{want, Peer};
use herald_smtp::{BufferBudget, Limits, Mode, Session};

const OPEN: &[u8] =
    b"EHLO c.example\r\nMAIL FROM:<a@c.example>\r\nRCPT TO:<list@l.example>\r\nDATA\r\n";

fn limits(f: impl FnOnce(&mut Limits)) -> Limits {
    let mut l = Limits::default();
    f(&mut l);
    l
}

#[test]
fn over_long_command_line_is_refused_without_buffering() {
    let mut p = Peer::smtp();
    let long = vec![b'A'; 5000];
    for chunk in long.chunks(300) {
        assert!(p.send(chunk).is_empty(), "no reply before the line ends");
        assert!(p.buf.len() < 512, "buffer stays under one command line");
    }
    assert_eq!(p.codes(b"\r\nNOOP\r\n"), want(&["500 5.5.2", "250 2.0.0"]));

    let mut exact = b"NOOP ".to_vec();
    exact.resize(510, b'x');
    exact.extend_from_slice(b"\r\n");
    assert_eq!(exact.len(), 512);
    assert_eq!(
        p.codes(&exact),
        want(&["250 2.0.0"]),
        "512 octets with CRLF is legal"
    );
    exact.insert(5, b'x');
    assert_eq!(p.codes(&exact), want(&["500 5.5.2"]), "513 is not");
}

#[test]
fn nul_bytes_bare_lf_and_bare_cr_in_commands_are_refused() {
    let mut p = Peer::smtp();
    let codes = p.codes(b"NO\0OP\r\nEHLO c.example\nEHLO c\r.example\r\nEHLO c.example\r\nMAIL FROM:<a\0@c.example>\r\n");
    assert_eq!(
        codes,
        want(&["500 5.5.2", "500 5.5.2", "500 5.5.2", "250", "500 5.5.2"])
    );
}

#[test]
fn declared_size_over_the_limit_is_refused_at_mail() {
    let mut p = Peer::new(Mode::Smtp, limits(|l| l.max_message_octets = 1000));
    let codes = p.codes(b"EHLO c.example\r\nMAIL FROM:<a@c.example> SIZE=1001\r\nMAIL FROM:<a@c.example> SIZE=1000\r\n");
    assert_eq!(codes, want(&["250", "552 5.3.4", "250 2.1.0"]));
    let mut p = Peer::smtp();
    let codes = p.codes(b"EHLO c.example\r\nMAIL FROM:<a@c.example> SIZE=18446744073709551616\r\n");
    assert_eq!(codes, want(&["250", "552 5.3.4"]));
}

#[test]
fn oversize_message_is_read_to_its_end_and_refused() {
    let mut p = Peer::new(Mode::Smtp, limits(|l| l.max_message_octets = 100));
    p.send(OPEN);
    for _ in 0..20 {
        assert!(p
            .send(b"0123456789012345678901234567890123456789\r\n")
            .is_empty());
    }
    assert_eq!(p.codes(b".\r\n"), want(&["552 5.3.4"]));
    assert!(p.messages.is_empty());
    // The session goes on: a small message right after is accepted.
    let codes =
        p.codes(b"MAIL FROM:<a@c.example>\r\nRCPT TO:<list@l.example>\r\nDATA\r\nsmall\r\n.\r\n");
    assert_eq!(codes, want(&["250 2.1.0", "250 2.1.5", "354", "250 2.0.0"]));
    assert_eq!(&p.messages[0].body[..], b"small\r\n");
}

#[test]
fn over_long_data_line_is_refused_at_the_real_end() {
    let mut p = Peer::smtp();
    p.send(OPEN);
    let long = vec![b'x'; 4000];
    for chunk in long.chunks(700) {
        p.send(chunk);
        assert!(p.buf.len() <= 1001, "buffer stays under one DATA line");
    }
    assert_eq!(
        p.codes(b"\r\nmore\r\n.\r\nNOOP\r\n"),
        want(&["500 5.5.2", "250 2.0.0"])
    );
    assert!(p.messages.is_empty());
}

#[test]
fn too_many_recipients_get_452_and_the_rest_is_delivered() {
    let mut p = Peer::new(Mode::Smtp, limits(|l| l.max_recipients = 3));
    p.send(b"EHLO c.example\r\nMAIL FROM:<a@c.example>\r\n");
    let codes = p.codes(
        b"RCPT TO:<list1@l.example>\r\nRCPT TO:<list2@l.example>\r\nRCPT TO:<list3@l.example>\r\n\
RCPT TO:<list4@l.example>\r\nDATA\r\nx\r\n.\r\n",
    );
    assert_eq!(
        codes,
        want(&[
            "250 2.1.5",
            "250 2.1.5",
            "250 2.1.5",
            "452 4.5.3",
            "354",
            "250 2.0.0"
        ])
    );
    assert_eq!(p.messages[0].rcpts.len(), 3);
    assert_eq!(p.checked.len(), 3, "the fourth is not even looked up");
}

#[test]
fn pipelined_garbage_closes_the_session_after_max_errors() {
    let mut p = Peer::smtp();
    let garbage = b"GET / HTTP/1.1\r\n".repeat(50);
    let wire = p.send(&garbage);
    let codes = harness::summary(&wire);
    assert_eq!(codes.len(), 11);
    assert!(codes[..10].iter().all(|c| c == "500 5.5.1"));
    assert_eq!(codes[10], "421 4.7.0");
    assert!(p.closed);
    assert!(
        p.send(b"NOOP\r\n").is_empty(),
        "a closed session says nothing more"
    );
}

#[test]
fn smuggled_commands_after_bare_lf_dot_are_never_executed() {
    for separator in [&b"\n.\n"[..], b"\r\n.\n", b"\n.\r\n", b"\r.\r", b"\r\n.\r"] {
        let mut p = Peer::smtp();
        p.send(OPEN);
        let mut attack = b"Subject: hi\r\n\r\nhello".to_vec();
        attack.extend_from_slice(separator);
        attack.extend_from_slice(
            b"MAIL FROM:<ceo@victim.example>\r\nRCPT TO:<list-evil@l.example>\r\nDATA\r\nforged\r\n.\r\n",
        );
        let codes = p.codes(&attack);
        assert_eq!(codes, want(&["550 5.6.0"]), "separator {separator:?}");
        assert!(p.messages.is_empty(), "nothing accepted, nothing split");
        assert_eq!(
            p.checked.len(),
            1,
            "the smuggled RCPT was content, not a command"
        );
        // The session stays usable for an honest transaction.
        let codes =
            p.codes(b"MAIL FROM:<a@c.example>\r\nRCPT TO:<list@l.example>\r\nDATA\r\nok\r\n.\r\n");
        assert_eq!(codes, want(&["250 2.1.0", "250 2.1.5", "354", "250 2.0.0"]));
        assert_eq!(&p.messages[0].body[..], b"ok\r\n");
    }
}

/// `\r\n\0.\r\n` is content, and a message holding a NUL is refused (a receiver that strips
/// NULs would read the dot as the end of data).
#[test]
fn nul_octet_in_body_is_refused_and_the_session_stays_in_sync() {
    let mut p = Peer::smtp();
    p.send(OPEN);
    let codes =
        p.codes(b"Subject: hi\r\n\r\nhello\r\n\0.\r\nMAIL FROM:<ceo@victim.example>\r\n.\r\n");
    assert_eq!(codes, want(&["550 5.6.0"]));
    assert!(p.messages.is_empty());
    let codes =
        p.codes(b"MAIL FROM:<a@c.example>\r\nRCPT TO:<list@l.example>\r\nDATA\r\nok\r\n.\r\n");
    assert_eq!(codes, want(&["250 2.1.0", "250 2.1.5", "354", "250 2.0.0"]));
}

#[test]
fn bare_cr_or_lf_in_body_is_refused_per_recipient_in_lmtp() {
    let mut p = Peer::lmtp();
    let codes = p.codes(
        b"LHLO c.example\r\nMAIL FROM:<a@c.example>\r\nRCPT TO:<list-a@l.example>\r\n\
RCPT TO:<list-b@l.example>\r\nDATA\r\nline one\rline two\r\n.\r\n",
    );
    assert_eq!(
        codes,
        want(&[
            "250",
            "250 2.1.0",
            "250 2.1.5",
            "250 2.1.5",
            "354",
            "550 5.6.0",
            "550 5.6.0"
        ])
    );
    assert!(p.messages.is_empty());
}

#[test]
fn errors_from_refused_recipients_count_towards_the_limit() {
    let mut p = Peer::new(Mode::Smtp, limits(|l| l.max_errors = 3));
    p.send(b"EHLO c.example\r\nMAIL FROM:<a@c.example>\r\n");
    let codes = p.codes(b"RCPT TO:<a@x.example>\r\nRCPT TO:<b@x.example>\r\nRCPT TO:<c@x.example>\r\nRCPT TO:<list@l.example>\r\n");
    assert_eq!(
        codes,
        want(&["550 5.1.1", "550 5.1.1", "550 5.1.1", "421 4.7.0"])
    );
    assert!(p.closed);
    assert_eq!(p.checked.len(), 3);
}

/// `n` lines of 100 octets, CRLF included.
fn lines(n: usize) -> Vec<u8> {
    let mut line = vec![b'x'; 98];
    line.extend_from_slice(b"\r\n");
    line.repeat(n)
}

#[test]
fn a_spent_buffer_budget_refuses_transiently_and_the_session_stays_in_sync() {
    let budget = BufferBudget::new(100_000);
    let mut p = Peer::smtp();
    p.session = Session::new(Mode::Smtp, Limits::default(), "mx.herald.example")
        .with_budget(budget.clone());
    // Another session holds most of the budget.
    let mut other = budget.reservation();
    assert!(other.grow_to(60_000, 60_000));
    let codes = p.codes(b"EHLO c.example\r\nMAIL FROM:<a@c.example> SIZE=50000\r\n");
    assert_eq!(
        codes,
        want(&["250", "452 4.3.1"]),
        "declared size cannot fit"
    );
    let codes = p.codes(b"MAIL FROM:<a@c.example>\r\nRCPT TO:<list@l.example>\r\nDATA\r\n");
    assert_eq!(
        codes,
        want(&["250 2.1.0", "250 2.1.5", "452 4.3.1"]),
        "no room for a first step: refused before 354, no body sent"
    );
    drop(other);
    assert_eq!(p.codes(b"DATA\r\n"), want(&["354"]));
    assert!(p.send(&lines(100)).is_empty());
    assert_eq!(budget.used(), 65_536, "one grant step");
    // The other session takes the rest while this body is still arriving.
    let mut other = budget.reservation();
    assert!(other.grow_to(34_464, 34_464));
    let mut rest = lines(600);
    rest.extend_from_slice(b".\r\nNOOP\r\n");
    assert_eq!(
        p.codes(&rest),
        want(&["452 4.3.1", "250 2.0.0"]),
        "read to its real end, refused transiently, next command in sync"
    );
    assert!(p.messages.is_empty(), "nothing half-stored");
    assert_eq!(budget.used(), 34_464, "the refused body holds nothing");
    drop(other);
    let mut retry = OPEN[16..].to_vec(); // the same transaction again, without EHLO
    retry.extend_from_slice(&lines(700));
    retry.extend_from_slice(b".\r\n");
    assert_eq!(
        p.codes(&retry),
        want(&["250 2.1.0", "250 2.1.5", "354", "250 2.0.0"])
    );
    assert_eq!(p.messages.len(), 1);
    assert_eq!(budget.used(), 0, "returned once the message was stored");
}

#[test]
fn input_deadline_covers_a_whole_command_or_the_whole_data_phase() {
    let l = limits(|l| {
        l.command_timeout_secs = 7;
        l.data_timeout_secs = 3;
        l.data_deadline_secs = 30;
    });
    let mut p = Peer::new(Mode::Smtp, l);
    assert_eq!(p.session.input_deadline().as_secs(), 7);
    p.send(OPEN);
    assert_eq!(p.session.read_timeout().as_secs(), 3, "idle limit in DATA");
    assert_eq!(p.session.input_deadline().as_secs(), 30, "whole DATA phase");
}
