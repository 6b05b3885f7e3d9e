//! The ARC sealer on its own: field layout, the rules on instance and cv, and both signatures
//! checked with ring against the public key, over canonical input rebuilt here from the
//! fields (so the selection and order of what is signed are checked, not just the crypto).
//! End-to-end verification by mail-auth and dkimpy is in crates/fanout/tests/arc.rs.

#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

use base64::Engine;
use herald_auth::arc::{instance, seal};
use herald_auth::dkim::{generate, header_fields, relaxed_header};
use herald_auth::{ArcCv, ArcError, ArcHop, DkimAlgorithm, DkimError, DkimSigner};
use sha2::Digest;
use std::collections::HashMap;

const BH: [u8; 32] = [7; 32];
const NOW: u64 = 1_800_000_000;
const AR: &str = "herald.test;\r\n\tdkim=pass header.d=example.com;\r\n\tarc=pass;\r\n\tdmarc=pass";

const HEADER: &[u8] =
    b"DKIM-Signature: v=1; a=ed25519-sha256; d=lists.example.org; s=sel;\r\n b=AAAA\r\n\
From: Alice <alice@example.com>\r\nTo: \"Bob\" <bob@example.net>\r\nSubject:  [announce]  Hello\r\n\
 world\r\nX-Other: not signed\r\nDKIM-Signature: v=1; d=example.com; b=BBBB\r\n";

/// An earlier hop's set; only its bytes matter here (the seal covers them as they are).
const SET1: &[u8] = b"ARC-Seal: i=1; a=rsa-sha256; cv=none; d=fwd.example; s=x;\r\n b=CCCC\r\n\
ARC-Message-Signature: i=1; a=rsa-sha256; d=fwd.example; s=x; h=from; bh=DDDD; b=EEEE\r\n\
ARC-Authentication-Results: i=1; fwd.example; spf=pass\r\n";

struct Key {
    signer: DkimSigner,
    public: Vec<u8>,
}

fn key() -> Key {
    let k = generate(DkimAlgorithm::Ed25519).unwrap();
    let p = k.dns_txt.split("p=").nth(1).unwrap();
    Key {
        signer: DkimSigner::from_pem(
            "lists.example.org",
            "sel",
            DkimAlgorithm::Ed25519,
            k.private_pem.as_bytes(),
        )
        .unwrap(),
        public: base64::engine::general_purpose::STANDARD.decode(p).unwrap(),
    }
}

fn hop(instance: u32, cv: ArcCv) -> ArcHop {
    ArcHop {
        instance,
        cv,
        auth_results: format!(" {AR}\r\n"),
    }
}

/// The three new fields, in the order returned.
fn split(set: &[u8]) -> Vec<Vec<u8>> {
    header_fields(set)
        .into_iter()
        .map(|(_, raw)| raw.to_vec())
        .collect()
}

/// A signature field with its `b=` value removed, and the value (base64, unfolded).
fn without_b(field: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let text = String::from_utf8(field.to_vec()).unwrap();
    let at = text.rfind(" b=").unwrap() + 3;
    let value: String = text[at..].chars().filter(|c| !c.is_whitespace()).collect();
    let mut stripped = text.as_bytes()[..at].to_vec();
    stripped.extend_from_slice(b"\r\n");
    let sig = base64::engine::general_purpose::STANDARD
        .decode(value)
        .unwrap();
    (stripped, sig)
}

/// Relaxed canonical `fields`, then `own` (its b= emptied) without the final CRLF; checks
/// `own`'s Ed25519 signature over that with ring.
fn verifies(key: &Key, fields: &[&[u8]], own: &[u8]) -> bool {
    let mut canonical = Vec::new();
    for f in fields {
        assert!(relaxed_header(f, &mut canonical));
    }
    let (stripped, sig) = without_b(own);
    assert!(relaxed_header(&stripped, &mut canonical));
    canonical.truncate(canonical.len() - 2);
    // ed25519-sha256 signs the SHA-256 digest of the canonical input (RFC 8463 §3).
    let digest = sha2::Sha256::digest(&canonical);
    ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, &key.public)
        .verify(&digest, &sig)
        .is_ok()
}

/// The fields an AMS's `h=` selects from `header`, bottom-up per name (RFC 6376 §5.4.2).
fn selected<'h>(header: &'h [u8], ams: &[u8]) -> Vec<&'h [u8]> {
    let text = String::from_utf8(ams.to_vec()).unwrap();
    let h = text.split("h=").nth(1).unwrap().split(';').next().unwrap();
    let fields = header_fields(header);
    let mut used: HashMap<String, usize> = HashMap::new();
    let mut out = Vec::new();
    for name in h.split(':').map(str::trim) {
        let n = used.entry(name.to_string()).or_default();
        let found = fields
            .iter()
            .rev()
            .filter(|(f, _)| f.eq_ignore_ascii_case(name))
            .nth(*n);
        if let Some((_, raw)) = found {
            out.push(*raw);
        }
        *n += 1;
    }
    out
}

