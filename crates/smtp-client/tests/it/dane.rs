//! DANE (RFC 7672) with real parts on 127.0.0.1: the verifier against rcgen certificates and
//! chains from a test CA; sessions against scripted STARTTLS servers; TLSA and DNSSEC lookups
//! against the simulator's DNS server playing a validating resolver (AD on signed names,
//! SERVFAIL on bogus ones).

use crate::support::client_config;
use crate::support::smtp::{serve, tls_config_for, Script};
use herald_routing::dane::tlsa;
use herald_routing::{
    Dane, DaneConfig, HostDane, MxHost, MxResolver, MxSecurity, ResolverConfig, TlsMode, TlsaSet,
};
use herald_sim::pki::TestCa;
use herald_sim::{DnsServer, Zone};
use herald_smtp_client::{
    spki_of, ClientConfig, Connection, DaneError, DaneMatch, DaneVerifier, OutgoingCopy,
    SessionErrorKind, TlsError,
};
use herald_types::RcptOutcome;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use sha2::{Digest, Sha256, Sha512};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MX: &str = "mx.dane.test";

fn record(u: u8, s: u8, m: u8, data: &[u8]) -> tlsa::Tlsa {
    tlsa::parse(&[&[u, s, m][..], data].concat()).unwrap()
}

fn set(records: Vec<tlsa::Tlsa>) -> Arc<TlsaSet> {
    Arc::new(TlsaSet::new(records))
}

fn verifier(records: Vec<tlsa::Tlsa>) -> DaneVerifier {
    let algs = rustls::crypto::ring::default_provider().signature_verification_algorithms;
    DaneVerifier::new(set(records), algs)
}

fn name(n: &str) -> ServerName<'static> {
    ServerName::try_from(n.to_string()).unwrap()
}

