//! `herald queue` and `herald status`: the running server's delivery queue (destinations,
//! stragglers, hosts down) and its state at a glance (store, queue, spool, nodes, recent
//! posts), as tables (or JSON for `queue --json`).

use crate::client::{or_null, pretty, Api};
use anyhow::Result;
use herald_api_types::{QueueSnapshot, Status};

pub async fn queue(api: &Api, as_json: bool, limit: usize, stragglers: bool) -> Result<()> {
    let q: QueueSnapshot = api
        .get(&format!(
            "/api/v1/queue?limit={limit}&stragglers={stragglers}"
        ))
        .await?;
    if as_json {
        outln!("{}", pretty(&q)?);
        return Ok(());
    }
    outln!(
        "queued {}  (fast {}  slow {})  resolving {}  connections {} (slow {})  hosts down {}",
        q.queued,
        q.fast_lane,
        q.slow_lane,
        q.resolving,
        q.connections,
        q.slow_connections,
        q.hosts_down
    );
    outln!(
        "{:<40} {:>7} {:>7} {:>7} {:>7} {:>9} {:>8} {:>8}  LAST ERROR",
        "DESTINATION",
        "READY",
        "RETRY",
        "WAITING",
        "ROOM",
        "CONNS",
        "OLDEST",
        "DOWN"
    );
    for d in q.destinations.iter().take(limit) {
        let down = d.down_for_secs.map_or("-".into(), |s| format!("{s}s"));
        outln!(
            "{:<40} {:>7} {:>7} {:>7} {:>7} {:>9} {:>7}s {:>8}  {}",
            d.destination,
            d.ready,
            d.retry_ready,
            d.waiting,
            d.waiting_for_room,
            format!("{}/{}", d.connections, d.connection_limit),
            d.oldest_age_secs,
            down,
            d.last_error.as_deref().unwrap_or("")
        );
    }
    if stragglers {
        outln!("\n{:<50} {:>8} {:>10}", "STRAGGLER", "PENDING", "OLDEST");
        for s in q.stragglers.iter().take(limit) {
            outln!(
                "{:<50} {:>8} {:>9}s",
                s.recipient,
                s.pending,
                s.oldest_age_secs
            );
        }
    }
    if !q.down_hosts.is_empty() && limit > 0 {
        outln!(
            "\n{:<40} {:<16} {:>8} {:>8}  LAST ERROR",
            "DOWN HOST",
            "ADDRESS",
            "FAILURES",
            "PROBE IN"
        );
        for h in q.down_hosts.iter().take(limit) {
            outln!(
                "{:<40} {:<16} {:>8} {:>7}s  {}",
                h.host,
                h.addr,
                h.consecutive_failures,
                h.probe_in_secs,
                h.last_error.as_deref().unwrap_or("")
            );
        }
    }
    Ok(())
}

pub async fn status(api: &Api) -> Result<()> {
    let s: Status = api.get("/api/v1/status").await?;
    outln!("herald {}  up {} s", s.version, s.uptime_secs);
    match &s.store_error {
        None => outln!("lists {}  members {}", s.lists, s.members),
        Some(why) => {
            outln!("store: DOWN ({why}); lists, members and nodes unknown until it answers")
        }
    }
    outln!(
        "queue: {} copies queued, {} connections, {} destinations with work",
        s.queued,
        s.connections,
        s.destinations
    );
    let sp = &s.spool;
    outln!(
        "spool: {} live posts, {} segments, {} commits, fsync avg {} µs",
        sp.live_posts,
        sp.segments,
        sp.commits,
        sp.fsync_avg_us
    );
    if !s.nodes.is_empty() {
        outln!("nodes:");
        for n in &s.nodes {
            outln!(
                "  {:<24} {:<22} {:<5} heartbeat {:>6.1} s ago  v{} schema {}{}",
                n.node_id,
                n.address,
                n.state,
                n.heartbeat_age_ms as f64 / 1000.0,
                n.version,
                n.schema_version,
                if n.this_node { "  (this node)" } else { "" }
            );
        }
    }
    outln!("recent posts:");
    for p in &s.posts {
        outln!(
            "  {} {:<32} recipients {} delivered {} failed {} pending {}{}",
            p.post,
            p.list,
            or_null(p.recipients),
            p.delivered,
            p.failed,
            or_null(p.pending),
            if p.complete { " (complete)" } else { "" }
        );
    }
    Ok(())
}
