//! The simulated DNS server, queried with a raw hickory-proto client over UDP and TCP, and with
//! hickory-resolver (what Herald's delivery stage uses).

// Helpers outside #[test] functions unwrap too: a failure there is a test failure.
#![allow(clippy::unwrap_used)]

use herald_sim::{DnsServer, SimError, Zone};
use hickory_proto::op::{Edns, Message, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use hickory_resolver::config::{NameServerConfigGroup, ResolverConfig};
use hickory_resolver::name_server::TokioConnectionProvider;
use hickory_resolver::Resolver;
use std::net::{Ipv4Addr, SocketAddr};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

fn zone() -> Zone {
    let mut z = Zone::new();
    z.add_mx("bigmail.example", 10, "mx1.bigmail.example")
        .add_mx("bigmail.example", 20, "mx2.bigmail.example")
        .add_a("mx1.bigmail.example", Ipv4Addr::new(127, 1, 0, 1))
        .add_a("mx2.bigmail.example", Ipv4Addr::new(127, 1, 0, 2))
        .add_txt("bigmail.example", "v=spf1 -all")
        .set_null_mx("nomail.example")
        .add_a("plain.example", Ipv4Addr::new(127, 1, 0, 3))
        .set_servfail("broken.example", true);
    for i in 0..40 {
        z.add_mx(
            "many.example",
            i,
            &format!("mx{i}.with-a-long-host-name.many.example"),
        );
    }
    z
}

async fn start() -> DnsServer {
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    DnsServer::start(addr, zone()).await.unwrap()
}

fn query(name: &str, qtype: RecordType, id: u16) -> Message {
    let mut m = Message::new();
    m.set_id(id).set_recursion_desired(true);
    m.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
    m
}

async fn udp_ask(server: SocketAddr, msg: &Message) -> Message {
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    sock.send_to(&msg.to_vec().unwrap(), server).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let (n, _) = tokio::time::timeout(std::time::Duration::from_secs(2), sock.recv_from(&mut buf))
        .await
        .unwrap()
        .unwrap();
    Message::from_vec(&buf[..n]).unwrap()
}

async fn tcp_ask(server: SocketAddr, msg: &Message) -> Message {
    let mut s = TcpStream::connect(server).await.unwrap();
    let q = msg.to_vec().unwrap();
    s.write_all(&(q.len() as u16).to_be_bytes()).await.unwrap();
    s.write_all(&q).await.unwrap();
    let mut len = [0u8; 2];
    s.read_exact(&mut len).await.unwrap();
    let mut buf = vec![0u8; u16::from_be_bytes(len) as usize];
    s.read_exact(&mut buf).await.unwrap();
    Message::from_vec(&buf).unwrap()
}

#[tokio::test]
async fn answers_mx_a_txt_with_echoed_header() {
    let dns = start().await;
    let r = udp_ask(
        dns.local_addr(),
        &query("BigMail.Example.", RecordType::MX, 4242),
    )
    .await;
    assert_eq!(r.id(), 4242);
    assert!(r.authoritative() && r.recursion_desired() && r.recursion_available());
    assert_eq!(r.response_code(), ResponseCode::NoError);
    assert_eq!(r.queries().len(), 1);
    assert_eq!(r.queries()[0].name().to_ascii(), "BigMail.Example.");
    let mut mx: Vec<(u16, String)> = r
        .answers()
        .iter()
        .filter_map(|rec| match rec.data() {
            RData::MX(mx) => Some((mx.preference(), mx.exchange().to_ascii())),
            _ => None,
        })
        .collect();
    mx.sort();
    assert_eq!(
        mx,
        [
            (10, "mx1.bigmail.example.".to_string()),
            (20, "mx2.bigmail.example.".to_string())
        ]
    );
    assert_eq!(r.additionals().len(), 2, "A glue for both MX hosts");

    let r = udp_ask(
        dns.local_addr(),
        &query("mx2.bigmail.example.", RecordType::A, 1),
    )
    .await;
    match r.answers()[0].data() {
        RData::A(a) => assert_eq!(a.0, Ipv4Addr::new(127, 1, 0, 2)),
        other => panic!("expected A, got {other:?}"),
    }
    let r = udp_ask(
        dns.local_addr(),
        &query("bigmail.example.", RecordType::TXT, 2),
    )
    .await;
    match r.answers()[0].data() {
        RData::TXT(t) => assert_eq!(t.to_string(), "v=spf1 -all"),
        other => panic!("expected TXT, got {other:?}"),
    }
    dns.shutdown().await;
}

#[tokio::test]
async fn negative_answers_null_mx_and_servfail() {
    let dns = start().await;
    let a = dns.local_addr();
    let r = udp_ask(a, &query("nowhere.example.", RecordType::MX, 3)).await;
    assert_eq!(r.response_code(), ResponseCode::NXDomain);
    assert!(r.answers().is_empty());
    assert_eq!(r.name_servers()[0].record_type(), RecordType::SOA);

    let r = udp_ask(a, &query("plain.example.", RecordType::MX, 4)).await;
    assert_eq!(
        r.response_code(),
        ResponseCode::NoError,
        "known name, no MX"
    );
    assert!(r.answers().is_empty());

    let r = udp_ask(a, &query("nomail.example.", RecordType::MX, 5)).await;
    match r.answers()[0].data() {
        RData::MX(mx) => {
            assert_eq!(mx.preference(), 0);
            assert!(mx.exchange().is_root());
        }
        other => panic!("expected null MX, got {other:?}"),
    }
    let r = udp_ask(a, &query("broken.example.", RecordType::MX, 6)).await;
    assert_eq!(r.response_code(), ResponseCode::ServFail);
    dns.shutdown().await;
}

#[tokio::test]
async fn big_answers_truncate_over_udp_and_complete_over_tcp() {
    let dns = start().await;
    let q = query("many.example.", RecordType::MX, 9);
    let r = udp_ask(dns.local_addr(), &q).await;
    assert!(r.truncated());
    assert!(r.answers().is_empty());
    let r = tcp_ask(dns.local_addr(), &q).await;
    assert!(!r.truncated());
    assert_eq!(r.answers().len(), 40);

    // With EDNS the client may take bigger UDP answers.
    let mut q = query("many.example.", RecordType::MX, 10);
    let mut edns = Edns::new();
    edns.set_max_payload(4096);
    q.set_edns(edns);
    let r = udp_ask(dns.local_addr(), &q).await;
    assert!(!r.truncated());
    assert_eq!(r.answers().len(), 40);
    dns.shutdown().await;
}

#[tokio::test]
async fn malformed_query_gets_formerr_and_zone_updates_apply() {
    let dns = start().await;
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let junk = [0x12, 0x34, 0x01, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xff, 0xff];
    sock.send_to(&junk, dns.local_addr()).await.unwrap();
    let mut buf = [0u8; 512];
    let (n, _) = sock.recv_from(&mut buf).await.unwrap();
    let r = Message::from_vec(&buf[..n]).unwrap();
    assert_eq!((r.id(), r.response_code()), (0x1234, ResponseCode::FormErr));

    dns.update_zone(|z| {
        z.add_mx("late.example", 5, "mx.late.example");
    })
    .unwrap();
    let r = udp_ask(
        dns.local_addr(),
        &query("late.example.", RecordType::MX, 11),
    )
    .await;
    assert_eq!(r.answers().len(), 1);
    assert!(dns
        .update_zone(|z| {
            z.add_a("bad..name", Ipv4Addr::LOCALHOST);
        })
        .is_err());
    dns.shutdown().await;
}

#[tokio::test]
async fn refuses_non_loopback_and_bad_names() {
    let addr: SocketAddr = "0.0.0.0:0".parse().unwrap();
    assert!(matches!(
        DnsServer::start(addr, Zone::new()).await,
        Err(SimError::NotLoopback { .. })
    ));
    let mut z = Zone::new();
    z.add_mx("x.example", 1, "-bad-.example");
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let err = DnsServer::start(addr, z).await.unwrap_err();
    assert!(err.to_string().contains("-bad-.example"), "{err}");
}

#[tokio::test]
async fn hickory_resolver_accepts_the_answers() {
    let dns = start().await;
    let group = NameServerConfigGroup::from_ips_clear(
        &[dns.local_addr().ip()],
        dns.local_addr().port(),
        true,
    );
    let cfg = ResolverConfig::from_parts(None, vec![], group);
    let mut builder = Resolver::builder_with_config(cfg, TokioConnectionProvider::default());
    builder.options_mut().attempts = 1;
    let resolver = builder.build();

    let mx = resolver.mx_lookup("bigmail.example.").await.unwrap();
    let mut hosts: Vec<_> = mx
        .iter()
        .map(|m| (m.preference(), m.exchange().to_ascii()))
        .collect();
    hosts.sort();
    assert_eq!(hosts[0], (10, "mx1.bigmail.example.".to_string()));
    let ips = resolver.ipv4_lookup("mx1.bigmail.example.").await.unwrap();
    assert_eq!(
        ips.iter().next().map(|a| a.0),
        Some(Ipv4Addr::new(127, 1, 0, 1))
    );
    let err = resolver.mx_lookup("nowhere.example.").await.unwrap_err();
    assert!(err.is_nx_domain(), "{err:?}");
    let err = resolver.mx_lookup("plain.example.").await.unwrap_err();
    assert!(err.is_no_records_found() && !err.is_nx_domain(), "{err:?}");
    // Truncated over UDP, the resolver retries over TCP by itself.
    let many = resolver.mx_lookup("many.example.").await.unwrap();
    assert_eq!(many.iter().count(), 40);
    dns.shutdown().await;
}
