//! `herald-bench watch`: CPU seconds and peak RSS of a process, or of a process tree (Postfix
//! is a master and its children), sampled every `--interval-ms` until a stop file appears, the
//! process is gone, or `--max-secs` passed.
//!
//! CPU: utime + stime from /proc/<pid>/stat (100 clock ticks a second, Linux's USER_HZ),
//! counted from the first sample for processes alive then and from zero for processes that
//! appear later; a child that lives and dies between two samples is missed (Postfix's
//! children live long: `max_idle` 100 s). Memory: the sum of PSS (proportional set size, from
//! /proc/<pid>/smaps_rollup) over the tree, peak over samples — summing RSS would count the
//! shared libraries of Postfix's hundreds of processes hundreds of times; for a single process
//! PSS is its RSS less shared pages. For the root process alone, VmHWM (the kernel's own peak
//! RSS) is reported as well.
//!
//! SECURITY: reads /proc only.

use anyhow::{Context, Result};
use clap::Args;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Linux's USER_HZ.
const TICKS_PER_SEC: f64 = 100.0;

#[derive(Args)]
pub struct WatchArgs {
    /// The process (the root of the tree with --tree).
    #[arg(long)]
    pid: u32,
    /// Include every descendant.
    #[arg(long)]
    tree: bool,
    /// Stop when this file exists.
    #[arg(long)]
    stop_file: PathBuf,
    /// Write the result (JSON) here.
    #[arg(long)]
    out: PathBuf,
    #[arg(long, default_value_t = 100)]
    interval_ms: u64,
    /// Stop after this long whatever happens.
    #[arg(long, default_value_t = 7200)]
    max_secs: u64,
}

/// (ppid, utime + stime in ticks) of a process.
fn stat(pid: u32) -> Option<(u32, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ppid = f.get(1)?.parse().ok()?;
    let cpu = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some((ppid, cpu))
}

/// A field of /proc/<pid>/<file> in kB (0 when unreadable).
fn proc_kb(pid: u32, file: &str, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/{file}")).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The process and, with `tree`, its descendants, with their CPU ticks.
fn processes(root: u32, tree: bool) -> HashMap<u32, u64> {
    let mut all: HashMap<u32, (u32, u64)> = HashMap::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            if let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) {
                if let Some(s) = stat(pid) {
                    all.insert(pid, s);
                }
            }
        }
    }
    let mut out = HashMap::new();
    let Some(&(_, cpu)) = all.get(&root) else {
        return out;
    };
    out.insert(root, cpu);
    if tree {
        // Parents come before children in no particular order: repeat until nothing is added.
        loop {
            let before = out.len();
            for (pid, (ppid, cpu)) in &all {
                if out.contains_key(ppid) && !out.contains_key(pid) {
                    out.insert(*pid, *cpu);
                }
            }
            if out.len() == before {
                break;
            }
        }
    }
    out
}

pub fn run(a: WatchArgs) -> Result<()> {
    let started = Instant::now();
    let baseline = processes(a.pid, a.tree);
    let mut last: HashMap<u32, u64> = baseline.clone();
    let (mut peak_rss_kb, mut samples) = (0u64, 0u64);
    let mut hwm_kb = 0;
    let mut start_pss_kb = None;
    loop {
        let now = processes(a.pid, a.tree);
        if now.is_empty() {
            break;
        }
        hwm_kb = proc_kb(a.pid, "status", "VmHWM:").max(hwm_kb);
        let rss: u64 = now
            .keys()
            .map(|p| proc_kb(*p, "smaps_rollup", "Pss:"))
            .sum();
        peak_rss_kb = peak_rss_kb.max(rss);
        start_pss_kb.get_or_insert(rss);
        last.extend(now);
        samples += 1;
        if a.stop_file.exists() || started.elapsed() > Duration::from_secs(a.max_secs) {
            break;
        }
        std::thread::sleep(Duration::from_millis(a.interval_ms));
    }
    let ticks: u64 = (last.iter())
        .map(|(pid, cpu)| cpu.saturating_sub(baseline.get(pid).copied().unwrap_or(0)))
        .sum();
    let out = serde_json::json!({
        "cpu_secs": ticks as f64 / TICKS_PER_SEC,
        "peak_pss_kb": peak_rss_kb,
        "root_hwm_kb": hwm_kb,
        "start_pss_kb": start_pss_kb,
        "processes": last.len(),
        "samples": samples,
        "watched_secs": started.elapsed().as_secs_f64(),
    });
    std::fs::write(&a.out, out.to_string()).with_context(|| format!("{}", a.out.display()))
}
