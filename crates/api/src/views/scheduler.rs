//! Scheduler → wire: the queue snapshot (`/api/v1/queue`, `/api/v1/top`) and channel depths. The
//! one file that reads `herald_scheduler`'s view structs, so changes to the scheduler's
//! internals meet the API here.

use super::count;
use herald_api_types as v;
use herald_scheduler as s;

pub(crate) fn queue(q: &s::QueueSnapshot) -> v::QueueSnapshot {
    v::QueueSnapshot {
        queued: count(q.queued),
        resolving: count(q.resolving),
        connections: count(q.connections),
        slow_connections: count(q.slow_connections),
        fast_lane: count(q.fast_lane),
        slow_lane: count(q.slow_lane),
        destinations_with_work: count(q.destinations_with_work),
        hosts_down: count(q.hosts_down),
        destinations: q.destinations.iter().map(destination).collect(),
        stragglers: q.stragglers.iter().map(straggler).collect(),
        down_hosts: q.down_hosts.iter().map(host).collect(),
        build_micros: q.build_micros,
    }
}

pub(crate) fn destination(d: &s::DestinationView) -> v::DestinationView {
    v::DestinationView {
        destination: d.destination.clone(),
        budget: d.budget.clone(),
        ready: count(d.ready),
        retry_ready: count(d.retry_ready),
        waiting: count(d.waiting),
        waiting_for_room: count(d.waiting_for_room),
        connections: count(d.connections),
        slow_connections: count(d.slow_connections),
        connection_limit: count(d.connection_limit),
        oldest_age_secs: d.oldest_age_secs,
        down_for_secs: d.down_for_secs,
        last_error: d.last_error.clone(),
        delivered: d.delivered,
        deferred: d.deferred,
        failed: d.failed,
    }
}

fn straggler(x: &s::StragglerView) -> v::StragglerView {
    v::StragglerView {
        recipient: x.recipient.clone(),
        pending: x.pending,
        oldest_age_secs: x.oldest_age_secs,
    }
}

fn host(h: &s::HostView) -> v::HostView {
    v::HostView {
        host: h.host.clone(),
        addr: h.addr.clone(),
        consecutive_failures: h.consecutive_failures,
        probe_in_secs: h.probe_in_secs,
        last_error: h.last_error.clone(),
    }
}

/// A down host as `/api/v1/top` shows it (named by its MX host, with the time to its probe).
pub(crate) fn down_host(h: &s::HostView) -> v::DownHost {
    v::DownHost {
        destination: h.host.clone(),
        addr: h.addr.clone(),
        consecutive_failures: h.consecutive_failures,
        down_for_secs: Some(h.probe_in_secs),
        last_error: h.last_error.clone(),
    }
}

pub(crate) fn channel(c: &s::ChannelView) -> v::ChannelView {
    v::ChannelView {
        channel: c.channel.to_string(),
        depth: count(c.depth),
        capacity: count(c.capacity),
    }
}
