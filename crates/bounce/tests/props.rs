//! Hostile input: malformed bounces never panic the parser, whatever the bytes. (The cargo-fuzz
//! target `fuzz/fuzz_targets/bounce_parse.rs` explores further; this runs in the normal suite.)

use herald_bounce::{classify_message, BounceKind, MAX_DIAGNOSTIC_CHARS};
use proptest::prelude::*;

fn corpus_seed() -> Vec<u8> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    std::fs::read(dir.join("postfix_hard.eml")).expect("corpus")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let v = classify_message(&bytes);
        prop_assert!(v.diagnostic.chars().count() <= MAX_DIAGNOSTIC_CHARS);
    }

    #[test]
    fn mutated_reports_never_panic(
        cuts in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..32),
        truncate in any::<prop::sample::Index>(),
    ) {
        let mut raw = corpus_seed();
        for (at, byte) in cuts {
            let i = at.index(raw.len());
            raw[i] = byte;
        }
        let keep = truncate.index(raw.len() + 1);
        raw.truncate(keep);
        let _ = classify_message(&raw);
    }

    #[test]
    fn delivery_status_fields_are_bounded(lines in proptest::collection::vec("[A-Za-z-]{1,20}: [ -~]{0,80}", 0..400)) {
        let mut out = Vec::new();
        herald_bounce::parse_fields(&lines.join("\n\n"), &mut out);
        prop_assert!(out.len() <= herald_bounce::MAX_DSN_RECIPIENTS);
    }
}

#[test]
fn a_huge_report_is_read_only_up_to_its_limit() {
    let mut raw = corpus_seed();
    raw.extend(std::iter::repeat_n(b'x', 4 << 20));
    assert_eq!(classify_message(&raw).kind, BounceKind::Hard);
}
