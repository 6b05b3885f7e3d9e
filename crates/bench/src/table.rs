//! `herald-bench table <results-dir>`: the comparison table of one benchmark run, as Markdown.
//!
//! The results directory holds one folder per system run (`herald`, `postfix`, and
//! `postfix-xverp` when the scenario has it), each with `report.json` (`herald sim report
//! --json`), `resources.json` (`herald-bench watch`) and `wall_secs` (t0 to the last deliverable
//! copy, or to the end of the wait when that never came). Missing folders are skipped.
//!
//! Ratios are Herald / Postfix, literally: above 1 is better for copies/s, below 1 is better for
//! times, CPU and memory.

use anyhow::{Context, Result};
use clap::Args;
use serde_json::Value;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

#[derive(Args)]
pub struct TableArgs {
    /// The results directory bench/run.sh wrote.
    dir: PathBuf,
}

/// One system's figures; None where unknown or not reached.
#[derive(Default)]
struct Row {
    wall: Option<f64>,
    t50: Option<f64>,
    t95: Option<f64>,
    t100: Option<f64>,
    rate: Option<f64>,
    rate95: Option<f64>,
    cpu: Option<f64>,
    rss_mb: Option<f64>,
    hwm_mb: Option<f64>,
    missing: Option<f64>,
    dups: Option<f64>,
    delivered: Option<f64>,
    /// Commands refused for rate (4.7.28).
    rate_refusals: Option<f64>,
}

fn read_json(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("{}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{}", path.display()))
}

fn load(dir: &Path) -> Result<Row> {
    let report = read_json(&dir.join("report.json"))?;
    let res = read_json(&dir.join("resources.json"))?;
    let wall: Option<f64> = std::fs::read_to_string(dir.join("wall_secs"))
        .ok()
        .and_then(|t| t.trim().parse().ok());
    let secs = |k: &str| report[k].as_f64().map(|ms| ms / 1000.0);
    let delivered = report["delivered"].as_f64();
    let span = secs("t100_ms").or(wall);
    Ok(Row {
        wall,
        t50: secs("t50_ms"),
        t95: secs("t95_ms"),
        t100: secs("t100_ms"),
        rate: delivered.zip(span).map(|(d, s)| d / s.max(0.001)),
        rate95: (report["deliverable"].as_f64())
            .zip(secs("t95_ms"))
            .map(|(d, s)| 0.95 * d / s.max(0.001)),
        cpu: res["cpu_secs"].as_f64(),
        rss_mb: res["peak_pss_kb"].as_f64().map(|kb| kb / 1024.0),
        hwm_mb: res["root_hwm_kb"].as_f64().map(|kb| kb / 1024.0),
        missing: report["missing"].as_f64(),
        dups: report["duplicates"].as_f64(),
        delivered,
        rate_refusals: report["rate_refusals"].as_f64(),
    })
}

fn cell(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "n/a".into(), |v| format!("{v:.digits$}"))
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b != 0.0 => format!("{:.2}", a / b),
        _ => "n/a".into(),
    }
}

pub fn run(a: TableArgs) -> Result<()> {
    let systems: Vec<(&str, Row)> = ["herald", "postfix", "postfix-xverp"]
        .into_iter()
        .filter(|s| a.dir.join(s).join("report.json").exists())
        .map(|s| load(&a.dir.join(s)).map(|r| (s, r)))
        .collect::<Result<_>>()?;
    let herald = systems.iter().find(|(s, _)| *s == "herald").map(|(_, r)| r);
    let postfix = systems
        .iter()
        .find(|(s, _)| *s == "postfix")
        .map(|(_, r)| r);
    let mut out = String::from("| metric |");
    for (s, _) in &systems {
        let _ = write!(out, " {s} |");
    }
    out.push_str(" Herald/Postfix |\n|---|");
    out.push_str(&"---:|".repeat(systems.len() + 1));
    out.push('\n');
    type Get = fn(&Row) -> Option<f64>;
    let metrics: [(&str, Get, usize); 13] = [
        ("wall time (s)", |r| r.wall, 1),
        ("t50 (s)", |r| r.t50, 2),
        ("t95 (s)", |r| r.t95, 2),
        ("t100 (s)", |r| r.t100, 2),
        ("delivered", |r| r.delivered, 0),
        ("copies/s (delivered / t100)", |r| r.rate, 0),
        (
            "copies/s to 95 % (0.95 x deliverable / t95)",
            |r| r.rate95,
            0,
        ),
        ("CPU (s)", |r| r.cpu, 1),
        ("peak memory, PSS (MB)", |r| r.rss_mb, 0),
        (
            "peak RSS of the (master) process, VmHWM (MB)",
            |r| r.hwm_mb,
            0,
        ),
        ("missing", |r| r.missing, 0),
        ("duplicates", |r| r.dups, 0),
        ("refused for rate (4.7.28)", |r| r.rate_refusals, 0),
    ];
    for (name, get, digits) in metrics {
        let _ = write!(out, "| {name} |");
        for (_, r) in &systems {
            let _ = write!(out, " {} |", cell(get(r), digits));
        }
        let _ = writeln!(
            out,
            " {} |",
            ratio(herald.and_then(get), postfix.and_then(get))
        );
    }
    print!("{out}");
    let path = a.dir.join("table.md");
    std::fs::write(&path, &out).with_context(|| format!("{}", path.display()))
}
