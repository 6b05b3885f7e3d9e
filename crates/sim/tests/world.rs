//! Whole worlds: config parsing and its errors, the generator, and DNS published for the
//! receivers.

#![allow(clippy::unwrap_used)]

mod common;

use herald_sim::config::Expectation;
use herald_sim::{GenSpec, Profile, ProfileFractions, World, WorldConfig};
use hickory_proto::op::{Message, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use std::net::Ipv4Addr;

const GOOD: &str = r#"
smtp_port = 0
[receiver]
check_mime_every = 1
keep_messages = true

[[domains]]
name = "bigmail.example"
mx_addr = "127.1.8.1"
weight = 50
starttls = true
profile = { kind = "throttle", max_msgs_per_conn = 100 }
extra_mx = [{ host = "mx2.bigmail.example", addr = "127.1.8.2", preference = 20, profile = { kind = "hung" } }]

[[domains]]
name = "Slow.Example"
mx_addr = "127.1.8.3"
profile = { kind = "slow", delay_ms = 5 }

[[domains]]
name = "grey.example"
mx_addr = "127.1.8.4"
profile = { kind = "greylist", retry_after_secs = 0.5 }

[[domains]]
name = "dead.example"
mx_addr = "127.1.8.5"
profile = { kind = "refused" }
"#;

#[test]
fn parses_a_world_and_round_trips_it() {
    let cfg = WorldConfig::from_toml(GOOD).unwrap();
    assert_eq!(cfg.domains.len(), 4);
    assert_eq!(cfg.domains[1].name, "slow.example");
    assert_eq!(cfg.domains[1].mx_host, "mx.slow.example");
    assert_eq!(cfg.domains[0].extra_mx[0].profile, Some(Profile::Hung));
    assert_eq!(cfg.hosts().len(), 5);
    let again = WorldConfig::from_toml(&cfg.to_toml().unwrap()).unwrap();
    assert_eq!(again, cfg);
    assert_eq!(
        cfg.expectation("a@bigmail.example"),
        Expectation::Deliverable
    );
    assert_eq!(cfg.expectation("a@dead.example"), Expectation::Unreachable);
    assert_eq!(
        cfg.expectation("a@elsewhere.example"),
        Expectation::NoSuchDomain
    );
}

#[test]
fn bad_configs_name_the_key() {
    let domain = |extra: &str| {
        format!("[[domains]]\nname = \"a.example\"\nmx_addr = \"127.1.8.1\"\n{extra}\n")
    };
    let cases: Vec<(String, &str, &str)> = vec![
        (
            domain("profile = { kind = \"slow\", delay_ms = \"soon\" }"),
            "domains[0].profile.delay_ms",
            "invalid type",
        ),
        (
            domain("profile = { kind = \"slow\" }"),
            "domains[0].profile.delay_ms",
            "required",
        ),
        (
            domain("profile = { kind = \"slow\", delay_ms = 5, retry_after_secs = 1 }"),
            "domains[0].profile.retry_after_secs",
            "not used by kind",
        ),
        (
            domain("profile = { kind = \"bouncy\" }"),
            "domains[0].profile.kind",
            "unknown variant",
        ),
        (
            domain("colour = \"red\""),
            "domains[0].colour",
            "unknown key",
        ),
        (
            "[[domains]]\nname = \"a.example\"\n".into(),
            "domains[0].mx_addr",
            "required key is missing",
        ),
        (
            "[[domains]]\nname = \"a.example\"\nmx_addr = \"10.0.0.1\"\n".into(),
            "domains[0].mx_addr",
            "not in 127.0.0.0/8",
        ),
        (
            "[[domains]]\nname = \"a.example\"\nmx_addr = \"127.0.0.1\"\n".into(),
            "domains[0].mx_addr",
            "reserved for Herald",
        ),
        (
            format!("{}{}", domain(""), domain("")),
            "domains[1].name",
            "duplicate domain",
        ),
        (
            domain("profile = { kind = \"unknown_users\", fraction = 2.0 }"),
            "domains[0].profile.fraction",
            "between 0 and 1",
        ),
        (
            domain("profile = { kind = \"greylist\", retry_after_secs = -1 }"),
            "domains[0].profile.retry_after_secs",
            "between 0",
        ),
        (
            "[[domains]]\nname = \"bad_name.example\"\nmx_addr = \"127.1.8.1\"\n".into(),
            "domains[0].name",
            "not a valid domain",
        ),
        (
            "dns_addr = \"8.8.8.8:53\"\n".into(),
            "dns_addr",
            "not in 127.0.0.0/8",
        ),
        ("smtp_port = 70000\n".into(), "smtp_port", ""),
        (
            "[receiver]\nmax_recipients = 0\n".into(),
            "receiver.max_recipients",
            "> 0",
        ),
        (
            domain("dnssec = \"maybe\""),
            "domains[0].dnssec",
            "unknown variant",
        ),
        (
            domain("tlsa_bogus = true"),
            "domains[0].tlsa_bogus",
            "needs dnssec = \"signed\"",
        ),
        (
            domain("dnssec = \"bogus\"\ntlsa_bogus = true"),
            "domains[0].tlsa_bogus",
            "needs dnssec",
        ),
        (
            domain("tlsa = [{ usage = 3, selector = 1, matching = 1 }]"),
            "domains[0].tlsa[0].data",
            "no STARTTLS",
        ),
        (
            domain("starttls = true\ntlsa = [{ usage = 3, selector = 2, matching = 1 }]"),
            "domains[0].tlsa[0].data",
            "can be computed",
        ),
        (
            domain("tlsa = [{ usage = 3, selector = 1, matching = 1, data = \"abc\" }]"),
            "domains[0].tlsa[0].data",
            "hexadecimal",
        ),
        (
            domain("tlsa = [{ usage = 3, selector = 1, matching = 1, data = \"zz\" }]"),
            "domains[0].tlsa[0].data",
            "hexadecimal",
        ),
        (
            domain("tlsa = [{ usage = 3, selector = 1, matching = 1, data = \"\" }]"),
            "domains[0].tlsa[0].data",
            "1 to 16384 octets",
        ),
        (
            domain(&format!(
                "tlsa = [{{ usage = 3, selector = 1, matching = 0, data = \"{}\" }}]",
                "00".repeat(16 * 1024 + 1)
            )),
            "domains[0].tlsa[0].data",
            "1 to 16384 octets",
        ),
        (
            domain("tlsa = [{ usage = 256, selector = 1, matching = 1, data = \"00\" }]"),
            "domains[0].tlsa[0].usage",
            "",
        ),
        (
            domain("tlsa = [{ usage = 3, selector = 1, matching = 1, data = \"00\", ttl = 5 }]"),
            "domains[0].tlsa[0].ttl",
            "unknown key",
        ),
    ];
    for (text, key, fragment) in cases {
        let err = WorldConfig::from_toml(&text).unwrap_err();
        assert_eq!(err.key_path(), Some(key), "{text}\n→ {err}");
        assert!(err.to_string().starts_with(&format!("{key}: ")), "{err}");
        assert!(err.to_string().contains(fragment), "{err}");
    }
    let err = WorldConfig::from_toml("domains = [").unwrap_err();
    assert!(err.to_string().contains("not valid TOML"), "{err}");
}

#[test]
fn generated_worlds_are_deterministic_and_zipf_shaped() {
    let spec = GenSpec {
        domains: 2000,
        seed: 7,
        fractions: ProfileFractions {
            hung: 0.02,
            refused: 0.01,
            greylist: 0.01,
            slow: 0.03,
            unknown_users: 0.005,
            throttle: 0.2,
            starttls: 0.5,
            ..ProfileFractions::default()
        },
        ..GenSpec::default()
    };
    let a = WorldConfig::generate(&spec).unwrap();
    assert_eq!(a, WorldConfig::generate(&spec).unwrap());
    assert_eq!(a.domains[0].name, "d0000.example");
    assert_eq!(a.domains[0].mx_addr, Ipv4Addr::new(127, 1, 1, 1));
    assert_eq!(a.domains[1999].mx_addr, Ipv4Addr::new(127, 1, 8, 222));

    let members = a.member_addresses(100_000);
    assert_eq!(members.len(), 100_000);
    assert_eq!(members, a.member_addresses(100_000));
    let unique: std::collections::HashSet<_> = members.iter().collect();
    assert_eq!(unique.len(), members.len());
    let counts = a.member_counts(100_000);
    assert!(counts[0] > 10 * counts[20] && counts[20] >= counts[1999]);

    // Shares of members per profile come close to what was asked.
    let share = |pred: &dyn Fn(&Profile) -> bool| {
        let hit: usize = a
            .domains
            .iter()
            .zip(&counts)
            .filter(|(d, _)| pred(&d.profile))
            .map(|(_, c)| c)
            .sum();
        hit as f64 / 100_000.0
    };
    let hung = share(&|p| *p == Profile::Hung);
    assert!((0.015..=0.025).contains(&hung), "hung share {hung}");
    let throttle = share(&|p| matches!(p, Profile::Throttle { .. }));
    assert!(
        (0.15..=0.21).contains(&throttle),
        "throttle share {throttle}"
    );
    let by_name: std::collections::HashMap<_, _> =
        a.domains.iter().map(|d| (d.name.as_str(), d)).collect();
    let unknown = members
        .iter()
        .filter(|m| {
            let d = by_name[m.rsplit_once('@').unwrap().1];
            d.expectation(m) == Expectation::UnknownUser
        })
        .count() as f64
        / 100_000.0;
    assert!(
        (0.003..=0.007).contains(&unknown),
        "unknown share {unknown}"
    );

    let bad = GenSpec {
        fractions: ProfileFractions {
            hung: 0.7,
            refused: 0.7,
            ..ProfileFractions::default()
        },
        ..GenSpec::default()
    };
    let err = WorldConfig::generate(&bad).unwrap_err();
    assert_eq!(err.key_path(), Some("gen.fractions"));
}

#[tokio::test]
async fn a_world_publishes_its_mx_hosts_in_dns() {
    let mut cfg = WorldConfig::from_toml(GOOD).unwrap();
    for (i, d) in cfg.domains.iter_mut().enumerate() {
        d.mx_addr = Ipv4Addr::new(127, 1, 7, i as u8 + 1);
    }
    cfg.domains[0].extra_mx[0].addr = Ipv4Addr::new(127, 1, 7, 100);
    let world = World::start(cfg).await.unwrap();
    let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut q = Message::new();
    q.set_id(1).set_recursion_desired(true);
    q.add_query(Query::query(
        Name::from_ascii("bigmail.example.").unwrap(),
        RecordType::MX,
    ));
    sock.send_to(&q.to_vec().unwrap(), world.dns_addr())
        .await
        .unwrap();
    let mut buf = [0u8; 1500];
    let (n, _) = sock.recv_from(&mut buf).await.unwrap();
    let r = Message::from_vec(&buf[..n]).unwrap();
    let mut mx: Vec<_> = r
        .answers()
        .iter()
        .filter_map(|a| match a.data() {
            RData::MX(m) => Some((m.preference(), m.exchange().to_ascii())),
            _ => None,
        })
        .collect();
    mx.sort();
    assert_eq!(mx[0], (10, "mx.bigmail.example.".into()));
    assert_eq!(mx[1], (20, "mx2.bigmail.example.".into()));
    assert_eq!(
        world.mx_addr("bigmail.example").map(|a| a.port()),
        Some(world.smtp_port())
    );
    world.shutdown().await;
}

/// Sends one query with DO set and returns the answer.
async fn ask_dnssec(dns: std::net::SocketAddr, name: &str, qtype: RecordType) -> Message {
    let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut q = Message::new();
    q.set_id(2).set_recursion_desired(true);
    q.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
    let mut edns = hickory_proto::op::Edns::new();
    edns.set_dnssec_ok(true);
    q.set_edns(edns);
    sock.send_to(&q.to_vec().unwrap(), dns).await.unwrap();
    let mut buf = [0u8; 4096];
    let (n, _) = sock.recv_from(&mut buf).await.unwrap();
    Message::from_vec(&buf[..n]).unwrap()
}

const DANE_WORLD: &str = r#"
smtp_port = 0

[[domains]]
name = "signed.example"
mx_addr = "127.1.9.1"
starttls = true
dnssec = "signed"
tlsa = [
    { usage = 3, selector = 1, matching = 1 },
    { usage = 3, selector = 0, matching = 0 },
    { usage = 1, selector = 1, matching = 1, data = "00ff" },
]

[[domains]]
name = "bogus.example"
mx_addr = "127.1.9.2"
dnssec = "bogus"

[[domains]]
name = "badtlsa.example"
mx_addr = "127.1.9.3"
dnssec = "signed"
tlsa = [{ usage = 3, selector = 1, matching = 1, data = "0011" }]
tlsa_bogus = true
"#;

#[tokio::test]
async fn a_world_publishes_dnssec_status_and_tlsa_records() {
    use sha2::{Digest, Sha256};
    let cfg = WorldConfig::from_toml(DANE_WORLD).unwrap();
    assert_eq!(
        WorldConfig::from_toml(&cfg.to_toml().unwrap()).unwrap(),
        cfg
    );
    let world = World::start(cfg).await.unwrap();
    let dns = world.dns_addr();
    let port = world.smtp_port();
    let r = ask_dnssec(
        dns,
        &format!("_{port}._tcp.mx.signed.example."),
        RecordType::TLSA,
    )
    .await;
    assert!(r.authentic_data(), "{r:?}");
    let records: Vec<(u8, u8, u8, Vec<u8>)> = r
        .answers()
        .iter()
        .filter_map(|a| match a.data() {
            RData::TLSA(t) => Some((
                u8::from(t.cert_usage()),
                u8::from(t.selector()),
                u8::from(t.matching()),
                t.cert_data().to_vec(),
            )),
            _ => None,
        })
        .collect();
    let spki = world.tls_spki_der().unwrap();
    let cert = world.tls_certificate_der().unwrap();
    assert_eq!(
        records,
        vec![
            (3, 1, 1, Sha256::digest(spki).to_vec()),
            (3, 0, 0, cert.to_vec()),
            (1, 1, 1, vec![0x00, 0xff]),
        ]
    );
    let mx = ask_dnssec(dns, "signed.example.", RecordType::MX).await;
    assert!(mx.authentic_data() && mx.answers().len() == 1);
    let bogus = ask_dnssec(dns, "bogus.example.", RecordType::MX).await;
    assert_eq!(bogus.response_code(), ResponseCode::ServFail);
    let badtlsa = ask_dnssec(dns, "badtlsa.example.", RecordType::MX).await;
    assert!(badtlsa.authentic_data());
    let name = format!("_{port}._tcp.mx.badtlsa.example.");
    let r = ask_dnssec(dns, &name, RecordType::TLSA).await;
    assert_eq!(r.response_code(), ResponseCode::ServFail);
    world.shutdown().await;
}

#[tokio::test]
async fn a_generated_world_starts_and_each_host_behaves() {
    use tokio::io::AsyncReadExt;
    let spec = GenSpec {
        domains: 60,
        seed: 3,
        zipf_exponent: 0.0, // equal sizes, so each share maps to whole domains
        fractions: ProfileFractions {
            hung: 0.1,
            refused: 0.1,
            slow: 0.1,
            starttls: 0.5,
            ..ProfileFractions::default()
        },
        slow_delay_ms: 1,
        ..GenSpec::default()
    };
    let cfg = WorldConfig::generate(&spec).unwrap();
    let world = World::start(cfg).await.unwrap();
    let (mut refused, mut hung, mut greeted) = (0, 0, 0);
    for h in world.hosts() {
        let addr = std::net::SocketAddr::from((h.addr, world.smtp_port()));
        let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
            assert_eq!(h.profile, Profile::Refused, "{}", h.name);
            refused += 1;
            continue;
        };
        let mut buf = [0u8; 4];
        let wait =
            std::time::Duration::from_millis(if h.profile == Profile::Hung { 50 } else { 2000 });
        match tokio::time::timeout(wait, s.read_exact(&mut buf)).await {
            Ok(Ok(_)) => {
                assert_eq!(&buf, b"220 ", "{}", h.name);
                greeted += 1;
            }
            _ => {
                assert_eq!(h.profile, Profile::Hung, "{}", h.name);
                hung += 1;
            }
        }
    }
    assert_eq!((refused, hung, greeted), (6, 6, 51));
    let port = world.smtp_port();
    world.shutdown().await;

    // Shutdown released the sockets: the same fixed port binds again at once.
    let mut again = WorldConfig::generate(&GenSpec { domains: 5, ..spec }).unwrap();
    again.smtp_port = port;
    World::start(again).await.unwrap().shutdown().await;
}

