//! Splice benchmark: render a ~10 KB post once, splice 100,000 personalized copies.
//!
//! Run: `cargo run --release -p herald-fanout --example splice_bench`
//! Prints, per scenario, the median of 5 runs in copies/s and ns/copy. The members cycle over
//! 1,000 distinct addresses with names and a custom field, so the per-copy work (To field,
//! HMAC token, footer values) is the real one, not a cached repeat.

use herald_fanout::{render, unsubscribe_token, ListContext, Template};
use herald_types::{Address, List, ListId, ListSettings, Member, MemberId, MemberStatus};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Instant;

const COPIES: usize = 100_000;
const RUNS: usize = 5;
const MEMBERS: usize = 1_000;

fn post_10k() -> Vec<u8> {
    let mut post = b"From: Alice Example <alice@example.com>\r\nTo: announce@lists.example.org\r\n\
Subject: Weekly report\r\nDate: Mon, 3 Mar 2025 10:00:00 +0000\r\nMessage-ID: <bench@example.com>\r\n\
MIME-Version: 1.0\r\nContent-Type: text/plain; charset=us-ascii\r\n\r\n"
        .to_vec();
    let line =
        b"The quick brown fox jumps over the lazy dog; pack my box with five dozen jugs.\r\n";
    while post.len() < 10 * 1024 {
        post.extend_from_slice(line);
    }
    post
}

fn members() -> Vec<Member> {
    (0..MEMBERS)
        .map(|i| Member {
            id: MemberId(i as i64),
            list_id: ListId(1),
            address: Address::parse(&format!("member{i}@host{}.example.com", i % 37))
                .expect("valid"),
            display_name: Some(format!("Member Number {i}")),
            status: MemberStatus::Enabled,
            fields: BTreeMap::from([("company".to_string(), format!("Company {i}"))]),
        })
        .collect()
}

fn template(footer: Option<&str>, personalize: bool) -> Template {
    let list = List {
        id: ListId(1),
        address: Address::parse("announce@lists.example.org").expect("valid"),
        settings: ListSettings {
            display_name: "Announcements".into(),
            subject_prefix: Some("[announce]".into()),
            footer: footer.map(str::to_string),
            personalize,
            ..ListSettings::default()
        },
        created_at_ms: 0,
    };
    let ctx = ListContext {
        unsubscribe_base_url: "https://lists.example.org".into(),
        archive_url: Some("https://lists.example.org/archive/announce".into()),
        secret: b"bench-secret-0123456789abcdef".to_vec(),
        dkim: Default::default(),
    };
    let started = Instant::now();
    let t = render(&list, &ctx, &post_10k()).expect("renders");
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
