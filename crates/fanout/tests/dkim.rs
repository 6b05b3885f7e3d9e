//! DKIM signatures of spliced copies, checked by independent verifiers: mail-auth's verify
//! path (the public key served by the sim DNS server) and, in `dkimpy_verifies_copies`, the
//! Python dkimpy implementation.

#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

mod common;

use common::*;
use herald_auth::dkim::{generate, GeneratedKey};
use herald_auth::{Authenticator, DkimAlgorithm, DkimKeys, DkimSigner};
use herald_fanout::{render, ListContext, Template};
use herald_sim::{DnsServer, Zone};
use herald_types::{ListSettings, Member};
use std::time::Duration;

const LIST: &str = "announce@lists.example.org";
const DOMAIN: &str = "lists.example.org";

/// A post with the shapes canonicalization must get right: line-initial dots (stuffed on the
/// wire), trailing whitespace, runs of blanks, trailing empty lines.
const POST: &[u8] = b"From: Alice <alice@example.com>\r\nTo: announce@lists.example.org\r\n\
Subject: Weekly  report\r\nDate: Mon, 3 Mar 2025 10:00:00 +0000\r\nMessage-ID: <p1@example.com>\r\n\r\n\
Hello   all, \t\r\n.leading dot\r\n..two dots\r\n.\r\n\r\nend\r\n\r\n\r\n";

const FOOTER: &str = "--\n{{name}} <{{email}}>\n.{{company}}\nUnsubscribe: {{unsubscribe_url}}";

fn keys(algorithm: DkimAlgorithm, selector: &str) -> (DkimKeys, GeneratedKey) {
    let k = generate(algorithm).unwrap();
    let signer =
        DkimSigner::from_pem(DOMAIN, selector, algorithm, k.private_pem.as_bytes()).unwrap();
    (DkimKeys::new([signer]), k)
}

fn template(dkim: DkimKeys, footer: Option<&str>) -> Template {
    let settings = ListSettings {
        display_name: "Announcements".into(),
        subject_prefix: Some("[announce]".into()),
        footer: footer.map(str::to_string),
        ..ListSettings::default()
    };
    let c = ListContext { dkim, ..ctx(None) };
    let t = render(&list(LIST, settings), &c, POST).unwrap();
    assert!(t.is_signed());
    t
}

fn members() -> Vec<Member> {
    vec![
        member("bob@example.net", Some("Bob"), &[("company", "Acme")]),
        member("carol@example.com", None, &[]),
        member(
            "dave@example.org",
            Some(".Dave  Dot"),
            &[("company", ".dotco")],
        ),
    ]
}

/// The message as the receiver reassembles it from DATA.
fn received(t: &Template, m: &Member) -> Vec<u8> {
    let mut out = Vec::new();
    t.splice(m, &mut out);
    undot(&out)
}

async fn dns_with(records: &[(&str, &str)]) -> (DnsServer, Authenticator) {
    let mut zone = Zone::new();
    for (name, txt) in records {
        zone.add_txt(name, txt);
    }
    let dns = DnsServer::start("127.0.0.1:0".parse().unwrap(), zone)
        .await
        .unwrap();
    let auth =
        Authenticator::new(&[dns.local_addr()], Duration::from_secs(2), 2, "test.local").unwrap();
    (dns, auth)
}

async fn check_all_pass(algorithm: DkimAlgorithm, footer: Option<&str>) {
    let (dkim, key) = keys(algorithm, "sel1");
    let (dns, auth) = dns_with(&[("sel1._domainkey.lists.example.org", &key.dns_txt)]).await;
    let t = template(dkim, footer);
    for m in members() {
        let msg = received(&t, &m);
        let verdicts = auth.verify_dkim(&msg).await;
        assert_eq!(verdicts.len(), 1, "{}", String::from_utf8_lossy(&msg));
        assert!(
            verdicts[0].pass && verdicts[0].domain == DOMAIN,
            "{verdicts:?}\n{}",
            String::from_utf8_lossy(&msg)
        );
    }
    assert_eq!(t.sign_failures(), 0);
    dns.shutdown().await;
}