#[test]
fn a_hostile_world_has_one_rate_limited_provider_and_both_kinds_of_greylisting() {
    let spec = GenSpec {
        domains: 300,
        seed: 3,
        fractions: ProfileFractions {
            rate_limited: 0.3,
            drop_first_attempt: 0.02,
            greylist: 0.05,
            ..ProfileFractions::default()
        },
        rate_limit_msgs_per_sec: 200,
        rate_limit_max_msgs_per_conn: 50,
        ..GenSpec::default()
    };
    let w = WorldConfig::generate(&spec).unwrap();
    let provider: Vec<_> = w
        .domains
        .iter()
        .filter(|d| matches!(d.profile, Profile::RateLimited { .. }))
        .collect();
    assert!(
        provider.len() >= 2,
        "the biggest domains: {}",
        provider.len()
    );
    assert_eq!(provider[0].name, w.domains[0].name);
    let mut hosts = std::collections::BTreeSet::new();
    let mut pairs = std::collections::BTreeSet::new();
    for d in &provider {
        assert_eq!(d.extra_mx.len(), 1);
        assert!(d.mx_host.ends_with(".provider.example"), "{}", d.mx_host);
        hosts.insert(d.mx_host.clone());
        hosts.insert(d.extra_mx[0].host.clone());
        pairs.insert((d.mx_host.clone(), d.extra_mx[0].host.clone()));
        assert_eq!(
            d.profile,
            Profile::RateLimited {
                budget: "provider.example".into(),
                msgs_per_sec: 200,
                max_msgs_per_conn: Some(50),
            }
        );
    }
    assert!(hosts.len() <= 4 && pairs.len() >= 2, "{hosts:?} {pairs:?}");
    let grey: Vec<bool> = w
        .domains
        .iter()
        .filter_map(|d| match d.profile {
            Profile::Greylist { announce, .. } => Some(announce),
            _ => None,
        })
        .collect();
    assert!(grey.contains(&true) && grey.contains(&false), "{grey:?}");
    assert!(w
        .domains
        .iter()
        .any(|d| d.profile == Profile::DropFirstAttempt));
    // Round trip through TOML keeps every new key.
    assert_eq!(WorldConfig::from_toml(&w.to_toml().unwrap()).unwrap(), w);
}

