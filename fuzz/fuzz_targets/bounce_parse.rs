//! Fuzzes the bounce parser: any bytes mailed to `-bounces` must classify without panicking
//! and with a bounded diagnostic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let v = herald_bounce::classify_message(data);
    assert!(v.diagnostic.chars().count() <= herald_bounce::MAX_DIAGNOSTIC_CHARS);
    let mut out = Vec::new();
    herald_bounce::parse_fields(&String::from_utf8_lossy(data), &mut out);
    assert!(out.len() <= herald_bounce::MAX_DSN_RECIPIENTS);
});
