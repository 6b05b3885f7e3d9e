//! Each behaviour profile does what it claims: a raw SMTP client gets the configured reply
//! codes and timings; the recorder sees what was accepted, refused and duplicated.

mod common;

use common::{message, mx, start, Client};
use herald_sim::{MimeVerdict, Profile};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

const FROM: &str = "list-bounces+m=x.example@lists.example";

#[tokio::test]
async fn normal_host_accepts_pipelined_mail_and_records_it() {
    let addr = Ipv4Addr::new(127, 1, 9, 1);
    let world = start("normal.example", addr, Profile::Normal, false).await;
    let mut c = Client::connect(mx(&world, addr)).await;
    let ehlo = c.greet().await;
    for ext in ["PIPELINING", "8BITMIME", "SIZE", "ENHANCEDSTATUSCODES"] {
        assert!(ehlo.contains(ext), "{ehlo}");
    }
    assert!(!ehlo.contains("STARTTLS"));
    // Two transactions in one write, the second body dot-stuffed.
    let m1 = message("1@lists.example", "hello");
    let m2 = message("2@lists.example", "..leading dot");
    c.send(&format!(
        "MAIL FROM:<{FROM}>\r\nRCPT TO:<a@normal.example>\r\nRCPT TO:<b@normal.example>\r\nDATA\r\n"
    ))
    .await;
    for want in [250, 250, 250, 354] {
        assert_eq!(c.reply().await.0, want);
    }
    c.send(&format!(
        "{m1}.\r\nMAIL FROM:<>\r\nRCPT TO:<c@normal.example>\r\nDATA\r\n"
    ))
    .await;
    for want in [250, 250, 250, 354] {
        assert_eq!(c.reply().await.0, want);
    }
    c.send(&format!("{m2}.\r\nQUIT\r\n")).await;
    assert_eq!(c.reply().await.0, 250);
    assert_eq!(c.reply().await.0, 221);

    let snap = world.recorder().snapshot();
    assert_eq!(
        (snap.accepted, snap.unique_recipients, snap.duplicates),
        (3, 3, 0)
    );
    let a = &snap.copies_for("a@normal.example")[0];
    assert_eq!(&*a.sender, FROM);
    assert_eq!(a.size, m1.len());
    assert_eq!(a.message_id.as_deref(), Some("<1@lists.example>"));
    assert_eq!(a.mime, MimeVerdict::WellFormed);
    let c2 = &snap.copies_for("c@normal.example")[0];
    assert_eq!(&*c2.sender, "");
    let body = c2.message.as_ref().expect("keep_messages");
    assert!(body.ends_with(b"\r\n.leading dot\r\n"), "unstuffed");
    assert_eq!(snap.hosts["mx.normal.example"].connections, 1);
    world.shutdown().await;
}

#[tokio::test]
async fn duplicates_are_detected_by_recipient_and_message_id() {
    let addr = Ipv4Addr::new(127, 1, 9, 2);
    let world = start("dup.example", addr, Profile::Normal, false).await;
    let mut c = Client::connect(mx(&world, addr)).await;
    c.greet().await;
    let m = message("same@lists.example", "one");
    let personal = message("same@lists.example", "two (personalized differently)");
    assert_eq!(
        c.transaction(FROM, "a@dup.example", &m).await,
        [250, 250, 354, 250]
    );
    assert_eq!(
        c.transaction(FROM, "b@dup.example", &m).await,
        [250, 250, 354, 250]
    );
    assert_eq!(
        c.transaction(FROM, "A@DUP.example", &personal).await,
        [250, 250, 354, 250]
    );
    assert!(world.recorder().wait_for(3, Duration::from_secs(1)).await);
    let snap = world.recorder().snapshot();
    assert_eq!(
        (snap.accepted, snap.unique_recipients, snap.duplicates),
        (3, 2, 1)
    );
    assert_eq!(&*snap.duplicate_copies()[0].recipient, "A@DUP.example");
    world.shutdown().await;
}

