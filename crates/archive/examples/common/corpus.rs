//! The generated corpus of the archive measurements (BENCHMARKS.md), shared by
//! `measure.rs` and `bench/fts-compare` so both index the same mail: bodies cut from real prose,
//! 0.5–22 KB, headers as a list server receives them, one post in three a reply, dates over
//! ten years, one word of its own per body (`zq<i>x`). Deterministic (a fixed LCG).

#![allow(dead_code)]

use std::time::Instant;

/// Months the dates spread over.
pub const MONTHS: usize = 120;

/// The text of every file in `dir` (the design seeds), the words bodies are cut from.
pub fn prose(dir: &str) -> std::io::Result<String> {
    let mut text = String::new();
    for e in std::fs::read_dir(dir)? {
        text.push_str(&std::fs::read_to_string(e?.path()).unwrap_or_default());
    }
    Ok(text)
}

/// A fixed LCG: the same corpus every run.
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next(&mut self, m: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % m.max(1)
    }
}

/// Message `i` of `n`.
pub fn message(i: usize, n: usize, rnd: &mut Lcg, words: &[&str]) -> String {
    let size = 500 + rnd.next(21_500) as usize;
    let mut body = String::with_capacity(size + 80);
    body.push_str(&format!("zq{i}x "));
    let mut w = rnd.next(words.len() as u64) as usize;
    let mut line = 0;
    while body.len() < size {
        body.push_str(words[w % words.len()]);
        w += 1;
        line += 1;
        body.push_str(if line % 12 == 0 { "\r\n" } else { " " });
    }
    let reply = i > 0 && rnd.next(3) == 0;
    let parent = if reply { rnd.next(i as u64) } else { 0 };
    let refs = if reply {
        format!("In-Reply-To: <{parent}.{parent}@mail.example.org>\r\nReferences: <{parent}.{parent}@mail.example.org>\r\n")
    } else {
        String::new()
    };
    // Ten years, oldest first, each month about n/120 posts.
    let month = i * MONTHS / n.max(1);
    let (year, mon) = (2016 + month / 12, 1 + month % 12);
    let day = 1 + rnd.next(28);
    const MON: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "Return-Path: <user{u}@example.net>\r\nReceived: from mail.example.net (mail.example.net [192.0.2.{h}])\r\n\tby lists.example.org (Herald) with ESMTPS id {i}\r\n\tfor <dev@lists.example.org>; {day} {mn} {year} 10:00:00 +0000\r\n\
         From: User {u} <user{u}@example.net>\r\nTo: dev@lists.example.org\r\nSubject: {re}Topic {t}\r\n\
         Date: {day} {mn} {year} 10:{m:02}:00 +0000\r\nMessage-ID: <{i}.{i}@mail.example.org>\r\n{refs}\
         MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\n{body}\r\n",
        u = rnd.next(500),
        h = rnd.next(250),
        mn = MON[mon - 1],
        re = if reply { "Re: " } else { "" },
        t = if reply { parent } else { i as u64 },
        m = rnd.next(60),
    )
}

/// p50 and p95 of `samples` milliseconds.
pub fn percentiles(mut samples: Vec<f64>) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    (at(0.5), at(0.95))
}

pub fn timed<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let t = Instant::now();
    let v = f();
    (v, t.elapsed().as_secs_f64() * 1e3)
}