#[tokio::test]
async fn ed25519_copies_verify_with_and_without_footer() {
    check_all_pass(DkimAlgorithm::Ed25519, Some(FOOTER)).await;
    check_all_pass(DkimAlgorithm::Ed25519, None).await;
}

#[tokio::test]
async fn rsa_copies_verify() {
    check_all_pass(DkimAlgorithm::Rsa, Some(FOOTER)).await;
}

/// A 1024-bit RSA key, generated for this test only. RFC 8301 §3.2 still allows 1024 bits, but
/// neither aws-lc-rs nor ring signs with them: loading must fail with a reason an operator can
/// act on, never quoting the key.
const RSA_1024_PEM: &str = "-----BEGIN PRIVATE KEY-----
MIICdQIBADANBgkqhkiG9w0BAQEFAASCAl8wggJbAgEAAoGBANkPvlIyoWr/P9NZ
c9ByVh4Sl1ERe78q+s/t4f3vl1/USHP1Uf2u2LzjeCiTOgTlbdD5nMiLemp20nLi
3rcV/UYf/uDqr9uX8DFtdiyJ/THjkXYedO9T6x/9JR89IHXtUk5z+BYQo5R1d3uL
H1hzBIf5HsrKxxVINxcDi5V+gszBAgMBAAECgYBbtDMMNyfLNJuahyhO4H9RpTkY
nvJRCa99OVtJFXg2nFEf7Hz/WGdpJhEV012nw+Zpa4u5jnPhluHCd+bwIvIlbvHh
IOYwiFkaDqeKpzLUX+UMaNVKqgONtcMtG0+n11RcKsLorRg2ryrBA243O2XKEJMR
GW9aYz636qwfZMoGoQJBAPX8t99Y7xtwS5dnyvBRWcGk1vQANsRLbiAcUlXSWRde
2mvdZaW92K3RbyXsuvSRFyXjJJ01tRz+OyzI7KfKVGcCQQDh5Zu91BAT+BJwx835
Qo5ctwegfdxLJZPlA75+cyQYCegrBnbfBHgIInWX302+FxROtea1qb/bsoFdROV7
ulyXAkAHeCMFLygjhydkc4xf+7hj/uNgCVmgYEH5y6JcZMS7xu+O8uwROlCIBqH/
Xs7WeklfpyQHeggD11xoobk95xDlAkBntKiOOnfzIvUcT64w26xNxj07IezrluHR
xqlClgug+ZNbhUk3U27jlSZVRdAED8Zj6EB1b+vDqayYLBQKfGEbAkBV6Tdhgltl
TxgmAItoAGSrGklNDCL7izRmJY2bCn7rYAiUmDA7Jy1JNeYM00ffv2T7AZbLKTfb
44T+r3l/hypj
-----END PRIVATE KEY-----";

#[test]
fn keys_under_2048_bits_and_non_keys_are_refused_clearly() {
    let err = DkimSigner::from_pem(DOMAIN, "s", DkimAlgorithm::Rsa, RSA_1024_PEM.as_bytes())
        .unwrap_err()
        .to_string();
    assert!(err.contains("2048–8192 bits"), "{err}");
    assert!(
        !err.contains("MIIC"),
        "the key leaked into the error: {err}"
    );
    let ed = generate(DkimAlgorithm::Ed25519).unwrap().private_pem;
    let cases: [(&str, DkimAlgorithm, &[u8]); 4] = [
        ("ed25519 key as rsa", DkimAlgorithm::Rsa, ed.as_bytes()),
        (
            "rsa key as ed25519",
            DkimAlgorithm::Ed25519,
            RSA_1024_PEM.as_bytes(),
        ),
        ("no pem", DkimAlgorithm::Rsa, b"not a key"),
        (
            "garbage in a pem",
            DkimAlgorithm::Rsa,
            b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
        ),
    ];
    for (what, algorithm, pem) in cases {
        let err = DkimSigner::from_pem(DOMAIN, "s", algorithm, pem).unwrap_err();
        assert!(
            matches!(err, herald_auth::DkimError::BadKey { .. }),
            "{what}: {err}"
        );
    }
}

