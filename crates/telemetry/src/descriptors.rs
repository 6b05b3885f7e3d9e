//! The series that show whether the process is near its descriptor limit and what it refused to
//! stay clear of it: the open-file limit in force, HTTP connections open and refused (by
//! reason), and local shortages met on outbound connections (by resource). Kept here, beside
//! the other series, because `/metrics` is encoded from telemetry's registry; the API and the
//! scheduler only count.

use crate::exposition::{self, Counter, Gauge, Registry};
use herald_types::LocalResource;

/// Why an HTTP connection was refused or cut off (the `reason` label of
/// `herald_http_refusals_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpRefusal {
    /// `http.max_connections` open: refused at once (503, closed).
    TotalLimit,
    /// `http.max_connections_per_client` open from this address: refused at once.
    PerClientLimit,
    /// Idle with no request under way when the table was full: closed to admit a newcomer.
    Shed,
    /// No complete request head within `http.header_read_timeout_secs`.
    HeaderTimeout,
    /// Kept alive with no request, or a request body stalled, for `http.idle_timeout_secs`.
    IdleTimeout,
    /// `accept` itself failed for want of a descriptor or memory.
    AcceptFailed,
}

impl HttpRefusal {
    pub const ALL: [HttpRefusal; 6] = [
        HttpRefusal::TotalLimit,
        HttpRefusal::PerClientLimit,
        HttpRefusal::Shed,
        HttpRefusal::HeaderTimeout,
        HttpRefusal::IdleTimeout,
        HttpRefusal::AcceptFailed,
    ];

    pub fn word(self) -> &'static str {
        match self {
            HttpRefusal::TotalLimit => "total_limit",
            HttpRefusal::PerClientLimit => "per_client_limit",
            HttpRefusal::Shed => "shed",
            HttpRefusal::HeaderTimeout => "header_timeout",
            HttpRefusal::IdleTimeout => "idle_timeout",
            HttpRefusal::AcceptFailed => "accept_failed",
        }
    }
}

/// `herald_open_files_limit`, `herald_http_connections`, `herald_http_refusals_total{reason}`,
/// `herald_local_shortages_total{resource}`.
#[derive(Clone)]
pub struct DescriptorMetrics {
    open_files_limit: Gauge,
    http_connections: Gauge,
    http_refusals: [Counter; HttpRefusal::ALL.len()],
    shortages: [Counter; LocalResource::ALL.len()],
}

impl DescriptorMetrics {
    pub(crate) fn new(registry: &mut Registry) -> DescriptorMetrics {
        let open_files_limit = Gauge::default();
        exposition::register(
            registry,
            "herald_open_files_limit",
            "The process's open-file limit (RLIMIT_NOFILE soft limit) after start raised it.",
            open_files_limit.clone(),
        );
        let http_connections = Gauge::default();
        exposition::register(
            registry,
            "herald_http_connections",
            "HTTP connections open now on the API/web listener.",
            http_connections.clone(),
        );
        let http_refusals = exposition::counter_family(
            registry,
            "herald_http_refusals_total",
            "HTTP connections refused or closed by a listener bound: total or per-client cap (503 and close), an idle connection shed for a newcomer, no request head in time, kept alive idle or a request body stalled too long, accept failing for want of descriptors.",
            HttpRefusal::ALL.map(|r| [("reason", r.word())]),
        );
        let shortages = exposition::counter_family(
            registry,
            "herald_local_shortages_total",
            "Outbound connections that failed for want of a local resource (descriptors, memory, socket buffers, local ports): never counted against the receiving host; new connections pause briefly instead.",
            LocalResource::ALL.map(|r| [("resource", r.word())]),
        );
        DescriptorMetrics {
            open_files_limit,
            http_connections,
            http_refusals,
            shortages,
        }
    }

    pub fn set_open_files_limit(&self, limit: u64) {
        self.open_files_limit
            .set(i64::try_from(limit).unwrap_or(i64::MAX));
    }

    pub fn http_opened(&self) {
        self.http_connections.inc();
    }

    pub fn http_closed(&self) {
        self.http_connections.dec();
    }

    pub fn http_connections(&self) -> i64 {
        self.http_connections.get()
    }

    pub fn count_http_refusal(&self, why: HttpRefusal) {
        self.http_refusals[why as usize].inc();
    }

    pub fn http_refusals(&self, why: HttpRefusal) -> u64 {
        self.http_refusals[why as usize].get()
    }

    pub fn count_shortage(&self, resource: LocalResource) {
        self.shortages[resource.index()].inc();
    }

    pub fn shortages(&self, resource: LocalResource) -> u64 {
        self.shortages[resource.index()].get()
    }
}
