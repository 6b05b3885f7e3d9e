//! `enqueue()` per `Submission` kind against a real spool in a tempdir and a real SQLite
//! directory, and the RCPT answer carried to DATA over a real loopback SMTP session (one
//! directory lookup per recipient).

use bytes::Bytes;
use herald_directory::Directory;
use herald_enqueue::{
    ArrivalCheck, Backlog, DedupConfig, DedupStore, EnqueueError, Enqueuer, Handoff,
    HandoffReceivers, IntakeSection, ListHandler, LmtpClients, Origin, PostmasterPolicy,
    Submission,
};
use herald_spool::SpooledPost;
use herald_spool::{PostKind, Spool, SpoolConfig};
use herald_telemetry::{Telemetry, TelemetryConfig};
use herald_types::{Address, List, ListAddressKind, ListSettings, PostingPolicy};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

struct World {
    _dir: tempfile::TempDir,
    enqueuer: Arc<Enqueuer>,
    handed: HandoffReceivers,
    list: List,
}

fn a(s: &str) -> Address {
    Address::parse(s).expect("address")
}

fn world() -> World {
    let dir = tempfile::tempdir().expect("tempdir");
    let directory = Directory::open(&dir.path().join("herald.db")).expect("directory");
    let list = directory
        .create_list(
            &a("dev@lists.test"),
            &ListSettings {
                posting_policy: PostingPolicy::Anyone,
                ..ListSettings::default()
            },
        )
        .expect("list");
    let (spool, _) = Spool::open(SpoolConfig::new(dir.path().join("spool"))).expect("spool");
    let telemetry = Telemetry::new(&TelemetryConfig {
        log_path: None,
        log_rotation: None,
        stats: None,
    })
    .expect("telemetry");
    let dedup = DedupStore::open(
        DedupConfig {
            path: dir.path().join("dedup.log"),
            window_ms: 3_600_000,
            max_entries: 1000,
        },
        herald_types::unix_ms_now(),
    )
    .expect("dedup");
    let (handoff, handed) = Handoff::channels(16);
    let (backlog, queue) = Backlog::new(&IntakeSection::default());
    tokio::spawn(herald_enqueue::backlog::run(
        queue,
        handoff,
        tokio_util::sync::CancellationToken::new(),
    ));
    let enqueuer = Arc::new(Enqueuer {
        directory,
        spool,
        telemetry,
        max_message_bytes: 10_000,
        dedup: Some(dedup),
        arrival: ArrivalCheck::new(
            None,
            "herald.test",
            Duration::from_secs(1),
            LmtpClients::Unknown,
        ),
        backlog,
        post_rate: Default::default(),
        content_filter: None,
        shared: None,
        cluster_dedup: None,
    });
    World {
        _dir: dir,
        enqueuer,
        handed,
        list,
    }
}

/// The next post handed to a stage: the hand-off runs after the `250`, in its own task.
async fn next(rx: &mut tokio::sync::mpsc::Receiver<SpooledPost>) -> SpooledPost {
    tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .expect("handed over within 5 s")
        .expect("channel open")
}

const POST: &[u8] = b"From: a@x.test\r\nSubject: hi\r\nMessage-ID: <m1@x.test>\r\n\r\nbody\r\n";

fn smtp(from: &str) -> Origin {
    Origin::Smtp {
        envelope_from: Some(a(from)),
        peer: None,
        helo: "x.test".into(),
        smtputf8: false,
    }
}

#[tokio::test]
async fn list_mail_goes_to_its_stage_by_role_and_retries_are_acknowledged_once() {
    let mut w = world();
    // An open list: the post fans out.
    let post = |role, body: &'static [u8]| Submission::List {
        list: Box::new(w.list.clone()),
        role,
        origin: smtp("a@x.test"),
        body: Bytes::from_static(body),
    };
    let id = w
        .enqueuer
        .enqueue(post(ListAddressKind::Post, POST))
        .await
        .expect("enqueued");
    let handed = next(&mut w.handed.fanout).await;
    assert_eq!((handed.id, handed.meta.kind), (id, PostKind::ListPost));
    let again = w
        .enqueuer
        .enqueue(post(ListAddressKind::Post, POST))
        .await
        .expect("retry");
    assert_eq!(
        again, id,
        "a retry is acknowledged with the first post's id"
    );
    let bounce = ListAddressKind::Bounces { member: None };
    let b = w
        .enqueuer
        .enqueue(post(bounce, b"Subject: b\r\n\r\nx\r\n"))
        .await;
    let got = next(&mut w.handed.bounces).await;
    assert_eq!((Some(got.id), got.meta.kind), (b.ok(), PostKind::Bounce));
    // Handed over in order: had the retry been handed over, it would be waiting by now.
    assert!(
        w.handed.fanout.try_recv().is_err(),
        "the retry is not handed over again"
    );
    let r = w
        .enqueuer
        .enqueue(post(
            ListAddressKind::Request,
            b"Subject: help\r\n\r\nx\r\n",
        ))
        .await;
    let got = next(&mut w.handed.lists).await;
    assert_eq!((Some(got.id), got.meta.kind), (r.ok(), PostKind::Request));
}

