//! ARC seals of spliced copies (RFC 8617), checked by an independent verifier: mail-auth's
//! (`Authenticator::verify_arc`, public keys served by the sim DNS server). Posts are first
//! run through `check_arrival` and stored as the server stores them, our Authentication-Results
//! on top; an earlier hop's set is made by mail-auth's own `ArcSealer` (see `arc_world`).
//! Hostile input: tests/arc_hostile.rs; dkimpy cross-check: tests/arc_dkimpy.rs.

#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

mod arc_world;
mod common;

use arc_world::*;
use common::*;
use herald_auth::dkim::header_fields;
use herald_auth::{DkimAlgorithm, DkimKeys, DkimSigner};
use herald_fanout::{render, ListContext};
use herald_types::ListSettings;

#[tokio::test]
async fn copies_verify_for_rsa_and_ed25519_with_and_without_footer() {
    for algorithm in [DkimAlgorithm::Rsa, DkimAlgorithm::Ed25519] {
        let w = World::start(algorithm).await;
        let stored = w.arrive(POST).await;
        for footer in [Some(FOOTER), None] {
            let t = w.template(footer, &stored);
            assert!(t.is_signed() && t.is_sealed());
            for m in members() {
                let msg = received(&t, &m);
                let names = header_names(&msg);
                assert_eq!(
                    names[..5],
                    [
                        "ARC-Seal",
                        "ARC-Message-Signature",
                        "ARC-Authentication-Results",
                        "DKIM-Signature",
                        "Authentication-Results"
                    ]
                );
                let seal = field(&msg, "ARC-Seal");
                assert!(seal.contains("i=1;") && seal.contains("cv=none;"), "{seal}");
                let aar = field(&msg, "ARC-Authentication-Results");
                assert!(
                    aar.starts_with(&format!("ARC-Authentication-Results: i=1; {AUTHSERV_ID};"))
                );
                if let Err(e) = w.auth.verify_arc(&msg).await {
                    panic!(
                        "{algorithm:?}, footer {}: {e}\n{}",
                        footer.is_some(),
                        text(&msg)
                    );
                }
                assert!(w.dkim_passes(&msg).await, "{}", text(&msg));
            }
            assert_eq!((t.sign_failures(), t.seal_failures()), (0, 0));
        }
        w.dns.shutdown().await;
    }
}

#[tokio::test]
async fn arrival_results_always_carry_arc() {
    let w = World::start(DkimAlgorithm::Ed25519).await;
    for peer in [None, Some("127.0.0.9".parse().unwrap())] {
        let v = w
            .auth
            .check_arrival(POST, peer, "mx.example.com", "alice@example.com")
            .await;
        let ar = v.auth_results;
        assert!(ar.starts_with(&format!("Authentication-Results: {AUTHSERV_ID};\r\n\t")));
        assert_eq!(header_fields(ar.as_bytes()).len(), 1, "{ar}");
        assert!(ar.ends_with("\r\n") && ar.contains("\tarc=none") && ar.contains("\tdmarc="));
        assert_eq!(ar.contains("\tspf="), peer.is_some(), "{ar}");
    }
    w.dns.shutdown().await;
}

#[tokio::test]
async fn earlier_hop_gets_the_next_instance_and_the_chain_verifies() {
    let w = World::start(DkimAlgorithm::Ed25519).await;
    let forwarded = w.forwarded(POST);
    w.auth.verify_arc(&forwarded).await.unwrap();
    let stored = w.arrive(&forwarded).await;
    assert!(text(&stored).contains("\tarc=pass"), "{}", text(&stored));
    let first = received(&w.template(Some(FOOTER), &stored), &members()[0]);
    let seal = field(&first, "ARC-Seal");
    assert!(seal.contains("i=2;") && seal.contains("cv=pass;"), "{seal}");
    w.auth.verify_arc(&first).await.unwrap();
    assert!(w.dkim_passes(&first).await);

    // Our copy posted to a list again (what the next Herald would see): i=3, still valid.
    let stored = w.arrive(&first).await;
    let second = received(&w.template(None, &stored), &members()[1]);
    let seal = field(&second, "ARC-Seal");
    assert!(seal.contains("i=3;") && seal.contains("cv=pass;"), "{seal}");
    let seals = header_names(&second)
        .iter()
        .filter(|n| *n == "ARC-Seal")
        .count();
    assert_eq!(seals, 3);
    w.auth.verify_arc(&second).await.unwrap();
    w.dns.shutdown().await;
}

