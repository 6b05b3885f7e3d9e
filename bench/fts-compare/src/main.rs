//! SQLite FTS5 (as the archive uses it: contentless, `detail=none`, subject/sender/body) and
//! tantivy (the same three fields, indexed with term frequencies and no positions, nothing
//! stored), fed the same generated corpus (`crates/archive/examples/common/corpus.rs`, as
//! `measure` generates it), each committing every 500 messages, one indexing thread each.
//! Prints indexing rate, index size against the raw mail, and p50/p95 of the best 20 by BM25
//! for a word in every message, a two-word query and a word of one message.
//!
//! ```sh
//! cd bench/fts-compare && cargo run --release -- 100000 /work/shared/seeds /tmp/fts
//! ```

#[path = "../../../crates/archive/examples/common/corpus.rs"]
mod corpus;

use corpus::{message, percentiles, timed, Lcg};
use std::path::Path;
use tantivy::collector::TopDocs;
use tantivy::query::QueryParser;
use tantivy::schema::{IndexRecordOption, Schema, TextFieldIndexing, TextOptions};
use tantivy::{doc, Index};

/// Subject, sender and body text of a generated message (the fields the archive indexes).
fn fields(raw: &str) -> (String, String, String) {
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((raw, ""));
    let get = |name: &str| {
        head.lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or("")
            .trim()
            .to_string()
    };
    (get("Subject:"), get("From:"), body.to_string())
}

fn dir_size(p: &Path) -> u64 {
    std::fs::read_dir(p)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
                .sum()
        })
        .unwrap_or(0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args
        .get(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(20_000);
    let text = corpus::prose(args.get(2).map_or("/work/shared/seeds", String::as_str))?;
    let words: Vec<&str> = text.split_whitespace().collect();
    let work = Path::new(args.get(3).map_or("/tmp/fts-compare", String::as_str)).to_path_buf();
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(work.join("tantivy"))?;

    let mut rnd = Lcg(42);
    let docs: Vec<String> = (0..n).map(|i| message(i, n, &mut rnd, &words)).collect();
    let raw: usize = docs.iter().map(String::len).sum();
    println!("corpus: {n} messages, {raw} B raw");

    // SQLite FTS5, as crates/archive/src/store.rs creates it.
    let db = work.join("fts.db");
    let mut conn = rusqlite::Connection::open(&db)?;
    conn.execute_batch(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;
         CREATE VIRTUAL TABLE fts USING fts5 (subject, sender, body, content='', \
         contentless_delete=1, detail=none);",
    )?;
    let (_, ms) = timed(|| -> rusqlite::Result<()> {
        for (c, chunk) in docs.chunks(500).enumerate() {
            let tx = conn.transaction()?;
            {
                let mut st = tx.prepare(
                    "INSERT INTO fts (rowid, subject, sender, body) VALUES (?1, ?2, ?3, ?4)",
                )?;
                for (k, d) in chunk.iter().enumerate() {
                    let (s, f, b) = fields(d);
                    st.execute(rusqlite::params![(c * 500 + k + 1) as i64, s, f, b])?;
                }
            }
            tx.commit()?;
        }
        Ok(())
    });
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")?;
    let fts_bytes = std::fs::metadata(&db)?.len();
    println!(
        "fts5: indexed in {:.1} s = {:.0} msg/s; index {fts_bytes} B = {:.1} % of raw",
        ms / 1e3,
        n as f64 / (ms / 1e3),
        100.0 * fts_bytes as f64 / raw as f64
    );

    // tantivy, the same fields, frequencies without positions (the nearest to detail=none
    // that still ranks by BM25), nothing stored.
    let opts = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer("default")
            .set_index_option(IndexRecordOption::WithFreqs),
    );
    let mut sb = Schema::builder();
    let subject = sb.add_text_field("subject", opts.clone());
    let sender = sb.add_text_field("sender", opts.clone());
    let body = sb.add_text_field("body", opts);
    let index = Index::create_in_dir(work.join("tantivy"), sb.build())?;
    let (_, ms) = timed(|| -> tantivy::Result<()> {
        let mut w: tantivy::IndexWriter = index.writer_with_num_threads(1, 50_000_000)?;
        for (i, d) in docs.iter().enumerate() {
            let (s, f, b) = fields(d);
            w.add_document(doc!(subject => s, sender => f, body => b))?;
            if (i + 1) % 500 == 0 {
                w.commit()?;
            }
        }
        w.commit()?;
        w.wait_merging_threads()
    });
    let tv_bytes = dir_size(&work.join("tantivy"));
    println!(
        "tantivy: indexed in {:.1} s = {:.0} msg/s; index {tv_bytes} B = {:.1} % of raw",
        ms / 1e3,
        n as f64 / (ms / 1e3),
        100.0 * tv_bytes as f64 / raw as f64
    );

    let reader = index.reader()?;
    let searcher = reader.searcher();
    let mut parser = QueryParser::for_index(&index, vec![subject, sender, body]);
    parser.set_conjunction_by_default();
    let rare = format!("zq{}x", n / 2);
    for (what, q) in [
        ("common word 'the'", "the".to_string()),
        ("two words 'the list'", "the list".to_string()),
        ("rare word", rare),
    ] {
        let fts_q = q
            .split_whitespace()
            .map(|w| format!("\"{w}\""))
            .collect::<Vec<_>>()
            .join(" ");
        let mut st =
            conn.prepare("SELECT rowid FROM fts WHERE fts MATCH ?1 ORDER BY rank LIMIT 20")?;
        // What the archive runs: the newest 2,000 matches (store::RANK_WINDOW) ranked.
        let mut window = conn.prepare(
            "SELECT id FROM (SELECT rowid AS id, bm25(fts) AS score FROM fts WHERE fts MATCH ?1 \
             ORDER BY rowid DESC LIMIT 2000) ORDER BY score LIMIT 20",
        )?;
        let (mut f5, mut fw, mut tv) = (Vec::new(), Vec::new(), Vec::new());
        let (mut hits_f5, mut hits_tv) = (0, 0);
        for _ in 0..21 {
            let (rows, ms) = timed(|| {
                window
                    .query_map([&fts_q], |r| r.get::<_, i64>(0))
                    .and_then(|m| m.collect::<rusqlite::Result<Vec<i64>>>())
            });
            rows?;
            fw.push(ms);
            let (rows, ms) = timed(|| {
                st.query_map([&fts_q], |r| r.get::<_, i64>(0))
                    .and_then(|m| m.collect::<rusqlite::Result<Vec<i64>>>())
            });
            hits_f5 = rows?.len();
            f5.push(ms);
            let query = parser.parse_query(&q)?;
            let (top, ms) = timed(|| searcher.search(&query, &TopDocs::with_limit(20)));
            hits_tv = top?.len();
            tv.push(ms);
        }
        let (a50, a95) = percentiles(f5[1..].to_vec());
        let (b50, b95) = percentiles(tv[1..].to_vec());
        let (w50, w95) = percentiles(fw[1..].to_vec());
        println!(
            "{what}, best 20: fts5 all matches p50 {a50:.2} ms p95 {a95:.2} ms ({hits_f5} hits) | fts5 newest-2,000 window p50 {w50:.2} ms p95 {w95:.2} ms | tantivy p50 {b50:.2} ms p95 {b95:.2} ms ({hits_tv} hits)"
        );
    }
    std::fs::remove_dir_all(&work)?;
    Ok(())
}
