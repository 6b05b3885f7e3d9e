//! DKIM signing cost at fan-out: splice-only vs splice+sign, per copy, on one core.
//!
//! Run: `cargo run --release -p herald-fanout --example sign_bench`
//! A ~10 KB post, a personalized footer (so each copy hashes its own tail from the saved
//! prefix state) and 1,000 distinct members; the median of 5 runs. Reports ns/copy and the
//! share of a splice+sign copy that signing costs, for RSA-2048 and Ed25519, and the
//! no-footer case where every copy shares one body hash.

mod common;

use common::members;
use herald_auth::dkim::generate;
use herald_auth::{DkimAlgorithm, DkimKeys, DkimSigner};
use herald_fanout::Template;
use herald_types::Member;
use std::hint::black_box;
use std::time::Instant;

const RUNS: usize = 5;

fn template(footer: Option<&str>, dkim: DkimKeys) -> Template {
    common::template(footer, true, None, dkim)
}

fn keys(algorithm: DkimAlgorithm) -> DkimKeys {
    let k = generate(algorithm).expect("keygen");
    let s = DkimSigner::from_pem(
        "lists.example.org",
        "b",
        algorithm,
        k.private_pem.as_bytes(),
    )
    .expect("key loads");
    DkimKeys::new([s])
}

/// Median ns/copy.
fn bench(t: &Template, members: &[Member], copies: usize) -> f64 {
    let mut out = Vec::with_capacity(t.size_hint());
    let mut samples = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let started = Instant::now();
        for i in 0..copies {
            t.splice(&members[i % members.len()], &mut out);
            black_box(&out);
        }
        samples.push(started.elapsed().as_nanos() as f64 / copies as f64);
    }
    samples.sort_by(f64::total_cmp);
    samples[RUNS / 2]
}

fn main() {
    let members = members();
    let footer = "--\nHi {{name}} from {{company}} ({{email}}). Unsubscribe: {{unsubscribe_url}}";
    println!("sign_bench: ~10 KB post, median of {RUNS} runs, one core");
    for footer in [Some(footer), None] {
        let label = if footer.is_some() {
            "per-member footer"
        } else {
            "no footer (shared bh)"
        };
        let base = bench(&template(footer, DkimKeys::default()), &members, 50_000);
        println!(
            "{label}: splice only        {base:>9.0} ns/copy  {:>8.0} copies/s",
            1e9 / base
        );
        for (name, alg, copies) in [
            ("ed25519", DkimAlgorithm::Ed25519, 20_000),
            ("rsa-2048", DkimAlgorithm::Rsa, 2_000),
        ] {
            let t = template(footer, keys(alg));
            let ns = bench(&t, &members, copies);
            println!(
                "{label}: splice+{name:<9} {ns:>9.0} ns/copy  {:>8.0} copies/s  signing = {:.1}% of the copy",
                1e9 / ns,
                100.0 * (ns - base) / ns
            );
        }
    }
}
