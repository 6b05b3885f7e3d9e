//! The signing pool (`[delivery] signing_threads`) end to end: a post is
//! submitted over SMTP to a list whose domain has a DKIM key, fanned out with per-member
//! footers to the simulated world over real sockets, and every copy the receivers got is
//! checked the way a receiver checks it (mail-auth's verifier, the key from the world's DNS):
//! the DKIM signature and the ARC set made on the pool's threads verify, and `/metrics` shows
//! the pool — not the delivery workers — signed them. With `signing_threads = 0` the same
//! copies are signed inline and verify too.

use crate::support;

use herald_auth::{Authenticator, DkimAlgorithm};
use herald_sim::{Profile, World};
use serde_json::json;
use std::time::Duration;
use support::*;

const LIST: &str = "signed@lists.test";
const DOMAINS: usize = 3;
const MEMBERS: usize = 30;

/// Fans one post out to [`MEMBERS`] members with `signing_threads`, signing with a fresh
/// `algorithm` key (ARC-sealing too when `arc`); checks every copy verifies and returns
/// (copies signed in the pool, copies signed inline) from `/metrics`.
async fn fan_out_signed(algorithm: DkimAlgorithm, arc: bool, signing_threads: usize) -> (u64, u64) {
    let world = World::start(world_config(&vec![Profile::Normal; DOMAINS], true))
        .await
        .expect("world");
    let key = herald_auth::dkim::generate(algorithm).expect("key");
    world
        .dns()
        .update_zone(|z| {
            z.add_txt("s1._domainkey.lists.test", &key.dns_txt);
        })
        .expect("zone");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = server_config(&world, dir.path().join("data"));
    let key_file = dir.path().join("lists.test.pem");
    std::fs::write(&key_file, &key.private_pem).expect("write key");
    config.dkim.insert(
        "lists.test".into(),
        herald_server::config::DkimDomainConfig {
            key: herald_server::config::DkimKeyConfig {
                selector: "s1".into(),
                key_file,
                algorithm,
            },
            arc,
            second: None,
        },
    );
    config.delivery.signing_threads = Some(signing_threads);
    let server = TestServer::start(config).await;
    let api = server.api.clone();
    create_list(
        &api,
        LIST,
        json!({
            "posting_policy": "anyone",
            "personalize": true,
            "footer": "--\nFor {{name}} <{{email}}>: {{unsubscribe_url}}\n",
        }),
    )
    .await;
    let (status, report) = http_bytes(
        &format!("{api}/api/v1/lists/{LIST}/import"),
        members_csv(MEMBERS, DOMAINS).into_bytes(),
    )
    .await;
    assert_eq!(status, 200, "{report}");

    // Over SMTP, so the stored post carries our Authentication-Results and copies are sealed.
    let msg = format!(
        "From: Alice <alice@outside.test>\r\nTo: {LIST}\r\nSubject: signed\r\n\
         Message-ID: <signed-1@outside.test>\r\n\r\nHello  all, \t\r\n.a line with a dot\r\n"
    );
    let (mut c, _) = Smtp::connect(server.smtp).await;
    c.cmd("EHLO client.test").await;
    let r = c
        .send_mail("alice@outside.test", &[LIST], msg.as_bytes())
        .await;
    c.cmd("QUIT").await;
    assert!(r.starts_with("250"), "{r}");
    let post = wait_complete(&api, &queued_id(&r), Duration::from_secs(60)).await;
    assert_eq!(post.delivered, MEMBERS as u64, "{post:?}");

    let receiver = Authenticator::new(&[world.dns_addr()], Duration::from_secs(2), 2, "mx.test")
        .expect("authenticator");
    let snap = world.recorder().snapshot();
    assert_eq!(snap.accepted, MEMBERS as u64);
    assert_eq!(snap.duplicates, 0);
    for copy in &snap.copies {
        let raw = copy.message.as_deref().expect("kept");
        let text = String::from_utf8_lossy(raw);
        // Personalized: each copy is the member's own (its footer names the recipient).
        assert!(text.contains(&format!("<{}>:", copy.recipient)), "{text}");
        let verdicts = receiver.verify_dkim(raw).await;
        assert!(
            verdicts.iter().any(|v| v.pass && v.domain == "lists.test"),
            "{verdicts:?}\n{text}"
        );
        assert_eq!(text.contains("ARC-Seal: i=1;"), arc, "{text}");
        if arc {
            receiver
                .verify_arc(raw)
                .await
                .unwrap_or_else(|e| panic!("ARC: {e}\n{text}"));
        }
    }
    let pooled = metric(&api, "herald_signed_copies_total{where=\"pool\"}").await;
    let inline = metric(&api, "herald_signed_copies_total{where=\"inline\"}").await;
    let failed = metric(
        &api,
        "herald_copy_auth_total{step=\"dkim\",result=\"failed\"}",
    )
    .await;
    assert_eq!(failed, 0);
    server.stop().await;
    world.shutdown().await;
    (pooled, inline)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_signed_and_sealed_in_the_pool_verify() {
    let (pooled, inline) = fan_out_signed(DkimAlgorithm::Rsa, true, 2).await;
    assert_eq!((pooled, inline), (MEMBERS as u64, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ed25519_copies_signed_in_the_pool_verify() {
    let (pooled, inline) = fan_out_signed(DkimAlgorithm::Ed25519, false, 3).await;
    assert_eq!((pooled, inline), (MEMBERS as u64, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_signing_is_still_selectable_and_verifies() {
    let (pooled, inline) = fan_out_signed(DkimAlgorithm::Rsa, false, 0).await;
    assert_eq!((pooled, inline), (0, MEMBERS as u64));
}
