//! The spool's numbers in Prometheus text format: group-commit sizes and fsync latency are what
//! tell an operator whether the disk keeps up (seeds/000: synchronous writes per delivery).

use herald_spool::SpoolStats;
use herald_telemetry::metrics::{write_counter, write_gauge};

pub fn render(s: &SpoolStats, out: &mut String) {
    write_gauge(
        out,
        "herald_spool_writable",
        "1 when the journal can be written; 0 during an outage (a full disk): new posts get 452 4.3.1 and fan-out pauses until a repair succeeds.",
        i64::from(s.writable),
    );
    write_counter(
        out,
        "herald_spool_outages_total",
        "Times the journal became unwritable (each outage once).",
        &[],
        s.outages,
    );
    write_counter(
        out,
        "herald_spool_commits_total",
        "Group commits (one fdatasync each).",
        &[],
        s.commits,
    );
    write_counter(
        out,
        "herald_spool_records_total",
        "Journal records written.",
        &[],
        s.records_written,
    );
    write_counter(
        out,
        "herald_spool_bytes_total",
        "Journal bytes written.",
        &[],
        s.bytes_written,
    );
    write_gauge(
        out,
        "herald_spool_fsync_last_microseconds",
        "Duration of the latest fdatasync.",
        s.fsync_last_us as i64,
    );
    write_gauge(
        out,
        "herald_spool_fsync_avg_microseconds",
        "Average fdatasync duration.",
        s.fsync_avg_us as i64,
    );
    write_gauge(
        out,
        "herald_spool_fsync_max_microseconds",
        "Longest fdatasync.",
        s.fsync_max_us as i64,
    );
    write_gauge(
        out,
        "herald_spool_group_commit_last_records",
        "Records in the latest group commit.",
        s.group_last_records as i64,
    );
    write_gauge(
        out,
        "herald_spool_group_commit_avg_records",
        "Average records per group commit (rounded).",
        s.group_avg_records.round() as i64,
    );
    write_gauge(
        out,
        "herald_spool_group_commit_max_records",
        "Most records in one group commit.",
        s.group_max_records as i64,
    );
    write_gauge(
        out,
        "herald_spool_live_posts",
        "Posts accepted and not yet completed.",
        s.live_posts as i64,
    );
    write_gauge(
        out,
        "herald_spool_segments",
        "Journal segment files.",
        s.segments as i64,
    );
    write_counter(
        out,
        "herald_spool_quarantined_segments_total",
        "Damaged segments set aside at start.",
        &[],
        s.quarantined_segments,
    );
}

/// Depth and capacity of the scheduler's bounded channels, labelled by channel.
pub fn render_channels(channels: &[herald_scheduler::ChannelView], out: &mut String) {
    use std::fmt::Write as _;
    for (name, help, pick) in [
        (
            "herald_channel_depth",
            "Messages waiting in a stage's bounded channel.",
            (|c: &herald_scheduler::ChannelView| c.depth)
                as fn(&herald_scheduler::ChannelView) -> usize,
        ),
        (
            "herald_channel_capacity",
            "Capacity of a stage's bounded channel.",
            |c: &herald_scheduler::ChannelView| c.capacity,
        ),
    ] {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for c in channels {
            let _ = writeln!(out, "{name}{{channel=\"{}\"}} {}", c.channel, pick(c));
        }
    }
}
