//! MTA-STS discovery with real parts on 127.0.0.1: the simulator's DNS server publishing
//! `_mta-sts` TXT records and the policy host's address, and a real HTTPS server (rustls) whose
//! certificate a test CA signed. Covers fetch, cache, refresh on a new id, the persisted cache,
//! and hostile servers (none of which may crash, hang, or produce a policy).

use herald_routing::mta_sts::{LookupProblem, Mode, PolicySource};
use herald_routing::{MtaSts, MtaStsConfig, MxResolver, ResolverConfig};
use herald_sim::https::{PolicyResponse, PolicyServer};
use herald_sim::pki::TestCa;
use herald_sim::{DnsServer, Zone};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const DOMAIN: &str = "sts.test";
const POLICY_HOST: &str = "mta-sts.sts.test";
const ENFORCE: &str = "version: STSv1\r\nmode: enforce\r\nmx: *.sts.test\r\nmax_age: 86400\r\n";

/// A DNS server, a policy server for `mta-sts.sts.test` (and `mta-sts.other.test`, which the
/// certificate does not name) and a trust-anchor file with the test CA.
struct Net {
    dns: DnsServer,
    https: PolicyServer,
    resolver: MxResolver,
    ca_file: PathBuf,
    dir: tempfile::TempDir,
}

impl Net {
    async fn start(txt: Option<&str>) -> Net {
        let ca = TestCa::new("Herald test CA").unwrap();
        let cert = ca.issue(&[POLICY_HOST.to_string()]).unwrap();
        let localhost = SocketAddr::from(([127, 0, 0, 1], 0));
        let https = PolicyServer::start(localhost, cert).await.unwrap();
        https.set(POLICY_HOST, PolicyResponse::Policy(ENFORCE.into()));
        let mut zone = Zone::new();
        // Short TTLs: the refresh test changes the TXT record and must not wait for caches.
        zone.set_ttls(1, 1);
        zone.add_a(POLICY_HOST, Ipv4Addr::LOCALHOST);
        zone.add_a("mta-sts.other.test", Ipv4Addr::LOCALHOST);
        zone.add_txt("_mta-sts.other.test", "v=STSv1; id=1");
        if let Some(txt) = txt {
            zone.add_txt(&format!("_mta-sts.{DOMAIN}"), txt);
        }
        let dns = DnsServer::start(localhost, zone).await.unwrap();
        let resolver = MxResolver::new(&ResolverConfig {
            nameservers: vec![dns.local_addr()],
            timeout_ms: 500,
            attempts: 1,
        })
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, ca.pem()).unwrap();
        Net {
            dns,
            https,
            resolver,
            ca_file,
            dir,
        }
    }

    fn config(&self, fetch_timeout: Duration) -> MtaStsConfig {
        MtaStsConfig {
            https_port: self.https.local_addr().port(),
            fetch_timeout,
            ..MtaStsConfig::default()
        }
    }

    fn sts(&self, cache_file: Option<PathBuf>) -> MtaSts {
        let cfg = self.config(Duration::from_secs(2));
        MtaSts::new(&cfg, &self.resolver, Some(&self.ca_file), cache_file)
    }

    fn set_txt(&self, txt: &str) {
        self.dns
            .update_zone(|z| {
                z.remove(&format!("_mta-sts.{DOMAIN}"));
                z.add_txt(&format!("_mta-sts.{DOMAIN}"), txt);
            })
            .unwrap();
    }

    fn cache_path(&self) -> PathBuf {
        self.dir.path().join("mta-sts.json")
    }
}

