//! The egress sources' `/metrics` series, registered at scrape time: one label per configured
//! source address (bounded by the configuration). Offered to the HTTP API as a
//! `herald_stage::offers::Metrics`.

use crate::{utc_day, Egress, SourceView};
use herald_stage::offers::{self, Offered};
use herald_telemetry::exposition::{gauge_rows, Registry};

/// Connections open now, copies sent today (UTC) and today's warm-up cap (absent once its
/// schedule is over) of each source. Nothing when no source is configured.
pub fn register(sources: &[SourceView], out: &mut Registry) {
    if sources.is_empty() {
        return;
    }
    let label = |s: &SourceView| [("source", s.address.to_string())];
    gauge_rows(
        out,
        "herald_egress_connections",
        "Connections open from each egress source address.",
        sources.iter().map(|s| (label(s), s.connections as i64)),
    );
    gauge_rows(
        out,
        "herald_egress_sent_today",
        "Copies sent (reserved) from each egress source address on the current UTC day.",
        sources
            .iter()
            .map(|s| (label(s), i64::try_from(s.sent_today).unwrap_or(i64::MAX))),
    );
    gauge_rows(
        out,
        "herald_egress_warmup_cap_today",
        "Today's warm-up volume cap of each egress source address still warming up.",
        sources.iter().filter_map(|s| {
            s.cap_today
                .map(|c| (label(s), i64::try_from(c).unwrap_or(i64::MAX)))
        }),
    );
}

impl offers::Metrics for Egress {
    fn register_metrics<'a>(&'a self, out: &'a mut Registry) -> Offered<'a, ()> {
        register(&self.sources(utc_day(herald_types::unix_ms_now())), out);
        Box::pin(std::future::ready(()))
    }
}
