//! The data disk: how much room is left under the data directory, and whether it fills within
//! [`FILL_WARN_DAYS`] at the rate the data directory grows.
//!
//! The rate needs history: each `herald doctor` run appends one sample — (Unix seconds, bytes
//! under the data directory) — to `<data_dir>/disk-usage.log` ([`SAMPLES_FILE`], one
//! `<secs> <bytes>` line each, the newest [`MAX_SAMPLES`] kept). The rate is the growth from the
//! oldest sample of the last [`WINDOW_SECS`] (at least [`MIN_SPAN_SECS`] old) to now, so a daily
//! `herald doctor` from cron sees the weekly trend, and the first run only reports the room left.
//! Free space is what the filesystem gives an unprivileged writer (`statvfs` `f_bavail`).
//!
//! SECURITY: the samples file is Herald's own; a malformed line is skipped, never trusted to
//! size anything.

use crate::{Finding, Severity};
use std::path::Path;

/// The samples file under the data directory.
pub const SAMPLES_FILE: &str = "disk-usage.log";
/// Samples kept (a daily run keeps about three years).
pub const MAX_SAMPLES: usize = 1000;
/// How far back the rate looks.
pub const WINDOW_SECS: u64 = 7 * 24 * 3600;
/// A sample younger than this says nothing about a rate (two runs a moment apart).
pub const MIN_SPAN_SECS: u64 = 60;
/// Warn when the disk fills within this many days at the current rate.
pub const FILL_WARN_DAYS: f64 = 7.0;
/// An error when it fills within a day.
pub const FILL_ERROR_DAYS: f64 = 1.0;

/// One measurement of the data directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub at_secs: u64,
    pub used_bytes: u64,
}

/// Bytes in the files under `dir` (apparent sizes, as `du --apparent-size -s`), not following
/// symbolic links. Unreadable entries are skipped.
pub fn data_dir_bytes(dir: &Path) -> std::io::Result<u64> {
    let mut total = 0u64;
    let mut stack = vec![dir.to_path_buf()];
    std::fs::metadata(dir)?;
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.filter_map(Result::ok) {
            let Ok(meta) = e.path().symlink_metadata() else {
                continue;
            };
            if meta.is_dir() {
                stack.push(e.path());
            } else if meta.is_file() {
                total = total.saturating_add(meta.len());
            }
        }
    }
    Ok(total)
}

/// Bytes an unprivileged writer may still use on the filesystem holding `dir`, and its size.
pub fn free_bytes(dir: &Path) -> std::io::Result<(u64, u64)> {
    let st = nix::sys::statvfs::statvfs(dir).map_err(std::io::Error::from)?;
    let frag = st.fragment_size() as u64;
    Ok((
        (st.blocks_available() as u64).saturating_mul(frag),
        (st.blocks() as u64).saturating_mul(frag),
    ))
}

/// The samples recorded so far, oldest first; malformed lines are skipped.
pub fn read_samples(path: &Path) -> Vec<Sample> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|l| {
            let (at, used) = l.trim().split_once(' ')?;
            Some(Sample {
                at_secs: at.parse().ok()?,
                used_bytes: used.trim().parse().ok()?,
            })
        })
        .collect()
}