fn self_signed(names: &[&str]) -> rcgen::CertifiedKey {
    rcgen::generate_simple_self_signed(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
        .unwrap()
}

// ---- the verifier ----

#[test]
fn dane_ee_matches_a_self_signed_certificate_whatever_its_name() {
    let ck = self_signed(&["somewhere.else.test"]);
    let der = ck.cert.der().clone();
    let spki = spki_of(&der).unwrap();
    assert_eq!(spki, ck.key_pair.public_key_der(), "selector 1 is the SPKI");
    let now = UnixTime::now();
    for r in [
        record(3, 1, 1, &Sha256::digest(&spki)),
        record(3, 1, 2, &Sha512::digest(&spki)),
        record(3, 1, 0, &spki),
        record(3, 0, 1, &Sha256::digest(&der)),
        record(3, 0, 0, &der),
    ] {
        let got = verifier(vec![r.clone()]).check(&der, &[], &name(MX), now);
        assert_eq!(got, Ok(DaneMatch::EndEntity(r)));
    }
    // Names and dates play no part: even "now" far in the future is fine.
    let later = UnixTime::since_unix_epoch(Duration::from_secs(1 << 40));
    let r = record(3, 1, 1, &Sha256::digest(&spki));
    assert!(verifier(vec![r]).check(&der, &[], &name(MX), later).is_ok());
}

#[test]
fn a_tlsa_record_that_names_another_key_fails() {
    let ck = self_signed(&[MX]);
    let other = self_signed(&[MX]);
    let der = ck.cert.der().clone();
    let wrong = record(3, 1, 1, &Sha256::digest(other.key_pair.public_key_der()));
    let err = verifier(vec![wrong]).check(&der, &[], &name(MX), UnixTime::now());
    assert_eq!(err, Err(DaneError::NoMatch(None)));
    // One matching record among others is enough.
    let right = record(3, 1, 1, &Sha256::digest(ck.key_pair.public_key_der()));
    let wrong = record(3, 1, 1, &[0; 32]);
    let v = verifier(vec![wrong, right]);
    assert!(v.check(&der, &[], &name(MX), UnixTime::now()).is_ok());
}

/// A leaf for `MX` signed by a test CA: (chain [leaf, ca], the CA's DER).
fn ca_chain(names: &[&str]) -> (Vec<CertificateDer<'static>>, CertificateDer<'static>) {
    let ca = TestCa::new("DANE test CA").unwrap();
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let issued = ca.issue(&names).unwrap();
    let ca_der = issued.chain[1].clone();
    (issued.chain, ca_der)
}

#[test]
fn dane_ta_checks_the_chain_and_the_name() {
    let (chain, ca_der) = ca_chain(&[MX]);
    let ca_spki = spki_of(&ca_der).unwrap();
    let now = UnixTime::now();
    let ta = record(2, 1, 1, &Sha256::digest(&ca_spki));
    let v = verifier(vec![ta.clone()]);
    assert_eq!(
        v.check(&chain[0], &chain[1..], &name(MX), now),
        Ok(DaneMatch::TrustAnchor(ta.clone()))
    );
    let err = v.check(&chain[0], &chain[1..], &name("mx.other.test"), now);
    assert!(
        matches!(&err, Err(DaneError::NoMatch(Some(why))) if why.contains("does not name")),
        "{err:?}"
    );
    // The anchor must be presented for a digest record; a DANE-TA record never matches the
    // server's own certificate as its anchor.
    assert!(v.check(&chain[0], &[], &name(MX), now).is_err());
    let leaf_spki = spki_of(&chain[0]).unwrap();
    let leaf_as_ta = record(2, 1, 1, &Sha256::digest(&leaf_spki));
    assert!(verifier(vec![leaf_as_ta])
        .check(&chain[0], &chain[1..], &name(MX), now)
        .is_err());
    // The certificate's own dates still count under DANE-TA (unlike DANE-EE).
    let later = UnixTime::since_unix_epoch(Duration::from_secs(1 << 40));
    assert!(v.check(&chain[0], &chain[1..], &name(MX), later).is_err());
}

#[test]
fn dane_ta_anchors_published_in_full_need_not_be_presented() {
    let (chain, ca_der) = ca_chain(&[MX, "*.wild.test"]);
    let now = UnixTime::now();
    let full_cert = record(2, 0, 0, &ca_der);
    let full_key = record(2, 1, 0, &spki_of(&ca_der).unwrap());
    for r in [full_cert, full_key] {
        let v = verifier(vec![r.clone()]);
        assert_eq!(
            v.check(&chain[0], &[], &name(MX), now),
            Ok(DaneMatch::TrustAnchor(r.clone())),
            "{r}"
        );
        assert!(v.check(&chain[0], &[], &name("a.wild.test"), now).is_ok());
        assert!(v
            .check(&chain[0], &[], &name("b.a.wild.test"), now)
            .is_err());
    }
}

#[test]
fn garbage_certificates_match_nothing_and_do_not_panic() {
    let junk = CertificateDer::from(vec![0x30, 0x03, 1, 2, 3]);
    let spki_rec = record(3, 1, 1, &[1; 32]);
    let ta = record(2, 0, 1, &Sha256::digest(junk.as_ref()));
    let v = verifier(vec![spki_rec, ta]);
    let err = v.check(
        &junk,
        std::slice::from_ref(&junk),
        &name(MX),
        UnixTime::now(),
    );
    assert!(err.is_err());
    // A full-certificate DANE-EE pin compares octets: it needs no parse.
    let pin = record(3, 0, 0, junk.as_ref());
    assert!(verifier(vec![pin])
        .check(&junk, &[], &name(MX), UnixTime::now())
        .is_ok());
}

// ---- sessions ----

fn tls_config() -> ClientConfig {
    ClientConfig {
        tls: TlsMode::Opportunistic,
        // Nothing PKIX could vouch with: only DANE can authenticate.
        tls_ca_file: Some("/nonexistent/ca.pem".into()),
        ..client_config()
    }
}

fn server_config(chain: Vec<CertificateDer<'static>>, key: PrivateKeyDer<'static>) -> Script {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    Script {
        tls: Some(Arc::new(cfg)),
        ..Script::default()
    }
}

#[tokio::test]
async fn a_matching_tlsa_record_authenticates_the_session() {
    let ck = self_signed(&["not-the-mx.test"]);
    let spki = ck.key_pair.public_key_der();
    let (addr, server) = serve(Script {
        tls: Some(tls_config_for(&ck)),
        ..Script::default()
    })
    .await;
    let tlsa = set(vec![record(3, 1, 1, &Sha256::digest(&spki))]);
    let mut conn = Connection::connect_dane(addr, MX, &tls_config(), tlsa)
        .await
        .unwrap();
    let info = conn.tls_info().expect("TLS").clone();
    assert!(info.dane && !info.verified, "{info:?}");
    let mut copies = vec![OutgoingCopy::new("r@herald.test", "a@dane.test", b"hi\r\n")];
    conn.send(&mut copies).await.unwrap();
    assert!(matches!(copies[0].outcome, Some(RcptOutcome::Delivered(_))));
    conn.quit().await;
    let rec = server.await.unwrap();
    assert!(rec.tls);
    assert_eq!(rec.accepted.len(), 1);
}

#[tokio::test]
async fn a_mismatching_tlsa_record_fails_the_handshake_and_nothing_is_sent() {
    // Even a rule that disables TLS for the host cannot turn DANE off.
    let cfg = ClientConfig {
        tls_policy: vec![herald_routing::TlsPolicyRule {
            mx_suffix: "dane.test".into(),
            mode: TlsMode::Disabled,
            verify: false,
        }],
        ..tls_config()
    };
    let ck = self_signed(&[MX]);
    let (addr, server) = serve(Script {
        tls: Some(tls_config_for(&ck)),
        ..Script::default()
    })
    .await;
    let tlsa = set(vec![record(3, 1, 1, &[0xab; 32])]);
    let err = Connection::connect_dane(addr, MX, &cfg, tlsa.clone())
        .await
        .unwrap_err();
    assert!(
        matches!(err.kind(), SessionErrorKind::Tls(TlsError::Dane(inner)) if matches!(**inner, TlsError::NotAuthenticated(_))),
        "{err}"
    );
    assert!(!err.is_host_problem());
    let reply = err.synthetic_reply();
    assert_eq!(reply.code, 451);
    assert_eq!(
        reply.enhanced.map(|e| e.to_string()).as_deref(),
        Some("4.7.5")
    );
    assert!(
        reply.text.contains("DANE") && reply.text.contains("no TLSA record matches"),
        "{reply}"
    );
    let rec = server.await.unwrap();
    assert!(!rec.tls, "the handshake failed");
    assert!(
        !rec.commands.iter().any(|c| c.starts_with("MAIL")),
        "no plaintext retry: {:?}",
        rec.commands
    );

    // A server without STARTTLS: refused, not sent in plaintext.
    let (addr, server) = serve(Script::default()).await;
    let err = Connection::connect_dane(addr, MX, &cfg, tlsa)
        .await
        .unwrap_err();
    assert!(
        matches!(err.kind(), SessionErrorKind::Tls(TlsError::Dane(inner)) if matches!(**inner, TlsError::NotOffered)),
        "{err}"
    );
    drop(err);
    let rec = server.await.unwrap();
    assert!(!rec.commands.iter().any(|c| c.starts_with("MAIL")));
}

#[tokio::test]
async fn dane_ta_sessions_need_the_mx_name_in_the_certificate() {
    let ca = TestCa::new("DANE TA").unwrap();
    let issued = ca.issue(&[MX.to_string()]).unwrap();
    let ca_spki = spki_of(&issued.chain[1]).unwrap();
    let tlsa = set(vec![record(2, 1, 1, &Sha256::digest(&ca_spki))]);
    let (addr, _server) = serve(server_config(issued.chain.clone(), issued.key.clone_key())).await;
    let conn = Connection::connect_dane(addr, MX, &tls_config(), tlsa.clone())
        .await
        .unwrap();
    assert!(conn.tls_info().is_some_and(|t| t.dane));
    conn.quit().await;
    let (addr, server) = serve(server_config(issued.chain, issued.key)).await;
    let err = Connection::connect_dane(addr, "mx.elsewhere.test", &tls_config(), tlsa)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("does not name the MX host"),
        "{err}"
    );
    assert!(!server.await.unwrap().tls);
}