#[test]
fn rate_limited_profiles_are_checked() {
    let base = "[[domains]]\nname = \"p.example\"\nmx_addr = \"127.1.2.3\"\n";
    let err = WorldConfig::from_toml(&format!(
        "{base}profile = {{ kind = \"rate_limited\", msgs_per_sec = 5 }}\n"
    ))
    .unwrap_err();
    assert_eq!(err.key_path(), Some("domains[0].profile.budget"));
    let err = WorldConfig::from_toml(&format!(
        "{base}profile = {{ kind = \"rate_limited\", budget = \"p\", msgs_per_sec = 0 }}\n"
    ))
    .unwrap_err();
    assert_eq!(err.key_path(), Some("domains[0].profile.msgs_per_sec"));
    let err = WorldConfig::from_toml(&format!(
        "{base}profile = {{ kind = \"drop_first_attempt\", after_msgs = 1 }}\n"
    ))
    .unwrap_err();
    assert_eq!(err.key_path(), Some("domains[0].profile.after_msgs"));
    let ok = WorldConfig::from_toml(&format!(
        "{base}profile = {{ kind = \"greylist\", retry_after_secs = 60, announce = true }}\n"
    ))
    .unwrap();
    assert_eq!(
        ok.domains[0].profile,
        Profile::Greylist {
            retry_after: std::time::Duration::from_secs(60),
            announce: true
        }
    );
}

