//! Run directories and reports: a known delivery over real sockets gives exactly the expected
//! counts (delivered, missing, duplicates, failed), the charts are written, and damaged event
//! files are reported by line.

#![allow(clippy::unwrap_used)]

mod common;

use common::{message, Client};
use herald_sim::export::{self, Endpoint, Event, Exporter};
use herald_sim::report::ReportBuilder;
use herald_sim::{DomainConfig, Profile, Report, World, WorldConfig};
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

fn domain(name: &str, addr: Ipv4Addr, profile: Profile) -> DomainConfig {
    DomainConfig {
        name: name.into(),
        weight: 1.0,
        mx_host: format!("mx.{name}"),
        mx_addr: addr,
        mx_preference: 10,
        extra_mx: vec![],
        profile,
        starttls: false,
        dane: Default::default(),
        extensions: Default::default(),
    }
}

fn world_config() -> WorldConfig {
    let mut cfg = WorldConfig::empty();
    cfg.smtp_port = 0;
    cfg.domains = vec![
        domain("ok.example", Ipv4Addr::new(127, 1, 9, 1), Profile::Normal),
        domain(
            "users.example",
            Ipv4Addr::new(127, 1, 9, 2),
            Profile::UnknownUsers {
                users: vec!["ghost".into()],
                fraction: 0.0,
            },
        ),
        domain(
            "dead.example",
            Ipv4Addr::new(127, 1, 9, 3),
            Profile::Refused,
        ),
    ];
    cfg
}

const MEMBERS: [&str; 6] = [
    "a@ok.example",
    "b@ok.example",
    "c@ok.example",
    "ghost@users.example",
    "d@users.example",
    "x@dead.example",
];

async fn deliver(world: &World) {
    let port = world.smtp_port();
    let mut ok = Client::connect(SocketAddr::from(([127, 1, 9, 1], port))).await;
    ok.greet().await;
    let body = message("post-1@lists.example", "hello");
    for to in ["a@ok.example", "b@ok.example", "A@OK.example"] {
        let codes = ok
            .transaction("list-bounces@lists.example", to, &body)
            .await;
        assert_eq!(codes, [250, 250, 354, 250]);
    }
    let mut users = Client::connect(SocketAddr::from(([127, 1, 9, 2], port))).await;
    users.greet().await;
    let codes = (users.transaction("l@lists.example", "ghost@users.example", &body)).await;
    assert_eq!(codes[1], 550);
    let codes = (users.transaction("l@lists.example", "d@users.example", &body)).await;
    assert_eq!(codes, [250, 250, 354, 250]);
}

#[tokio::test]
async fn report_counts_match_a_known_delivery() {
    let dir = tempfile::tempdir().unwrap();
    let world = World::start(world_config()).await.unwrap();
    let exporter = Exporter::start(
        world.recorder().clone(),
        dir.path(),
        Duration::from_millis(10),
        Some(4),
    )
    .unwrap();
    std::fs::write(
        dir.path().join(export::WORLD_FILE),
        world.config().to_toml().unwrap(),
    )
    .unwrap();
    let endpoint = Endpoint {
        dns_addr: world.dns_addr().to_string(),
        smtp_port: world.smtp_port(),
        pid: std::process::id(),
        started_unix_ms: world.recorder().started_unix_ms(),
    };
    export::write_json_atomic(&dir.path().join(export::ENDPOINT_FILE), &endpoint).unwrap();
    let members: Vec<String> = MEMBERS.iter().map(|m| m.to_string()).collect();
    export::write_members(&dir.path().join(export::MEMBERS_FILE), &members).unwrap();

    deliver(&world).await;
    let stats = exporter.finish().unwrap();
    assert_eq!((stats.copies, stats.rejections), (4, 1));
    world.shutdown().await;

    let r = Report::from_run_dir(dir.path(), None).unwrap();
    assert_eq!(r.members, Some(6));
    assert_eq!(r.deliverable, 4, "a, b, c, d");
    assert_eq!((r.expected_unknown_users, r.expected_unreachable), (1, 1));
    assert_eq!(r.delivered, 3);
    assert_eq!(r.missing, Some(1), "c got nothing");
    assert_eq!(r.duplicates, 1, "a@ok and A@OK are one mailbox");
    assert_eq!(r.permanently_failed, 1);
    assert_eq!((r.copies, r.strays), (4, 0));
    assert_eq!(r.origin, "first event");
    assert!(r.t_first_ms.is_some() && r.t50_ms.is_some());
    assert_eq!(r.t100_ms, None, "one deliverable member is missing");
    let last = r.curve.last().unwrap();
    assert_eq!((last.delivered, last.failed, last.deferred), (3, 1, 0));
    let text = r.to_string();
    assert!(text.contains("missing              1"), "{text}");

    // The status file the world rewrites for scripts.
    let status: export::Status =
        serde_json::from_slice(&std::fs::read(dir.path().join(export::STATUS_FILE)).unwrap())
            .unwrap();
    assert_eq!((status.accepted, status.duplicates), (4, 1));
    assert_eq!(status.deliverable, Some(4));

    // The same run for one kind of host: only ok.example's members (normal hosts).
    let normal = Report::from_run_dir_for(dir.path(), None, Some("normal")).unwrap();
    assert_eq!((normal.members, normal.deliverable), (Some(3), 3));
    assert_eq!(
        (normal.delivered, normal.strays),
        (2, 1),
        "d@users is a stray here"
    );
    let none = Report::from_run_dir_for(dir.path(), None, Some("tarpit")).unwrap();
    assert_eq!((none.members, none.delivered), (Some(0), 0));

    let (png, svg) = (dir.path().join("curve.png"), dir.path().join("curve.svg"));
    herald_sim::chart::write_charts(&r, "test run", &png, &svg).unwrap();
    assert!(std::fs::read(&png).unwrap().starts_with(b"\x89PNG"));
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.contains("<svg") && svg.contains("delivered (3 of 4"));
}

