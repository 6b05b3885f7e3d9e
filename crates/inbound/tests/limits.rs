//! The denial-of-service bounds over real loopback sockets: deadlines against trickling peers,
//! the per-client and per-network session limits, the global budget of buffered message
//! octets, and service under a flood: the stress timeout and shedding.

mod common;

use common::{start, want, Client};
use herald_inbound::{Mode, Refusal};
use std::net::IpAddr;
use std::time::Duration;

const OPEN: &[u8] =
    b"EHLO c.example\r\nMAIL FROM:<a@c.example>\r\nRCPT TO:<list@lists.example>\r\nDATA\r\n";

/// `n` lines of 100 octets, CRLF included.
fn lines(n: usize) -> Vec<u8> {
    let mut line = vec![b'x'; 98];
    line.extend_from_slice(b"\r\n");
    line.repeat(n)
}

/// Polls `f` until it holds (the server updates its counters on its own tasks).
async fn eventually(what: &str, f: impl Fn() -> bool) {
    for _ in 0..200 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never happened: {what}");
}

#[tokio::test]
async fn a_command_trickled_under_the_idle_timeout_is_cut_off_by_its_deadline() {
    let server = start(Mode::Smtp, |c| c.limits.command_timeout_secs = 2).await;
    let mut c = Client::connect(server.addr).await;
    // One byte every 0.7 s never trips a 2 s idle limit; the line would take 11 s.
    let (reply, after) = c
        .trickle_until_reply(b"EHLO c.example\r\n", Duration::from_millis(700))
        .await;
    assert!(reply.starts_with("421 4.4.2"), "{reply}");
    assert!(
        after < Duration::from_millis(2600),
        "deadline from the banner, not per read: {after:?}"
    );
    assert!(c.closed().await);
    assert_eq!(server.recorder.refusals(), vec![Refusal::CommandTimeout]);
}

#[tokio::test]
async fn a_body_trickled_under_the_idle_timeout_is_cut_off_and_never_stored() {
    let server = start(Mode::Smtp, |c| {
        c.limits.data_timeout_secs = 1;
        c.limits.data_deadline_secs = 2;
    })
    .await;
    let mut c = Client::connect(server.addr).await;
    c.send(OPEN).await;
    let codes = c.replies(4).await;
    assert_eq!(codes, want(&["250", "250 2.1.0", "250 2.1.5", "354"]));
    // Each byte comes well within the 1 s idle limit; the end never does.
    let body = b"Subject: slow\r\n\r\n".repeat(10);
    let (reply, after) = c
        .trickle_until_reply(&body, Duration::from_millis(300))
        .await;
    assert!(reply.starts_with("421 4.4.2"), "{reply}");
    assert!(after < Duration::from_millis(2600), "{after:?}");
    assert!(c.closed().await);
    assert!(server.recorder.messages().is_empty(), "nothing handed over");
    assert_eq!(server.recorder.refusals(), vec![Refusal::DataTimeout]);
    eventually("the dropped body's budget returned", || {
        server.shared.buffered_octets() == 0
    })
    .await;
}

#[tokio::test]
async fn one_address_gets_at_most_max_sessions_per_client_and_the_count_is_released() {
    let server = start(Mode::Smtp, |c| {
        c.max_sessions = 4;
        c.max_sessions_per_client = 3;
    })
    .await;
    let here: IpAddr = "127.0.0.1".parse().unwrap();
    let mut open = Vec::new();
    for _ in 0..3 {
        open.push(Client::connect(server.addr).await);
    }
    let mut refused = Client::connect_raw(server.addr).await;
    assert_eq!(refused.reply().await, "421 4.7.0");
    assert!(refused.closed().await);
    // The refused connection took no session slot: another address still gets the 4th.
    let other: IpAddr = "127.0.0.2".parse().unwrap();
    let mut elsewhere = Client::connect_from(other, server.addr).await;
    assert_eq!(elsewhere.reply().await, "220");
    assert_eq!(server.shared.sessions_from(here), 3);

    let mut leaving = open.pop().unwrap();
    leaving.send(b"QUIT\r\n").await;
    assert_eq!(leaving.reply().await, "221 2.0.0");
    assert!(leaving.closed().await);
    eventually("the slot released", || {
        server.shared.sessions_from(here) == 2
    })
    .await;
    let mut again = Client::connect(server.addr).await;
    again.send(b"NOOP\r\n").await;
    assert_eq!(again.reply().await, "250 2.0.0");
    assert_eq!(server.recorder.refusals(), vec![Refusal::TooManyFromClient]);

    drop((open, again, elsewhere));
    eventually("every slot released", || {
        server.shared.sessions_from(here) + server.shared.sessions_from(other) == 0
    })
    .await;
}