#[test]
fn smtp_extensions_default_to_smtputf8_without_dsn_and_round_trip() {
    let text = "[[domains]]\nname = \"a.example\"\nmx_addr = \"127.1.8.1\"\n\
                [[domains]]\nname = \"b.example\"\nmx_addr = \"127.1.8.2\"\n\
                smtputf8 = false\ndsn = true\n";
    let cfg = WorldConfig::from_toml(text).unwrap();
    let ext: Vec<_> = cfg.domains.iter().map(|d| d.extensions).collect();
    assert!(ext[0].smtputf8 && !ext[0].dsn, "the default: {:?}", ext[0]);
    assert!(!ext[1].smtputf8 && ext[1].dsn, "{:?}", ext[1]);
    let again = WorldConfig::from_toml(&cfg.to_toml().unwrap()).unwrap();
    assert_eq!(again, cfg);
    assert!(WorldConfig::from_toml(&text.replace("dsn = true", "dsn = \"yes\"")).is_err());
}

#[test]
fn tarpit_profiles_parse_round_trip_and_refuse_hostile_values() {
    let text = r#"
[[domains]]
name = "tarpit.example"
mx_addr = "127.1.8.40"
profile = { kind = "tarpit", byte_delay_ms = 250, max_sessions = 3 }
"#;
    let cfg = WorldConfig::from_toml(text).unwrap();
    assert_eq!(
        cfg.domains[0].profile,
        Profile::Tarpit {
            byte_delay: std::time::Duration::from_millis(250),
            max_sessions: Some(3),
        }
    );
    assert_eq!(
        WorldConfig::from_toml(&cfg.to_toml().unwrap()).unwrap(),
        cfg
    );
    assert_eq!(
        cfg.expectation("a@tarpit.example"),
        Expectation::Deliverable
    );
    for (bad, key) in [
        ("{ kind = \"tarpit\" }", "byte_delay_ms"),
        (
            "{ kind = \"tarpit\", byte_delay_ms = 60001 }",
            "byte_delay_ms",
        ),
        (
            "{ kind = \"tarpit\", byte_delay_ms = 1, max_sessions = 0 }",
            "max_sessions",
        ),
        (
            "{ kind = \"tarpit\", byte_delay_ms = 1, delay_ms = 5 }",
            "delay_ms",
        ),
        ("{ kind = \"tarpit\", byte_delay_ms = -1 }", "byte_delay_ms"),
    ] {
        let t = text.replace(
            "{ kind = \"tarpit\", byte_delay_ms = 250, max_sessions = 3 }",
            bad,
        );
        let err = WorldConfig::from_toml(&t).unwrap_err().to_string();
        assert!(err.contains(key) || err.contains("profile"), "{bad}: {err}");
    }
}