/// Appends `now` to the samples at `path` (the newest [`MAX_SAMPLES`] kept), through a
/// temporary file and a rename so a crash never leaves half a file.
pub fn record_sample(path: &Path, mut samples: Vec<Sample>, now: Sample) -> std::io::Result<()> {
    samples.push(now);
    let skip = samples.len().saturating_sub(MAX_SAMPLES);
    let text: String = samples[skip..]
        .iter()
        .map(|s| format!("{} {}\n", s.at_secs, s.used_bytes))
        .collect();
    let tmp = path.with_extension("log.tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

/// Growth in bytes per second from the oldest usable sample to `now`; `None` without one.
/// A shrinking directory grows at 0.
pub fn growth_per_sec(samples: &[Sample], now: Sample) -> Option<f64> {
    let base = samples.iter().find(|s| {
        let age = now.at_secs.saturating_sub(s.at_secs);
        s.at_secs <= now.at_secs && (MIN_SPAN_SECS..=WINDOW_SECS).contains(&age)
    })?;
    let span = now.at_secs.saturating_sub(base.at_secs) as f64;
    Some(now.used_bytes.saturating_sub(base.used_bytes) as f64 / span)
}

/// The finding: room left, and how many days until it is gone at `rate` bytes per second.
pub fn finding(subject: &str, now: Sample, free: u64, rate: Option<f64>) -> Finding {
    let room = format!(
        "data directory {}, {} free on its disk",
        human(now.used_bytes),
        human(free)
    );
    let Some(rate) = rate else {
        return Finding::new(
            Severity::Ok,
            "disk",
            subject,
            format!("{room}; no growth rate yet (each `herald doctor` run records one sample in {SAMPLES_FILE}; run it again later)"),
        );
    };
    let per_day = rate * 86_400.0;
    if per_day < 1.0 {
        return Finding::new(
            Severity::Ok,
            "disk",
            subject,
            format!("{room}; not growing"),
        );
    }
    let days = free as f64 / per_day;
    let severity = if days < FILL_ERROR_DAYS {
        Severity::Error
    } else if days < FILL_WARN_DAYS {
        Severity::Warn
    } else {
        Severity::Ok
    };
    let mut message = format!(
        "{room}; growing {}/day: full in {days:.1} days at this rate",
        human(per_day as u64)
    );
    if severity != Severity::Ok {
        message.push_str(" (free space, or bound the delivery log ([log] delivery_log_*), archive and statistics retention)");
    }
    Finding::new(severity, "disk", subject, message)
}

/// Measures the data directory, records the sample and judges the disk. `now_secs` is the
/// clock (an input, so tests need not wait days).
pub fn check(data_dir: &Path, now_secs: u64) -> Finding {
    let subject = data_dir.display().to_string();
    let measured = data_dir_bytes(data_dir).and_then(|used| Ok((used, free_bytes(data_dir)?)));
    let (used, (free, _)) = match measured {
        Ok(m) => m,
        Err(e) => return finding_error(data_dir, &e.to_string()),
    };
    let now = Sample {
        at_secs: now_secs,
        used_bytes: used,
    };
    let path = data_dir.join(SAMPLES_FILE);
    let samples = read_samples(&path);
    let rate = growth_per_sec(&samples, now);
    let mut f = finding(&subject, now, free, rate);
    if let Err(e) = record_sample(&path, samples, now) {
        // Doctor may run as a user who cannot write there: the check still answers.
        f.message
            .push_str(&format!(" (sample not recorded in {SAMPLES_FILE}: {e})"));
    }
    f
}

/// The finding when the data directory cannot be measured at all.
pub fn finding_error(data_dir: &Path, why: &str) -> Finding {
    Finding::new(
        Severity::Warn,
        "disk",
        data_dir.display().to_string(),
        format!("cannot measure the data directory: {why}"),
    )
}

/// Bytes for people: `1.5 GB`.
fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1000.0 && unit + 1 < UNITS.len() {
        v /= 1000.0;
        unit += 1;
    }
    match unit {
        0 => format!("{bytes} B"),
        _ => format!("{v:.1} {}", UNITS[unit]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GB: u64 = 1_000_000_000;

    fn s(at_secs: u64, used_bytes: u64) -> Sample {
        Sample {
            at_secs,
            used_bytes,
        }
    }

    #[test]
    fn the_rate_comes_from_the_oldest_sample_of_the_window() {
        let now = s(10 * 86_400, 20 * GB);
        let samples = [s(0, 0), s(3 * 86_400, 6 * GB), s(10 * 86_400 - 10, 20 * GB)];
        // Day 0 is outside the week; day 3 is the base: 14 GB in 7 days.
        let rate = growth_per_sec(&samples, now).expect("rate");
        assert!((rate * 86_400.0 - 2.0 * GB as f64).abs() < 1.0, "{rate}");
        // Only a sample seconds old: no rate.
        assert_eq!(growth_per_sec(&samples[2..], now), None);
    }

    #[test]
    fn fills_within_a_week_warns_within_a_day_errs() {
        let now = s(1000, 50 * GB);
        let per_day = |gb: f64| Some(gb * GB as f64 / 86_400.0);
        let f = finding("/d", now, 100 * GB, per_day(20.0));
        assert_eq!(f.severity, Severity::Warn, "{f:?}");
        assert!(f.message.contains("full in 5.0 days"), "{f:?}");
        assert_eq!(
            finding("/d", now, 100 * GB, per_day(200.0)).severity,
            Severity::Error
        );
        assert_eq!(
            finding("/d", now, 100 * GB, per_day(10.0)).severity,
            Severity::Ok
        );
        assert_eq!(
            finding("/d", now, 100 * GB, Some(0.0)).severity,
            Severity::Ok
        );
        let first = finding("/d", now, 100 * GB, None);
        assert!(first.message.contains("no growth rate yet"), "{first:?}");
    }

    #[test]
    fn samples_are_recorded_bounded_and_malformed_lines_skipped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(SAMPLES_FILE);
        std::fs::write(&path, "12 34\nnot a sample\n56 x\n").expect("write");
        let samples = read_samples(&path);
        assert_eq!(samples, vec![s(12, 34)]);
        let many: Vec<Sample> = (0..MAX_SAMPLES as u64 + 5).map(|i| s(i, i)).collect();
        record_sample(&path, many, s(9999, 1)).expect("record");
        let back = read_samples(&path);
        assert_eq!(back.len(), MAX_SAMPLES);
        assert_eq!(back.last(), Some(&s(9999, 1)));
        // The check measures and records.
        std::fs::write(dir.path().join("big"), vec![0u8; 4096]).expect("write");
        let f = check(dir.path(), 20_000);
        assert_eq!(f.check, "disk");
        assert_eq!(read_samples(&path).last().map(|s| s.at_secs), Some(20_000));
    }
}
