//! The shared fan-out's `/metrics` series, registered at scrape time: the cluster gauges read
//! from the shared store (shards open, leased, done, bad; reclaims; the oldest lease's age) and
//! this node's own counters and held shards.

use crate::node::Shards;
use herald_directory::ShardCounts;
use herald_telemetry::exposition::{counter_at, gauge_at, gauge_rows, Registry};

/// Registers the series: `cluster` as `Directory::shard_counts` returned it (None when the
/// store could not be read: the cluster gauges are left out rather than shown as zero).
pub fn register(shards: &Shards, cluster: Option<&ShardCounts>, out: &mut Registry) {
    if let Some(c) = cluster {
        gauge_rows(
            out,
            "herald_cluster_shards",
            "Shards of shared posts in the shared store, by state: open (claimable), leased (a node fans it out), done, bad (set aside: a damaged row).",
            [("open", c.open), ("leased", c.leased), ("done", c.done), ("bad", c.bad)]
                .map(|(s, n)| ([("state", s.to_string())], i64::try_from(n).unwrap_or(i64::MAX))),
        );
        gauge_at(
            out,
            "herald_cluster_shards_reclaimed",
            "Claims, over the stored shards, that took a shard from a node whose lease had run out.",
            i64::try_from(c.reclaimed).unwrap_or(i64::MAX),
        );
        gauge_at(
            out,
            "herald_cluster_shard_lease_age_milliseconds",
            "Age of the oldest shard lease held now (since it was taken), store clock.",
            i64::try_from(c.oldest_lease_ms).unwrap_or(i64::MAX),
        );
    }
    let k = &shards.counters;
    gauge_at(
        out,
        "herald_shards_held",
        "Shards this node fans out now.",
        i64::try_from(shards.held()).unwrap_or(i64::MAX),
    );
    gauge_at(
        out,
        "herald_shards_draining",
        "1 while this node is drained (claims no shards).",
        i64::from(shards.is_draining()),
    );
    for (name, help, v) in [
        (
            "herald_shards_published_total",
            "List posts this node stored in the shared store.",
            k.published.get(),
        ),
        (
            "herald_shards_claimed_total",
            "Shards this node claimed.",
            k.claimed.get(),
        ),
        (
            "herald_shards_reclaimed_total",
            "Shards this node took over after another node's lease ran out.",
            k.reclaimed.get(),
        ),
        (
            "herald_shards_done_total",
            "Shards this node finished.",
            k.done.get(),
        ),
        (
            "herald_shards_handed_back_total",
            "Shards this node handed back unfinished (drain).",
            k.handed_back.get(),
        ),
        (
            "herald_shards_lost_total",
            "Shards another node took over from this one (its lease ran out).",
            k.lost.get(),
        ),
        (
            "herald_shards_bad_total",
            "Shards this node set aside as damaged.",
            k.bad.get(),
        ),
        (
            "herald_shards_reports_total",
            "Batched shard reports this node wrote (one statement each, with the lease renewal).",
            k.reports.get(),
        ),
        (
            "herald_shards_report_failures_total",
            "Shard reports that failed (retried next interval).",
            k.report_failures.get(),
        ),
    ] {
        counter_at(out, name, help, v);
    }
}