// ---- lookups ----

struct Net {
    dns: DnsServer,
    dane: Dane,
}

const PORT: u16 = 25;

/// A zone with: a signed domain whose MX publishes a usable TLSA record, a signed host without
/// TLSA, one with only unusable records, an unsigned one with TLSA, a signed host whose TLSA is
/// bogus, and a bogus domain.
async fn net() -> Net {
    let lo = Ipv4Addr::new(127, 0, 0, 1);
    let mut z = Zone::new();
    z.set_ttls(60, 60);
    z.add_mx("signed.test", 10, "mx.signed.test")
        .add_a("mx.signed.test", lo)
        .add_tlsa("_25._tcp.mx.signed.test", 3, 1, 1, &[7; 32])
        .add_tlsa("_25._tcp.mx.signed.test", 1, 1, 1, &[7; 32])
        .set_signed("signed.test", true);
    z.add_a("notlsa.signed.test", lo);
    z.add_a("unusable.signed.test", lo)
        .add_tlsa("_25._tcp.unusable.signed.test", 0, 0, 1, &[7; 32])
        .add_tlsa("_25._tcp.unusable.signed.test", 3, 1, 1, &[7; 3]);
    z.add_a("bogustlsa.signed.test", lo)
        .add_tlsa("_25._tcp.bogustlsa.signed.test", 3, 1, 1, &[7; 32])
        .set_servfail("_25._tcp.bogustlsa.signed.test", true);
    z.add_mx("plain.test", 10, "mx.plain.test")
        .add_a("mx.plain.test", lo)
        .add_tlsa("_25._tcp.mx.plain.test", 3, 1, 1, &[7; 32]);
    z.add_mx("bogus.test", 10, "mx.bogus.test")
        .set_bogus("bogus.test", true);
    // An answer over the 1232-octet EDNS size: truncated over UDP, asked again over TCP.
    let mut big = vec![0x30u8];
    big.resize(2000, 0x55);
    z.add_a("big.signed.test", lo)
        .add_tlsa("_25._tcp.big.signed.test", 3, 1, 0, &big);
    let dns = DnsServer::start(SocketAddr::from((lo, 0)), z)
        .await
        .unwrap();
    let resolver = MxResolver::new(&ResolverConfig {
        nameservers: vec![dns.local_addr()],
        timeout_ms: 500,
        attempts: 1,
    })
    .unwrap();
    let dane = Dane::new(&DaneConfig::default(), &resolver, PORT);
    Net { dns, dane }
}

