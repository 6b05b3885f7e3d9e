//! Spool → wire: the journal's counters and gauges (`/api/v1/status`).

use herald_api_types as v;
use herald_spool as sp;

pub(crate) fn stats(s: &sp::SpoolStats) -> v::SpoolStats {
    v::SpoolStats {
        commits: s.commits,
        records_written: s.records_written,
        bytes_written: s.bytes_written,
        fsync_last_us: s.fsync_last_us,
        fsync_avg_us: s.fsync_avg_us,
        fsync_max_us: s.fsync_max_us,
        group_last_records: s.group_last_records,
        group_avg_records: s.group_avg_records,
        group_max_records: s.group_max_records,
        live_posts: s.live_posts,
        segments: s.segments,
        segment_rolls: s.segment_rolls,
        relocated_posts: s.relocated_posts,
        segments_deleted: s.segments_deleted,
        ignored_outcomes: s.ignored_outcomes,
        quarantined_segments: s.quarantined_segments,
        torn_tail_bytes: s.torn_tail_bytes,
        writable: s.writable,
        outages: s.outages,
    }
}
