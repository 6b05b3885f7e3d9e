//! DANE (RFC 7672) end to end, with real parts on 127.0.0.0/8: the simulated world's DNS plays
//! the validating resolver (AD on signed zones' answers to DNSSEC queries, SERVFAIL on bogus
//! ones) and publishes TLSA records for its STARTTLS receivers' self-signed certificate; a real
//! HTTPS server serves one MTA-STS policy, to show DANE taking precedence over it. Herald runs
//! in-process with `[delivery.dane] enabled = true` (and, in the last test, off).

use crate::support;

use herald_sim::https::{PolicyResponse, PolicyServer};
use herald_sim::pki::TestCa;
use herald_sim::{DaneSpec, Dnssec, Profile, TlsaData, TlsaSpec, World};
use serde_json::json;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};
use support::*;

const LIST: &str = "dane@lists.test";
const POLICY_ADDR: Ipv4Addr = Ipv4Addr::new(127, 2, 0, 2);

/// `3 1 1` naming the receivers' own key (computed when the world starts).
fn ee_spki_sha256() -> TlsaSpec {
    TlsaSpec {
        usage: 3,
        selector: 1,
        matching: 1,
        data: TlsaData::Receiver,
    }
}

/// `3 1 1` naming some other key.
fn wrong_key() -> TlsaSpec {
    TlsaSpec {
        data: TlsaData::Bytes(vec![0xab; 32]),
        ..ee_spki_sha256()
    }
}

/// One domain of the world: (STARTTLS, DNSSEC, TLSA records, TLSA answers bogus).
type Spec = (bool, Dnssec, Vec<TlsaSpec>, bool);

/// A world of `d0.test` … one member each (`m<i>@d<i>.test`).
async fn world(specs: Vec<Spec>) -> World {
    let mut wc = world_config(&vec![Profile::Normal; specs.len()], false);
    for (d, (starttls, dnssec, tlsa, tlsa_bogus)) in wc.domains.iter_mut().zip(specs) {
        d.starttls = starttls;
        d.dane = DaneSpec {
            dnssec,
            tlsa,
            tlsa_bogus,
        };
    }
    World::start(wc).await.expect("world")
}

/// An MTA-STS `enforce` policy for `domain` naming no host it has: without DANE its copies are
/// deferred.
async fn publish_sts_enforce(world: &World, domain: &str) -> (PolicyServer, TestCa) {
    let ca = TestCa::new("DANE e2e MTA-STS CA").expect("ca");
    let host = format!("mta-sts.{domain}");
    let cert = ca.issue(std::slice::from_ref(&host)).expect("cert");
    let https = PolicyServer::start(SocketAddr::from((POLICY_ADDR, 0)), cert)
        .await
        .expect("policy server");
    https.set(
        &host,
        PolicyResponse::Policy(
            "version: STSv1\r\nmode: enforce\r\nmx: *.elsewhere.test\r\nmax_age: 86400\r\n".into(),
        ),
    );
    world
        .dns()
        .update_zone(|z| {
            z.add_txt(&format!("_mta-sts.{domain}"), "v=STSv1; id=1");
            z.add_a(&host, POLICY_ADDR);
        })
        .expect("zone update");
    (https, ca)
}

fn config(
    world: &World,
    data_dir: &Path,
    https: &PolicyServer,
    ca: &TestCa,
    dane: bool,
) -> herald_server::Config {
    let mut c = server_config(world, data_dir.to_path_buf());
    let trust = data_dir.with_extension("ca.pem");
    std::fs::write(&trust, ca.pem()).expect("trust file");
    c.delivery.tls_ca_file = Some(trust);
    c.delivery.mta_sts.https_port = https.local_addr().port();
    c.delivery.mta_sts.fetch_timeout = Duration::from_secs(2);
    c.delivery.dane.enabled = dane;
    c
}