#[tokio::test]
async fn slow_host_delays_each_reply() {
    let addr = Ipv4Addr::new(127, 1, 9, 3);
    let delay = Duration::from_millis(120);
    let world = start("slow.example", addr, Profile::Slow { delay }, false).await;
    let t0 = Instant::now();
    let mut c = Client::connect(mx(&world, addr)).await;
    assert_eq!(c.reply().await.0, 220);
    assert!(t0.elapsed() >= delay, "banner after {:?}", t0.elapsed());
    let t1 = Instant::now();
    c.expect("EHLO c.example\r\n", 250).await;
    c.expect("NOOP\r\n", 250).await;
    assert!(
        t1.elapsed() >= delay * 2,
        "two replies after {:?}",
        t1.elapsed()
    );
    world.shutdown().await;
}

#[tokio::test]
async fn greylist_defers_then_accepts_after_the_interval() {
    let addr = Ipv4Addr::new(127, 1, 9, 4);
    let retry_after = Duration::from_millis(500);
    let world = start(
        "grey.example",
        addr,
        Profile::Greylist {
            retry_after,
            announce: false,
        },
        false,
    )
    .await;
    let mut c = Client::connect(mx(&world, addr)).await;
    c.greet().await;
    c.expect(&format!("MAIL FROM:<{FROM}>\r\n"), 250).await;
    let text = c.expect("RCPT TO:<a@grey.example>\r\n", 451).await;
    assert!(text.contains("4.7.1"), "{text}");
    c.expect("RCPT TO:<a@grey.example>\r\n", 451).await;
    tokio::time::sleep(retry_after + Duration::from_millis(50)).await;
    c.expect("RCPT TO:<a@grey.example>\r\n", 250).await;
    c.expect("RCPT TO:<b@grey.example>\r\n", 451).await; // another pair starts its own clock
    let snap = world.recorder().snapshot();
    assert_eq!(snap.rejected_by_code["451 4.7.1"], 3);
    assert_eq!(snap.rejections_for("a@grey.example").len(), 2);
    world.shutdown().await;
}

#[tokio::test]
async fn unknown_users_get_550_5_1_1() {
    let addr = Ipv4Addr::new(127, 1, 9, 5);
    let profile = Profile::UnknownUsers {
        users: vec!["bob".into()],
        fraction: 0.0,
    };
    let world = start("users.example", addr, profile, false).await;
    let mut c = Client::connect(mx(&world, addr)).await;
    c.greet().await;
    c.expect(&format!("MAIL FROM:<{FROM}>\r\n"), 250).await;
    let text = c.expect("RCPT TO:<Bob@users.example>\r\n", 550).await;
    assert!(text.contains("5.1.1"), "{text}");
    c.expect("RCPT TO:<alice@users.example>\r\n", 250).await;
    assert_eq!(
        world.expectation("bob@users.example"),
        herald_sim::config::Expectation::UnknownUser
    );
    world.shutdown().await;

    let addr = Ipv4Addr::new(127, 1, 9, 6);
    let all = Profile::UnknownUsers {
        users: vec![],
        fraction: 1.0,
    };
    let world = start("nobody.example", addr, all, false).await;
    let mut c = Client::connect(mx(&world, addr)).await;
    c.greet().await;
    let codes = c.transaction(FROM, "x@nobody.example", "").await;
    assert_eq!(codes, [250, 550, 554]);
    world.shutdown().await;
}

#[tokio::test]
async fn throttle_closes_after_k_messages_per_connection() {
    let addr = Ipv4Addr::new(127, 1, 9, 7);
    let profile = Profile::Throttle {
        max_msgs_per_conn: Some(2),
        max_msgs_per_min: None,
    };
    let world = start("throttle.example", addr, profile, false).await;
    let mut c = Client::connect(mx(&world, addr)).await;
    c.greet().await;
    for i in 0..2 {
        let m = message(&format!("{i}@l"), "x");
        assert_eq!(
            c.transaction(FROM, "a@throttle.example", &m).await,
            [250, 250, 354, 250]
        );
    }
    let text = c.expect(&format!("MAIL FROM:<{FROM}>\r\n"), 421).await;
    assert!(text.contains("4.7.28"), "{text}");
    assert!(c.try_reply().await.is_none(), "connection closed after 421");
    world.shutdown().await;
}

