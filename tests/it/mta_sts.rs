//! MTA-STS (RFC 8461) end to end, with real parts on 127.0.0.0/8: the simulated world's DNS
//! publishes `_mta-sts.<domain>` TXT records and the policy hosts' addresses; a real HTTPS server
//! (rustls, certificate signed by a test CA) serves the policies; the world's STARTTLS receivers
//! are the MX hosts. Herald trusts the test CA (and, where a test says so, the receivers'
//! certificate) through `delivery.tls_ca_file`.

use crate::support;

use herald_api_types::PostSummary;
use herald_sim::https::{PolicyResponse, PolicyServer};
use herald_sim::pki::TestCa;
use herald_sim::{Profile, World};
use serde_json::json;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::*;

const LIST: &str = "sts@lists.test";
/// Where the policy hosts of every domain live.
const POLICY_ADDR: Ipv4Addr = Ipv4Addr::new(127, 2, 0, 1);

/// The policy server and what Herald must trust.
struct StsNet {
    https: PolicyServer,
    ca: TestCa,
}

impl StsNet {
    /// A policy server for `mta-sts.d0.test` … `mta-sts.d<n-1>.test`.
    async fn start(domains: usize) -> StsNet {
        let ca = TestCa::new("Herald MTA-STS test CA").expect("ca");
        let names: Vec<String> = (0..domains).map(|i| format!("mta-sts.d{i}.test")).collect();
        let cert = ca.issue(&names).expect("policy host certificate");
        let https = PolicyServer::start(SocketAddr::from((POLICY_ADDR, 0)), cert)
            .await
            .expect("policy server");
        StsNet { https, ca }
    }

    /// Publishes a policy for `domain`: TXT record with `id`, the policy host's address, and the
    /// policy body.
    fn publish(&self, world: &World, domain: &str, id: &str, response: PolicyResponse) {
        world
            .dns()
            .update_zone(|z| {
                // Short TTLs so that changes are seen at once by the next refresh.
                z.set_ttls(1, 1);
                z.remove(&format!("_mta-sts.{domain}"));
                z.add_txt(&format!("_mta-sts.{domain}"), &format!("v=STSv1; id={id}"));
                if !z.contains(&format!("mta-sts.{domain}")) {
                    z.add_a(&format!("mta-sts.{domain}"), POLICY_ADDR);
                }
            })
            .expect("zone update");
        self.https.set(&format!("mta-sts.{domain}"), response);
    }

    /// A trust-anchor file: the test CA, and the receivers' certificate when `trust_mx`.
    fn trust_file(&self, world: &World, dir: &Path, trust_mx: bool) -> PathBuf {
        let mut pem = self.ca.pem();
        if trust_mx {
            pem.push_str(&der_to_pem(
                world.tls_certificate_der().expect("a STARTTLS MX"),
            ));
        }
        let path = dir.join("trust.pem");
        std::fs::write(&path, pem).expect("write trust file");
        path
    }
}

fn policy(mode: &str, mx: &str) -> PolicyResponse {
    PolicyResponse::Policy(format!(
        "version: STSv1\r\nmode: {mode}\r\nmx: {mx}\r\nmax_age: 86400\r\n"
    ))
}

/// A world of `starttls.len()` domains, one member each (`m<i>@d<i>.test`).
async fn world(starttls: &[bool]) -> World {
    let mut wc = world_config(&vec![Profile::Normal; starttls.len()], false);
    for (d, tls) in wc.domains.iter_mut().zip(starttls) {
        d.starttls = *tls;
    }
    World::start(wc).await.expect("world")
}

/// Herald pointed at the world and the policy server, trusting `trust`.
fn config(world: &World, net: &StsNet, data_dir: PathBuf, trust: PathBuf) -> herald_server::Config {
    let mut c = server_config(world, data_dir);
    c.delivery.tls_ca_file = Some(trust);
    c.delivery.mta_sts.https_port = net.https.local_addr().port();
    c.delivery.mta_sts.fetch_timeout = Duration::from_secs(2);
    c
}

