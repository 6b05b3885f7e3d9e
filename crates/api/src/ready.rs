//! Readiness (`GET /readyz`) beside liveness (`GET /healthz`).
//!
//! `/healthz` says the process is alive and its HTTP listener answers: it stays `200 ok` while
//! the server is degraded, so a supervisor never restarts a server that is only waiting for
//! disk space or for its store (a restart would not help and would cut open sessions).
//! `/readyz` says whether the server can take mail now: `200 ready`, or `503` with one line
//! per reason — the spool refuses posts (a full data disk: SMTP says `452 4.3.1`), the store
//! did not take the last heartbeat (PostgreSQL unreachable), a listener cannot accept
//! connections. A load balancer sends posts elsewhere while it is `503`; the same answer is in
//! `/metrics` as `herald_ready`.
//!
//! The probes are cheap reads of state the stages keep (no store query per request): a load
//! balancer may ask every second. The server composes them (`server::steps::serve`); this
//! crate only runs them.
//!
//! SECURITY: public like `/healthz` (a probe carries no credentials). The reasons name a
//! condition and the first error's text (a path on the server, an error kind), nothing a
//! member wrote.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use std::sync::Arc;

/// One condition: `Some(reason)` while it keeps the server from taking mail.
pub type Probe = Box<dyn Fn() -> Option<String> + Send + Sync>;

/// The probes `/readyz` asks, in the order their reasons are listed.
#[derive(Default)]
pub struct Readiness {
    probes: Vec<Probe>,
}

impl std::fmt::Debug for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Readiness")
            .field("probes", &self.probes.len())
            .finish()
    }
}

impl Readiness {
    pub fn with(mut self, probe: Probe) -> Self {
        self.probes.push(probe);
        self
    }

    /// Every reason the server is not ready now; empty when it is.
    pub fn reasons(&self) -> Vec<String> {
        self.probes.iter().filter_map(|p| p()).collect()
    }
}

/// `GET /readyz`: `200 ready`, or `503` and `not ready: <reason>` lines.
pub async fn readyz(State(s): State<Arc<crate::ApiState>>) -> impl IntoResponse {
    let reasons = s.readiness.reasons();
    let plain = [(header::CONTENT_TYPE, "text/plain; charset=utf-8")];
    if reasons.is_empty() {
        return (StatusCode::OK, plain, "ready\n".to_string());
    }
    let body: String = reasons
        .iter()
        .map(|r| format!("not ready: {}\n", one_line(r)))
        .collect();
    (StatusCode::SERVICE_UNAVAILABLE, plain, body)
}

/// A reason on one line (error texts may carry newlines).
fn one_line(r: &str) -> String {
    r.split(['\r', '\n'])
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_listed_in_order_and_only_when_present() {
        let r = Readiness::default()
            .with(Box::new(|| Some("spool: disk full".into())))
            .with(Box::new(|| None))
            .with(Box::new(|| Some("store".into())));
        assert_eq!(r.reasons(), vec!["spool: disk full", "store"]);
        assert!(Readiness::default().reasons().is_empty());
        assert_eq!(one_line("a\r\nb"), "a b");
    }
}