#[tokio::test]
async fn throttle_per_minute_defers_with_452() {
    let addr = Ipv4Addr::new(127, 1, 9, 8);
    let profile = Profile::Throttle {
        max_msgs_per_conn: None,
        max_msgs_per_min: Some(2),
    };
    let world = start("rate.example", addr, profile, false).await;
    let mut c = Client::connect(mx(&world, addr)).await;
    c.greet().await;
    c.expect(&format!("MAIL FROM:<{FROM}>\r\n"), 250).await;
    c.expect("RCPT TO:<a@rate.example>\r\n", 250).await;
    c.expect("RCPT TO:<b@rate.example>\r\n", 250).await;
    let text = c.expect("RCPT TO:<c@rate.example>\r\n", 452).await;
    assert!(text.contains("4.5.3"), "{text}");
    // The limit is per host, not per connection.
    let mut c2 = Client::connect(mx(&world, addr)).await;
    c2.greet().await;
    c2.expect(&format!("MAIL FROM:<{FROM}>\r\n"), 250).await;
    c2.expect("RCPT TO:<d@rate.example>\r\n", 452).await;
    world.shutdown().await;
}

#[tokio::test]
async fn hung_host_accepts_but_never_sends_a_banner() {
    let addr = Ipv4Addr::new(127, 1, 9, 9);
    let world = start("hung.example", addr, Profile::Hung, false).await;
    let mut s = tokio::net::TcpStream::connect(mx(&world, addr))
        .await
        .unwrap();
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_millis(300), {
        use tokio::io::AsyncReadExt;
        s.read(&mut buf)
    })
    .await;
    assert!(read.is_err(), "no banner, connection held open: {read:?}");
    let snap = world.recorder().snapshot();
    assert_eq!(snap.hosts["mx.hung.example"].connections, 1);
    world.shutdown().await;
}

#[tokio::test]
async fn refused_host_has_no_listener() {
    let addr = Ipv4Addr::new(127, 1, 9, 10);
    let world = start("refused.example", addr, Profile::Refused, false).await;
    assert_ne!(world.smtp_port(), 0);
    let err = tokio::net::TcpStream::connect(mx(&world, addr))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused);
    assert_eq!(
        world.expectation("a@refused.example"),
        herald_sim::config::Expectation::Unreachable
    );
    world.shutdown().await;
}

#[tokio::test]
async fn drop_mid_data_closes_during_data() {
    let addr = Ipv4Addr::new(127, 1, 9, 11);
    let profile = Profile::DropMidData { after_msgs: 1 };
    let world = start("drop.example", addr, profile, false).await;
    let mut c = Client::connect(mx(&world, addr)).await;
    c.greet().await;
    let m = message("1@l", "first");
    assert_eq!(
        c.transaction(FROM, "a@drop.example", &m).await,
        [250, 250, 354, 250]
    );
    c.send(&format!(
        "MAIL FROM:<{FROM}>\r\nRCPT TO:<b@drop.example>\r\nDATA\r\n"
    ))
    .await;
    assert_eq!(c.reply().await.0, 250);
    assert_eq!(c.reply().await.0, 250);
    assert_eq!(c.reply().await.0, 354);
    c.send("From: x@y\r\n").await;
    assert!(
        c.try_reply().await.is_none(),
        "dropped without a final reply"
    );
    let snap = world.recorder().snapshot();
    assert_eq!(snap.accepted, 1);
    assert_eq!(snap.hosts["mx.drop.example"].dropped_mid_data, 1);
    world.shutdown().await;
}