#[tokio::test]
async fn one_network_gets_at_most_max_sessions_per_network() {
    let server = start(Mode::Smtp, |c| {
        c.max_sessions_per_client = 2;
        c.max_sessions_per_network = 3;
    })
    .await;
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    let mut open = Vec::new();
    for from in ["127.0.9.1", "127.0.9.1", "127.0.9.2"] {
        let mut c = Client::connect_from(ip(from), server.addr).await;
        assert_eq!(c.reply().await, "220");
        open.push(c);
    }
    // A third address of the same /24: refused for its network, before any banner.
    let mut refused = Client::connect_from(ip("127.0.9.3"), server.addr).await;
    assert_eq!(refused.reply().await, "421 4.7.0");
    assert!(refused.closed().await);
    // The next /24 is another network.
    let mut next = Client::connect_from(ip("127.0.10.1"), server.addr).await;
    assert_eq!(next.reply().await, "220");
    assert_eq!(server.shared.sessions_from_network(ip("127.0.9.200")), 3);
    assert_eq!(
        server.recorder.refusals(),
        vec![Refusal::TooManyFromNetwork]
    );
    drop(open);
    eventually("the network's count released", || {
        server.shared.sessions_from_network(ip("127.0.9.0")) == 0
    })
    .await;
}

#[tokio::test]
async fn a_full_listener_sheds_the_longest_idle_session_never_one_in_a_transaction() {
    let server = start(Mode::Smtp, |c| c.max_sessions = 3).await;
    let mut idler = Client::connect(server.addr).await;
    let mut busy = Client::connect(server.addr).await;
    busy.send(&OPEN[..OPEN.len() - 6]).await; // EHLO, MAIL, RCPT: in a transaction
    assert_eq!(
        busy.replies(3).await,
        want(&["250", "250 2.1.0", "250 2.1.5"])
    );
    let mut talker = Client::connect(server.addr).await;
    talker.send(b"NOOP\r\n").await;
    assert_eq!(talker.reply().await, "250 2.0.0");
    // Full: the newcomer is admitted, and the session silent since its banner is shed.
    let mut newcomer = Client::connect(server.addr).await;
    assert_eq!(idler.reply().await, "421 4.7.0");
    assert!(idler.closed().await);
    // Next the talker (idle since its NOOP), then the newcomer; the transaction is never shed.
    let mut second = Client::connect(server.addr).await;
    assert_eq!(talker.reply().await, "421 4.7.0");
    let mut third = Client::connect(server.addr).await;
    assert_eq!(newcomer.reply().await, "421 4.7.0");
    busy.send(b"DATA\r\nSubject: kept\r\n\r\nhi\r\n.\r\n").await;
    assert_eq!(busy.replies(2).await, want(&["354", "250 2.0.0"]));
    assert_eq!(server.recorder.messages().len(), 1);
    // The transaction is over: the busy session is idle again and may be shed like the rest.
    second.send(b"MAIL FROM:<a@c.example>\r\n").await;
    assert_eq!(second.reply().await, "503 5.5.1", "EHLO first; still idle");
    third
        .send(b"EHLO c.example\r\nMAIL FROM:<b@c.example>\r\n")
        .await;
    assert_eq!(third.replies(2).await, want(&["250", "250 2.1.0"]));
    let mut fourth = Client::connect(server.addr).await;
    assert_eq!(
        busy.reply().await,
        "421 4.7.0",
        "idle longest of the idle ones"
    );
    fourth.send(b"NOOP\r\n").await;
    assert_eq!(fourth.reply().await, "250 2.0.0");
    assert_eq!(server.recorder.refusals(), vec![Refusal::Shed; 4]);
}

