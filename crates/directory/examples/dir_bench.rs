//! Directory benchmark: bulk-adds a million members, scans them the way fan-out does, and
//! imports a CSV file a tenth that size.
//!
//! Run: `cargo run --release -p herald-directory --example dir_bench [members] [db-path]`
//! (default 1,000,000 members in a temporary directory). Prints one line per phase.
//! With `postgres` as the path, the same phases run on PostgreSQL: a throw-away
//! server started by `herald-pg-harness` on 127.0.0.1, fsync off as the harness runs it.

use herald_directory::{Directory, NewMember};
use herald_types::{Address, ListSettings, MemberId};
use std::time::Instant;

/// Members per `add_members` call: one transaction each. A real benchmark harness creates its
/// list the same way, without holding a million `NewMember`s in memory at once.
const CHUNK: usize = 100_000;
/// Page size of the scan, as fan-out would use.
const PAGE: usize = 5_000;

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
    println!("backend: {}", d.store_kind().as_str());
    let list = d.create_list(
        &Address::parse("bench@lists.example")?,
        &ListSettings::default(),
    )?;

    // Only the add_members calls are timed; building the input is the caller's cost.
    let mut in_add = std::time::Duration::ZERO;
    let mut added = 0;
    for base in (0..total).step_by(CHUNK) {
        let chunk: Vec<NewMember> = (base..(base + CHUNK).min(total))
            .map(|i| {
                let a =
                    Address::from_parts(&format!("member{i}"), &format!("d{}.example", i % 1000));
                a.map(NewMember::new)
            })
            .collect::<Result<_, _>>()?;
        let start = Instant::now();
        added += d.add_members(list.id, &chunk)?;
        in_add += start.elapsed();
    }
    report("add_members", added as usize, in_add);

    // The fan-out scan before and after delivery modes: `members_page` (enabled
    // members) against `delivery_page(Regular)` (enabled and regular), alternated three times.
    let up_to = d.max_member_id(list.id)?;
    for _ in 0..3 {
        let start = Instant::now();
        let (mut after, mut seen) = (MemberId(0), 0usize);
        loop {
            let page = d.members_page(list.id, after, up_to, PAGE, true)?;
            let Some(last) = page.last() else { break };
            after = last.id;
            seen += page.len();
        }
        report("members_page scan", seen, start.elapsed());
        let start = Instant::now();
        let (mut after, mut seen) = (MemberId(0), 0usize);
        loop {
            let page = d.delivery_page(
                list.id,
                after,
                up_to,
                PAGE,
                herald_types::DeliveryMode::Regular,
            )?;
            let Some(last) = page.last() else { break };
            after = last.id;
            seen += page.len();
        }
        report("delivery_page(regular) scan", seen, start.elapsed());
    }

    let start = Instant::now();
    let counts = d.member_counts(list.id)?;
    println!("member_counts: {:?} in {:?}", counts, start.elapsed());
    let start = Instant::now();
    let readded = d.add_members(
        list.id,
        &[NewMember::new(Address::parse("member0@d0.example")?)],
    )?;
    println!(
        "re-add one existing member (added {readded}) in {:?}",
        start.elapsed()
    );
    // CSV import of a tenth of the list size into a second list (parsing + validation + upsert).
    let rows = total / 10;
    let mut csv = String::from("email,name,city\n");
    for i in 0..rows {
        csv.push_str(&format!(
            "csv{i}@d{}.example,\"Member {i}\",Paris\n",
            i % 1000
        ));
    }
    let other = d.create_list(
        &Address::parse("csv@lists.example")?,
        &ListSettings::default(),
    )?;
    let start = Instant::now();
    let r = d.import_csv(other.id, csv.as_bytes(), &mut |_| {})?;
    report("import_csv", r.added as usize, start.elapsed());
    if let Ok(meta) = std::fs::metadata(&path) {
        println!(
            "database file: {:.1} MiB",
            meta.len() as f64 / (1024.0 * 1024.0)
        );
    }
    Ok(())
}

fn report(what: &str, n: usize, took: std::time::Duration) {
    let secs = took.as_secs_f64();
    println!(
        "{what}: {n} members in {secs:.2} s ({:.0} members/s)",
        n as f64 / secs
    );
}