#[tokio::test]
async fn protocol_limits_and_sequence_errors() {
    let addr = Ipv4Addr::new(127, 1, 9, 12);
    let mut cfg = common::world_config("limits.example", addr, Profile::Normal, false);
    cfg.receiver.max_message_bytes = 1000;
    let world = herald_sim::World::start(cfg).await.unwrap();
    let mut c = Client::connect(mx(&world, addr)).await;
    c.reply().await;
    c.expect("MAIL FROM:<a@b>\r\n", 503).await; // before EHLO
    c.expect("HELO c.example\r\n", 250).await;
    c.expect("RCPT TO:<a@b>\r\n", 503).await;
    c.expect("MAIL FROM:<a@b> SIZE=5000\r\n", 552).await;
    c.expect("FOO\r\n", 500).await;
    c.expect("STARTTLS\r\n", 502).await;
    let big = message("big@l", &"x".repeat(3000));
    assert_eq!(
        c.transaction(FROM, "a@limits.example", &big).await,
        [250, 250, 354, 552]
    );
    c.expect("NOOP\r\n", 250).await;
    c.send(&format!("{}\r\n", "Y".repeat(5000))).await;
    assert_eq!(c.reply().await.0, 500);
    assert!(c.try_reply().await.is_none());
    assert_eq!(world.recorder().snapshot().rejected_by_code["552 5.3.4"], 2);
    world.shutdown().await;
}

#[tokio::test]
async fn sessions_beyond_the_host_limit_are_turned_away() {
    let addr = Ipv4Addr::new(127, 1, 9, 13);
    let mut cfg = common::world_config("busy.example", addr, Profile::Normal, false);
    cfg.receiver.max_sessions_per_host = 1;
    let world = herald_sim::World::start(cfg).await.unwrap();
    let mut first = Client::connect(mx(&world, addr)).await;
    first.greet().await;
    let mut second = Client::connect(mx(&world, addr)).await;
    let (code, text) = second.reply().await;
    assert_eq!(code, 421, "{text}");
    assert!(text.contains("4.3.2"), "{text}");
    first.expect("QUIT\r\n", 221).await;
    assert_eq!(world.recorder().snapshot().hosts["mx.busy.example"].busy, 1);
    world.shutdown().await;
}

#[tokio::test]
async fn an_announcing_greylist_says_its_interval() {
    let addr = Ipv4Addr::new(127, 1, 9, 14);
    let profile = Profile::Greylist {
        retry_after: Duration::from_secs(90),
        announce: true,
    };
    let world = start("greysays.example", addr, profile, false).await;
    let mut c = Client::connect(mx(&world, addr)).await;
    c.greet().await;
    c.expect(&format!("MAIL FROM:<{FROM}>\r\n"), 250).await;
    let text = c.expect("RCPT TO:<a@greysays.example>\r\n", 451).await;
    assert!(
        text.contains("4.7.1") && text.contains("retry in 90 seconds"),
        "{text}"
    );
    assert_eq!(world.recorder().snapshot().rejected_by_code["451 4.7.1"], 1);
    world.shutdown().await;
}

#[tokio::test]
async fn drop_first_attempt_drops_once_per_recipient() {
    let addr = Ipv4Addr::new(127, 1, 9, 15);
    let world = start("dropfirst.example", addr, Profile::DropFirstAttempt, false).await;
    let m = message("1@l", "first");
    let mut c = Client::connect(mx(&world, addr)).await;
    c.greet().await;
    c.send(&format!(
        "MAIL FROM:<{FROM}>\r\nRCPT TO:<a@dropfirst.example>\r\nDATA\r\n"
    ))
    .await;
    assert_eq!(c.reply().await.0, 250);
    assert_eq!(c.reply().await.0, 250);
    assert_eq!(c.reply().await.0, 354);
    c.send("From: x@y\r\n").await;
    assert!(
        c.try_reply().await.is_none(),
        "the first attempt is dropped"
    );
    let mut c = Client::connect(mx(&world, addr)).await;
    c.greet().await;
    assert_eq!(
        c.transaction(FROM, "A@dropfirst.example", &m).await,
        [250, 250, 354, 250],
        "the retry is accepted (recipients compared case-insensitively)"
    );
    let snap = world.recorder().snapshot();
    assert_eq!(snap.accepted, 1);
    assert_eq!(snap.hosts["mx.dropfirst.example"].dropped_mid_data, 1);
    assert_eq!(
        world.expectation("a@dropfirst.example"),
        herald_sim::config::Expectation::Deliverable
    );
    world.shutdown().await;
}

