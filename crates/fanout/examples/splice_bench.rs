//! Splice benchmark: render a ~10 KB post once, splice 100,000 personalized copies.
//!
//! Run: `cargo run --release -p herald-fanout --example splice_bench`
//! Prints, per scenario, the median of 5 runs in copies/s and ns/copy. The members cycle over
//! 1,000 distinct addresses with names and a custom field, so the per-copy work (To field,
//! HMAC token, footer values) is the real one, not a cached repeat.

mod common;

use common::{members, post_10k, MEMBERS};
use herald_fanout::{unsubscribe_token, Template};
use herald_types::{Address, Member};
use std::hint::black_box;
use std::time::Instant;

const COPIES: usize = 100_000;
const RUNS: usize = 5;

/// The benchmark template, and how long rendering it took (once per post).
fn template(footer: Option<&str>, personalize: bool) -> Template {
    let started = Instant::now();
    let t = common::template(
        footer,
        personalize,
        Some("https://lists.example.org/archive/announce"),
        Default::default(),
    );
    println!("  render: {:?} (once per post)", started.elapsed());
    t
}

/// Median ns/copy over RUNS runs of COPIES splices into one reused buffer.
fn bench(t: &Template, members: &[Member]) -> (f64, usize) {
    let mut out = Vec::with_capacity(t.size_hint());
    let mut samples = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let started = Instant::now();
        for i in 0..COPIES {
            t.splice(&members[i % members.len()], &mut out);
            black_box(&out);
        }
        samples.push(started.elapsed().as_nanos() as f64 / COPIES as f64);
    }
    samples.sort_by(f64::total_cmp);
    (samples[RUNS / 2], out.len())
}

fn report(name: &str, t: &Template, members: &[Member]) {
    let (ns, size) = bench(t, members);
    println!(
        "{name}: copy {size} bytes, median {ns:.0} ns/copy, {:.0} copies/s\n",
        1e9 / ns
    );
}

fn main() {
    let members = members();
    let footer =
        "_______________________________________________\n{{list_name}} <{{list_address}}>\n\
Hi {{name}} from {{company}} ({{email}}). Unsubscribe: {{unsubscribe_url}}";
    println!(
        "splice_bench: {COPIES} copies per run, median of {RUNS} runs, {MEMBERS} distinct members"
    );
    report(
        "personalized + footer",
        &template(Some(footer), true),
        &members,
    );
    report("personalized, no footer", &template(None, true), &members);
    report(
        "not personalized, no footer",
        &template(None, false),
        &members,
    );

    // For scale: a plain 10 KB memcpy, and the HMAC part of each copy (the unsubscribe token).
    let post = post_10k();
    let mut buf = Vec::with_capacity(post.len());
    let started = Instant::now();
    for _ in 0..COPIES {
        buf.clear();
        buf.extend_from_slice(black_box(&post));
        black_box(&buf);
    }
    println!(
        "reference: 10 KB memcpy {:.0} ns",
        started.elapsed().as_nanos() as f64 / COPIES as f64
    );
    let list = Address::parse("announce@lists.example.org").expect("valid");
    let started = Instant::now();
    for i in 0..COPIES {
        black_box(unsubscribe_token(
            b"k",
            &list,
            &members[i % MEMBERS].address,
        ));
    }
    println!(
        "reference: unsubscribe_token (keys the HMAC each call; splice reuses a keyed one) {:.0} ns",
        started.elapsed().as_nanos() as f64 / COPIES as f64
    );
}
