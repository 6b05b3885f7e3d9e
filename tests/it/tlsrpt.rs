//! TLS reporting (RFC 8460) end to end, with real parts on 127.0.0.0/8: a post goes to members
//! at a domain with an enforced MTA-STS policy and STARTTLS (d0), a plaintext-only domain (d1)
//! and a domain that publishes no `_smtp._tls` record (d2, which also receives the mailed
//! reports). `herald tls-report send` then sends each domain its report for the day: by mail
//! (a `multipart/report; report-type="tlsrpt"` with the gzip'd JSON, DKIM-signed by the list
//! domain and verified as a receiver would) and by HTTPS POST to the simulated world's HTTPS
//! server. What the reports say is checked against what happened: d0's sessions succeeded
//! under its `sts` policy; d1's failed with `starttls-not-supported`.

use crate::support;

use flate2::read::GzDecoder;
use herald_sim::https::{PolicyResponse, PolicyServer};
use herald_sim::pki::TestCa;
use herald_sim::World;
use herald_tlsrpt::report::Report;
use mail_parser::MimeHeaders;
use serde_json::json;
use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;
use support::*;

const LIST: &str = "news@lists.test";
/// The HTTPS server: d0's MTA-STS policy host and d2's report collector.
const HTTPS_ADDR: Ipv4Addr = Ipv4Addr::new(127, 2, 0, 1);
/// Where d0 and d1 want their reports mailed.
const REPORTS_TO: &str = "tlsrpt@d2.test";

/// The report mails that reached `REPORTS_TO`, once `n` have.
async fn report_mails(world: &World, n: usize) -> Vec<String> {
    wait_until_some(&format!("{n} report mails"), || {
        let mails: Vec<String> = world
            .recorder()
            .snapshot()
            .copies_for(REPORTS_TO)
            .into_iter()
            .filter_map(|c| c.message.as_deref())
            .map(|m| String::from_utf8_lossy(m).into_owned())
            .collect();
        (mails.len() >= n).then_some(mails)
    })
    .await
}

fn gunzip(gz: &[u8]) -> Report {
    let mut json = String::new();
    GzDecoder::new(gz).read_to_string(&mut json).expect("gzip");
    serde_json::from_str(&json).unwrap_or_else(|e| panic!("report JSON: {e}: {json}"))
}