#[tokio::test]
async fn rate_limited_hosts_share_one_budget_and_cap_connections() {
    let (a, b) = (Ipv4Addr::new(127, 1, 9, 16), Ipv4Addr::new(127, 1, 9, 17));
    let profile = Profile::RateLimited {
        budget: "big.example".into(),
        msgs_per_sec: 3,
        max_msgs_per_conn: Some(2),
    };
    let mut cfg = common::world_config("big.example", a, profile, false);
    cfg.domains[0].extra_mx.push(herald_sim::config::ExtraMx {
        host: "mx2.big.example".into(),
        addr: b,
        preference: 20,
        profile: None,
    });
    let world = herald_sim::World::start(cfg).await.unwrap();
    let m = message("1@l", "x");
    let mut first = Client::connect(mx(&world, a)).await;
    first.greet().await;
    let mut second = Client::connect(mx(&world, b)).await;
    second.greet().await;
    assert_eq!(
        first.transaction(FROM, "u1@big.example", &m).await,
        [250, 250, 354, 250]
    );
    assert_eq!(
        first.transaction(FROM, "u2@big.example", &m).await,
        [250, 250, 354, 250]
    );
    assert_eq!(
        second.transaction(FROM, "u3@big.example", &m).await,
        [250, 250, 354, 250]
    );
    // The budget of 3 a second is spent over both hosts: the next MAIL is refused for rate.
    let text = second.expect(&format!("MAIL FROM:<{FROM}>\r\n"), 451).await;
    assert!(
        text.contains("4.7.28") && text.contains("unusual rate"),
        "{text}"
    );
    // Two messages on the first connection: its next MAIL gets 421 and the connection closes.
    let text = first.expect(&format!("MAIL FROM:<{FROM}>\r\n"), 421).await;
    assert!(text.contains("4.7.28"), "{text}");
    assert!(first.try_reply().await.is_none());
    tokio::time::sleep(Duration::from_millis(600)).await;
    second.expect(&format!("MAIL FROM:<{FROM}>\r\n"), 250).await;
    let snap = world.recorder().snapshot();
    assert_eq!(snap.accepted, 3);
    assert_eq!(snap.rejected_by_code["451 4.7.28"], 1);
    assert_eq!(snap.rejected_by_code["421 4.7.28"], 1);
    world.shutdown().await;
}

