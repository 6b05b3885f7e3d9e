//! Golden files: `tests/golden/<case>/input.eml` + `case.json` → `expected.eml` (the exact DATA
//! payload, dot-stuffed). Run with `HERALD_BLESS=1` to rewrite the expected files after an
//! intended change, then review the diff.

#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

mod common;

use common::*;
use herald_fanout::render;
use herald_types::ListSettings;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Deserialize)]
struct Case {
    list: String,
    #[serde(default)]
    settings: ListSettings,
    member: MemberSpec,
    archive_url: Option<String>,
    /// Text the footer must show in a text/plain part of the copy.
    footer_contains: Option<String>,
    /// Fields that must appear exactly once in the copy's header.
    #[serde(default)]
    once: Vec<String>,
    /// Fields that must not appear in the copy's header.
    #[serde(default)]
    absent: Vec<String>,
}

#[derive(Deserialize)]
struct MemberSpec {
    address: String,
    name: Option<String>,
    #[serde(default)]
    fields: BTreeMap<String, String>,
}

#[test]
fn golden_cases() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let mut dirs: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    assert!(dirs.len() >= 8, "golden cases missing");
    let bless = std::env::var_os("HERALD_BLESS").is_some();
    for dir in dirs {
        run_case(&dir, bless);
    }
}

fn run_case(dir: &Path, bless: bool) {
    let name = dir.file_name().unwrap().to_string_lossy().into_owned();
    let input = std::fs::read(dir.join("input.eml")).unwrap();
    let case: Case =
        serde_json::from_slice(&std::fs::read(dir.join("case.json")).unwrap()).unwrap();
    let list = list(&case.list, case.settings);
    let fields: Vec<(&str, &str)> = case
        .member
        .fields
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let member = member(&case.member.address, case.member.name.as_deref(), &fields);
    let template = render(&list, &ctx(case.archive_url.as_deref()), &input)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    // A reused, dirty buffer must give the same copy.
    let mut out = b"leftover from the previous copy".to_vec();
    template.splice(&member, &mut out);
    check_wire(&out);
    check_structure(&name, &input, &out, case.footer_contains.as_deref());
    let names = header_names(&out);
    for field in &case.once {
        let n = names
            .iter()
            .filter(|n| n.eq_ignore_ascii_case(field))
            .count();
        assert_eq!(n, 1, "{name}: {field} appears {n} times");
    }
    for field in &case.absent {
        assert!(
            !names.iter().any(|n| n.eq_ignore_ascii_case(field)),
            "{name}: {field} present"
        );
    }
    let expected_path = dir.join("expected.eml");
    if bless {
        std::fs::write(&expected_path, &out).unwrap();
        return;
    }
    let expected = std::fs::read(&expected_path)
        .unwrap_or_else(|_| panic!("{name}: no expected.eml (run with HERALD_BLESS=1)"));
    assert!(
        out == expected,
        "{name}: copy differs from expected.eml\n--- got ---\n{}\n--- expected ---\n{}",
        String::from_utf8_lossy(&out),
        String::from_utf8_lossy(&expected)
    );
}
