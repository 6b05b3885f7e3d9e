//! Hostile ARC input: garbage ARC-Seal, ARC-Message-Signature and Authentication-Results
//! fields (huge or missing instances, non-UTF-8, overlong lines) never panic, and every copy
//! still goes out DKIM-signed; seal failures are counted, not fatal.

#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

mod arc_world;
mod common;

use arc_world::*;
use common::*;
use herald_auth::dkim::generate;
use herald_auth::{DkimAlgorithm, DkimKeys, DkimSigner};
use herald_fanout::{render, ListContext};
use herald_types::ListSettings;
use proptest::prelude::*;

#[tokio::test]
async fn hostile_arc_fields_never_panic_and_copies_go_out_signed() {
    let w = World::start(DkimAlgorithm::Ed25519).await;
    let ours = format!("Authentication-Results: {AUTHSERV_ID}; arc=pass\r\n").into_bytes();
    let with = |rest: &[u8]| [ours.as_slice(), rest].concat();
    // (stored post header, sealed?, seal failures per copy)
    let cases: Vec<(Vec<u8>, bool, u64)> = vec![
        // Instances beyond 50 (huge ones saturate): no seal.
        (with(b"ARC-Seal: i=999; cv=pass\r\n"), false, 0),
        (
            with(b"ARC-Seal: i=99999999999999999999999; cv=pass\r\n"),
            false,
            0,
        ),
        (
            with(b"ARC-Seal: i=50; cv=pass\r\nARC-Seal: i=1\r\n"),
            false,
            0,
        ),
        // Seals without a usable instance: a broken chain, sealed at i=1 with cv=fail.
        (with(b"ARC-Seal: cv=pass; b=\r\n"), true, 0),
        (with(b"ARC-Seal:\r\n"), true, 0),
        (with(b"ARC-Seal: i=0\r\n"), true, 0),
        (with(b"ARC-Seal: i=\xff\xfe; cv=\x80\r\n"), true, 0),
        // Only ARC-Seal fields number the chain.
        (
            with(b"ARC-Message-Signature: i=4294967296\r\nARC-Authentication-Results: i=\r\n"),
            true,
            0,
        ),
        // Claimed to pass, but the earlier set is incomplete: each seal fails and is counted.
        (with(b"ARC-Seal: i=1; cv=none\r\n"), true, 1),
        // Our results unreadable (not UTF-8): no seal. Empty: sealed. Too long a line for the
        // AAR: each seal fails and is counted.
        (
            b"Authentication-Results: herald.test; arc=pass \xff\r\n".to_vec(),
            false,
            0,
        ),
        (
            b"Authentication-Results: herald.test;\r\n".to_vec(),
            true,
            0,
        ),
        (
            format!(
                "Authentication-Results: {AUTHSERV_ID}; dkim=none ({})\r\n",
                "x".repeat(990)
            )
            .into_bytes(),
            true,
            1,
        ),
    ];
    for (header, sealed, failures) in cases {
        let post = [header.as_slice(), POST].concat();
        let t = w.template(Some(FOOTER), &post);
        let label = text(&header);
        assert_eq!(t.is_sealed(), sealed, "{label}");
        for m in members() {
            let copy = received(&t, &m);
            let first = if sealed && failures == 0 {
                "ARC-Seal"
            } else {
                "DKIM-Signature"
            };
            assert_eq!(header_names(&copy)[0], first, "{label}");
            assert!(w.dkim_passes(&copy).await, "{label}");
        }
        assert_eq!(t.sign_failures(), 0, "{label}");
        assert_eq!(
            t.seal_failures(),
            failures * members().len() as u64,
            "{label}"
        );
    }
    w.dns.shutdown().await;
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Any bytes in the fields ARC reads (one line each): rendering and splicing do not panic
    /// and every copy is DKIM-signed.
    #[test]
    fn arbitrary_arc_fields_never_panic(
        ar in proptest::collection::vec(any::<u8>(), 0..120),
        seal in proptest::collection::vec(any::<u8>(), 0..120),
        ams in proptest::collection::vec(any::<u8>(), 0..120),
    ) {
        static KEYS: std::sync::OnceLock<DkimKeys> = std::sync::OnceLock::new();
        let keys = KEYS.get_or_init(|| {
            let k = generate(DkimAlgorithm::Ed25519).unwrap();
            DkimKeys::new([DkimSigner::from_pem("lists.example.org", "s", DkimAlgorithm::Ed25519, k.private_pem.as_bytes()).unwrap()])
        });
        let line = |v: &[u8]| -> Vec<u8> { v.iter().map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }).collect() };
        let post = [
            format!("Authentication-Results: {AUTHSERV_ID};").as_bytes(), &line(&ar), b"\r\n",
            b"ARC-Seal:", &line(&seal), b"\r\n",
            b"ARC-Message-Signature:", &line(&ams), b"\r\n",
            POST,
        ].concat();
        let c = ListContext { dkim: keys.clone(), ..ctx(None) };
        let t = render(&list(LIST, ListSettings::default()), &c, &post).unwrap();
        let mut out = Vec::new();
        t.splice(&members()[0], &mut out);
        prop_assert!(out.starts_with(b"ARC-Seal: ") || out.starts_with(b"DKIM-Signature: "));
        prop_assert_eq!(t.sign_failures(), 0);
    }
}