/// Creates the list with one member per domain.
async fn list_with_members(server: &TestServer, domains: usize) {
    create_list(&server.api, LIST, json!({"posting_policy": "anyone"})).await;
    let (status, report) = http_bytes(
        &format!("{}/api/v1/lists/{LIST}/import", server.api),
        members_csv(domains, domains).into_bytes(),
    )
    .await;
    assert_eq!(status, 200, "{report}");
}

/// Sends one post to the list; returns its id.
async fn post(server: &TestServer, subject: &str) -> String {
    let (mut smtp, _) = Smtp::connect(server.smtp).await;
    smtp.cmd("EHLO client.outside.test").await;
    let body = format!(
        "From: <poster@outside.test>\r\nSubject: {subject}\r\nMessage-ID: <{}@outside.test>\r\n\r\nhello\r\n",
        subject.replace(' ', "-")
    );
    let reply = smtp
        .send_mail("poster@outside.test", &[LIST], body.as_bytes())
        .await;
    queued_id(&reply)
}

/// Waits until `post` has `delivered` copies and at least `min_deferred` deferral attempts, and
/// has stayed incomplete (some copy keeps being deferred).
async fn wait_partial(api: &str, post: &str, delivered: u64, min_deferred: u64) -> PostSummary {
    let started = Instant::now();
    loop {
        let p = post_progress(api, post).await;
        if let Some(p) = p.as_ref() {
            if p.delivered == delivered && p.deferred_attempts >= min_deferred {
                assert!(!p.complete, "{p:?}");
                return p.clone();
            }
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{p:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The delivery log's attempt lines for `rcpt`.
fn log_lines(data_dir: &Path, rcpt: &str) -> Vec<String> {
    let log = std::fs::read_to_string(data_dir.join("log/delivery.log")).expect("delivery log");
    log.lines()
        .filter(|l| l.contains(&format!("to=<{rcpt}>")))
        .map(str::to_string)
        .collect()
}

/// Enforce, enforce with no matching MX, testing, no record, a record whose policy cannot be
/// fetched, a stalled policy host and a malformed record — one world, one post.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_policy_mode_shapes_delivery() {
    // d0, d1: STARTTLS MX hosts; the others plaintext only.
    let world = world(&[true, true, false, false, false, false, false]).await;
    let net = StsNet::start(7).await;
    net.publish(&world, "d0.test", "1", policy("enforce", "mx.d0.test"));
    net.publish(
        &world,
        "d1.test",
        "1",
        policy("enforce", "*.elsewhere.test"),
    );
    net.publish(&world, "d2.test", "1", policy("testing", "*.d2.test"));
    // d3.test publishes nothing; d4.test's policy host answers 404.
    net.publish(&world, "d4.test", "1", PolicyResponse::Status(404));
    // d5.test's policy host never answers (the fetch times out); d6.test's record is malformed.
    net.publish(&world, "d5.test", "1", PolicyResponse::Hang);
    net.publish(
        &world,
        "d6.test",
        "1",
        policy("enforce", "*.elsewhere.test"),
    );
    world
        .dns()
        .update_zone(|z| {
            z.remove("_mta-sts.d6.test");
            z.add_txt("_mta-sts.d6.test", "v=STSv1; id=1;; id=\u{7f}");
        })
        .expect("zone update");
    let dir = tempfile::tempdir().expect("tempdir");
    let data_dir = dir.path().join("data");
    let trust = net.trust_file(&world, dir.path(), true);
    let server = TestServer::start(config(&world, &net, data_dir.clone(), trust)).await;
    list_with_members(&server, 7).await;
    let id = post(&server, "modes").await;
    // Everything but d1's copy is delivered; d1's is deferred again and again.
    wait_partial(&server.api, &id, 6, 2).await;
    let (_, metrics) = http("GET", &format!("{}/metrics", server.api), None).await;
    server.stop().await;

    let snap = world.recorder().snapshot();
    assert_eq!(snap.accepted, 6);
    assert!(
        snap.copies_for("m1@d1.test").is_empty(),
        "d1 must get nothing"
    );

    let d0 = log_lines(&data_dir, "m0@d0.test");
    assert_eq!(d0.len(), 1, "{d0:?}");
    assert!(d0[0].contains("status=sent"), "{}", d0[0]);
    assert!(d0[0].contains("/verified, mta-sts=enforce"), "{}", d0[0]);

    let d1 = log_lines(&data_dir, "m1@d1.test");
    assert!(d1.len() >= 2, "{d1:?}");
    for line in &d1 {
        assert!(line.contains("status=deferred"), "{line}");
        assert!(
            line.contains("dsn=4.7.5") && line.contains("MTA-STS"),
            "{line}"
        );
        assert!(line.contains("mta-sts=enforce"), "{line}");
    }

    let d2 = log_lines(&data_dir, "m2@d2.test");
    assert_eq!(d2.len(), 1, "{d2:?}");
    assert!(d2[0].contains("status=sent"), "{}", d2[0]);
    assert!(
        d2[0].contains("tls=none, mta-sts=testing-failed"),
        "{}",
        d2[0]
    );
    let metrics = metrics.as_str().unwrap_or_default();
    assert!(
        metrics.contains("herald_mta_sts_attempts_total{policy=\"testing-failed\"} 1\n"),
        "{metrics}"
    );

    for rcpt in ["m3@d3.test", "m4@d4.test", "m5@d5.test", "m6@d6.test"] {
        let lines = log_lines(&data_dir, rcpt);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].contains("status=sent"), "{}", lines[0]);
        assert!(
            lines[0].ends_with(", tls=none"),
            "no policy applies: {}",
            lines[0]
        );
    }
    net.https.shutdown().await;
    world.shutdown().await;
}

/// Enforce with an MX certificate Herald cannot verify: deferred, never sent (not even in
/// plaintext); a domain without a policy on the same kind of MX still gets its copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enforce_defers_when_the_mx_certificate_does_not_verify() {
    let world = world(&[true, true]).await;
    let net = StsNet::start(2).await;
    net.publish(&world, "d0.test", "1", policy("enforce", "mx.d0.test"));
    let dir = tempfile::tempdir().expect("tempdir");
    let data_dir = dir.path().join("data");
    // The CA only: the policy verifies, the receivers' self-signed certificate does not.
    let trust = net.trust_file(&world, dir.path(), false);
    let server = TestServer::start(config(&world, &net, data_dir.clone(), trust)).await;
    list_with_members(&server, 2).await;
    let id = post(&server, "bad cert").await;
    wait_partial(&server.api, &id, 1, 2).await;
    server.stop().await;

    let snap = world.recorder().snapshot();
    assert!(
        snap.copies_for("m0@d0.test").is_empty(),
        "d0 must get nothing"
    );
    assert_eq!(snap.copies_for("m1@d1.test").len(), 1);
    for line in log_lines(&data_dir, "m0@d0.test") {
        assert!(
            line.contains("status=deferred") && line.contains("4.7.5"),
            "{line}"
        );
        assert!(
            line.contains("MTA-STS policy requires verified TLS"),
            "{line}"
        );
        assert!(line.contains("mta-sts=enforce"), "{line}");
    }
    let d1 = log_lines(&data_dir, "m1@d1.test");
    assert!(d1[0].ends_with(", tls=TLSv1.3/unverified"), "{}", d1[0]);
    net.https.shutdown().await;
    world.shutdown().await;
}

