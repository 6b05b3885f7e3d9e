//! MX resolution against the tiny DNS responder in `support::dns`.

use crate::support::dns::{serve, Rr, Zone};
use herald_routing::{MxResolver, ResolveError, ResolverConfig};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

fn v4(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, last)
}

fn zone() -> Zone {
    Zone {
        records: vec![
            ("example.test", Rr::Mx(20, "mx2.example.test")),
            ("example.test", Rr::Mx(10, "mx1.example.test")),
            ("example.test", Rr::Mx(30, "mx3.example.test")),
            ("mx1.example.test", Rr::A(v4(2))),
            ("mx1.example.test", Rr::Aaaa(Ipv6Addr::LOCALHOST)),
            ("mx2.example.test", Rr::A(v4(3))),
            // mx3 has no address at all: dropped while the others have some.
            ("implicit.test", Rr::A(v4(9))),
            ("nullmx.test", Rr::Mx(0, ".")),
            ("noaddr.test", Rr::Mx(10, "ghost.noaddr.test")),
            ("broken-mx.test", Rr::Mx(10, "mx.broken.test")),
        ],
        servfail: vec!["broken.test", "mx.broken.test"],
        silent: false,
    }
}

fn resolver(ns: SocketAddr) -> MxResolver {
    let cfg = ResolverConfig {
        nameservers: vec![ns],
        timeout_ms: 300,
        attempts: 1,
    };
    MxResolver::new(&cfg).unwrap()
}

#[tokio::test]
async fn mx_hosts_come_in_preference_order_with_their_addresses() {
    let r = resolver(serve(zone()).await);
    let hosts = r.resolve("Example.TEST.").await.unwrap();
    let got: Vec<_> = hosts
        .iter()
        .map(|h| (h.name.as_str(), h.preference))
        .collect();
    assert_eq!(
        got,
        vec![("mx1.example.test", 10), ("mx2.example.test", 20)]
    );
    assert_eq!(
        hosts[0].addrs,
        vec![IpAddr::V4(v4(2)), IpAddr::V6(Ipv6Addr::LOCALHOST)]
    );
    assert_eq!(hosts[1].addrs, vec![IpAddr::V4(v4(3))]);
}

#[tokio::test]
async fn domain_without_mx_is_its_own_implicit_mx() {
    let r = resolver(serve(zone()).await);
    let hosts = r.resolve("implicit.test").await.unwrap();
    assert_eq!(hosts.len(), 1);
    assert_eq!(
        (hosts[0].name.as_str(), hosts[0].preference),
        ("implicit.test", 0)
    );
    assert_eq!(hosts[0].addrs, vec![IpAddr::V4(v4(9))]);
}

#[tokio::test]
async fn permanent_failures() {
    let r = resolver(serve(zone()).await);
    let null = r.resolve("nullmx.test").await.unwrap_err();
    assert!(matches!(null, ResolveError::NullMx { .. }), "{null}");
    let nx = r.resolve("nope.test").await.unwrap_err();
    assert!(matches!(nx, ResolveError::NoSuchDomain { .. }), "{nx}");
    let none = r.resolve("noaddr.test").await.unwrap_err();
    assert!(matches!(none, ResolveError::NoAddress { .. }), "{none}");
    for e in [null, nx, none] {
        assert!(e.is_permanent(), "{e}");
        assert!(e.synthetic_reply().is_permanent());
    }
}

#[tokio::test]
async fn servfail_is_transient() {
    let r = resolver(serve(zone()).await);
    let e = r.resolve("broken.test").await.unwrap_err();
    assert!(matches!(e, ResolveError::Temporary { .. }), "{e:?}");
    // An MX host whose address lookup fails, with no other host: transient too.
    let e = r.resolve("broken-mx.test").await.unwrap_err();
    assert!(!e.is_permanent(), "{e}");
    assert_eq!(e.synthetic_reply().code, 451);
}

#[tokio::test]
async fn silent_dns_server_is_a_transient_timeout() {
    let ns = serve(Zone {
        silent: true,
        ..Zone::default()
    })
    .await;
    let r = resolver(ns);
    let started = Instant::now();
    let e = r.resolve("example.test").await.unwrap_err();
    assert!(matches!(e, ResolveError::Timeout { .. }), "{e:?}");
    assert!(!e.is_permanent());
    // One try of 300 ms (attempts = 1), not a retry more.
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(290) && took < Duration::from_millis(550),
        "{took:?}"
    );
}