#[tokio::test]
async fn altered_copies_fail_the_chain() {
    let w = World::start(DkimAlgorithm::Ed25519).await;
    let stored = w.arrive(&w.forwarded(POST)).await;
    let copy = text(&received(&w.template(Some(FOOTER), &stored), &members()[0]));
    w.auth.verify_arc(copy.as_bytes()).await.unwrap();
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
        (
            "ARC-Authentication-Results: i=2; herald.test;",
            "ARC-Authentication-Results: i=2; herald.test; spf=pass;",
        ),
        (
            "ARC-Authentication-Results: i=1; fwd.example",
            "ARC-Authentication-Results: i=1; fwd.example; spf=pass",
        ),
    ] {
        assert!(copy.contains(from), "{from}");
        let altered = copy.replacen(from, to, 1);
        assert!(
            w.auth.verify_arc(altered.as_bytes()).await.is_err(),
            "{from}"
        );
    }
    // A chain with a field taken out is broken too.
    let cut = copy.replacen(&field(copy.as_bytes(), "ARC-Seal"), "", 1);
    assert!(w.auth.verify_arc(cut.as_bytes()).await.is_err());
    w.dns.shutdown().await;
}

#[tokio::test]
async fn broken_incoming_chain_seals_cv_fail() {
    let w = World::start(DkimAlgorithm::Ed25519).await;
    let stored = broken_chain(&w).await;
    assert!(text(&stored).contains("\tarc=fail"), "{}", text(&stored));
    let t = w.template(Some(FOOTER), &stored);
    for m in members() {
        let copy = received(&t, &m);
        let seal = field(&copy, "ARC-Seal");
        assert!(seal.contains("i=2;") && seal.contains("cv=fail;"), "{seal}");
        // A failed chain stays failed for every later verifier; the copy is still signed.
        assert!(w.auth.verify_arc(&copy).await.is_err());
        assert!(w.dkim_passes(&copy).await);
    }
    assert_eq!((t.sign_failures(), t.seal_failures()), (0, 0));
    w.dns.shutdown().await;
}

#[tokio::test]
async fn no_seal_without_trusted_results_or_key() {
    let w = World::start(DkimAlgorithm::Ed25519).await;
    let foreign = [
        b"Authentication-Results: mx.other.example; arc=pass\r\n".as_slice(),
        POST,
    ]
    .concat();
    let t = w.template(None, &foreign);
    assert!(t.is_signed() && !t.is_sealed());
    assert_eq!(
        header_names(&received(&t, &members()[0]))[0],
        "DKIM-Signature"
    );
    // Our results, but no key for the list domain: neither signed nor sealed.
    let stored = w.arrive(POST).await;
    let t = render(&list(LIST, ListSettings::default()), &ctx(None), &stored).unwrap();
    assert!(!t.is_signed() && !t.is_sealed());
    // An empty authserv-id trusts nothing.
    let c = ListContext {
        dkim: w.list.clone(),
        authserv_id: String::new(),
        ..ctx(None)
    };
    let t = render(&list(LIST, ListSettings::default()), &c, &stored).unwrap();
    assert!(t.is_signed() && !t.is_sealed());
    // Mail Herald writes itself is never sealed.
    let c = ListContext {
        dkim: w.list.clone(),
        ..ctx(None)
    };
    let t = herald_fanout::verbatim(&addr(LIST), &c, &stored);
    assert!(t.is_signed() && !t.is_sealed());
    // A key configured with `arc = false` signs but does not seal.
    let signer = DkimSigner::from_pem(
        "lists.example.org",
        "sel1",
        DkimAlgorithm::Ed25519,
        w.list_pem.as_bytes(),
    )
    .unwrap()
    .with_arc(false);
    let c = ListContext {
        dkim: DkimKeys::new([signer]),
        ..ctx(None)
    };
    let t = render(&list(LIST, ListSettings::default()), &c, &stored).unwrap();
    assert!(t.is_signed() && !t.is_sealed());
    w.dns.shutdown().await;
}
