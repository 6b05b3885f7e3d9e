//! One event taxonomy for everything Herald does, and the consumers fed by it: the delivery log,
//! the Prometheus counters behind `/metrics`, and per-post progress (for `herald status`, the
//! demo's progress bar and the reports).
//!
//! Besides those: the statistics store (`stats`: per-minute/hour/post roll-ups in SQLite behind
//! the reports), per-second outcome rates (`rate`), SMTP latency per destination class
//! (`classes`), stragglers (`stragglers`), lock and stage-wait measurements (`contention`) and
//! the process's own CPU and memory (`process`).
//!
//! Every stage calls [`Telemetry::emit`] with an [`Event`]; nothing downstream parses log text.
//! `emit` is cheap: atomic counter updates, a short critical section on the post's progress, and
//! a bounded hand-off of the formatted log line to a writer thread. When the log writer falls
//! behind, `emit` blocks (backpressure) rather than dropping lines: a delivery log that silently
//! loses lines is worse than a slower fan-out.

pub mod classes;
pub mod config;
pub mod contention;
pub mod descriptors;
pub mod event;
pub mod exposition;
pub mod imap;
pub mod log;
pub mod logfiles;
pub mod metrics;
pub mod process;
pub mod progress;
pub mod rate;
pub mod scheduling;
pub mod stats;
pub mod stragglers;
pub mod time;

pub use config::{telemetry_config, LogConfig, LogFormat, StatsSection};
pub use contention::{Contention, LockId, StageId};
pub use event::{Attempt, Event, PostmasterForward, PostmasterMail};
pub use logfiles::RotationPolicy;
pub use metrics::{Gauges, InboundRefusal, Metrics};
pub use progress::PostSummary;
pub use scheduling::SchedulerEvent;
pub use stats::{StatsConfig, StatsError, StatsReader};
pub use stragglers::Stragglers;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Where telemetry writes. `log_path: None` keeps the delivery log off (tests, benchmarks);
/// `stats: None` keeps the statistics store off (reports then say so).
#[derive(Debug, Clone, Default)]
pub struct TelemetryConfig {
    pub log_path: Option<PathBuf>,
    /// How the delivery log rotates itself (`None`: never; an external logrotate and SIGHUP).
    pub log_rotation: Option<RotationPolicy>,
    pub stats: Option<StatsConfig>,
}

/// The handle every stage holds. Cloning is cheap.
#[derive(Clone)]
pub struct Telemetry {
    inner: Arc<Inner>,
}

struct Inner {
    /// Every live series of `/metrics` (metrics and contention register theirs at start).
    registry: exposition::Registry,
    metrics: Metrics,
    progress: progress::ProgressBook,
    log: Option<log::DeliveryLog>,
    contention: Arc<Contention>,
    stragglers: Mutex<stragglers::StragglerBook>,
    stats: Option<stats::StatsSink>,
}

/// Why telemetry could not start.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("cannot open delivery log {path}: {source}")]
    OpenLog {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot open the statistics store: {0}")]
    Stats(#[from] StatsError),
}

impl Telemetry {
    pub fn new(cfg: &TelemetryConfig) -> Result<Telemetry, TelemetryError> {
        let log = match &cfg.log_path {
            Some(path) => Some(log::DeliveryLog::open(path, cfg.log_rotation)?),
            None => None,
        };
        let contention = Arc::new(Contention::default());
        let stats = match &cfg.stats {
            Some(s) => Some(stats::StatsSink::open(s, contention.clone())?),
            None => None,
        };
        Ok(Telemetry::with_parts(log, stats, contention))
    }

    /// Telemetry with no delivery log and no statistics store: for tests and benchmarks.
    pub fn disabled_log() -> Telemetry {
        Telemetry::with_parts(None, None, Arc::new(Contention::default()))
    }

    fn with_parts(
        log: Option<log::DeliveryLog>,
        stats: Option<stats::StatsSink>,
        contention: Arc<Contention>,
    ) -> Telemetry {
        let mut registry = exposition::Registry::default();
        let metrics = Metrics::new(&mut registry);
        contention.register(&mut registry);
        Telemetry {
            inner: Arc::new(Inner {
                registry,
                metrics,
                progress: progress::ProgressBook::default(),
                log,
                contention,
                stragglers: Mutex::new(stragglers::StragglerBook::default()),
                stats,
            }),
        }
    }

    /// Records one event in every consumer.
    pub fn emit(&self, event: Event) {
        let inner = &*self.inner;
        inner.metrics.observe(&event);
        inner.progress.observe(&event, &inner.contention);
        if let Event::Attempt(a) = &event {
            let now = herald_types::unix_ms_now();
            inner
                .contention
                .lock(LockId::Stragglers, &inner.stragglers)
                .observe(a, now);
        }
        if let Some(stats) = &inner.stats {
            stats.observe(&event);
        }
        if let Some(log) = &inner.log {
            if let Some(line) = log::format_line(&event) {
                log.write(line);
            }
        }
    }

    /// Lock and stage-wait measurements; stages record their channel waits here.
    pub fn contention(&self) -> &Contention {
        &self.inner.contention
    }

    /// The `limit` recipients and destinations holding the most deferred copies.
    pub fn stragglers(&self, limit: usize) -> Stragglers {
        let now = herald_types::unix_ms_now();
        self.inner
            .contention
            .lock(LockId::Stragglers, &self.inner.stragglers)
            .report(now, limit)
    }

    /// Writes the aggregated statistics now and opens a reader on the store, so a report sees
    /// every event emitted before the call. Blocking (SQLite): call from a blocking thread.
    pub fn stats_reader(&self) -> Result<StatsReader, StatsError> {
        let sink = self.inner.stats.as_ref().ok_or(StatsError::Disabled)?;
        sink.flush()?;
        StatsReader::open(sink.path())
    }

    /// Writes the aggregated statistics (shutdown). Blocking.
    pub fn flush_stats(&self) {
        if let Some(sink) = &self.inner.stats {
            if let Err(e) = sink.flush() {
                tracing::error!(error = %e, "final statistics flush failed");
            }
        }
    }

    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// Writes the whole `/metrics` exposition ([`exposition::CONTENT_TYPE`]): telemetry's live
    /// series, its scrape-time views, then `others` (values other stages hand in at scrape time,
    /// e.g. the spool's), ending with `# EOF`.
    pub fn encode_metrics(&self, others: &exposition::Registry, out: &mut String) {
        let mut snapshot = exposition::Registry::default();
        self.inner.metrics.register_snapshot(&mut snapshot);
        self.inner.contention.register_snapshot(&mut snapshot);
        exposition::encode(out, &[&self.inner.registry, &snapshot, others]);
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

    /// Reopens the delivery log at its path (SIGHUP, after logrotate renamed it). Nothing to do
    /// when the log is off.
    pub fn reopen_log(&self) -> std::io::Result<()> {
        match &self.inner.log {
            Some(log) => log.reopen(),
            None => Ok(()),
        }
    }

    /// Waits until everything handed to the delivery log is written and flushed.
    pub fn flush_log(&self) {
        if let Some(log) = &self.inner.log {
            log.flush();
        }
    }
}