#[tokio::test]
async fn smtputf8_and_dsn_are_taken_only_where_offered() {
    // The default host offers SMTPUTF8 and not DSN.
    let addr = Ipv4Addr::new(127, 1, 9, 40);
    let world = start("utf8.example", addr, Profile::Normal, false).await;
    let mut c = Client::connect(mx(&world, addr)).await;
    let ehlo = c.greet().await;
    assert!(ehlo.contains("SMTPUTF8") && !ehlo.contains("DSN"), "{ehlo}");
    let rp = "list-bounces+j\u{f6}rg=utf8.example@lists.example";
    c.send("MAIL FROM:<a@lists.example> RET=HDRS\r\n").await;
    assert_eq!(c.reply().await.0, 555, "DSN not offered");
    c.send(&format!("MAIL FROM:<{rp}>\r\n")).await;
    assert_eq!(
        c.reply().await.0,
        553,
        "UTF-8 without the SMTPUTF8 parameter"
    );
    c.send(&format!(
        "MAIL FROM:<{rp}> SMTPUTF8\r\nRCPT TO:<j\u{f6}rg@utf8.example>\r\nDATA\r\n"
    ))
    .await;
    for want in [250, 250, 354] {
        assert_eq!(c.reply().await.0, want);
    }
    c.send(&format!(
        "{}.\r\nQUIT\r\n",
        message("u1@lists.example", "hi")
    ))
    .await;
    assert_eq!(c.reply().await.0, 250);
    let snap = world.recorder().snapshot();
    let copy = &snap.copies_for("j\u{f6}rg@utf8.example")[0];
    assert!(copy.smtputf8 && copy.dsn.is_empty());
    world.shutdown().await;

    // A host without SMTPUTF8 and with DSN.
    let addr = Ipv4Addr::new(127, 1, 9, 41);
    let mut cfg = common::world_config("dsn.example", addr, Profile::Normal, false);
    cfg.domains[0].extensions.smtputf8 = false;
    cfg.domains[0].extensions.dsn = true;
    let world = herald_sim::World::start(cfg).await.unwrap();
    let mut c = Client::connect(mx(&world, addr)).await;
    let ehlo = c.greet().await;
    assert!(!ehlo.contains("SMTPUTF8") && ehlo.contains("DSN"), "{ehlo}");
    c.send("MAIL FROM:<a@lists.example> SMTPUTF8\r\n").await;
    assert_eq!(c.reply().await.0, 555, "SMTPUTF8 not offered");
    c.send("MAIL FROM:<a@lists.example> RET=HDRS ENVID=x1\r\nRCPT TO:<j\u{f6}rg@dsn.example>\r\n")
        .await;
    assert_eq!(c.reply().await.0, 250);
    assert_eq!(c.reply().await.0, 553);
    c.send("RCPT TO:<b@dsn.example> NOTIFY=FAILURE ORCPT=rfc822;b+40dsn.example\r\nDATA\r\n")
        .await;
    for want in [250, 354] {
        assert_eq!(c.reply().await.0, want);
    }
    c.send(&format!(
        "{}.\r\nQUIT\r\n",
        message("d1@lists.example", "hi")
    ))
    .await;
    assert_eq!(c.reply().await.0, 250);
    let snap = world.recorder().snapshot();
    let copy = &snap.copies_for("b@dsn.example")[0];
    assert_eq!(
        &*copy.dsn,
        "RET=HDRS ENVID=x1 NOTIFY=FAILURE ORCPT=rfc822;b+40dsn.example"
    );
    world.shutdown().await;
}

#[tokio::test]
async fn a_tarpit_writes_every_reply_one_byte_at_a_time_within_its_session_limit() {
    use tokio::io::AsyncReadExt;
    let addr = Ipv4Addr::new(127, 1, 9, 30);
    let delay = Duration::from_millis(20);
    let profile = Profile::Tarpit {
        byte_delay: delay,
        max_sessions: Some(1),
    };
    let world = start("tarpit.example", addr, profile, false).await;
    let t0 = Instant::now();
    let mut raw = tokio::net::TcpStream::connect(mx(&world, addr))
        .await
        .unwrap();
    let mut banner = Vec::new();
    let mut reads = 0;
    let mut buf = [0u8; 512];
    while !banner.ends_with(b"\r\n") {
        let n = raw.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed after {banner:?}");
        banner.extend_from_slice(&buf[..n]);
        reads += 1;
    }
    let text = String::from_utf8_lossy(&banner).to_string();
    assert!(text.starts_with("220 "), "{text}");
    // One byte per write, a delay apart: a read never gets the line whole.
    assert!(
        reads * 2 >= banner.len(),
        "{reads} reads for {} bytes",
        banner.len()
    );
    assert!(
        t0.elapsed() >= delay * banner.len() as u32,
        "{:?}",
        t0.elapsed()
    );
    // A second session is over the tarpit's own limit: turned away at once.
    let mut second = Client::connect(mx(&world, addr)).await;
    let (code, text) = second.reply().await;
    assert_eq!(code, 421, "{text}");
    // The first session works, slowly but correctly.
    let mut c = Client::new(raw);
    c.expect("EHLO c.example\r\n", 250).await;
    let codes = c
        .transaction(FROM, "a@tarpit.example", &message("<t1@x>", "hello"))
        .await;
    assert_eq!(codes, vec![250, 250, 354, 250]);
    assert_eq!(world.recorder().snapshot().copies.len(), 1);
    world.shutdown().await;
}
