//! `herald-bench post`: the scenario posts, generated so the repository holds no large files.
//! `text`: a plain-text post of about `--kb` KB. `related`: a multipart/related post (HTML plus
//! an inline PNG-typed base64 part) of about `--kb` KB, as newsletters are.
//!
//! The bytes are deterministic (a fixed generator), so runs are comparable.

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use std::fmt::Write as _;
use std::path::PathBuf;

#[derive(Clone, Copy, ValueEnum)]
pub enum Kind {
    Text,
    Related,
}

#[derive(Args)]
pub struct PostArgs {
    #[arg(long, value_enum)]
    kind: Kind,
    /// Approximate size in KB.
    #[arg(long)]
    kb: usize,
    /// The list address (To:).
    #[arg(long)]
    list: String,
    /// Where to write the post.
    #[arg(long)]
    out: PathBuf,
    /// Message-ID local part (unique per run).
    #[arg(long, default_value = "bench")]
    id: String,
}

const PARA: &str = "Herald takes one post and gets a personal copy of it to every member, as fast \
as the network allows, while part of the Internet is slow, dead or hostile.\r\n";

fn headers(a: &PostArgs, content_type: &str) -> String {
    format!(
        "From: Bench Poster <poster@herald.test>\r\nTo: {}\r\nSubject: Benchmark post \
         ({} KB)\r\nMessage-ID: <{}@herald.test>\r\nDate: Sat, 21 Nov 2026 00:00:00 +0000\r\n\
         MIME-Version: 1.0\r\nContent-Type: {content_type}\r\n\r\n",
        a.list, a.kb, a.id
    )
}

/// Deterministic base64 text of about `bytes` encoded bytes, in 76-column lines.
fn base64_lines(bytes: usize) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut out = String::with_capacity(bytes + bytes / 38);
    let mut col = 0;
    while out.len() < bytes {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.push(ALPHABET[(x % 64) as usize] as char);
        col += 1;
        if col == 76 {
            out.push_str("\r\n");
            col = 0;
        }
    }
    // Whole quanta of 4 characters, so the part decodes.
    while col % 4 != 0 {
        out.push('A');
        col += 1;
    }
    out.push_str("\r\n");
    out
}

pub fn run(a: PostArgs) -> Result<()> {
    let target = a.kb * 1024;
    let post = match a.kind {
        Kind::Text => {
            let mut p = headers(&a, "text/plain; charset=utf-8");
            while p.len() < target {
                p.push_str(PARA);
            }
            p
        }
        Kind::Related => {
            let b = "=_herald_bench_related";
            let mut p = headers(
                &a,
                &format!("multipart/related; boundary=\"{b}\"; type=\"text/html\""),
            );
            let _ = write!(
                p,
                "--{b}\r\nContent-Type: text/html; charset=utf-8\r\n\r\n<html><body><p>\
                 Newsletter</p><img src=\"cid:img1@herald.test\">\r\n"
            );
            for _ in 0..40 {
                let _ = write!(p, "<p>{}</p>\r\n", PARA.trim_end());
            }
            p.push_str("</body></html>\r\n");
            let _ = write!(
                p,
                "--{b}\r\nContent-Type: image/png\r\nContent-Transfer-Encoding: base64\r\n\
                 Content-ID: <img1@herald.test>\r\nContent-Disposition: inline\r\n\r\n"
            );
            let image = target.saturating_sub(p.len() + 64);
            p.push_str(&base64_lines(image));
            let _ = write!(p, "--{b}--\r\n");
            p
        }
    };
    std::fs::write(&a.out, post).with_context(|| format!("writing {}", a.out.display()))
}
