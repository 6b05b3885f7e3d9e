//! Measures the archive on a generated corpus (BENCHMARKS.md): store rate, raw size,
//! stored (deflate'd) body size, FTS5 index size; page and search latencies (p50/p95) at that
//! size; listing every message against `ls -l` of a Maildir folder holding the same mail; and a
//! Postmark-style create/read/delete mix against the same mix on Maildir files on the same disk
//! (seeds/002, the CASPUR measurements).
//!
//! `cargo run --release -p herald-archive --example measure -- <messages> <text-dir> [<work-dir>]`
//!
//! Bodies are slices of real prose (the text files in `<text-dir>`, e.g. the design seeds),
//! 0.5–22 KB uniformly like the seed's Postmark runs; headers as a list server receives them;
//! one post in three replies to an earlier one (In-Reply-To/References); dates spread over ten
//! years (120 months); every body carries one word of its own (`zq<i>x`) for a rare-term
//! search. Deterministic (a fixed LCG), so runs compare.

#[path = "common/corpus.rs"]
mod corpus;

use corpus::{message, percentiles, timed, Lcg, MONTHS};
use herald_archive::store::NewMessage;
use herald_archive::{Archive, Scope};
use std::io::Write;
use std::path::Path;
use std::time::Instant;

const LIST: &str = "dev@lists.example.org";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args
        .get(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(20_000);
    let dir = args
        .get(2)
        .cloned()
        .unwrap_or_else(|| "/work/shared/seeds".into());
    let work = args
        .get(3)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
        .join(format!("herald-archive-measure-{}", std::process::id()));
    let text = corpus::prose(&dir)?;
    let words: Vec<&str> = text.split_whitespace().collect();
    std::fs::create_dir_all(&work)?;
    let result = run(n, &words, &work);
    std::fs::remove_dir_all(&work)?;
    result
}

fn run(n: usize, words: &[&str], work: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let mut a = Archive::open(&work.join("archive.db"))?;
    let mut rnd = Lcg(42);
    let (mut raw_total, start) = (0usize, Instant::now());
    let mut batch = Vec::new();
    for i in 0..n {
        let raw = message(i, n, &mut rnd, words);
        raw_total += raw.len();
        batch.push(NewMessage {
            list: LIST.into(),
            raw: raw.into_bytes(),
            received_ms: 1_800_000_000_000,
        });
        if batch.len() == 500 {
            a.insert_batch(&batch)?;
            batch.clear();
        }
        if i > 0 && i % 100_000 == 0 {
            eprintln!(
                "{i} stored, {:.0} msg/s",
                i as f64 / start.elapsed().as_secs_f64()
            );
        }
    }
    a.insert_batch(&batch)?;
    let secs = start.elapsed().as_secs_f64();
    let totals = a.lists()?;
    let (fts, messages) = a.sizes()?;
    let file = std::fs::metadata(work.join("archive.db"))?.len();
    let stored = totals.first().map(|t| t.stored_bytes).unwrap_or(0);
    println!(
        "messages {n}  raw {raw_total} B  in {secs:.1} s = {:.0} msg/s, {:.1} MB/s",
        n as f64 / secs,
        raw_total as f64 / secs / 1e6
    );
    let pct = |b: i64| 100.0 * b as f64 / raw_total as f64;
    println!("bodies deflated {stored} B ({:.1}% of raw)", pct(stored));
    println!(
        "fts index {fts} B ({:.1}% of raw); messages table + indexes {messages} B; database file {file} B ({:.1}% of raw)",
        pct(fts),
        pct(file as i64)
    );

    // Pages and searches, 200 samples each, at this size.
    let mut r = Lcg(7);
    let months: Vec<(i32, u8)> = (0..MONTHS)
        .map(|m| ((2016 + m / 12) as i32, (1 + m % 12) as u8))
        .collect();
    let mut first = Vec::new();
    let mut deep = Vec::new();
    let mut thread = Vec::new();
    for _ in 0..200 {
        let (year, month) = months[r.next(MONTHS as u64) as usize];
        let scope = Scope::Month { year, month };
        let (page, ms) = timed(|| a.scope_summaries(LIST, scope, (i64::MIN, 0), 100));
        let page = page?;
        first.push(ms);
        // The month's last page: start after the key of a row near its end.
        if let Some(m) = page.last() {
            let (_, ms) = timed(|| a.scope_summaries(LIST, scope, (m.date_ms, m.id), 100));
            deep.push(ms);
            let (_, ms) =
                timed(|| a.scope_summaries(LIST, Scope::Thread(m.thread_id), (i64::MIN, 0), 100));
            thread.push(ms);
        }
    }
    let common = (0..200)
        .map(|_| timed(|| a.search(LIST, "the", 20, 0)).1)
        .collect::<Vec<_>>();
    let rare = (0..200)
        .map(|_| {
            let i = r.next(n as u64);
            timed(|| a.search(LIST, &format!("zq{i}x"), 20, 0)).1
        })
        .collect::<Vec<_>>();
    for (what, s) in [
        ("month page, first 100 rows", first),
        ("month page, next 100 rows (keyset)", deep),
        ("thread page", thread),
        ("search common word 'the', first 20", common),
        ("search rare word, first 20", rare),
    ] {
        let (p50, p95) = percentiles(s);
        println!("{what}: p50 {p50:.2} ms, p95 {p95:.2} ms");
    }

    // Listing: every message's summary, month by month, against `ls -l` of a Maildir folder
    // holding the same number of messages (at most 100,000, as the seed measured).
    let (listed, ms) = timed(|| -> Result<usize, herald_archive::ArchiveError> {
        let mut count = 0;
        for &(year, month) in &months {
            let mut after = (i64::MIN, 0);
            loop {
                let page = a.scope_summaries(LIST, Scope::Month { year, month }, after, 1000)?;
                let Some(last) = page.last() else { break };
                after = (last.date_ms, last.id);
                count += page.len();
            }
        }
        Ok(count)
    });
    println!("list all {} summaries from the store: {ms:.0} ms", listed?);
    let maildir = work.join("Maildir");
    for d in ["cur", "new", "tmp"] {
        std::fs::create_dir_all(maildir.join(d))?;
    }
    let files = n.min(100_000);
    let mut g = Lcg(42);
    for i in 0..files {
        let raw = message(i, n, &mut g, words);
        std::fs::write(maildir.join("cur").join(format!("{i}.herald:2,S")), raw)?;
    }
    // Warm cache on both sides (the files were just written, the store just read): dropping
    // the page cache needs root and would favour neither.
    let (out, ms) = timed(|| {
        std::process::Command::new("ls")
            .arg("-l")
            .arg(maildir.join("cur"))
            .output()
    });
    let lines = out?.stdout.split(|&b| b == b'\n').count();
    println!("ls -l of a {files}-file Maildir folder: {ms:.0} ms ({lines} lines)");

    // Postmark-style: a pool of messages, then transactions of create / read / delete chosen
    // at random, on the store (one transaction and fsync per create/delete, as the archive
    // writer does per batch) and on Maildir files (write + fsync + rename, read, unlink).
    postmark(&mut a, &maildir, words)?;
    Ok(())
}