fn copy(ms: u64, rcpt: &str, msgid: &str) -> Event {
    Event::Copy {
        ms,
        rcpt: rcpt.into(),
        from: "l-bounces@x".into(),
        size: 10,
        msgid: Some(msgid.into()),
        digest: None,
        mime: "lines".into(),
        host: "mx".into(),
    }
}

#[test]
fn percentiles_count_from_t0_over_the_deliverable_population() {
    let world = world_config();
    let members: Vec<String> = (0..20).map(|i| format!("m{i}@ok.example")).collect();
    let mut b = ReportBuilder::new(&world, Some(&members), Some(1000));
    for i in 0..20u64 {
        b.add(copy(
            1000 + (i + 1) * 100,
            &format!("m{i}@ok.example"),
            "<p>",
        ));
    }
    b.add(copy(5000, "m3@ok.example", "<p>"));
    b.add(copy(5000, "m3@ok.example", "<other-post>"));
    b.add(copy(6000, "stranger@ok.example", "<p>"));
    b.add(Event::Reject {
        ms: 1500,
        code: 451,
        status: "4.7.1".into(),
        rcpt: Some("m1@ok.example".into()),
        host: "mx".into(),
    });
    let r = b.finish();
    assert_eq!(
        (r.delivered, r.missing, r.duplicates, r.strays),
        (20, Some(0), 1, 1)
    );
    assert_eq!(r.t_first_ms, Some(100));
    assert_eq!(r.t50_ms, Some(1000), "the 10th of 20");
    assert_eq!(r.t95_ms, Some(1900), "the 19th of 20");
    assert_eq!(r.t100_ms, Some(2000));
    assert_eq!(r.deferrals, 1);
    assert_eq!(r.curve.first().unwrap().delivered, 0);
    assert_eq!(r.curve.last().unwrap().delivered, 20);
    assert!(r.curve.len() <= 402);
}

#[test]
fn damaged_event_files_are_reported_by_line_and_torn_tails_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.jsonl");
    let good = serde_json::to_string(&copy(1, "a@ok.example", "<p>")).unwrap();
    std::fs::write(&path, format!("{good}\n{good}\n{{\"e\":\"copy\",\"ms\"")).unwrap();
    assert_eq!(export::read_events(&path, |_| {}).unwrap(), 2);
    std::fs::write(&path, format!("{good}\nnot json\n")).unwrap();
    let err = export::read_events(&path, |_| {}).unwrap_err().to_string();
    assert!(err.contains("events.jsonl:2:"), "{err}");
    std::fs::write(dir.path().join("m.csv"), "address\nx@y\n").unwrap();
    let err = export::read_members(&dir.path().join("m.csv")).unwrap_err();
    assert!(err.to_string().contains("email"), "{err}");
}
