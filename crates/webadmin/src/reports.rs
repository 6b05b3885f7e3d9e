//! The views that were JSON only, as pages with their actions: a list's bounces
//! (`/admin/lists/<list>/bounces`: re-enable a member, reset a score), the stragglers
//! (`/admin/stragglers`: retry, give up, disable), stored postmaster mail
//! (`/admin/postmaster`, one message, delete) and the audit log (`/admin/audit`).
//!
//! SECURITY: bounce diagnostics, remote replies and postmaster mail are written by strangers;
//! audit targets by administrators. All spliced escaped.

use crate::layout::{csrf_field, enc, list_href, list_nav, page, time, Ctx};
use crate::message::MessageView;
use herald_api_types::accounts::AuditView;
use herald_api_types::{BounceEvent, PostmasterView, StragglerGroup, Stragglers};
use maud::{html, Markup};

fn post_button(ctx: &Ctx, action: &str, label: &str, hidden: &[(&str, &str)]) -> Markup {
    html! {
        form.inline method="post" action=(action) {
            (csrf_field(ctx))
            @for (k, v) in hidden { input type="hidden" name=(k) value=(v); }
            button type="submit" { (label) }
        }
    }
}

/// `/admin/lists/<list>/bounces`: the latest events, newest first.
pub fn bounces_page(ctx: &Ctx, list: &str, events: &[BounceEvent]) -> String {
    let member = |a: &str, verb: &str| format!("{}/members/{}/{verb}", list_href(list), enc(a));
    let body = html! {
        (list_nav(list, true))
        @if events.is_empty() {
            p { "No bounce recorded." }
        } @else {
            table {
                caption.visually-hidden { "Bounces" }
                thead { tr {
                    th scope="col" { "When (UTC)" } th scope="col" { "Member" } th scope="col" { "Kind" }
                    th scope="col" { "Status" } th scope="col" { "Diagnostic" } th scope="col" { "Score" } th scope="col" { "Actions" }
                } }
                tbody {
                    @for e in events {
                        tr {
                            td { (time(e.at_ms)) }
                            td { @if e.address.is_empty() { "(the list)" } @else { (e.address) } }
                            td { (e.kind) }
                            td { (e.status.as_deref().unwrap_or("")) }
                            td.diag { (e.diagnostic) }
                            td { (format!("{:.1}", e.score)) }
                            td.actions {
                                @if !e.address.is_empty() {
                                    (post_button(ctx, &member(&e.address, "enable"), "Re-enable", &[("back", "bounces")]))
                                    (post_button(ctx, &member(&e.address, "reset-bounces"), "Reset score", &[("back", "bounces")]))
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    page(ctx, &format!("Bounces of {list}"), body)
}

fn straggler_table(ctx: &Ctx, caption: &str, field: &str, groups: &[StragglerGroup]) -> Markup {
    html! {
        table {
            caption { (caption) }
            thead { tr {
                th scope="col" { (field) } th scope="col" { "Pending" } th scope="col" { "Oldest (s)" }
                th scope="col" { "Tries" } th scope="col" { "Last error" } th scope="col" { "Actions" }
            } }
            tbody {
                @for g in groups {
                    tr {
                        td { (g.key) } td { (g.pending) } td { (g.oldest_secs) } td { (g.max_tries) }
                        td.diag { (g.last_error) }
                        td.actions {
                            (post_button(ctx, "/admin/stragglers/retry", "Retry now", &[(field, &g.key)]))
                            (post_button(ctx, "/admin/stragglers/give-up", "Give up", &[(field, &g.key)]))
                            @if field == "recipient" {
                                (post_button(ctx, "/admin/stragglers/disable", "Disable the member", &[(field, &g.key)]))
                            }
                        }
                    }
                }
            }
        }
    }
}

/// `/admin/stragglers`.
pub fn stragglers_page(ctx: &Ctx, s: &Stragglers) -> String {
    let body = html! {
        p { (s.total) " deferred copies pending" @if s.untracked > 0 { " (" (s.untracked) " not itemized)" } "." }
        (straggler_table(ctx, "By recipient", "recipient", &s.recipients))
        (straggler_table(ctx, "By destination domain", "domain", &s.destinations))
    };
    page(ctx, "Stragglers", body)
}

/// `/admin/postmaster`.
pub fn postmaster_page(ctx: &Ctx, rows: &[PostmasterView]) -> String {
    let body = html! {
        @if rows.is_empty() {
            p { "No postmaster mail is stored." }
        } @else {
            table {
                caption.visually-hidden { "Postmaster mail" }
                thead { tr { th scope="col" { "Received (UTC)" } th scope="col" { "To" } th scope="col" { "From" } th scope="col" { "Forwarded" } } }
                tbody {
                    @for r in rows {
                        tr {
                            td { a href={ "/admin/postmaster/" (enc(&r.post)) } { (time(r.received_at_ms)) } }
                            td { (r.to) } td { (r.from.as_deref().unwrap_or("<>")) } td { (r.forward) }
                        }
                    }
                }
            }
        }
    };
    page(ctx, "Postmaster mail", body)
}

/// `/admin/postmaster/<post>`.
pub fn postmaster_message(ctx: &Ctx, post: &str, m: &MessageView) -> String {
    let body = html! {
        dl.headers { @for (n, v) in &m.headers { dt { (n) } dd { (v) } } }
        pre.body { (m.text) }
        @if !m.attachments.is_empty() {
            ul { @for a in &m.attachments { li { (a.name) " — " (a.content_type) ", " (a.bytes) " bytes" } } }
        }
        (post_button(ctx, &format!("/admin/postmaster/{}/delete", enc(post)), "Delete", &[]))
        p { a href="/admin/postmaster" { "Back" } }
    };
    page(
        ctx,
        if m.subject.is_empty() {
            "(no subject)"
        } else {
            &m.subject
        },
        body,
    )
}

/// `/admin/audit` (a list's, for its owner: `?list=`).
pub fn audit_page(ctx: &Ctx, list: Option<&str>, rows: &[AuditView]) -> String {
    let body = html! {
        @if let Some(l) = list { (list_nav(l, true)) }
        table {
            caption.visually-hidden { "Audit log" }
            thead { tr {
                th scope="col" { "When (UTC)" } th scope="col" { "Who" } th scope="col" { "From" } th scope="col" { "Action" }
                th scope="col" { "List" } th scope="col" { "Target" } th scope="col" { "Outcome" }
            } }
            tbody {
                @for r in rows {
                    tr {
                        td { (time(r.at_ms)) } td { (r.actor) } td { (r.client.as_deref().unwrap_or("")) }
                        td { (r.action) } td { (r.list.as_deref().unwrap_or("")) }
                        td { (r.target.as_deref().unwrap_or("")) } td { (r.outcome) }
                    }
                }
            }
        }
    };
    let title = match list {
        Some(l) => format!("Audit log of {l}"),
        None => "Audit log".to_string(),
    };
    page(ctx, &title, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_text_is_escaped_and_actions_are_forms() {
        let ctx = Ctx {
            csrf: Some("t".into()),
            site_admin: true,
            ..Ctx::default()
        };
        let ev = BounceEvent {
            address: "a@x.test".into(),
            diagnostic: "550 <script>x</script>".into(),
            kind: "hard".into(),
            ..BounceEvent::default()
        };
        let html = bounces_page(&ctx, "l@x.test", &[ev]);
        assert!(!html.contains("<script>x") && html.contains("/members/a%40x%2Etest/enable"));
        let s = Stragglers {
            total: 1,
            recipients: vec![StragglerGroup {
                key: "r@<b>.test".into(),
                ..StragglerGroup::default()
            }],
            ..Stragglers::default()
        };
        let html = stragglers_page(&ctx, &s);
        assert!(!html.contains("<b>.test") && html.contains("/admin/stragglers/disable"));
        let a = AuditView {
            actor: "<i>".into(),
            ..AuditView::default()
        };
        assert!(!audit_page(&ctx, None, &[a]).contains("<i>"));
    }
}
