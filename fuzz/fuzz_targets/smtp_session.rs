//! libFuzzer target: the SMTP session: a hostile peer's commands and DATA in arbitrary chunks.
//!
//! Place in the flow: none; `.ci/fuzz.sh` builds this with SanitizerCoverage on stable Rust and
//! runs it for a bounded time. The properties are in `herald_fuzz::smtp_session`, shared with the
//! corpus replay in `cargo test`.
//!
//! SECURITY: the input is arbitrary bytes; a panic in the check is a finding.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    herald_fuzz::smtp_session::check(data);
});
