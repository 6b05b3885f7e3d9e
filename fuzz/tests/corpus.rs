//! Replays every committed fuzz input through the same checks the fuzzers run, so plain
//! `cargo test` covers them without libFuzzer: the seed corpora (`corpus/<target>/`) and the
//! crashes the fuzzers found (`regressions/<target>/`, one file per finding, kept forever).

use herald_fuzz::{check, TARGETS};
use std::fs;
use std::path::{Path, PathBuf};

/// The files under `fuzz/<dir>/<target>/`, sorted; none when the folder does not exist.
fn inputs(dir: &str, target: &str) -> Vec<PathBuf> {
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir).join(target);
    let Ok(entries) = fs::read_dir(&folder) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

/// Runs `target`'s check on every input; the panic message names the file that broke it.
fn replay(dir: &str, target: &str) -> usize {
    let files = inputs(dir, target);
    for file in &files {
        let data = fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let outcome = std::panic::catch_unwind(|| check(target, &data));
        match outcome {
            Ok(known) => assert!(known, "unknown target {target}"),
            Err(_) => panic!("{target} check failed on {}", file.display()),
        }
    }
    files.len()
}

#[test]
fn seed_corpora_pass_their_checks() {
    for target in TARGETS {
        let n = replay("corpus", target);
        assert!(n >= 3, "corpus/{target} holds {n} seeds; keep at least 3");
    }
}

#[test]
fn every_crash_found_by_fuzzing_stays_fixed() {
    for target in TARGETS {
        replay("regressions", target);
    }
}