fn postmark(
    a: &mut Archive,
    maildir: &Path,
    words: &[&str],
) -> Result<(), Box<dyn std::error::Error>> {
    const POOL: usize = 2_000;
    const TRANSACTIONS: usize = 6_000;
    let pm = maildir.join("postmark");
    std::fs::create_dir_all(pm.join("tmp"))?;
    std::fs::create_dir_all(pm.join("cur"))?;
    let list = "postmark@lists.example.org";
    let mut g = Lcg(99);
    let msgs: Vec<String> = (0..POOL + TRANSACTIONS)
        .map(|i| {
            message(i, POOL + TRANSACTIONS, &mut g, words)
                .replace(&format!("<{i}.{i}@"), &format!("<pm{i}.{i}@"))
        })
        .collect();
    // Store.
    for chunk in msgs[..POOL].chunks(500) {
        let batch: Vec<NewMessage> = chunk
            .iter()
            .map(|m| NewMessage {
                list: list.into(),
                raw: m.clone().into_bytes(),
                received_ms: 1_800_000_000_000,
            })
            .collect();
        a.insert_batch(&batch)?;
    }
    let mut live: Vec<usize> = (0..POOL).collect();
    let mut next = POOL;
    let mut r = Lcg(5);
    let t = Instant::now();
    for _ in 0..TRANSACTIONS {
        match r.next(3) {
            0 => {
                a.insert_batch(&[NewMessage {
                    list: list.into(),
                    raw: msgs[next].clone().into_bytes(),
                    received_ms: 1_800_000_000_000,
                }])?;
                live.push(next);
                next += 1;
            }
            1 => {
                let i = live[r.next(live.len() as u64) as usize];
                a.message(list, &format!("pm{i}.{i}@mail.example.org"))?;
            }
            _ => {
                let k = r.next(live.len() as u64) as usize;
                let i = live.swap_remove(k);
                a.remove(list, &format!("pm{i}.{i}@mail.example.org"), 0)?;
            }
        }
    }
    let store_secs = t.elapsed().as_secs_f64();
    // Maildir.
    let path = |i: usize| pm.join("cur").join(format!("{i}.herald:2,S"));
    for (i, m) in msgs[..POOL].iter().enumerate() {
        std::fs::write(path(i), m)?;
    }
    let mut live: Vec<usize> = (0..POOL).collect();
    let mut next = POOL;
    let mut r = Lcg(5);
    let t = Instant::now();
    for _ in 0..TRANSACTIONS {
        match r.next(3) {
            0 => {
                let tmp = pm.join("tmp").join(format!("{next}"));
                let mut f = std::fs::File::create(&tmp)?;
                f.write_all(msgs[next].as_bytes())?;
                f.sync_all()?;
                std::fs::rename(&tmp, path(next))?;
                live.push(next);
                next += 1;
            }
            1 => {
                let i = live[r.next(live.len() as u64) as usize];
                std::fs::read(path(i))?;
            }
            _ => {
                let k = r.next(live.len() as u64) as usize;
                let i = live.swap_remove(k);
                std::fs::remove_file(path(i))?;
            }
        }
    }
    let maildir_secs = t.elapsed().as_secs_f64();
    println!(
        "postmark-style {TRANSACTIONS} transactions (pool {POOL}, create/read/delete 1:1:1): store {:.0} tx/s (one committed transaction, fsync, per create and per delete), Maildir {:.0} tx/s (fsync per create, unlink without fsync)",
        TRANSACTIONS as f64 / store_secs,
        TRANSACTIONS as f64 / maildir_secs
    );
    Ok(())
}
