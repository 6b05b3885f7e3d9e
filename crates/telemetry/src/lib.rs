//! One event taxonomy for everything Herald does, and the consumers fed by it: the delivery log,
//! the Prometheus counters behind `/metrics`, and per-post progress (for `herald status`, the
//! demo's progress bar and the reports).
//!
//! Every stage calls [`Telemetry::emit`] with an [`Event`]; nothing downstream parses log text.
//! `emit` is cheap: atomic counter updates, a short critical section on the post's progress, and
//! a bounded hand-off of the formatted log line to a writer thread. When the log writer falls
//! behind, `emit` blocks (backpressure) rather than dropping lines: a delivery log that silently
//! loses lines is worse than a slower fan-out.

pub mod event;
pub mod log;
pub mod metrics;
pub mod progress;
pub mod scheduling;
pub mod time;

pub use event::{Attempt, Event};
pub use metrics::{Gauges, Metrics};
pub use progress::PostSummary;
pub use scheduling::{DeferralKind, HostStateKind, LaneKind, SchedulerEvent};

use std::path::PathBuf;
use std::sync::Arc;

/// Where telemetry writes. `log_path: None` keeps the delivery log off (tests, benchmarks).
#[derive(Debug, Clone, Default)]
pub struct TelemetryConfig {
    pub log_path: Option<PathBuf>,
}

/// The handle every stage holds. Cloning is cheap.
#[derive(Clone)]
pub struct Telemetry {
    inner: Arc<Inner>,
}

struct Inner {
    metrics: Metrics,
    progress: progress::ProgressBook,
    log: Option<log::DeliveryLog>,
}

/// Why telemetry could not start.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("cannot open delivery log {path}: {source}")]
    OpenLog {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl Telemetry {
    pub fn new(cfg: &TelemetryConfig) -> Result<Telemetry, TelemetryError> {
        let log = match &cfg.log_path {
            Some(path) => Some(log::DeliveryLog::open(path)?),
            None => None,
        };
        Ok(Telemetry {
            inner: Arc::new(Inner {
                metrics: Metrics::default(),
                progress: progress::ProgressBook::default(),
                log,
            }),
        })
    }

    /// Telemetry with no delivery log: for tests and benchmarks.
    pub fn disabled_log() -> Telemetry {
        Telemetry {
            inner: Arc::new(Inner {
                metrics: Metrics::default(),
                progress: progress::ProgressBook::default(),
                log: None,
            }),
        }
    }

    /// Records one event in every consumer.
    pub fn emit(&self, event: Event) {
        self.inner.metrics.observe(&event);
        self.inner.progress.observe(&event);
        if let Some(log) = &self.inner.log {
            if let Some(line) = log::format_line(&event) {
                log.write(line);
            }
        }
    }

    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// Live gauges the scheduler and spool keep current (queue depth, open connections, …).
    pub fn gauges(&self) -> &Gauges {
        &self.inner.metrics.gauges
    }

    /// Progress of one post, if it is known (accepted or recovered since the server started).
    pub fn progress(&self, post: herald_types::PostId) -> Option<PostSummary> {
        self.inner.progress.summary(post)
    }

    /// Progress of every post known since the server started, newest first.
    pub fn all_progress(&self) -> Vec<PostSummary> {
        self.inner.progress.all()
    }

    /// Waits until everything handed to the delivery log is written and flushed.
    pub fn flush_log(&self) {
        if let Some(log) = &self.inner.log {
            log.flush();
        }
    }
}
