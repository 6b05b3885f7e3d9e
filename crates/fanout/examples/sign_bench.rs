//! DKIM signing and ARC sealing cost at fan-out: splice-only vs splice+sign vs
//! splice+sign+seal, per copy, on one core.
//!
//! Run: `cargo run --release -p herald-fanout --example sign_bench`
//! A ~10 KB post, a personalized footer (so each copy hashes its own tail from the saved
//! prefix state) and 1,000 distinct members; the median of 5 runs. Reports ns/copy and the
//! share of the copy that signing (and sealing) costs, for RSA-2048 and Ed25519, and the
//! no-footer case where every copy shares one body hash. The sealed rows render the post as
//! stored after the arrival check (our Authentication-Results on top): ARC at i=1, i.e. two
//! more signatures per copy (AMS and AS) over the same body hash.

mod common;

use common::{members, post_10k_arrived};
use herald_auth::dkim::generate;
use herald_auth::{DkimAlgorithm, DkimKeys, DkimSigner};
use herald_fanout::Template;
use herald_types::Member;
use std::hint::black_box;
use std::time::Instant;

const RUNS: usize = 5;

fn template(footer: Option<&str>, dkim: DkimKeys, sealed: bool) -> Template {
    let t = if sealed {
        common::template_of(&post_10k_arrived(), footer, true, None, dkim)
    } else {
        common::template(footer, true, None, dkim)
    };
    assert_eq!(t.is_sealed(), sealed && t.is_signed());
    t
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
        let base = bench(
            &template(footer, DkimKeys::default(), false),
            &members,
            50_000,
        );
        println!(
            "{label}: splice only             {base:>9.0} ns/copy  {:>8.0} copies/s",
            1e9 / base
        );
        for (name, alg, copies) in [
            ("ed25519", DkimAlgorithm::Ed25519, 20_000),
            ("rsa-2048", DkimAlgorithm::Rsa, 1_000),
        ] {
            let keys = keys(alg);
            for sealed in [false, true] {
                let t = template(footer, keys.clone(), sealed);
                let ns = bench(&t, &members, copies);
                assert_eq!((t.sign_failures(), t.seal_failures()), (0, 0));
                let what = format!("{name}{}", if sealed { "+arc" } else { "" });
                println!(
                    "{label}: splice+{what:<14} {ns:>9.0} ns/copy  {:>8.0} copies/s  signing = {:.1}% of the copy",
                    1e9 / ns,
                    100.0 * (ns - base) / ns
                );
            }
        }
    }
}