/// The report attached to a mail, with the mail's checks: the RFC 8460 §5.3 structure.
fn report_in(mail: &str) -> Report {
    let parsed = mail_parser::MessageParser::new()
        .parse(mail.as_bytes())
        .expect("parsable report mail");
    let ct = parsed.content_type().expect("content type");
    assert_eq!(
        (ct.ctype(), ct.subtype()),
        ("multipart", Some("report")),
        "{mail}"
    );
    assert_eq!(ct.attribute("report-type"), Some("tlsrpt"), "{mail}");
    let part = parsed
        .attachments()
        .find(|a| {
            a.content_type()
                .is_some_and(|c| c.subtype() == Some("tlsrpt+gzip"))
        })
        .expect("an application/tlsrpt+gzip part");
    let name = part.attachment_name().expect("a file name");
    assert!(
        name.starts_with("lists.test!") && name.ends_with(".json.gz"),
        "{name}"
    );
    gunzip(part.contents())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_reach_the_domains_that_ask_by_mail_and_https() {
    let mut wc = world_config(&vec![herald_sim::Profile::Normal; 3], true);
    wc.domains[0].starttls = true;
    let world = World::start(wc).await.expect("world");
    let ca = TestCa::new("Herald TLS-RPT test CA").expect("ca");
    let cert = ca
        .issue(&["mta-sts.d0.test".to_string(), "reports.d2.test".to_string()])
        .expect("https certificate");
    let https = PolicyServer::start(SocketAddr::from((HTTPS_ADDR, 0)), cert)
        .await
        .expect("https server");
    let port = https.local_addr().port();
    https.set(
        "mta-sts.d0.test",
        PolicyResponse::Policy(
            "version: STSv1\r\nmode: enforce\r\nmx: mx.d0.test\r\nmax_age: 86400\r\n".into(),
        ),
    );
    https.set("reports.d2.test", PolicyResponse::Status(200));
    let key = herald_auth::dkim::generate(herald_auth::DkimAlgorithm::Ed25519).expect("key");
    world
        .dns()
        .update_zone(|z| {
            z.add_txt("_mta-sts.d0.test", "v=STSv1; id=1");
            z.add_a("mta-sts.d0.test", HTTPS_ADDR);
            z.add_a("reports.d2.test", HTTPS_ADDR);
            z.add_txt(
                "_smtp._tls.d0.test",
                &format!(
                    "v=TLSRPTv1; rua=mailto:{REPORTS_TO},https://reports.d2.test:{port}/tlsrpt"
                ),
            );
            z.add_txt(
                "_smtp._tls.d1.test",
                "v=TLSRPTv1; rua=mailto:tlsrpt%40d2.test",
            );
            z.add_txt("s1._domainkey.lists.test", &key.dns_txt);
        })
        .expect("zone");

    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = server_config(&world, dir.path().join("data"));
    let trust = dir.path().join("trust.pem");
    let mut pem = ca.pem();
    pem.push_str(&der_to_pem(
        world.tls_certificate_der().expect("a STARTTLS MX"),
    ));
    std::fs::write(&trust, pem).expect("trust file");
    config.delivery.tls_ca_file = Some(trust);
    config.delivery.mta_sts.https_port = port;
    let key_file = dir.path().join("lists.test.pem");
    std::fs::write(&key_file, &key.private_pem).expect("write key");
    config.dkim.insert(
        "lists.test".into(),
        herald_server::config::DkimDomainConfig {
            key: herald_server::config::DkimKeyConfig {
                selector: "s1".into(),
                key_file,
                algorithm: herald_auth::DkimAlgorithm::Ed25519,
            },
            arc: false,
            second: None,
        },
    );
    config.tls_report.organization = "Herald test".into();
    let server = TestServer::start(config).await;

    create_list(&server.api, LIST, json!({"posting_policy": "anyone"})).await;
    let (status, report) = http_bytes(
        &format!("{}/api/v1/lists/{LIST}/import", server.api),
        members_csv(3, 3).into_bytes(),
    )
    .await;
    assert_eq!(status, 200, "{report}");
    let (mut smtp, _) = Smtp::connect(server.smtp).await;
    smtp.cmd("EHLO client.outside.test").await;
    let reply = smtp
        .send_mail(
            "poster@outside.test",
            &[LIST],
            b"From: <poster@outside.test>\r\nSubject: hello\r\nMessage-ID: <p1@outside.test>\r\n\r\nhello\r\n",
        )
        .await;
    let post = queued_id(&reply);
    let done = wait_complete(&server.api, &post, Duration::from_secs(30)).await;
    assert_eq!(done.delivered, 3, "{done:?}");

    // An unusable day is refused with a clear message; today's reports go out.
    let (status, body) = http(
        "POST",
        &format!("{}/api/v1/tls-report/send?day=2026-13-45", server.api),
        None,
    )
    .await;
    assert_eq!(status, 400, "{body}");
    let today = herald_tlsrpt::stage::today();
    let out = herald_cli(&server.api, None, &["tls-report", "send", "--day", &today]);
    assert!(out.contains("d0.test: sent (1 ok, 0 failed)"), "{out}");
    assert!(out.contains("d1.test: sent (0 ok, 1 failed)"), "{out}");
    assert!(out.contains("d2.test: no-record"), "{out}");

    let mails = report_mails(&world, 2).await;
    let receiver = herald_auth::Authenticator::new(
        &[world.dns_addr()],
        Duration::from_secs(2),
        2,
        "mx.d2.test",
    )
    .expect("authenticator");
    let mut by_domain = std::collections::BTreeMap::new();
    for mail in &mails {
        assert!(
            mail.contains("\r\nTLS-Report-Submitter: lists.test\r\n"),
            "{mail}"
        );
        let dkim = receiver.verify_dkim(mail.as_bytes()).await;
        assert!(
            dkim.iter().any(|v| v.pass && v.domain == "lists.test"),
            "the report must be DKIM-signed by the submitter: {dkim:?}\n{mail}"
        );
        let report = report_in(mail);
        assert_eq!(report.organization_name, "Herald test");
        assert_eq!(report.contact_info, "postmaster@lists.test");
        assert_eq!(
            report.date_range.start_datetime,
            format!("{today}T00:00:00Z")
        );
        assert_eq!(report.policies.len(), 1, "{report:?}");
        let domain = report.policies[0].policy.policy_domain.clone();
        assert!(
            mail.contains(&format!("\r\nTLS-Report-Domain: {domain}\r\n")),
            "{mail}"
        );
        by_domain.insert(domain, report);
    }
    let d0 = &by_domain["d0.test"].policies[0];
    assert_eq!(d0.policy.policy_type, "sts");
    assert!(
        d0.policy.policy_string.iter().any(|l| l == "mode: enforce"),
        "{d0:?}"
    );
    assert_eq!(d0.policy.mx_host, vec!["mx.d0.test"]);
    assert_eq!(
        (
            d0.summary.total_successful_session_count,
            d0.summary.total_failure_session_count
        ),
        (1, 0)
    );
    let d1 = &by_domain["d1.test"].policies[0];
    assert_eq!(d1.policy.policy_type, "no-policy-found");
    assert_eq!(d1.summary.total_failure_session_count, 1);
    assert_eq!(d1.failure_details.len(), 1);
    assert_eq!(d1.failure_details[0].result_type, "starttls-not-supported");
    assert_eq!(d1.failure_details[0].receiving_mx_hostname, "mx.d1.test");
    assert_eq!(d1.failure_details[0].failed_session_count, 1);

    // d0 also asked for HTTPS: one POST of the same report, gzip'd, with the RFC's media type.
    let uploads = https.uploads();
    assert_eq!(uploads.len(), 1, "{uploads:?}");
    assert_eq!(uploads[0].host, "reports.d2.test");
    assert_eq!(uploads[0].path, "/tlsrpt");
    assert_eq!(
        uploads[0].content_type.as_deref(),
        Some("application/tlsrpt+gzip")
    );
    assert_eq!(gunzip(&uploads[0].body), by_domain["d0.test"]);

    // The reports' own delivery is counted too (d2's sessions), and the counts survive a
    // restart: the ledger has them.
    server.stop().await;
    let ledger =
        herald_tlsrpt::ledger::Ledger::open(&dir.path().join("data/tlsrpt.db")).expect("ledger");
    let rows = ledger.rows(&today, "d1.test").expect("rows");
    assert_eq!(rows.iter().map(|r| r.count).sum::<u64>(), 1, "{rows:?}");
    assert_eq!(
        ledger
            .outcome(&today, "d1.test")
            .expect("outcome")
            .map(|o| o.state),
        Some("sent".to_string())
    );
    https.shutdown().await;
    world.shutdown().await;
}