#[test]
fn first_instance_layout_and_signatures() {
    let key = key();
    let set = seal(&key.signer, HEADER, &BH, NOW, &hop(1, ArcCv::None)).unwrap();
    let f = split(&set);
    assert_eq!(f.len(), 3, "{}", String::from_utf8_lossy(&set));
    let (seal_f, ams, aar) = (&f[0], &f[1], &f[2]);
    let text = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
    assert!(text(seal_f).starts_with(&format!(
        "ARC-Seal: i=1; a=ed25519-sha256; t={NOW}; cv=none; d=lists.example.org; s=sel;\r\n b="
    )));
    assert!(text(ams).starts_with("ARC-Message-Signature: i=1; a=ed25519-sha256; c=relaxed/relaxed; d=lists.example.org; s=sel;\r\n"));
    assert!(text(ams).contains(&format!(
        "bh={};",
        base64::engine::general_purpose::STANDARD.encode(BH)
    )));
    assert_eq!(
        text(aar),
        format!("ARC-Authentication-Results: i=1; {AR}\r\n")
    );
    assert!(!text(ams).contains("v=1"));
    for f in &f {
        assert_eq!(instance(f), Some(1));
    }
    // Same fields as DKIM (From over-signed) plus both DKIM-Signatures, ours last (topmost).
    let h = text(ams)
        .split("h=")
        .nth(1)
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    assert_eq!(h, "from:to:subject:dkim-signature:dkim-signature:from");
    let signed = selected(HEADER, ams);
    assert_eq!(signed.len(), 5);
    assert!(signed[4].starts_with(b"DKIM-Signature: v=1; a=ed25519"));
    assert!(verifies(&key, &signed, ams), "AMS signature");
    assert!(verifies(&key, &[aar, ams], seal_f), "AS signature");
    assert!(!verifies(&key, &[ams, aar], seal_f), "order matters");
}

#[test]
fn later_instance_seals_the_earlier_sets_in_order() {
    let key = key();
    let header = [HEADER, SET1].concat();
    let set = seal(&key.signer, &header, &BH, NOW, &hop(2, ArcCv::Pass)).unwrap();
    let f = split(&set);
    assert!(String::from_utf8_lossy(&f[0]).contains("i=2; a=ed25519-sha256;"));
    assert!(String::from_utf8_lossy(&f[0]).contains("cv=pass"));
    let earlier = split(SET1);
    let (aar1, ams1, as1) = (&earlier[2], &earlier[1], &earlier[0]);
    assert!(verifies(&key, &[aar1, ams1, as1, &f[2], &f[1]], &f[0]));
    assert!(!verifies(&key, &[&f[2], &f[1]], &f[0]));
    // The AMS never signs ARC fields (RFC 8617 §4.1.2 forbids ARC-Seal).
    assert!(selected(&header, &f[1])
        .iter()
        .all(|raw| !raw.starts_with(b"ARC-")));
    assert!(verifies(&key, &selected(&header, &f[1]), &f[1]));
}

#[test]
fn cv_fail_seal_covers_only_its_own_set() {
    let key = key();
    // A broken earlier chain: a lone seal, no AMS or AAR for i=1.
    let header = [HEADER, b"ARC-Seal: i=1; cv=none; b=x\r\n".as_slice()].concat();
    assert!(matches!(
        seal(&key.signer, &header, &BH, NOW, &hop(2, ArcCv::Pass)),
        Err(ArcError::BrokenChain(1))
    ));
    let set = seal(&key.signer, &header, &BH, NOW, &hop(2, ArcCv::Fail)).unwrap();
    let f = split(&set);
    assert!(String::from_utf8_lossy(&f[0]).contains("i=2; a=ed25519-sha256;"));
    assert!(String::from_utf8_lossy(&f[0]).contains("cv=fail"));
    assert!(verifies(&key, &[&f[2], &f[1]], &f[0]));
    // Garbage seals without an instance: i=1, cv=fail is allowed and signs its set alone.
    let set = seal(&key.signer, HEADER, &BH, NOW, &hop(1, ArcCv::Fail)).unwrap();
    let f = split(&set);
    assert!(verifies(&key, &[&f[2], &f[1]], &f[0]));
}

#[test]
fn instance_cv_and_payload_rules() {
    let key = key();
    let fails = |h: ArcHop| seal(&key.signer, HEADER, &BH, NOW, &h).unwrap_err();
    assert!(matches!(fails(hop(0, ArcCv::None)), ArcError::Instance(0)));
    assert!(matches!(
        fails(hop(51, ArcCv::Pass)),
        ArcError::Instance(51)
    ));
    assert!(matches!(
        fails(hop(2, ArcCv::None)),
        ArcError::Cv { instance: 2, .. }
    ));
    assert!(matches!(
        fails(hop(1, ArcCv::Pass)),
        ArcError::Cv { instance: 1, .. }
    ));
    let mut injected = hop(1, ArcCv::None);
    injected.auth_results = "herald.test; none\r\nX-Injected: 1".into();
    assert!(matches!(fails(injected), ArcError::AuthResults));
    let no_from = seal(
        &key.signer,
        b"Subject: x\r\n",
        &BH,
        NOW,
        &hop(1, ArcCv::None),
    );
    assert!(matches!(no_from, Err(ArcError::Dkim(DkimError::NoFrom))));
    // Fifty is the last instance that can be sealed.
    let mut chain = HEADER.to_vec();
    for i in 1..50 {
        let s = String::from_utf8(SET1.to_vec()).unwrap();
        chain.extend_from_slice(s.replace("i=1;", &format!("i={i};")).as_bytes());
    }
    assert!(seal(&key.signer, &chain, &BH, NOW, &hop(50, ArcCv::Pass)).is_ok());
}