#[tokio::test]
async fn mx_answers_are_judged_by_the_ad_bit() {
    let n = net().await;
    assert_eq!(n.dane.mx_security("SIGNED.test.").await, MxSecurity::Secure);
    assert_eq!(n.dane.mx_security("plain.test").await, MxSecurity::Insecure);
    assert!(matches!(
        n.dane.mx_security("bogus.test").await,
        MxSecurity::Failed(why) if why.contains("SERVFAIL")
    ));
    assert_eq!(
        n.dane.mx_security("nonexistent.signed.test").await,
        MxSecurity::Secure,
        "an authenticated denial is secure"
    );
}

#[tokio::test]
async fn host_lookups_follow_rfc_7672() {
    let n = net().await;
    let (dane, left) = n.dane.host("mx.signed.test").await;
    let HostDane::Required(set) = dane else {
        panic!("{dane:?}");
    };
    assert_eq!(set.len(), 1, "the PKIX record is unusable: {set:?}");
    assert!(left > Duration::from_secs(50) && left <= Duration::from_secs(60));
    assert_eq!(
        n.dane.host("notlsa.signed.test").await.0,
        HostDane::NoRecords
    );
    assert_eq!(
        n.dane.host("unusable.signed.test").await.0,
        HostDane::NoRecords
    );
    assert_eq!(n.dane.host("mx.plain.test").await.0, HostDane::Insecure);
    let (dane, left) = n.dane.host("bogustlsa.signed.test").await;
    assert!(
        matches!(&dane, HostDane::Failed(why) if why.contains("TLSA") && why.contains("SERVFAIL")),
        "{dane:?}"
    );
    assert_eq!(left, Duration::ZERO, "failures are not cached");
    assert_eq!(n.dane.tlsa_name("mx.x.test."), "_25._tcp.mx.x.test");
    let (big, _) = n.dane.host("big.signed.test").await;
    assert!(
        matches!(&big, HostDane::Required(set) if set.records()[0].data.len() == 2000),
        "{big:?}"
    );
}

#[tokio::test]
async fn answers_are_cached_for_their_ttl_and_failures_are_asked_again() {
    let n = net().await;
    assert!(matches!(
        n.dane.host("mx.signed.test").await.0,
        HostDane::Required(_)
    ));
    assert!(matches!(
        n.dane.host("bogustlsa.signed.test").await.0,
        HostDane::Failed(_)
    ));
    n.dns
        .update_zone(|z| {
            z.remove("_25._tcp.mx.signed.test");
            z.set_servfail("_25._tcp.bogustlsa.signed.test", false);
        })
        .unwrap();
    // Within its TTL the cached answer stands; the failure was not cached, so the repaired
    // record is seen at once.
    assert!(matches!(
        n.dane.host("MX.signed.test.").await.0,
        HostDane::Required(_)
    ));
    assert!(matches!(
        n.dane.host("bogustlsa.signed.test").await.0,
        HostDane::Required(_)
    ));
    let hosts = ["mx.signed.test", "notlsa.signed.test", "mx.plain.test"].map(|h| MxHost {
        name: h.into(),
        preference: 10,
        addrs: vec![Ipv4Addr::LOCALHOST.into()],
    });
    let started = Instant::now();
    let (per_host, valid_for) = n.dane.hosts(&hosts).await;
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(matches!(per_host[0], HostDane::Required(_)));
    assert_eq!(per_host[1..], [HostDane::NoRecords, HostDane::Insecure]);
    assert!(valid_for <= Duration::from_secs(60));
}

#[tokio::test]
async fn an_unanswering_resolver_is_a_failure_not_an_absence() {
    // A socket that reads queries and never answers.
    let silent = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let resolver = MxResolver::new(&ResolverConfig {
        nameservers: vec![silent.local_addr().unwrap()],
        timeout_ms: 100,
        attempts: 2,
    })
    .unwrap();
    let dane = Dane::new(&DaneConfig::default(), &resolver, PORT);
    let started = Instant::now();
    assert!(matches!(
        dane.mx_security("x.test").await,
        MxSecurity::Failed(_)
    ));
    assert!(matches!(
        dane.host("mx.x.test").await.0,
        HostDane::Failed(_)
    ));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "bounded by timeout × attempts"
    );
}