#[tokio::test]
async fn generated_tarpits_hung_primaries_and_dead_addresses_are_published() {
    let spec = GenSpec {
        domains: 200,
        seed: 5,
        fractions: ProfileFractions {
            tarpit: 0.02,
            hung_primary: 0.02,
            dead_addrs: 0.02,
            ..ProfileFractions::default()
        },
        tarpit_byte_delay_ms: 30,
        tarpit_max_sessions: 2,
        ..GenSpec::default()
    };
    let cfg = WorldConfig::generate(&spec).unwrap();
    let tarpits = cfg
        .domains
        .iter()
        .filter(|d| matches!(d.profile, Profile::Tarpit { .. }))
        .count();
    assert!(tarpits >= 1);
    let hung_primary: Vec<_> = cfg
        .domains
        .iter()
        .filter(|d| d.profile == Profile::Hung && !d.extra_mx.is_empty())
        .collect();
    assert!(!hung_primary.is_empty());
    for d in &hung_primary {
        assert_eq!(d.extra_mx.last().unwrap().profile, Some(Profile::Normal));
        assert_eq!(
            cfg.expectation(&format!("a@{}", d.name)),
            Expectation::Deliverable
        );
    }
    let dead = cfg
        .domains
        .iter()
        .find(|d| d.profile == Profile::Refused && d.extra_mx.len() >= 2)
        .expect("a domain with dead addresses");
    assert!(dead.extra_mx.iter().all(|x| x.host == dead.mx_host));
    assert_eq!(
        cfg.expectation(&format!("a@{}", dead.name)),
        Expectation::Deliverable
    );
    // Published: one MX record for the name, three A records behind it.
    let world = World::start(cfg.clone()).await.unwrap();
    let ask = |name: String, t: RecordType| {
        let dns = world.dns_addr();
        async move {
            let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
            let mut q = Message::new();
            q.set_id(3).set_recursion_desired(true);
            q.add_query(Query::query(Name::from_ascii(name).unwrap(), t));
            sock.send_to(&q.to_vec().unwrap(), dns).await.unwrap();
            let mut buf = [0u8; 1500];
            let (n, _) = sock.recv_from(&mut buf).await.unwrap();
            Message::from_vec(&buf[..n]).unwrap()
        }
    };
    let mx = ask(format!("{}.", dead.name), RecordType::MX).await;
    assert_eq!(mx.answers().len(), 1, "{:?}", mx.answers());
    let a = ask(format!("{}.", dead.mx_host), RecordType::A).await;
    assert_eq!(a.answers().len(), 3, "{:?}", a.answers());
    world.shutdown().await;
}