/// Waits for the cache file (written off the async threads) to mention `needle`.
async fn wait_for_file(path: &Path, needle: &str) {
    let started = Instant::now();
    while !std::fs::read_to_string(path).is_ok_and(|t| t.contains(needle)) {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{} not written",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_published_policy_is_fetched_once_and_then_served_from_the_cache() {
    let net = Net::start(Some("v=STSv1; id=2024a")).await;
    let sts = net.sts(None);
    let first = sts.lookup("STS.test.").await;
    assert_eq!(first.source, PolicySource::Fetched, "{:?}", first.problem);
    let policy = first.policy.unwrap();
    assert_eq!(policy.id, "2024a");
    assert_eq!(policy.policy.mode, Mode::Enforce);
    assert!(policy.policy.allows("mx1.sts.test"));
    let again = sts.lookup(DOMAIN).await;
    assert_eq!(again.source, PolicySource::Cached);
    assert_eq!(net.https.requests(), 1, "same id: no second fetch");
}

#[tokio::test]
async fn a_new_id_fetches_the_new_policy() {
    let net = Net::start(Some("v=STSv1; id=1")).await;
    let sts = net.sts(None);
    assert_eq!(sts.lookup(DOMAIN).await.source, PolicySource::Fetched);
    net.https.set(
        POLICY_HOST,
        PolicyResponse::Policy(
            "version: STSv1\nmode: testing\nmx: mx.sts.test\nmax_age: 600\n".into(),
        ),
    );
    net.set_txt("v=STSv1; id=2");
    tokio::time::sleep(Duration::from_millis(1100)).await; // the TXT record's TTL
    let next = sts.lookup(DOMAIN).await;
    assert_eq!(next.source, PolicySource::Fetched, "{:?}", next.problem);
    let p = next.policy.unwrap();
    assert_eq!((p.id.as_str(), p.policy.mode), ("2", Mode::Testing));
    assert_eq!(net.https.requests(), 2);
}

#[tokio::test]
async fn no_record_means_no_policy_and_no_fetch() {
    let net = Net::start(None).await;
    let sts = net.sts(None);
    let l = sts.lookup(DOMAIN).await;
    assert_eq!(l.source, PolicySource::None);
    assert!(l.policy.is_none() && l.problem.is_none());
    assert_eq!(net.https.requests(), 0);
}

#[tokio::test]
async fn malformed_or_duplicate_records_mean_no_policy() {
    for records in [
        vec!["v=STSv1;"],
        vec!["v=STSv1; id=not-alphanumeric"],
        vec!["v=STSv1; id=1", "v=STSv1; id=2"],
        vec!["v=STSv1 id=1"],
        vec!["\u{7f}\u{0}garbage; v=STSv1; id=1"],
    ] {
        let net = Net::start(None).await;
        net.dns
            .update_zone(|z| {
                for r in &records {
                    z.add_txt(&format!("_mta-sts.{DOMAIN}"), r);
                }
            })
            .unwrap();
        let l = net.sts(None).lookup(DOMAIN).await;
        assert_eq!(l.source, PolicySource::None, "{records:?}");
        assert_eq!(net.https.requests(), 0, "{records:?}");
    }
}

#[tokio::test]
async fn a_failed_txt_lookup_without_a_cached_policy_means_no_policy() {
    let net = Net::start(Some("v=STSv1; id=1")).await;
    net.dns
        .update_zone(|z| {
            z.set_servfail(&format!("_mta-sts.{DOMAIN}"), true);
        })
        .unwrap();
    let l = net.sts(None).lookup(DOMAIN).await;
    assert_eq!(l.source, PolicySource::None);
    assert!(
        matches!(l.problem, Some(LookupProblem::Dns { .. })),
        "{:?}",
        l.problem
    );
}

/// Every way a policy host can fail: the lookup ends with no policy, in bounded time.
#[tokio::test]
async fn hostile_or_broken_policy_hosts_yield_no_policy() {
    let mut big = "version: STSv1\nmode: enforce\nmx: mx.sts.test\nmax_age: 600\n".to_string();
    big.push_str(&"x-pad: ".repeat(10_000));
    let cases = [
        ("404", PolicyResponse::Status(404)),
        ("redirect", PolicyResponse::Status(301)),
        ("garbage", PolicyResponse::Raw(b"\x16\x03garbage\r\n\r\n\x00\xff".to_vec())),
        ("oversized", PolicyResponse::Policy(big.clone())),
        ("oversized, no length", PolicyResponse::CloseDelimited(big)),
        ("not a policy", PolicyResponse::Policy("<html>hello</html>".into())),
        ("invalid max_age", PolicyResponse::Policy("version: STSv1\nmode: enforce\nmx: a.sts.test\nmax_age: 99999999\n".into())),
        ("truncated", PolicyResponse::Raw(b"HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\nversion: STSv1\n".to_vec())),
        ("wrong type", PolicyResponse::Raw(format!("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\r\n{ENFORCE}", ENFORCE.len()).into_bytes())),
        ("stalled", PolicyResponse::Hang),
        ("trickling", PolicyResponse::Trickle { bytes: ENFORCE.as_bytes().to_vec(), interval_ms: 200 }),
    ];
    let net = Net::start(Some("v=STSv1; id=1")).await;
    let cfg = net.config(Duration::from_millis(800));
    for (what, response) in cases {
        net.https.set(POLICY_HOST, response);
        let sts = MtaSts::new(&cfg, &net.resolver, Some(&net.ca_file), None);
        let started = Instant::now();
        let l = sts.lookup(DOMAIN).await;
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{what}: took {:?}",
            started.elapsed()
        );
        assert_eq!(l.source, PolicySource::None, "{what}");
        assert!(
            matches!(l.problem, Some(LookupProblem::Fetch(_))),
            "{what}: {:?}",
            l.problem
        );
    }
}