#[tokio::test]
async fn under_stress_idle_sessions_get_the_short_timeout_even_those_already_open() {
    let server = start(Mode::Smtp, |c| {
        c.max_sessions = 4;
        c.stress_threshold_percent = 50;
        c.stress_command_timeout_secs = 1;
    })
    .await;
    // Opened before stress, with the 300 s command timeout.
    let mut trickler = Client::connect(server.addr).await;
    // The second session makes it 50 %: stress mode; this one is in a transaction.
    let mut busy = Client::connect(server.addr).await;
    busy.send(&OPEN[..OPEN.len() - 6]).await;
    assert_eq!(
        busy.replies(3).await,
        want(&["250", "250 2.1.0", "250 2.1.5"])
    );
    // A command trickled under stress is cut 1 s after its banner, not 300 s.
    let (reply, after) = trickler
        .trickle_until_reply(b"EHLO c.example\r\n", Duration::from_millis(200))
        .await;
    assert!(reply.starts_with("421 4.4.2"), "{reply}");
    assert!(after < Duration::from_millis(1500), "{after:?}");
    assert!(trickler.closed().await);
    // The transaction is not hurried: past the stress timeout it still goes on.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    busy.send(b"DATA\r\nSubject: slow but fine\r\n\r\nhi\r\n.\r\n")
        .await;
    assert_eq!(busy.replies(2).await, want(&["354", "250 2.0.0"]));
    assert_eq!(server.recorder.refusals(), vec![Refusal::StressTimeout]);
    // The trickler gone, 1 session of 4: stress mode is over, and idlers keep the long timeout.
    eventually("stress on, then off", || {
        server.recorder.stress_changes() == vec![true, false]
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    busy.send(b"NOOP\r\n").await;
    assert_eq!(busy.reply().await, "250 2.0.0");
}

#[tokio::test]
async fn lmtp_is_never_shed_nor_stressed() {
    let server = start(Mode::Lmtp, |c| {
        c.max_sessions = 2;
        c.stress_command_timeout_secs = 1;
    })
    .await;
    let mut open = vec![
        Client::connect(server.addr).await,
        Client::connect(server.addr).await,
    ];
    let mut refused = Client::connect_raw(server.addr).await;
    assert_eq!(refused.reply().await, "421 4.3.2", "full, and nobody shed");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    for c in &mut open {
        c.send(b"LHLO mta.example\r\n").await;
        assert_eq!(c.reply().await, "250");
    }
    assert!(server.recorder.refusals().is_empty());
    assert!(server.recorder.stress_changes().is_empty());
}

#[tokio::test]
async fn lmtp_is_not_limited_per_client() {
    let server = start(Mode::Lmtp, |c| c.max_sessions_per_client = 2).await;
    let mut open = Vec::new();
    for _ in 0..5 {
        open.push(Client::connect(server.addr).await);
    }
    for c in &mut open {
        c.send(b"LHLO mta.example\r\n").await;
        assert_eq!(c.reply().await, "250");
    }
    assert!(server.recorder.refusals().is_empty());
}

#[tokio::test]
async fn concurrent_bodies_beyond_the_budget_get_452_and_a_retry_succeeds() {
    let server = start(Mode::Smtp, |c| {
        c.max_buffered_octets = 200_000;
        c.limits.max_message_octets = 160_000;
    })
    .await;
    let mut a = Client::connect(server.addr).await;
    let mut b = Client::connect(server.addr).await;
    for c in [&mut a, &mut b] {
        c.send(OPEN).await;
        assert_eq!(c.replies(4).await.last().map(String::as_str), Some("354"));
    }
    // A's body is in memory, not finished.
    a.send(&lines(1500)).await;
    eventually("A's body reserved", || {
        server.shared.buffered_octets() >= 150_000
    })
    .await;
    // B's does not fit: read to its end, refused for now, the session stays in sync.
    b.send(&lines(1500)).await;
    b.send(b".\r\nNOOP\r\n").await;
    assert_eq!(b.replies(2).await, want(&["452 4.3.1", "250 2.0.0"]));
    a.send(b".\r\n").await;
    assert_eq!(a.reply().await, "250 2.0.0");
    // B retries the same message once A's is stored.
    b.send(&OPEN[16..]).await;
    b.send(&lines(1500)).await;
    b.send(b".\r\n").await;
    assert_eq!(
        b.replies(4).await,
        want(&["250 2.1.0", "250 2.1.5", "354", "250 2.0.0"])
    );
    let stored = server.recorder.messages();
    assert_eq!(stored.len(), 2, "each message stored exactly once");
    assert!(stored
        .iter()
        .all(|m| m.envelope.body.ends_with(&lines(1500))));
    assert_eq!(server.recorder.refusals(), vec![Refusal::BufferBudget]);
    for c in [&mut a, &mut b] {
        c.send(b"QUIT\r\n").await;
        assert_eq!(c.reply().await, "221 2.0.0");
    }
    assert!(a.closed().await && b.closed().await);
    eventually("the budget back to zero", || {
        server.shared.buffered_octets() == 0
    })
    .await;
}
