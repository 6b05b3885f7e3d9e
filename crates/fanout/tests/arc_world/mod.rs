//! The world the ARC tests run in: the sim DNS with the list's and a forwarder's keys, our
//! verifier, the arrival step as the server does it, and an earlier hop made by mail-auth's
//! own `ArcSealer`. Shared by tests/arc.rs, tests/arc_hostile.rs and tests/arc_dkimpy.rs.

#![allow(dead_code)] // each test binary uses its part

use crate::common::*;
use base64::Engine;
use herald_auth::dkim::{generate, header_fields, GeneratedKey};
use herald_auth::{Authenticator, DkimAlgorithm, DkimKeys, DkimSigner};
use herald_fanout::{render, ListContext, Template};
use herald_sim::{DnsServer, Zone};
use herald_types::{ListSettings, Member};
use mail_auth::arc::ArcSealer;
use mail_auth::common::crypto::{DkimKey, Ed25519Key, RsaKey, Sha256};
use mail_auth::common::headers::HeaderWriter;
use mail_auth::{ArcOutput, AuthenticatedMessage, AuthenticationResults};
use std::time::Duration;

pub const LIST: &str = "announce@lists.example.org";
const LIST_KEY: &str = "sel1._domainkey.lists.example.org";
const FWD_KEY: &str = "fwd._domainkey.fwd.example";

pub const POST: &[u8] = b"From: Alice <alice@example.com>\r\nTo: announce@lists.example.org\r\n\
Subject: Weekly  report\r\nDate: Mon, 3 Mar 2025 10:00:00 +0000\r\nMessage-ID: <p1@example.com>\r\n\r\n\
Hello   all, \t\r\n.leading dot\r\n\r\nend\r\n\r\n\r\n";

pub const FOOTER: &str = "--\n{{name}} <{{email}}>\nUnsubscribe: {{unsubscribe_url}}";

/// The sim DNS with the list's and a forwarder's keys, and our verifier.
pub struct World {
    pub dns: DnsServer,
    pub auth: Authenticator,
    pub list: DkimKeys,
    /// The list key's PEM (to build signers with other settings).
    pub list_pem: String,
    fwd: GeneratedKey,
    algorithm: DkimAlgorithm,
    pub records: Vec<(&'static str, String)>,
}

impl World {
    pub async fn start(algorithm: DkimAlgorithm) -> World {
        let (list, fwd) = (generate(algorithm).unwrap(), generate(algorithm).unwrap());
        let records = vec![
            (LIST_KEY, list.dns_txt.clone()),
            (FWD_KEY, fwd.dns_txt.clone()),
        ];
        let mut zone = Zone::new();
        for (name, txt) in &records {
            zone.add_txt(name, txt);
        }
        let dns = DnsServer::start("127.0.0.1:0".parse().unwrap(), zone)
            .await
            .unwrap();
        let auth = Authenticator::new(&[dns.local_addr()], Duration::from_secs(2), 2, AUTHSERV_ID)
            .unwrap();
        let signer = DkimSigner::from_pem(
            "lists.example.org",
            "sel1",
            algorithm,
            list.private_pem.as_bytes(),
        )
        .unwrap();
        World {
            dns,
            auth,
            list: DkimKeys::new([signer]),
            list_pem: list.private_pem.clone(),
            fwd,
            algorithm,
            records,
        }
    }

    /// The post as the server stores it: a fresh Authentication-Results of ours on top, any
    /// older one with our authserv-id stripped (as the server does on arrival).
    pub async fn arrive(&self, raw: &[u8]) -> Vec<u8> {
        let v = self
            .auth
            .check_arrival(raw, None, "mx.example.com", "alice@example.com")
            .await;
        let end = find(raw, b"\r\n\r\n").unwrap() + 2;
        let mut out = v.auth_results.into_bytes();
        for (name, field) in header_fields(&raw[..end]) {
            let ours = format!(" {AUTHSERV_ID};");
            if !(name.eq_ignore_ascii_case("Authentication-Results")
                && field[name.len() + 1..].starts_with(ours.as_bytes()))
            {
                out.extend_from_slice(field);
            }
        }
        out.extend_from_slice(&raw[end..]);
        out
    }

    /// What a forwarder sends on: `raw` with an i=1 ARC set by mail-auth's sealer.
    pub fn forwarded(&self, raw: &[u8]) -> Vec<u8> {
        let pem = &self.fwd.private_pem;
        let key = match self.algorithm {
            // The deprecated PEM helper spares a rustls-pki-types dependency for one test key.
            #[allow(deprecated)]
            DkimAlgorithm::Rsa => DkimKey::Rsa(RsaKey::<Sha256>::from_rsa_pem(pem).unwrap()),
            DkimAlgorithm::Ed25519 => {
                DkimKey::Ed25519(Ed25519Key::from_pkcs8_maybe_unchecked_der(&pem_der(pem)).unwrap())
            }
        };
        let msg = AuthenticatedMessage::parse(raw).unwrap();
        let results = AuthenticationResults::new("fwd.example");
        let set = ArcSealer::from_key(key)
            .domain("fwd.example")
            .selector("fwd")
            .headers(["From", "To", "Subject", "Date", "Message-ID"])
            .seal(&msg, &results, &ArcOutput::default())
            .unwrap();
        [set.to_header().as_bytes(), raw].concat()
    }

    pub fn template(&self, footer: Option<&str>, stored: &[u8]) -> Template {
        let settings = ListSettings {
            display_name: "Announcements".into(),
            subject_prefix: Some("[announce]".into()),
            footer: footer.map(str::to_string),
            ..ListSettings::default()
        };
        let c = ListContext {
            dkim: self.list.clone(),
            ..ctx(None)
        };
        render(&list(LIST, settings), &c, stored).unwrap()
    }

    pub async fn dkim_passes(&self, msg: &[u8]) -> bool {
        let v = self.auth.verify_dkim(msg).await;
        !v.is_empty() && v.iter().all(|v| v.pass)
    }
}

fn pem_der(pem: &str) -> Vec<u8> {
    let b64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap()
}

pub fn members() -> Vec<Member> {
    vec![
        member("bob@example.net", Some("Bob"), &[]),
        member("carol@example.com", None, &[]),
        member("dave@example.org", Some(".Dave  Dot"), &[]),
    ]
}

/// The message as the receiver reassembles it from DATA.
pub fn received(t: &Template, m: &Member) -> Vec<u8> {
    let mut out = Vec::new();
    t.splice(m, &mut out);
    undot(&out)
}

/// The first field called `name`, as text.
pub fn field(msg: &[u8], name: &str) -> String {
    let end = find(msg, b"\r\n\r\n").unwrap() + 2;
    let (_, raw) = header_fields(&msg[..end])
        .into_iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .unwrap();
    String::from_utf8_lossy(raw).into_owned()
}

pub fn text(msg: &[u8]) -> String {
    String::from_utf8_lossy(msg).into_owned()
}

/// A forwarded post whose earlier set no longer verifies (Subject changed after sealing).
pub async fn broken_chain(w: &World) -> Vec<u8> {
    let forwarded = text(&w.forwarded(POST)).replacen("Weekly  report", "Weekly  rep0rt", 1);
    assert!(w.auth.verify_arc(forwarded.as_bytes()).await.is_err());
    w.arrive(forwarded.as_bytes()).await
}
