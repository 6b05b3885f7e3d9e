//! The bounce corpus: one message per real-world format (Postfix, Exim, sendmail, Exchange,
//! Gmail, Yahoo, qmail, vacation replies), written from the published formats, each with the
//! classification and the failed recipient the report names (`tests/corpus/EXPECTED`).

use herald_bounce::{classify_message, BounceKind};
use std::path::Path;

#[test]
fn every_corpus_message_classifies_as_expected() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let expected = std::fs::read_to_string(dir.join("EXPECTED")).expect("EXPECTED");
    let mut checked = 0;
    let mut failures = Vec::new();
    for line in expected
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let cols: Vec<&str> = line.split_whitespace().collect();
        let [file, kind, rcpt] = cols[..] else {
            panic!("bad EXPECTED line: {line}")
        };
        let raw = std::fs::read(dir.join(file)).expect(file);
        let v = classify_message(&raw);
        let want_kind = BounceKind::parse(kind).expect("kind");
        let got_rcpt = v
            .recipient
            .as_ref()
            .map_or("-".to_string(), |a| a.to_string());
        if v.kind != want_kind || got_rcpt != rcpt {
            failures.push(format!(
                "{file}: want {kind} {rcpt}, got {} {got_rcpt} ({:?})",
                v.kind.as_str(),
                v.diagnostic
            ));
        }
        checked += 1;
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(checked >= 18, "only {checked} corpus entries");
}
