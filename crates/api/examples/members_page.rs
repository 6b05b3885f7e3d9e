//! The web members page at scale: a list of a million members, then the
//! page's work per view — the directory search (`search_members`: one index range scan, keyset
//! paging) and the HTML (`herald_webadmin::members::members_page`) — timed over many views of
//! each kind: the first page, a deep page by keyset, an address prefix, a name prefix. Beside
//! them, what the page does not do: count the list (`member_counts`).
//!
//! Run: `cargo run --release -p herald-api --example members_page [members] [db-path]`
//! (default 1,000,000 members in a temporary directory; with `postgres` as the path, a
//! throw-away PostgreSQL server from `herald-pg-harness`). Prints p50/p95/max per kind.

use herald_directory::{Directory, NewMember, SearchBy};
use herald_types::{Address, ListSettings, MemberId};
use herald_webadmin::members::{AddForm, MemberLine, Search, PAGE_SIZE};
use std::time::{Duration, Instant};

const CHUNK: usize = 100_000;

/// What a view asks for: search column, prefix, keyset.
type Query = (SearchBy, String, Option<MemberId>);
/// Makes the next view's query of one kind.
type NextQuery = Box<dyn FnMut() -> Query>;
/// Views timed per kind.
const VIEWS: usize = 200;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let total: usize = args
        .next()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(1_000_000);
    let tmp = tempfile::tempdir()?;
    let path: std::path::PathBuf = args
        .next()
        .map_or_else(|| tmp.path().join("bench.db"), Into::into);
    let d = if path.as_os_str() == "postgres" {
        let url = herald_pg_harness::PgServer::shared().fresh_database()?;
        Directory::open_postgres(&url, herald_directory::DEFAULT_MAX_CONNECTIONS)?
    } else {
        Directory::open(&path)?
    };
    println!("backend: {}, {total} members", d.store_kind().as_str());
    let list = d.create_list(
        &Address::parse("big@lists.example")?,
        &ListSettings::default(),
    )?;
    let t = Instant::now();
    let mut i = 0;
    while i < total {
        let n = CHUNK.min(total - i);
        let chunk: Vec<NewMember> = (i..i + n)
            .map(|k| {
                // Addresses in a scrambled order (ids and addresses do not sort alike).
                let a = (k as u64).wrapping_mul(2_654_435_761) % 10_000_000;
                let mut m = NewMember::new(
                    Address::parse(&format!("u{a:07}@d{}.example", k % 97)).expect("address"),
                );
                m.display_name = Some(format!("Person {:07}", (k as u64 * 7_919) % 10_000_000));
                m
            })
            .collect();
        d.add_members(list.id, &chunk)?;
        i += n;
    }
    println!("add {total} members: {:.1} s", t.elapsed().as_secs_f64());

    let t = Instant::now();
    let counts = d.member_counts(list.id)?;
    println!(
        "member_counts (COUNT over the list, not done per page view): {:.1} ms ({} members)",
        ms(t.elapsed()),
        counts.total
    );
    let max_id = d.max_member_id(list.id)?.0;
    let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let kinds: Vec<(&str, NextQuery)> = vec![
        (
            "first page (address order)",
            Box::new(|| (SearchBy::Address, String::new(), None)),
        ),
        (
            "deep page by keyset (after a random member)",
            Box::new(move || {
                let after = 1 + (rnd() % max_id.max(1) as u64) as i64;
                (SearchBy::Address, String::new(), Some(MemberId(after)))
            }),
        ),
        (
            "address prefix (u + 4 digits: ~100 matches)",
            Box::new(move || (SearchBy::Address, format!("u{:04}", rnd() % 1000), None)),
        ),
        (
            "name prefix (Person + 5 digits: ~10 matches)",
            Box::new(move || {
                (
                    SearchBy::Name,
                    format!("person {:05}", rnd() % 100_000),
                    None,
                )
            }),
        ),
    ];
    let ctx = herald_webadmin::Ctx {
        who: "owner@example.org".into(),
        csrf: Some("x".repeat(43)),
        ..Default::default()
    };
    println!(
        "{:<48} {:>9} {:>9} {:>9} {:>11} {:>9}",
        "members page", "p50 ms", "p95 ms", "max ms", "page bytes", "rows/view"
    );
    for (name, mut next) in kinds {
        let mut times = Vec::with_capacity(VIEWS);
        let (mut bytes, mut rows) = (0, 0);
        for _ in 0..VIEWS {
            let (by, q, after) = next();
            let t = Instant::now();
            let found = d.search_members(list.id, by, &q, after, PAGE_SIZE + 1)?;
            let lines: Vec<MemberLine> = found
                .iter()
                .take(PAGE_SIZE)
                .map(|f| MemberLine {
                    member: herald_api_types::MemberView {
                        id: f.member.id.0,
                        list_id: f.member.list_id.0,
                        address: f.member.address.to_string(),
                        display_name: f.member.display_name.clone(),
                        status: f.member.status.clone(),
                        fields: f.member.fields.clone(),
                    },
                    delivery: f.delivery,
                    language: f.language.clone(),
                })
                .collect();
            let next_after = (found.len() > PAGE_SIZE).then(|| found[PAGE_SIZE - 1].member.id.0);
            let search = Search {
                q,
                by: "address".into(),
                error: None,
            };
            let html = herald_webadmin::members::members_page(
                &ctx,
                "big@lists.example",
                &search,
                &lines,
                next_after,
                &AddForm::default(),
            );
            times.push(t.elapsed());
            bytes = html.len();
            rows += lines.len();
        }
        times.sort();
        let p = |q: f64| ms(times[((times.len() as f64 * q) as usize).min(times.len() - 1)]);
        println!(
            "{name:<48} {:>9.2} {:>9.2} {:>9.2} {bytes:>11} {:>9.1}",
            p(0.5),
            p(0.95),
            p(1.0),
            rows as f64 / VIEWS as f64
        );
    }
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
