//! The spool's numbers in Prometheus text format: group-commit sizes and fsync latency are what
//! tell an operator whether the disk keeps up (seeds/000: synchronous writes per delivery).

use herald_spool::SpoolStats;
use herald_telemetry::metrics::{write_counter, write_gauge};

pub fn render(s: &SpoolStats, out: &mut String) {
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