/// RSA and Ed25519 together (RFC 8463 §3): every copy carries both signatures, each verifies
/// against its own selector, and altering a signed field breaks both.
#[tokio::test]
async fn dual_signed_copies_carry_two_verifying_signatures() {
    let rsa = generate(DkimAlgorithm::Rsa).unwrap();
    let ed = generate(DkimAlgorithm::Ed25519).unwrap();
    let signer = DkimSigner::from_pem(
        DOMAIN,
        "rsa1",
        DkimAlgorithm::Rsa,
        rsa.private_pem.as_bytes(),
    )
    .unwrap()
    .with_second(
        DkimSigner::from_pem(
            DOMAIN,
            "ed1",
            DkimAlgorithm::Ed25519,
            ed.private_pem.as_bytes(),
        )
        .unwrap(),
    )
    .unwrap();
    let (dns, auth) = dns_with(&[
        ("rsa1._domainkey.lists.example.org", &rsa.dns_txt),
        ("ed1._domainkey.lists.example.org", &ed.dns_txt),
    ])
    .await;
    let t = template(DkimKeys::new([signer]), Some(FOOTER));
    for m in members() {
        let msg = received(&t, &m);
        let verdicts = auth.verify_dkim(&msg).await;
        assert_eq!(verdicts.len(), 2, "{}", String::from_utf8_lossy(&msg));
        assert!(
            verdicts.iter().all(|v| v.pass && v.domain == DOMAIN),
            "{verdicts:?}"
        );
        let text = String::from_utf8_lossy(&msg).into_owned();
        assert!(text.contains("a=rsa-sha256") && text.contains("a=ed25519-sha256"));
        let altered = text.replacen("Subject: [announce]", "Subject: [announce] X", 1);
        let verdicts = auth.verify_dkim(altered.as_bytes()).await;
        assert!(verdicts.iter().all(|v| !v.pass), "{verdicts:?}");
    }
    assert_eq!(t.sign_failures(), 0);
    // A second key must be another selector of the same domain.
    let same = DkimSigner::from_pem(
        DOMAIN,
        "rsa1",
        DkimAlgorithm::Rsa,
        rsa.private_pem.as_bytes(),
    )
    .unwrap();
    let other = DkimSigner::from_pem(
        "other.test",
        "x",
        DkimAlgorithm::Ed25519,
        ed.private_pem.as_bytes(),
    )
    .unwrap();
    for second in [same, other] {
        let first = DkimSigner::from_pem(
            DOMAIN,
            "rsa1",
            DkimAlgorithm::Rsa,
            rsa.private_pem.as_bytes(),
        )
        .unwrap();
        assert!(first.with_second(second).is_err());
    }
    dns.shutdown().await;
}

#[tokio::test]
async fn altered_copies_fail() {
    let (dkim, key) = keys(DkimAlgorithm::Ed25519, "sel1");
    let (dns, auth) = dns_with(&[("sel1._domainkey.lists.example.org", &key.dns_txt)]).await;
    let t = template(dkim, Some(FOOTER));
    let msg = received(&t, &members()[0]);
    let text = String::from_utf8(msg).unwrap();
    for (from, to) in [
        (
            "Subject: [announce] Weekly  report",
            "Subject: [announce] Weekly  rep0rt",
        ),
        ("To: \"Bob\"", "To: \"Rob\""),
        (
            "List-Unsubscribe-Post: List-Unsubscribe=One-Click",
            "List-Unsubscribe-Post: x",
        ),
        ("end\r\n", "end!\r\n"),
        ("Bob <bob@example.net>", "Bob <bob@example.com>"),
    ] {
        assert!(text.contains(from), "{from}");
        let altered = text.replacen(from, to, 1);
        let v = auth.verify_dkim(altered.as_bytes()).await;
        assert!(v.len() == 1 && !v[0].pass, "{from}: {v:?}");
    }
    // Adding a second From after signing fails too (From is over-signed).
    let added = format!("From: Mallory <m@evil.example>\r\n{text}");
    let v = auth.verify_dkim(added.as_bytes()).await;
    assert!(!v.iter().any(|v| v.pass), "{v:?}");
    dns.shutdown().await;
}