#[tokio::test]
async fn generated_server_and_postmaster_mail_are_spooled_for_their_one_recipient() {
    let mut w = world();
    let generated = Submission::Generated {
        list: Box::new(w.list.clone()),
        to: a("bob@x.test"),
        body: Bytes::from_static(b"Subject: confirm\r\n\r\nx\r\n"),
    };
    w.enqueuer.enqueue(generated).await.expect("generated");
    let got = next(&mut w.handed.fanout).await;
    assert_eq!(got.meta.kind, PostKind::Generated);
    assert_eq!(got.meta.recipients, vec![a("bob@x.test")]);
    assert!(!got.meta.null_sender);

    let server = Submission::Server {
        from: a("postmaster@lists.test"),
        to: vec![a("ops@example.org")],
        dsn: None,
        body: Bytes::from_static(b"Subject: fwd\r\n\r\nx\r\n"),
    };
    w.enqueuer.enqueue(server).await.expect("server mail");
    let got = next(&mut w.handed.fanout).await;
    assert!(got.meta.null_sender, "server mail goes out from <>");

    let pm = |body: Bytes| Submission::Postmaster {
        rcpt: a("postmaster@lists.test"),
        envelope_from: Some(a("x@y.test")),
        dsn: None,
        body,
    };
    w.enqueuer
        .enqueue(pm(Bytes::from_static(b"Subject: hi\r\n\r\nx\r\n")))
        .await
        .expect("postmaster mail");
    let got = next(&mut w.handed.lists).await;
    assert_eq!(got.meta.kind, PostKind::Postmaster);
    let big = w
        .enqueuer
        .enqueue(pm(Bytes::from(vec![b'x'; 20_000])))
        .await;
    assert!(matches!(big, Err(EnqueueError::TooBig { limit: 10_000 })));
    assert_eq!(w.enqueuer.spool.live_count(PostKind::Postmaster), 1);
}

async fn say(
    r: &mut BufReader<tokio::net::tcp::OwnedReadHalf>,
    w: &mut tokio::net::tcp::OwnedWriteHalf,
    line: &str,
) -> String {
    w.write_all(line.as_bytes()).await.expect("write");
    let mut reply = String::new();
    loop {
        let mut l = String::new();
        r.read_line(&mut l).await.expect("read");
        reply.push_str(&l);
        if l.len() < 4 || l.as_bytes()[3] != b'-' {
            return reply;
        }
    }
}

#[tokio::test]
async fn the_rcpt_answer_is_carried_to_data_one_lookup_per_recipient() {
    let mut w = world();
    let policy = PostmasterPolicy {
        hostname: "herald.test".into(),
        max_stored: 10,
        complaints_local_part: String::new(),
    };
    let handler = Arc::new(ListHandler::new(w.enqueuer.clone(), policy));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let stop = tokio_util::sync::CancellationToken::new();
    let server = tokio::spawn(herald_inbound::serve(
        listener,
        herald_inbound::Mode::Smtp,
        herald_inbound::InboundConfig::new("herald.test"),
        handler.clone(),
        stop.clone(),
    ));
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (r, mut wr) = stream.into_split();
    let mut r = BufReader::new(r);
    let mut greeting = String::new();
    r.read_line(&mut greeting).await.expect("greeting");
    say(&mut r, &mut wr, "EHLO x.test\r\n").await;
    say(&mut r, &mut wr, "MAIL FROM:<a@x.test>\r\n").await;
    for rcpt in [
        "dev@lists.test",
        "dev-request@lists.test",
        "nobody@lists.test",
    ] {
        say(&mut r, &mut wr, &format!("RCPT TO:<{rcpt}>\r\n")).await;
    }
    assert!(say(&mut r, &mut wr, "DATA\r\n").await.starts_with("354"));
    let end = say(
        &mut r,
        &mut wr,
        "From: a@x.test\r\nSubject: hi\r\nMessage-ID: <m2@x.test>\r\n\r\nbody\r\n.\r\n",
    )
    .await;
    assert!(end.starts_with("250"), "{end}");
    assert_eq!(
        handler.directory_lookups(),
        3,
        "one lookup per RCPT, none again at DATA"
    );
    let post = next(&mut w.handed.fanout).await;
    assert_eq!(post.meta.kind, PostKind::ListPost);
    let request = next(&mut w.handed.lists).await;
    assert_eq!(request.meta.kind, PostKind::Request);
    say(&mut r, &mut wr, "QUIT\r\n").await;
    stop.cancel();
    let _ = server.await;
}
