//! The server's `[stats]` and `[log]` tables: what telemetry writes to disk. Every key has a
//! default and unknown keys are refused; [`telemetry_config`] turns them into the
//! [`TelemetryConfig`] under the server's data directory.

use crate::{StatsConfig, TelemetryConfig};
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
}

impl Default for StatsSection {
    fn default() -> Self {
        StatsSection {
            enabled: true,
            flush_secs: 5,
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
}

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
        }
    }
}

/// Where telemetry writes under `data_dir`: `log/delivery.log` and `stats.db`, each only when
/// its section turns it on.
pub fn telemetry_config(data_dir: &Path, log: &LogConfig, stats: &StatsSection) -> TelemetryConfig {
    TelemetryConfig {
        log_path: log
            .delivery_log
            .then(|| data_dir.join("log").join("delivery.log")),
        stats: stats.enabled.then(|| StatsConfig {
            path: data_dir.join("stats.db"),
            flush_secs: stats.flush_secs,
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
            },
            &StatsSection {
                enabled: false,
                flush_secs: 5,
            },
        );
        assert!(off.log_path.is_none() && off.stats.is_none());
    }

    #[test]
    fn flush_secs_is_bounded_and_the_error_names_it() {
        for flush_secs in [0, 3601] {
            let s = StatsSection {
                enabled: true,
                flush_secs,
            };
            let e = s.check().expect_err("out of range");
            assert!(e.starts_with("stats.flush_secs"), "{flush_secs}: {e}");
        }
        assert!(StatsSection::default().check().is_ok());
    }
}
