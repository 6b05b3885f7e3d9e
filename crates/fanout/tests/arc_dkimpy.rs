//! ARC seals of spliced copies checked by dkimpy (`dkim.arc_verify`), a second verifier
//! independent of mail-auth; installed into a virtualenv on first use like tests/dkim.rs.

#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

mod arc_world;
mod common;

use arc_world::*;
use common::*;
use herald_auth::DkimAlgorithm;

/// dkimpy's arc_verify: `pass:<file>` must give cv=pass. `failseal:<file>` must stop at our
/// cv=fail seal ("chain terminated") with its AMS valid; the seal itself is checked with
/// dkimpy's canonicalization and RSA over its own set only (RFC 8617 §5.1.2), because
/// dkimpy's verifier checks every seal over all sets, unlike its own cv=fail signer.
const ARCVERIFY_SCRIPT: &str = r#"
import sys, re, base64, hashlib, dkim
from dkim.canonicalization import Relaxed
from dkim.crypto import RSASSA_PKCS1_v1_5_verify
from dkim.util import parse_tag_value
records = dict(l.split('\t', 1) for l in open(sys.argv[1]).read().splitlines())
def dns(name, timeout=5):
    r = records.get(name.decode().rstrip('.'))
    return r.encode() if r else None
def own_set_seal_valid(msg):
    headers, _ = dkim.rfc822_parse(msg)
    top = {}
    for name, value in headers:
        top.setdefault(name.lower(), value)
    seal = top[b'arc-seal']
    tags = parse_tag_value(seal)
    pk = dkim.load_pk_from_dns(tags[b's'] + b'._domainkey.' + tags[b'd'] + b'.', dns)[0]
    canon = Relaxed.canonicalize_headers([
        (b'ARC-Authentication-Results', top[b'arc-authentication-results']),
        (b'ARC-Message-Signature', top[b'arc-message-signature']),
        (b'ARC-Seal', dkim.RE_BTAG.sub(b'\\1', seal))])
    data = b''.join(x + b':' + (y.rstrip() if i == 2 else y) for i, (x, y) in enumerate(canon))
    sig = base64.b64decode(re.sub(rb'\s+', b'', tags[b'b']))
    return RSASSA_PKCS1_v1_5_verify(hashlib.sha256(data), sig, pk)
for arg in sys.argv[2:]:
    expect, path = arg.split(':', 1)
    msg = open(path, 'rb').read()
    cv, results, reason = dkim.arc_verify(msg, dnsfunc=dns)
    top = results[0] if results else {}
    if expect == 'pass':
        ok = cv == b'pass'
    else:
        ok = cv is None and top.get('cv') == b'fail' and top.get('ams-valid') and own_set_seal_valid(msg)
    if not ok:
        print('FAIL', arg, cv, reason, [(r['instance'], r.get('as-valid'), r.get('ams-valid')) for r in results])
        sys.exit(1)
print('OK', len(sys.argv) - 2)
"#;

/// dkimpy verifies ARC with rsa-sha256 only (its ARC_HASH_ALGORITHMS), so RSA keys here.
#[tokio::test]
async fn dkimpy_arcverify_checks_copies() {
    let Some(python) = dkimpy_or_skip() else {
        return;
    };
    let w = World::start(DkimAlgorithm::Rsa).await;
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("records.txt");
    let lines: Vec<String> = w.records.iter().map(|(n, r)| format!("{n}\t{r}")).collect();
    std::fs::write(&records, lines.join("\n")).unwrap();
    let mut args = vec![records.display().to_string()];
    let fresh = w.arrive(POST).await;
    let forwarded = w.arrive(&w.forwarded(POST)).await;
    let broken = broken_chain(&w).await;
    let cases = [
        ("pass", Some(FOOTER), &fresh),
        ("pass", None, &fresh),
        ("pass", Some(FOOTER), &forwarded),
        ("failseal", Some(FOOTER), &broken),
    ];
    for (n, (expect, footer, stored)) in cases.iter().enumerate() {
        let t = w.template(*footer, stored);
        for (i, m) in members().iter().enumerate() {
            let path = dir.path().join(format!("copy-{n}-{i}.eml"));
            std::fs::write(&path, received(&t, m)).unwrap();
            args.push(format!("{expect}:{}", path.display()));
        }
    }
    let out = std::process::Command::new(&python)
        .arg("-c")
        .arg(ARCVERIFY_SCRIPT)
        .args(&args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "dkimpy says {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    w.dns.shutdown().await;
}