#[tokio::test]
async fn chunked_and_close_delimited_policies_are_read() {
    let net = Net::start(Some("v=STSv1; id=1")).await;
    for response in [
        PolicyResponse::Chunked {
            body: ENFORCE.into(),
            chunk: 7,
        },
        PolicyResponse::CloseDelimited(ENFORCE.into()),
    ] {
        net.https.set(POLICY_HOST, response.clone());
        let l = net.sts(None).lookup(DOMAIN).await;
        assert_eq!(
            l.source,
            PolicySource::Fetched,
            "{response:?}: {:?}",
            l.problem
        );
    }
}

#[tokio::test]
async fn a_certificate_not_valid_for_the_policy_host_is_refused() {
    // mta-sts.other.test resolves to the same server, whose certificate names only sts.test's
    // policy host.
    let net = Net::start(None).await;
    net.https
        .set("mta-sts.other.test", PolicyResponse::Policy(ENFORCE.into()));
    let l = net.sts(None).lookup("other.test").await;
    assert_eq!(l.source, PolicySource::None);
    let problem = l.problem.map(|p| p.to_string()).unwrap_or_default();
    assert!(problem.contains("TLS"), "{problem}");
    // And without the CA as a trust anchor, the right name does not help either.
    let cfg = net.config(Duration::from_secs(2));
    let untrusting = MtaSts::new(
        &cfg,
        &net.resolver,
        Some(Path::new("/nonexistent/ca.pem")),
        None,
    );
    net.set_txt("v=STSv1; id=1");
    assert_eq!(untrusting.lookup(DOMAIN).await.source, PolicySource::None);
}

#[tokio::test]
async fn a_cached_policy_survives_fetch_failures_and_restarts() {
    let net = Net::start(Some("v=STSv1; id=1")).await;
    let path = net.cache_path();
    let sts = net.sts(Some(path.clone()));
    assert_eq!(sts.lookup(DOMAIN).await.source, PolicySource::Fetched);
    wait_for_file(&path, DOMAIN).await;

    // The id changes but the new policy cannot be fetched: the cached one still applies.
    net.https.set(POLICY_HOST, PolicyResponse::Status(500));
    net.set_txt("v=STSv1; id=2");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let l = sts.lookup(DOMAIN).await;
    assert_eq!(l.source, PolicySource::Cached);
    assert_eq!(l.policy.map(|p| p.id), Some("1".into()));
    assert!(l.problem.is_some());

    // A restart (a new MtaSts on the same file) with DNS failing: still enforced from disk.
    drop(sts);
    net.dns
        .update_zone(|z| {
            z.set_servfail(&format!("_mta-sts.{DOMAIN}"), true);
        })
        .unwrap();
    let restarted = net.sts(Some(path));
    let l = restarted.lookup(DOMAIN).await;
    assert_eq!(l.source, PolicySource::Cached, "{:?}", l.problem);
    assert_eq!(l.policy.map(|p| p.policy.mode), Some(Mode::Enforce));
}
