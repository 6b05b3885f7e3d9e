//! Directory → wire: lists, members, counts, CSV import reports, bounce events and consent.

use herald_api_types as v;
use herald_directory as d;
use herald_types::{List, Member};

pub(crate) fn list(l: &List) -> v::ListInfo {
    v::ListInfo {
        id: l.id.0,
        address: l.address.to_string(),
        settings: l.settings.clone(),
        created_at_ms: l.created_at_ms,
    }
}

pub(crate) fn list_view(l: &List, c: &d::MemberCounts) -> v::ListView {
    v::ListView {
        list: list(l),
        members: counts(c),
        // Filled by the handler from telemetry (a counter, not a directory fact).
        complaints: 0,
        effective: v::EffectiveSettings {
            require_aligned_from: l.settings.requires_aligned_from(),
        },
    }
}

fn counts(c: &d::MemberCounts) -> v::MemberCounts {
    v::MemberCounts {
        total: c.total,
        enabled: c.enabled,
        disabled: c.disabled,
    }
}

pub(crate) fn member(m: &Member) -> v::MemberView {
    v::MemberView {
        id: m.id.0,
        list_id: m.list_id.0,
        address: m.address.to_string(),
        display_name: m.display_name.clone(),
        status: m.status.clone(),
        fields: m.fields.clone(),
    }
}

pub(crate) fn import(r: &d::ImportReport) -> v::ImportReport {
    v::ImportReport {
        added: r.added,
        updated: r.updated,
        rejected: r
            .rejected
            .iter()
            .map(|row| v::RejectedRow {
                line: row.line,
                reason: row.reason.clone(),
            })
            .collect(),
        rejected_total: r.rejected_total,
    }
}

pub(crate) fn bounce(e: &d::BounceEvent) -> v::BounceEvent {
    v::BounceEvent {
        id: e.id,
        list_id: e.list_id.0,
        address: e.address.clone(),
        at_ms: e.at_ms,
        kind: e.kind.clone(),
        status: e.status.clone(),
        diagnostic: e.diagnostic.clone(),
        source: e.source.clone(),
        post: e.post.map(|p| p.0),
        counted: e.counted,
        score: e.score,
    }
}

pub(crate) fn bounce_score(s: &d::BounceScore) -> v::BounceScore {
    v::BounceScore {
        score: s.score,
        last_counted_ms: s.last_counted_ms,
    }
}

pub(crate) fn consent(c: &d::Consent) -> v::ConsentView {
    v::ConsentView {
        at_ms: c.at_ms,
        source: c.source.as_str().to_string(),
        client: c.client.clone(),
    }
}

/// A ban of `list`'s scope (`None`: global).
pub(crate) fn ban(b: &d::Ban, list: Option<&List>) -> v::BanView {
    v::BanView {
        id: b.id,
        list: list.map(|l| l.address.to_string()),
        pattern: b.pattern.clone(),
        created_at_ms: b.created_at_ms,
    }
}

/// A suppression-list entry of `list`'s scope (`None`: global).
pub(crate) fn suppression(s: &d::Suppression, list: Option<&List>) -> v::SuppressionView {
    v::SuppressionView {
        list: list.map(|l| l.address.to_string()),
        address: s.address.to_string(),
        reason: s.reason.clone(),
        source: s.source.as_str().to_string(),
        at_ms: s.at_ms,
    }
}
