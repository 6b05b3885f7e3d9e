//! Helpers shared by the spool's integration tests: metadata, configs, and looking at the
//! journal directory from outside.
#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is a test failure
#![allow(dead_code)]

use bytes::Bytes;
use herald_spool::{PostKind, PostMeta, RecoveredPost, Spool, SpoolConfig};
use herald_types::{Address, ListId, MemberId};
use std::path::{Path, PathBuf};

pub fn meta(n: u64) -> PostMeta {
    PostMeta {
        kind: PostKind::ListPost,
        list_id: ListId(1),
        list_address: Address::parse("list@example.org").unwrap(),
        envelope_from: Some(Address::parse(&format!("sender{n}@example.com")).unwrap()),
        received_at_ms: 1_700_000_000_000 + n,
        max_member_id: MemberId(1_000),
        message_id: Some(format!("<{n}@example.com>")),
        recipients: Vec::new(),
        hold_reason: None,
        null_sender: false,
        audience: Default::default(),
        dsn: None,
        member_range: None,
    }
}

pub fn body(n: u64, len: usize) -> Bytes {
    let mut b = format!("Subject: post {n}\r\n\r\n").into_bytes();
    while b.len() < len {
        b.extend_from_slice(format!("line {n} of the body\r\n").as_bytes());
    }
    b.truncate(len.max(20));
    Bytes::from(b)
}

pub fn cfg(dir: &Path) -> SpoolConfig {
    SpoolConfig::new(dir)
}

pub fn open(cfg: &SpoolConfig) -> (Spool, Vec<RecoveredPost>) {
    Spool::open(cfg.clone()).expect("open spool")
}

/// Files in the journal directory with the given suffix, sorted.
pub fn journal_files(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir.join("journal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    v.sort();
    v
}

pub fn segments(dir: &Path) -> Vec<PathBuf> {
    journal_files(dir, ".log")
}

/// Deterministic xorshift bytes for hostile-input tests.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}
