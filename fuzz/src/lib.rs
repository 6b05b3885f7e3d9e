//! The invariants Herald's fuzz targets check, as plain functions.
//!
//! Place in the flow: none at run time. The libFuzzer binaries in `fuzz_targets/` call these
//! on every generated input; `tests/corpus.rs` replays the committed corpora (`corpus/<target>/`)
//! and every crash the fuzzers found (`regressions/<target>/`) through them in plain
//! `cargo test`, so a finding stays fixed without the fuzzer.
//!
//! Invariants: each `check` returns normally for every input, or panics with a message that
//! names the broken property. A panic is the failure report here (that is how libFuzzer sees a
//! finding), so these functions use `assert!` on purpose.
//!
//! SECURITY: the inputs are arbitrary bytes standing in for a hostile peer (SMTP), a hostile
//! poster and member (the footer splice) and a hostile bounce sender (DSN parser).

pub mod dsn;
pub mod footer_splice;
pub mod smtp_session;

/// The committed inputs live beside this crate: `corpus/<target>/` and `regressions/<target>/`.
pub const TARGETS: [&str; 3] = ["smtp_session", "footer_splice", "bounce_parse"];

/// Runs the check of `target` (one of [`TARGETS`]) on `data`; `false` for an unknown target.
pub fn check(target: &str, data: &[u8]) -> bool {
    match target {
        "smtp_session" => smtp_session::check(data),
        "footer_splice" => footer_splice::check(data),
        "bounce_parse" => dsn::check(data),
        _ => return false,
    }
    true
}

/// Asserts that `data` uses CRLF line endings only: every LF follows a CR, every CR precedes
/// an LF. `what` names the data in the panic message.
pub fn assert_crlf_only(data: &[u8], what: &str) {
    for (i, &b) in data.iter().enumerate() {
        if b == b'\n' {
            assert!(i > 0 && data[i - 1] == b'\r', "{what}: bare LF at {i}");
        }
        if b == b'\r' {
            assert_eq!(data.get(i + 1), Some(&b'\n'), "{what}: bare CR at {i}");
        }
    }
}