async fn post_to_members(server: &TestServer, domains: usize) -> String {
    create_list(&server.api, LIST, json!({"posting_policy": "anyone"})).await;
    let (status, report) = http_bytes(
        &format!("{}/api/v1/lists/{LIST}/import", server.api),
        members_csv(domains, domains).into_bytes(),
    )
    .await;
    assert_eq!(status, 200, "{report}");
    let (mut smtp, _) = Smtp::connect(server.smtp).await;
    smtp.cmd("EHLO client.outside.test").await;
    let body = "From: <poster@outside.test>\r\nSubject: dane\r\nMessage-ID: <dane@outside.test>\r\n\r\nhello\r\n";
    let reply = smtp
        .send_mail("poster@outside.test", &[LIST], body.as_bytes())
        .await;
    queued_id(&reply)
}

/// The delivery log's attempt lines for `rcpt`.
fn log_lines(data_dir: &Path, rcpt: &str) -> Vec<String> {
    let log = std::fs::read_to_string(data_dir.join("log/delivery.log")).unwrap_or_default();
    log.lines()
        .filter(|l| l.contains(&format!("to=<{rcpt}>")))
        .map(str::to_string)
        .collect()
}

/// Waits until `post` has `delivered` copies and every one of `deferred` has been deferred at
/// least once (a log line), while the post stays incomplete.
async fn wait_outcomes(server: &TestServer, post: &str, delivered: u64, deferred: &[&str]) {
    let started = Instant::now();
    loop {
        let p = post_progress(&server.api, post).await;
        let all_deferred = deferred
            .iter()
            .all(|r| !log_lines(&server.data_dir, r).is_empty());
        if let Some(p) = p
            .as_ref()
            .filter(|p| p.delivered == delivered && all_deferred)
        {
            assert!(!p.complete, "{p:?}");
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{p:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn assert_each(lines: &[String], needles: &[&str]) {
    assert!(!lines.is_empty());
    for line in lines {
        for n in needles {
            assert!(line.contains(n), "{n:?} missing in {line}");
        }
    }
}

/// Every DANE case in one world and one post.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dane_decides_for_signed_domains_with_tlsa_records() {
    let started = Instant::now();
    let world = world(vec![
        // d0: signed, TLSA names the receiver's key: delivered over DANE-verified TLS.
        (true, Dnssec::Signed, vec![ee_spki_sha256()], false),
        // d1: signed, TLSA names another key: deferred, nothing sent.
        (true, Dnssec::Signed, vec![wrong_key()], false),
        // d2: signed TLSA, but the receiver offers no STARTTLS: deferred, nothing in plaintext.
        (false, Dnssec::Signed, vec![wrong_key()], false),
        // d3: unsigned zone with a TLSA record: ordinary opportunistic TLS.
        (true, Dnssec::Unsigned, vec![ee_spki_sha256()], false),
        // d4: signed, but the TLSA answer is bogus (SERVFAIL): deferred.
        (true, Dnssec::Signed, vec![ee_spki_sha256()], true),
        // d5: signed, no TLSA: ordinary delivery, dane=none.
        (true, Dnssec::Signed, vec![], false),
        // d6: signed with TLSA, and an MTA-STS enforce policy no host matches: DANE decides.
        (true, Dnssec::Signed, vec![ee_spki_sha256()], false),
        // d7: only PKIX-usage (unusable) records: as if none.
        (
            true,
            Dnssec::Signed,
            vec![TlsaSpec {
                usage: 1,
                ..ee_spki_sha256()
            }],
            false,
        ),
        // d8: a bogus zone: even its MX lookup fails, deferred.
        (true, Dnssec::Bogus, vec![ee_spki_sha256()], false),
    ])
    .await;
    let (https, ca) = publish_sts_enforce(&world, "d6.test").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let data_dir = dir.path().join("data");
    let server = TestServer::start(config(&world, &data_dir, &https, &ca, true)).await;
    let id = post_to_members(&server, 9).await;
    let deferred = ["m1@d1.test", "m2@d2.test", "m4@d4.test", "m8@d8.test"];
    wait_outcomes(&server, &id, 5, &deferred).await;
    let (_, metrics) = http("GET", &format!("{}/metrics", server.api), None).await;
    server.stop().await;

    let snap = world.recorder().snapshot();
    assert_eq!(snap.accepted, 5);
    for rcpt in deferred {
        assert!(snap.copies_for(rcpt).is_empty(), "{rcpt} must get nothing");
    }
    let log = |r| log_lines(&data_dir, r);
    assert_each(
        &log("m0@d0.test"),
        &["status=sent", "tls=TLSv1.3/unverified", "dane=verified"],
    );
    assert_each(
        &log("m1@d1.test"),
        &[
            "status=deferred",
            "dsn=4.7.5",
            "DANE",
            "no TLSA record matches",
            "dane=failed",
        ],
    );
    assert_each(
        &log("m2@d2.test"),
        &[
            "status=deferred",
            "dsn=4.7.5",
            "does not offer STARTTLS",
            "dane=failed",
        ],
    );
    assert_each(&log("m3@d3.test"), &["status=sent", "dane=insecure"]);
    assert_each(
        &log("m4@d4.test"),
        &[
            "status=deferred",
            "dsn=4.7.5",
            "TLSA lookup",
            "SERVFAIL",
            "dane=failed",
        ],
    );
    assert_each(&log("m5@d5.test"), &["status=sent", "dane=none"]);
    let d6 = log("m6@d6.test");
    assert_each(&d6, &["status=sent", "dane=verified"]);
    assert!(
        !d6[0].contains("mta-sts="),
        "MTA-STS is not applied: {}",
        d6[0]
    );
    assert_each(&log("m7@d7.test"), &["status=sent", "dane=none"]);
    assert_each(&log("m8@d8.test"), &["status=deferred"]);

    let metrics = metrics.as_str().unwrap_or_default();
    for (result, at_least) in [("verified", 2), ("none", 2), ("insecure", 1), ("failed", 3)] {
        let prefix = format!("herald_dane_attempts_total{{result=\"{result}\"}} ");
        let n: u64 = metrics
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{prefix} missing in {metrics}"));
        assert!(n >= at_least, "{prefix}{n}");
    }
    https.shutdown().await;
    world.shutdown().await;
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
}

/// With DANE off (the default) nothing changes: a mismatching TLSA record and a server without
/// STARTTLS still get their copies (opportunistic TLS or plaintext), the MTA-STS policy applies,
/// and the log has no `dane=`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_dane_off_delivery_is_unchanged() {
    let world = world(vec![
        (true, Dnssec::Signed, vec![wrong_key()], false),
        (false, Dnssec::Signed, vec![wrong_key()], false),
        (true, Dnssec::Signed, vec![ee_spki_sha256()], false),
    ])
    .await;
    let (https, ca) = publish_sts_enforce(&world, "d2.test").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let data_dir = dir.path().join("data");
    let server = TestServer::start(config(&world, &data_dir, &https, &ca, false)).await;
    let id = post_to_members(&server, 3).await;
    wait_outcomes(&server, &id, 2, &["m2@d2.test"]).await;
    server.stop().await;

    let snap = world.recorder().snapshot();
    assert_eq!(snap.copies_for("m0@d0.test").len(), 1);
    assert_eq!(snap.copies_for("m1@d1.test").len(), 1);
    assert!(snap.copies_for("m2@d2.test").is_empty());
    assert_each(
        &log_lines(&data_dir, "m0@d0.test"),
        &["status=sent", "tls=TLSv1.3/unverified"],
    );
    assert_each(
        &log_lines(&data_dir, "m1@d1.test"),
        &["status=sent", "tls=none"],
    );
    assert_each(
        &log_lines(&data_dir, "m2@d2.test"),
        &["status=deferred", "mta-sts=enforce"],
    );
    let log = std::fs::read_to_string(data_dir.join("log/delivery.log")).expect("log");
    assert!(!log.contains("dane="), "{log}");
    https.shutdown().await;
    world.shutdown().await;
}
