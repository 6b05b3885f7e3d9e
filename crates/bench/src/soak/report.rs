//! `herald-bench soak-report <dir>`: the markdown table of a soak's samples (samples.jsonl), the
//! per-hour slopes, and the RSS of the drained process against a fresh one (fresh.json, written
//! by bench/soak.sh); writes `<dir>/table.md` and prints it.
//!
//! Slopes: least squares over the load-phase samples after the first 20 % of the load (the warm-
//! up: lists fill the queue, caches fill, the allocator reaches its working set); the idle phase
//! is left out because it is a different regime (no intake). Fewer than three such samples: no
//! slope ("n/a") rather than a line through two points.

use anyhow::{Context, Result};
use clap::Args;
use serde_json::Value;
use std::fmt::Write as _;
use std::path::PathBuf;

#[derive(Args)]
pub struct SoakReportArgs {
    /// The results directory of a soak (samples.jsonl; fresh.json and check.txt if present).
    dir: PathBuf,
}

const MB: f64 = 1024.0 * 1024.0;

fn num(v: &Value, k: &str) -> Option<f64> {
    v.get(k).and_then(Value::as_f64)
}

fn gauge(v: &Value, k: &str) -> String {
    v["metrics"]
        .get(k)
        .and_then(Value::as_f64)
        .map_or("-".into(), |x| format!("{x:.0}"))
}

fn opt(x: Option<f64>, decimals: usize) -> String {
    x.map_or("-".into(), |x| format!("{x:.decimals$}"))
}

/// Slope of y over x by least squares; None with fewer than three points or no spread in x.
pub fn slope(points: &[(f64, f64)]) -> Option<f64> {
    if points.len() < 3 {
        return None;
    }
    let n = points.len() as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

fn table(samples: &[Value]) -> String {
    let mut t = String::from(
        "| t (min) | phase | RSS MB | fds | threads | unfinished | deferred | expansion pending | \
         spool MB | data dir MB | accept p50 ms | accept p99 ms | copies/s | posts acc / ref / skipped |\n\
         |---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for s in samples {
        let _ = writeln!(
            t,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} / {} |",
            opt(num(s, "t_secs").map(|x| x / 60.0), 1),
            s["phase"].as_str().unwrap_or("-"),
            opt(num(s, "rss_kb").map(|x| x / 1024.0), 0),
            opt(num(s, "fds"), 0),
            opt(num(s, "threads"), 0),
            gauge(s, "herald_unfinished_copies"),
            gauge(s, "herald_deferred_copies"),
            gauge(s, "herald_expansion_pending_copies"),
            opt(num(s, "spool_bytes").map(|x| x / MB), 0),
            opt(num(s, "data_bytes").map(|x| x / MB), 0),
            opt(num(s, "smtp_p50_ms"), 1),
            opt(num(s, "smtp_p99_ms"), 1),
            opt(num(s, "copies_per_sec"), 0),
            s["accepted"],
            s["refused"],
            s["skipped"],
        );
    }
    t
}

fn slopes(samples: &[Value]) -> String {
    let load: Vec<&Value> = samples.iter().filter(|s| s["phase"] == "load").collect();
    let load_secs = load
        .iter()
        .filter_map(|s| num(s, "t_secs"))
        .fold(0.0, f64::max);
    let steady: Vec<&&Value> = load
        .iter()
        .filter(|s| num(s, "t_secs").is_some_and(|t| t >= 0.2 * load_secs))
        .collect();
    let mut out = format!(
        "\nSlopes per hour (least squares over the {} load samples from t = {:.1} min; \
         the first 20 % of the load is warm-up):\n\n| quantity | slope per hour |\n|---|---:|\n",
        steady.len(),
        0.2 * load_secs / 60.0
    );
    let series: [(&str, &str, f64, &str); 5] = [
        ("RSS", "rss_kb", 1024.0, "MB"),
        ("open fds", "fds", 1.0, ""),
        ("threads", "threads", 1.0, ""),
        ("data dir", "data_bytes", MB, "MB"),
        ("spool", "spool_bytes", MB, "MB"),
    ];
    for (name, key, unit, unit_name) in series {
        let pts: Vec<(f64, f64)> = steady
            .iter()
            .filter_map(|s| Some((num(s, "t_secs")? / 3600.0, num(s, key)? / unit)))
            .collect();
        let _ = writeln!(
            out,
            "| {name} | {} |",
            slope(&pts).map_or("n/a (too few samples)".into(), |k| format!(
                "{k:+.1} {unit_name}"
            ))
        );
    }
    out
}

fn fresh(dir: &std::path::Path, samples: &[Value]) -> String {
    let drained = samples
        .iter()
        .rev()
        .find(|s| s["phase"] == "idle")
        .and_then(|s| num(s, "rss_kb"));
    let fresh: Option<Value> = std::fs::read_to_string(dir.join("fresh.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    let fresh_kb = fresh.as_ref().and_then(|f| num(f, "rss_kb"));
    let peak = samples
        .iter()
        .filter_map(|s| num(s, "rss_kb"))
        .fold(0.0, f64::max);
    let mut out = format!(
        "\nRSS: peak sample {:.0} MB; after the idle period (drained) {} MB; a fresh `herald serve` \
         on the same data directory {} MB",
        peak / 1024.0,
        opt(drained.map(|x| x / 1024.0), 0),
        opt(fresh_kb.map(|x| x / 1024.0), 0),
    );
    if let Some(f) = &fresh {
        let _ = write!(
            out,
            " ({} s after it answered /readyz; its unfinished copies then: {})",
            f["settle_secs"], f["unfinished"]
        );
    }
    match (drained, fresh_kb) {
        (Some(d), Some(f)) if f > 0.0 => {
            let _ = writeln!(
                out,
                ".\nDrained / fresh RSS: {:.2} (goal: at most 1.20).",
                d / f
            );
        }
        _ => out.push_str(".\n"),
    }
    out
}

pub fn run(args: SoakReportArgs) -> Result<()> {
    let path = args.dir.join("samples.jsonl");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let samples: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let mut md = table(&samples);
    md.push_str(&slopes(&samples));
    md.push_str(&fresh(&args.dir, &samples));
    if let Ok(check) = std::fs::read_to_string(args.dir.join("check.txt")) {
        md.push('\n');
        md.push_str(&check);
    }
    let out = args.dir.join("table.md");
    std::fs::write(&out, &md).with_context(|| format!("writing {}", out.display()))?;
    print!("{md}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slope_of_a_line_and_too_few_points() {
        let pts: Vec<(f64, f64)> = (0..5)
            .map(|i| (f64::from(i), 3.0 * f64::from(i) + 1.0))
            .collect();
        assert!((slope(&pts).unwrap() - 3.0).abs() < 1e-9);
        assert_eq!(slope(&pts[..2]), None);
        assert_eq!(slope(&[(1.0, 1.0), (1.0, 2.0), (1.0, 3.0)]), None);
    }
}
