//! Measures the archive on a generated corpus (BENCHMARKS.md, issue 14): store rate, raw size,
//! stored (deflate'd) body size, FTS5 index size.
//!
//! `cargo run --release -p herald-archive --example measure -- <messages> <text-dir>`
//!
//! Bodies are slices of real prose (the text files in `<text-dir>`, e.g. the design seeds),
//! 0.5–22 KB like list mail; headers as a list server receives them; one post in three replies
//! to an earlier one (In-Reply-To/References). Deterministic (a fixed LCG), so runs compare.

use herald_archive::store::NewMessage;
use herald_archive::Archive;
use std::time::Instant;

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
    let mut text = String::new();
    for e in std::fs::read_dir(&dir)? {
        text.push_str(&std::fs::read_to_string(e?.path()).unwrap_or_default());
    }
    let words: Vec<&str> = text.split_whitespace().collect();
    let tmp = std::env::temp_dir().join(format!("herald-archive-measure-{}", std::process::id()));
    std::fs::create_dir_all(&tmp)?;
    let mut a = Archive::open(&tmp.join("archive.db"))?;
    let mut seed: u64 = 42;
    let mut rnd = move |m: u64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % m
    };
    let (mut raw_total, start) = (0usize, Instant::now());
    let mut batch = Vec::new();
    for i in 0..n {
        let size = 500 + rnd(21_500) as usize;
        let mut body = String::with_capacity(size + 80);
        let mut w = rnd(words.len() as u64) as usize;
        let mut line = 0;
        while body.len() < size {
            body.push_str(words[w % words.len()]);
            w += 1;
            line += 1;
            body.push_str(if line % 12 == 0 { "\r\n" } else { " " });
        }
        let reply = i > 0 && rnd(3) == 0;
        let parent = if reply { rnd(i as u64) } else { 0 };
        let refs = if reply {
            format!("In-Reply-To: <{parent}.{parent}@mail.example.org>\r\nReferences: <{parent}.{parent}@mail.example.org>\r\n")
        } else {
            String::new()
        };
        let day = 1 + i * 28 / n.max(1);
        let raw = format!(
            "Return-Path: <user{u}@example.net>\r\nReceived: from mail.example.net (mail.example.net [192.0.2.{h}])\r\n\tby lists.example.org (Herald) with ESMTPS id {i}\r\n\tfor <dev@lists.example.org>; Mon, {day} Feb 2026 10:00:00 +0000\r\n\
             From: User {u} <user{u}@example.net>\r\nTo: dev@lists.example.org\r\nSubject: {re}Topic {t}\r\n\
             Date: Mon, {day} Feb 2026 10:{m:02}:00 +0000\r\nMessage-ID: <{i}.{i}@mail.example.org>\r\n{refs}\
             MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\n{body}\r\n",
            u = rnd(500),
            h = rnd(250),
            re = if reply { "Re: " } else { "" },
            t = if reply { parent } else { i as u64 },
            m = rnd(60),
        );
        raw_total += raw.len();
        batch.push(NewMessage {
            list: "dev@lists.example.org".into(),
            raw: raw.into_bytes(),
            received_ms: 1_800_000_000_000,
        });
        if batch.len() == 500 {
            a.insert_batch(&batch)?;
            batch.clear();
        }
    }
    a.insert_batch(&batch)?;
    let secs = start.elapsed().as_secs_f64();
    let totals = a.lists()?;
    let (fts, messages) = a.sizes()?;
    let file = std::fs::metadata(tmp.join("archive.db"))?.len();
    let stored = totals.first().map(|t| t.stored_bytes).unwrap_or(0);
    println!(
        "messages {n}  raw {raw_total} B  in {secs:.2} s = {:.0} msg/s, {:.1} MB/s",
        n as f64 / secs,
        raw_total as f64 / secs / 1e6
    );
    println!(
        "bodies deflated {stored} B ({:.1}% of raw)",
        100.0 * stored as f64 / raw_total as f64
    );
    println!("fts index {fts} B ({:.1}% of raw); messages table + indexes {messages} B; database file {file} B ({:.1}% of raw)",
        100.0 * fts as f64 / raw_total as f64, 100.0 * file as f64 / raw_total as f64);
    let t = Instant::now();
    let hits = a.search("dev@lists.example.org", "sendmail", 20, 0)?.len();
    println!(
        "search sendmail: {hits} hits (first page) in {:.1} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    let t = Instant::now();
    let page = a.month_page("dev@lists.example.org", 2026, 2, 50, 0)?.len();
    println!(
        "month page (50 rows) {page} in {:.1} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    std::fs::remove_dir_all(&tmp)?;
    Ok(())
}