#[tokio::test]
async fn signed_fields_include_rfc8058_ones() {
    let (dkim, _) = keys(DkimAlgorithm::Ed25519, "sel1");
    let t = template(dkim, None);
    let msg = String::from_utf8(received(&t, &members()[0])).unwrap();
    let sig = msg.split("\r\n\r\n").next().unwrap();
    let h = sig.split("h=").nth(1).unwrap().split(';').next().unwrap();
    for name in [
        "from",
        "to",
        "subject",
        "date",
        "message-id",
        "list-id",
        "list-unsubscribe",
        "list-unsubscribe-post",
    ] {
        assert!(
            h.split(':').any(|n| n.trim() == name),
            "{name} not in h={h}"
        );
    }
}

const DKIMPY_SCRIPT: &str = r#"
import sys, dkim
record = open(sys.argv[1], 'rb').read().strip()
def dns(name, timeout=5):
    return record if name.startswith(b'sel') else None
for path in sys.argv[2:]:
    msg = open(path, 'rb').read()
    if not dkim.verify(msg, dnsfunc=dns):
        print('FAIL', path)
        sys.exit(1)
print('OK', len(sys.argv) - 2)
"#;

#[test]
fn dkimpy_verifies_copies() {
    let Some(python) = dkimpy_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    for algorithm in [DkimAlgorithm::Rsa, DkimAlgorithm::Ed25519] {
        let (dkim, key) = keys(algorithm, "sel1");
        let record = dir.path().join("record.txt");
        std::fs::write(&record, &key.dns_txt).unwrap();
        let mut args = vec![record];
        for footer in [Some(FOOTER), None] {
            let t = template(dkim.clone(), footer);
            for (i, m) in members().iter().enumerate() {
                let path = dir
                    .path()
                    .join(format!("copy-{}-{i}.eml", footer.is_some()));
                std::fs::write(&path, received(&t, m)).unwrap();
                args.push(path);
            }
        }
        let out = std::process::Command::new(&python)
            .arg("-c")
            .arg(DKIMPY_SCRIPT)
            .args(&args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{algorithm:?}: dkimpy says {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Mail Herald writes itself (confirmations, notices, TLS reports) is sent `verbatim` and signed
/// like every copy. Regression: the signer hashed an empty body there (the body's start was never
/// marked), so every such message failed DKIM at the receiver with "body hash did not verify".
#[tokio::test]
async fn verbatim_mail_verifies() {
    let (dkim, key) = keys(DkimAlgorithm::Ed25519, "sel1");
    let (dns, auth) = dns_with(&[("sel1._domainkey.lists.example.org", &key.dns_txt)]).await;
    let c = ListContext { dkim, ..ctx(None) };
    let list_address = herald_types::Address::parse(LIST).unwrap();
    let t = herald_fanout::verbatim(&list_address, &c, POST);
    assert!(t.is_signed());
    for m in members() {
        let msg = received(&t, &m);
        let verdicts = auth.verify_dkim(&msg).await;
        assert!(
            verdicts.len() == 1 && verdicts[0].pass,
            "{verdicts:?}\n{}",
            String::from_utf8_lossy(&msg)
        );
    }
    dns.shutdown().await;
}
