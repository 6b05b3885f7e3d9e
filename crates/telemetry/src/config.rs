//! The server's `[stats]` and `[log]` tables: what telemetry writes to disk. Every key has a
//! default and unknown keys are refused; [`telemetry_config`] turns them into the
//! [`TelemetryConfig`] under the server's data directory.
//!
//! The delivery log rotates itself by default (256 MiB or a day per file, 30 gzip'd files,
//! 30 days), so a server whose operator set up no logrotate cannot fill its disk with it; with
//! logrotate, set `delivery_log_max_bytes = 0` and `delivery_log_max_age_secs = 0` and send
//! SIGHUP after each rotation.

use crate::{RotationPolicy, StatsConfig, TelemetryConfig};
use serde::Deserialize;
use std::path::Path;

/// The statistics store behind `herald report` and the dashboard (`<data_dir>/stats.db`).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StatsSection {
    /// Keep delivery statistics (off: reports are unavailable; used to measure their cost).
    pub enabled: bool,
    /// Aggregates are written to disk this often (and before every report).
    pub flush_secs: u64,
    /// Roll-ups older than this many days are deleted (hourly); 0 keeps them forever.
    pub keep_days: u32,
}

impl Default for StatsSection {
    fn default() -> Self {
        StatsSection {
            enabled: true,
            flush_secs: 5,
            keep_days: 90,
        }
    }
}

impl StatsSection {
    /// Checked when the server's configuration is loaded; the error names its key.
    pub fn check(&self) -> Result<(), String> {
        if self.flush_secs == 0 || self.flush_secs > 3600 {
            return Err("stats.flush_secs must be between 1 and 3600".into());
        }
        Ok(())
    }
}

/// Logging (`[log]`).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// Write `<data_dir>/log/delivery.log` (one line per delivery attempt).
    pub delivery_log: bool,
    /// The server's own log on stderr (journald under systemd): `text` for people, `json` (one
    /// object per line: timestamp, level, target, fields) for log shippers.
    pub format: LogFormat,
    /// Rotate the delivery log once it holds this many bytes (0: never by size).
    pub delivery_log_max_bytes: u64,
    /// Rotate the delivery log once its file is this old, if it has any line (0: never by age).
    pub delivery_log_max_age_secs: u64,
    /// Rotated delivery-log files kept at most; the oldest are removed first.
    pub delivery_log_keep_files: u32,
    /// Rotated delivery-log files older than this are removed (0: kept up to the count).
    pub delivery_log_keep_days: u32,
    /// Gzip rotated files (in the background; the writer never waits on it).
    pub delivery_log_compress: bool,
}

/// Smallest `delivery_log_max_bytes` other than 0: a few lines per file.
const MIN_LOG_FILE_BYTES: u64 = 4096;
/// Most rotated files kept (a directory listing per sweep stays short).
const MAX_KEEP_FILES: u32 = 10_000;

/// `[log] format`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            delivery_log: true,
            format: LogFormat::Text,
            delivery_log_max_bytes: 256 << 20,
            delivery_log_max_age_secs: 24 * 3600,
            delivery_log_keep_files: 30,
            delivery_log_keep_days: 30,
            delivery_log_compress: true,
        }
    }
}

impl LogConfig {
    /// Checked when the server's configuration is loaded; the error names its key.
    pub fn check(&self) -> Result<(), String> {
        if self.delivery_log_max_bytes != 0 && self.delivery_log_max_bytes < MIN_LOG_FILE_BYTES {
            return Err(format!(
                "log.delivery_log_max_bytes must be 0 (no rotation by size) or at least {MIN_LOG_FILE_BYTES}"
            ));
        }
        if self.delivery_log_max_age_secs != 0 && self.delivery_log_max_age_secs < 60 {
            return Err(
                "log.delivery_log_max_age_secs must be 0 (no rotation by age) or at least 60"
                    .into(),
            );
        }
        if self.delivery_log_keep_files == 0 || self.delivery_log_keep_files > MAX_KEEP_FILES {
            return Err(format!(
                "log.delivery_log_keep_files must be between 1 and {MAX_KEEP_FILES}"
            ));
        }
        Ok(())
    }

    /// The rotation the keys ask for; `None` when neither size nor age rotates.
    pub fn rotation(&self) -> Option<RotationPolicy> {
        let policy = RotationPolicy {
            max_bytes: self.delivery_log_max_bytes,
            max_age_secs: self.delivery_log_max_age_secs,
            keep_files: self.delivery_log_keep_files,
            keep_days: self.delivery_log_keep_days,
            compress: self.delivery_log_compress,
        };
        policy.rotates().then_some(policy)
    }
}

/// Where telemetry writes under `data_dir`: `log/delivery.log` and `stats.db`, each only when
/// its section turns it on.
pub fn telemetry_config(data_dir: &Path, log: &LogConfig, stats: &StatsSection) -> TelemetryConfig {
    TelemetryConfig {
        log_path: log
            .delivery_log
            .then(|| data_dir.join("log").join("delivery.log")),
        log_rotation: log.rotation(),
        stats: stats.enabled.then(|| StatsConfig {
            path: data_dir.join("stats.db"),
            flush_secs: stats.flush_secs,
            keep_days: stats.keep_days,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_place_the_log_and_the_store_under_the_data_dir() {
        let dir = Path::new("/var/lib/herald");
        let c = telemetry_config(dir, &LogConfig::default(), &StatsSection::default());
        assert_eq!(
            c.log_path.as_deref(),
            Some(Path::new("/var/lib/herald/log/delivery.log"))
        );
        let stats = c.stats.expect("stats on by default");
        assert_eq!(stats.path, Path::new("/var/lib/herald/stats.db"));
        assert_eq!(stats.flush_secs, 5);
        let off = telemetry_config(
            dir,
            &LogConfig {
                delivery_log: false,
                format: LogFormat::Json,
                ..LogConfig::default()
            },
            &StatsSection {
                enabled: false,
                ..StatsSection::default()
            },
        );
        assert!(off.log_path.is_none() && off.stats.is_none());
    }

    #[test]
    fn flush_secs_is_bounded_and_the_error_names_it() {
        for flush_secs in [0, 3601] {
            let s = StatsSection {
                flush_secs,
                ..StatsSection::default()
            };
            let e = s.check().expect_err("out of range");
            assert!(e.starts_with("stats.flush_secs"), "{flush_secs}: {e}");
        }
        assert!(StatsSection::default().check().is_ok());
    }

    #[test]
    fn rotation_keys_are_bounded_and_zero_turns_the_writer_s_rotation_off() {
        let d = LogConfig::default();
        assert!(d.check().is_ok());
        let r = d.rotation().expect("rotates by default");
        assert_eq!(
            (r.max_bytes, r.keep_files, r.compress),
            (256 << 20, 30, true)
        );
        let bad = [
            LogConfig {
                delivery_log_max_bytes: 100,
                ..LogConfig::default()
            },
            LogConfig {
                delivery_log_max_age_secs: 5,
                ..LogConfig::default()
            },
            LogConfig {
                delivery_log_keep_files: 0,
                ..LogConfig::default()
            },
        ];
        for (c, key) in bad.iter().zip(["max_bytes", "max_age_secs", "keep_files"]) {
            let e = c.check().expect_err(key);
            assert!(e.starts_with(&format!("log.delivery_log_{key}")), "{e}");
        }
        let external = LogConfig {
            delivery_log_max_bytes: 0,
            delivery_log_max_age_secs: 0,
            ..LogConfig::default()
        };
        assert!(external.check().is_ok() && external.rotation().is_none());
    }
}
