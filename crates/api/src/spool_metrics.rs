//! The spool's and the scheduler's channels' numbers for `/metrics`, read at scrape time into the
//! scrape's registry: group-commit sizes and fsync latency are what tell an operator whether the
//! disk keeps up (seeds/000: synchronous writes per delivery).

use herald_spool::SpoolStats;
use herald_telemetry::exposition::{counter_at, gauge_at, gauge_rows, Registry};

pub fn register(s: &SpoolStats, out: &mut Registry) {
    gauge_at(
        out,
        "herald_spool_writable",
        "1 when the spool takes new posts; 0 during a journal outage (a full disk: fan-out pauses until a repair succeeds) or while posts are held off to keep the data disk's last space for outcomes: new posts get 452 4.3.1.",
        i64::from(s.writable),
    );
    counter_at(
        out,
        "herald_spool_outages_total",
        "Times the journal became unwritable (each outage once).",
        s.outages,
    );
    counter_at(
        out,
        "herald_spool_commits_total",
        "Group commits (one fdatasync each).",
        s.commits,
    );
    counter_at(
        out,
        "herald_spool_records_total",
        "Journal records written.",
        s.records_written,
    );
    counter_at(
        out,
        "herald_spool_bytes_total",
        "Journal bytes written.",
        s.bytes_written,
    );
    gauge_at(
        out,
        "herald_spool_fsync_last_microseconds",
        "Duration of the latest fdatasync.",
        s.fsync_last_us as i64,
    );
    gauge_at(
        out,
        "herald_spool_fsync_avg_microseconds",
        "Average fdatasync duration.",
        s.fsync_avg_us as i64,
    );
    gauge_at(
        out,
        "herald_spool_fsync_max_microseconds",
        "Longest fdatasync.",
        s.fsync_max_us as i64,
    );
    gauge_at(
        out,
        "herald_spool_group_commit_last_records",
        "Records in the latest group commit.",
        s.group_last_records as i64,
    );
    gauge_at(
        out,
        "herald_spool_group_commit_avg_records",
        "Average records per group commit (rounded).",
        s.group_avg_records.round() as i64,
    );
    gauge_at(
        out,
        "herald_spool_group_commit_max_records",
        "Most records in one group commit.",
        s.group_max_records as i64,
    );
    gauge_at(
        out,
        "herald_spool_live_posts",
        "Posts accepted and not yet completed.",
        s.live_posts as i64,
    );
    gauge_at(
        out,
        "herald_spool_segments",
        "Journal segment files.",
        s.segments as i64,
    );
    counter_at(
        out,
        "herald_spool_quarantined_segments_total",
        "Damaged segments set aside at start.",
        s.quarantined_segments,
    );
}

/// The intake's hand-off backlog: a `250` is answered once a post is durable,
/// before its stage takes it, so a stage slower than the intake shows here first, long before
/// senders wait for room ([intake] backlog_max_posts / backlog_max_bytes).
pub fn register_intake(depth: &herald_enqueue::backlog::BacklogDepth, out: &mut Registry) {
    let clamp = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    gauge_at(
        out,
        "herald_intake_backlog_posts",
        "Posts acknowledged (durable in the spool) and not yet handed to their stage.",
        clamp(depth.posts()),
    );
    gauge_at(
        out,
        "herald_intake_backlog_bytes",
        "Bytes of the bodies of those posts, held in memory until handed over.",
        clamp(depth.bytes()),
    );
    counter_at(
        out,
        "herald_intake_handed_total",
        "Posts handed from the intake's backlog to their stage since the server started.",
        depth.handed(),
    );
}

/// Depth and capacity of the scheduler's bounded channels, labelled by channel.
pub fn register_channels(channels: &[herald_scheduler::ChannelView], out: &mut Registry) {
    let rows = |pick: fn(&herald_scheduler::ChannelView) -> usize| {
        channels
            .iter()
            .map(move |c| {
                let v = i64::try_from(pick(c)).unwrap_or(i64::MAX);
                ([("channel", c.channel.to_string())], v)
            })
            .collect::<Vec<_>>()
    };
    gauge_rows(
        out,
        "herald_channel_depth",
        "Messages waiting in a stage's bounded channel.",
        rows(|c| c.depth),
    );
    gauge_rows(
        out,
        "herald_channel_capacity",
        "Capacity of a stage's bounded channel.",
        rows(|c| c.capacity),
    );
}