/// The policy cached by a first run is enforced after a restart while the policy host fails:
/// the domain's MX moves to a host outside the policy, and its copy is deferred.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_policy_is_enforced_when_the_policy_host_fails() {
    let world = world(&[true, true]).await;
    let net = StsNet::start(2).await;
    net.publish(&world, "d0.test", "1", policy("enforce", "mx.d0.test"));
    let dir = tempfile::tempdir().expect("tempdir");
    let data_dir = dir.path().join("data");
    let trust = net.trust_file(&world, dir.path(), true);
    let cfg = config(&world, &net, data_dir.clone(), trust);

    let server = TestServer::start(cfg.clone()).await;
    list_with_members(&server, 2).await;
    let first = post(&server, "first").await;
    wait_complete(&server.api, &first, Duration::from_secs(30)).await;
    server.stop().await;
    assert!(
        std::fs::read_to_string(data_dir.join("mta-sts.json")).is_ok_and(|t| t.contains("d0.test")),
        "policy cache persisted"
    );

    // Now the policy host fails (and a new id makes Herald try it), and d0's MX is d1's host.
    net.publish(&world, "d0.test", "2", PolicyResponse::Status(500));
    world
        .dns()
        .update_zone(|z| {
            z.remove("d0.test");
            z.add_mx("d0.test", 10, "mx.d1.test");
        })
        .expect("zone update");
    let server = TestServer::start(cfg).await;
    let second = post(&server, "second").await;
    wait_partial(&server.api, &second, 1, 1).await;
    server.stop().await;

    let snap = world.recorder().snapshot();
    assert_eq!(
        snap.copies_for("m0@d0.test").len(),
        1,
        "only the first post's copy"
    );
    let d0 = log_lines(&data_dir, "m0@d0.test");
    assert!(
        d0[0].contains("status=sent") && d0[0].contains("mta-sts=enforce"),
        "{}",
        d0[0]
    );
    for line in &d0[1..] {
        assert!(line.contains("status=deferred"), "{line}");
        assert!(
            line.contains("allows none of its MX hosts (mx.d1.test)"),
            "{line}"
        );
    }
    net.https.shutdown().await;
    world.shutdown().await;
}

