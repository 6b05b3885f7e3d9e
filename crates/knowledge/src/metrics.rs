//! Shared knowledge's `/metrics` series: this node's exchanges with the
//! store and what they carried, registered at scrape time from [`crate::Counters`].
//! `herald_knowledge_statements_total` over time is the write rate BENCHMARKS.md reports.

use crate::Knowledge;
use herald_telemetry::exposition::{counter_at, Registry};
use std::sync::atomic::Ordering;

/// Registers this node's counters.
pub fn register(k: &Knowledge, out: &mut Registry) {
    let c = &k.counters;
    for (name, help, v) in [
        (
            "herald_knowledge_exchanges_total",
            "Exchanges of shared knowledge with the store (one transaction each).",
            &c.exchanges,
        ),
        (
            "herald_knowledge_exchange_failures_total",
            "Exchanges that failed (store unreachable); their news is written at the next one.",
            &c.failures,
        ),
        (
            "herald_knowledge_statements_total",
            "SQL statements the exchanges ran (writes and reads).",
            &c.statements,
        ),
        (
            "herald_knowledge_rates_lowered_total",
            "Provider rates this node lowered for the cluster (a rate refusal cut its pace).",
            &c.rates_lowered,
        ),
        (
            "herald_knowledge_shares_changed_total",
            "Provider shares the cluster changed here: another node lowered the rate, or the senders changed.",
            &c.shares_changed,
        ),
        (
            "herald_knowledge_down_hosts_sent_total",
            "Hosts this node marked down and told the cluster.",
            &c.down_sent,
        ),
        (
            "herald_knowledge_down_hosts_received_total",
            "Down hosts other nodes told this node about.",
            &c.down_received,
        ),
        (
            "herald_knowledge_ignored_rows_total",
            "Shared rows ignored as unusable (a rate not a positive number, an address that does not parse).",
            &c.ignored_rows,
        ),
    ] {
        counter_at(out, name, help, v.load(Ordering::Relaxed));
    }
}

impl herald_stage::offers::Metrics for Knowledge {
    fn register_metrics<'a>(
        &'a self,
        out: &'a mut Registry,
    ) -> herald_stage::offers::Offered<'a, ()> {
        register(self, out);
        Box::pin(std::future::ready(()))
    }
}
