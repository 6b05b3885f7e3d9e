//! Telemetry → wire: post progress, rates, destination classes, process resources, contention,
//! stragglers and the statistics-store reports.

use herald_api_types as v;
use herald_telemetry as t;
use herald_telemetry::stats as st;

pub(crate) fn post(p: &t::PostSummary) -> v::PostSummary {
    v::PostSummary {
        post: p.post.clone(),
        list: p.list.clone(),
        accepted_at_ms: p.accepted_at_ms,
        recipients: p.recipients,
        already_done: p.already_done,
        delivered: p.delivered,
        failed: p.failed,
        deferred_attempts: p.deferred_attempts,
        pending: p.pending,
        complete: p.complete,
        t_first_ms: p.t_first_ms,
        t50_ms: p.t50_ms,
        t95_ms: p.t95_ms,
        t100_ms: p.t100_ms,
    }
}

pub(crate) fn posts(ps: &[t::PostSummary]) -> Vec<v::PostSummary> {
    ps.iter().map(post).collect()
}

pub(crate) fn rate(r: &t::rate::RatePoint) -> v::RatePoint {
    v::RatePoint {
        sec: r.sec,
        delivered: r.delivered,
        deferred: r.deferred,
        failed: r.failed,
    }
}

pub(crate) fn class(c: &t::classes::ClassView) -> v::ClassView {
    v::ClassView {
        class: c.class.clone(),
        transactions: c.transactions,
        mean_ms: c.mean_ms,
    }
}

pub(crate) fn process(p: &t::process::ProcessStats) -> v::ProcessStats {
    v::ProcessStats {
        cpu_secs: p.cpu_secs,
        rss_bytes: p.rss_bytes,
        threads: p.threads,
        open_fds: p.open_fds,
    }
}

pub(crate) fn stage(s: &t::contention::StageView) -> v::StageView {
    v::StageView {
        stage: s.stage.to_string(),
        count: s.count,
        total_us: s.total_us,
        mean_us: s.mean_us,
        max_us: s.max_us,
    }
}

pub(crate) fn lock(l: &t::contention::LockView) -> v::LockView {
    v::LockView {
        lock: l.lock.to_string(),
        acquisitions: l.acquisitions,
        contended: l.contended,
        wait_us: l.wait_us,
        hold_us: l.hold_us,
        hold_max_us: l.hold_max_us,
    }
}

pub(crate) fn stragglers(s: &t::Stragglers) -> v::Stragglers {
    v::Stragglers {
        total: s.total,
        untracked: s.untracked,
        recipients: s.recipients.iter().map(straggler_group).collect(),
        destinations: s.destinations.iter().map(straggler_group).collect(),
    }
}

fn straggler_group(g: &t::stragglers::StragglerGroup) -> v::StragglerGroup {
    v::StragglerGroup {
        key: g.key.clone(),
        pending: g.pending,
        oldest_secs: g.oldest_secs,
        max_tries: g.max_tries,
        last_error: g.last_error.clone(),
        posts: g.posts.clone(),
    }
}

pub(crate) fn hour(h: &st::HourRow) -> v::HourRow {
    v::HourRow {
        hour_ms: h.hour_ms,
        delivered: h.delivered,
        delivered_hosts: h.delivered_hosts,
        failed: h.failed,
        failed_hosts: h.failed_hosts,
        deferred: h.deferred,
    }
}

pub(crate) fn day(d: &st::DayReport) -> v::DayReport {
    v::DayReport {
        day_start_ms: d.day_start_ms,
        minutes: d
            .minutes
            .iter()
            .map(|m| v::MinutePoint {
                minute_ms: m.minute_ms,
                delivered: m.delivered,
                failed: m.failed,
                deferred: m.deferred,
            })
            .collect(),
        arrivals: d
            .arrivals
            .iter()
            .map(|a| v::PostArrival {
                post: a.post.clone(),
                list: a.list.clone(),
                accepted_at_ms: a.accepted_at_ms,
                recipients: a.recipients,
            })
            .collect(),
        delivered: d.delivered,
        failed: d.failed,
        deferred: d.deferred,
    }
}

fn reason(r: &st::report::ReasonRow) -> v::ReasonRow {
    v::ReasonRow {
        reason: r.reason.clone(),
        copies: r.copies,
    }
}

pub(crate) fn post_report(r: &st::PostReport) -> v::PostReport {
    v::PostReport {
        post: r.post.clone(),
        list: r.list.clone(),
        accepted_at_ms: r.accepted_at_ms,
        size: r.size,
        recipients: r.recipients,
        completed_at_ms: r.completed_at_ms,
        delivered: r.delivered,
        failed: r.failed,
        deferred: r.deferred,
        t50_secs: r.t50_secs,
        t95_secs: r.t95_secs,
        t100_secs: r.t100_secs,
        curve: r
            .curve
            .iter()
            .map(|c| v::CurvePoint {
                second: c.second,
                delivered: c.delivered,
                failed: c.failed,
            })
            .collect(),
        failures: r.failures.iter().map(reason).collect(),
        deferrals: r.deferrals.iter().map(reason).collect(),
        slowest: r
            .slowest
            .iter()
            .map(|d| v::DestinationRow {
                domain: d.domain.clone(),
                copies: d.copies,
                mean_ms: d.mean_ms,
                max_ms: d.max_ms,
                last_after_ms: d.last_after_ms,
            })
            .collect(),
    }
}