/// A new TXT id is picked up by the route refresh: the new policy (enforce instead of testing)
/// applies to the next post, and the policy host is asked once per id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_policy_id_is_fetched_and_applied() {
    // d0's MX speaks plaintext only: fine under testing, refused under enforce.
    let world = world(&[false, false]).await;
    let net = StsNet::start(2).await;
    net.publish(&world, "d0.test", "1", policy("testing", "mx.d0.test"));
    let dir = tempfile::tempdir().expect("tempdir");
    let data_dir = dir.path().join("data");
    let trust = net.trust_file(&world, dir.path(), false);
    let mut cfg = config(&world, &net, data_dir.clone(), trust);
    cfg.scheduler.route_refresh_secs = 1;
    let server = TestServer::start(cfg).await;
    list_with_members(&server, 2).await;
    let first = post(&server, "under testing").await;
    wait_complete(&server.api, &first, Duration::from_secs(30)).await;

    net.publish(&world, "d0.test", "2", policy("enforce", "mx.d0.test"));
    // The TXT record's TTL (1 s) and a route refresh (every 1 s) later, enforce applies.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let second = post(&server, "under enforce").await;
    wait_partial(&server.api, &second, 1, 1).await;
    server.stop().await;

    assert_eq!(net.https.requests(), 2, "one fetch per policy id");
    let snap = world.recorder().snapshot();
    assert_eq!(
        snap.copies_for("m0@d0.test").len(),
        1,
        "only the first post's copy"
    );
    let d0 = log_lines(&data_dir, "m0@d0.test");
    assert!(
        d0[0].contains("status=sent") && d0[0].contains("mta-sts=testing-failed"),
        "{}",
        d0[0]
    );
    assert!(d0.len() >= 2, "{d0:?}");
    for line in &d0[1..] {
        assert!(
            line.contains("status=deferred") && line.contains("mta-sts=enforce"),
            "{line}"
        );
        assert!(line.contains("does not offer STARTTLS"), "{line}");
    }
    net.https.shutdown().await;
    world.shutdown().await;
}
