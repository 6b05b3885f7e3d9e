//! The held posts of a list: `/admin/lists/<list>/held` (each post with its sender, subject,
//! why it was held; checkboxes and one form for approving, rejecting or discarding the chosen
//! ones with a reason) and `/admin/lists/<list>/held/<post>` (the message: headers, text,
//! attachments by name; the same three actions for it alone).
//!
//! The three buttons post to `…/held/approve`, `…/reject`, `…/discard` (`formaction`), so the
//! audit log names the action from the path like every other route.
//!
//! SECURITY: everything shown comes from the stranger who sent the post and is spliced
//! escaped; the body is text (see `message`).

use crate::layout::{csrf_field, list_href, list_nav, page, time, Ctx};
use crate::message::MessageView;
use herald_api_types::HeldView;
use maud::{html, Markup};

/// Most characters of a reject reason (it goes into the notice to the sender).
pub const MAX_REASON_CHARS: usize = 500;

/// One held post on the list page.
#[derive(Debug, Clone)]
pub struct HeldLine {
    pub view: HeldView,
    /// The post's Subject (decoded, cleaned, bounded).
    pub subject: String,
}

fn actions(ctx: &Ctx, list: &str, bulk: bool) -> Markup {
    let base = format!("{}/held", list_href(list));
    html! {
        (csrf_field(ctx))
        p {
            label for="reason" { "Reason (sent to the sender when rejecting)" } br;
            textarea #reason name="reason" rows="2" cols="60" maxlength=(MAX_REASON_CHARS) {}
        }
        p.buttons {
            button type="submit" formaction={ (base) "/approve" } { @if bulk { "Approve selected" } @else { "Approve" } }
            " "
            button type="submit" formaction={ (base) "/reject" } { @if bulk { "Reject selected" } @else { "Reject" } }
            " "
            button type="submit" formaction={ (base) "/discard" } { @if bulk { "Discard selected" } @else { "Discard" } }
        }
    }
}

/// `/admin/lists/<list>/held`; `owner` decides the navigation shown.
pub fn held_page(ctx: &Ctx, list: &str, owner: bool, rows: &[HeldLine]) -> String {
    let base = format!("{}/held", list_href(list));
    let body = html! {
        (list_nav(list, owner))
        @if rows.is_empty() {
            p { "No post is waiting for a moderator." }
        } @else {
            form method="post" action={ (base) "/approve" } {
                table {
                    caption.visually-hidden { "Held posts" }
                    thead { tr {
                        th scope="col" { "Select" } th scope="col" { "Subject" } th scope="col" { "From" }
                        th scope="col" { "Held because" } th scope="col" { "Received (UTC)" }
                    } }
                    tbody {
                        @for r in rows {
                            @let id = format!("post-{}", r.view.post);
                            tr {
                                td {
                                    input type="checkbox" id=(id) name="post" value=(r.view.post);
                                    label.visually-hidden for=(id) { "Select " (r.subject) }
                                }
                                td { a href={ (base) "/" (r.view.post) } { @if r.subject.is_empty() { "(no subject)" } @else { (r.subject) } } }
                                td { (r.view.from.as_deref().unwrap_or("<>")) }
                                td { (r.view.reason.as_deref().unwrap_or("")) }
                                td { (time(r.view.received_at_ms)) }
                            }
                        }
                    }
                }
                (actions(ctx, list, true))
            }
        }
    };
    page(ctx, &format!("Held posts of {list}"), body)
}

/// `/admin/lists/<list>/held/<post>`.
pub fn held_message(
    ctx: &Ctx,
    list: &str,
    owner: bool,
    held: &HeldView,
    m: &MessageView,
) -> String {
    let base = format!("{}/held", list_href(list));
    let body = html! {
        (list_nav(list, owner))
        p { "Held because: " strong { (held.reason.as_deref().unwrap_or("(no reason given)")) } }
        dl.headers {
            @for (name, value) in &m.headers {
                dt { (name) } dd { (value) }
            }
        }
        h2 { "Text" @if m.from_html { " (converted from HTML)" } }
        pre.body { (m.text) }
        @if m.truncated { p.muted { "(The text is longer; the rest is not shown.)" } }
        @if !m.attachments.is_empty() {
            h2 { "Attachments" }
            ul {
                @for a in &m.attachments {
                    li { (a.name) " — " (a.content_type) ", " (a.bytes) " bytes" }
                }
                @if m.more_attachments > 0 { li { "… and " (m.more_attachments) " more" } }
            }
        }
        form method="post" action={ (base) "/approve" } {
            input type="hidden" name="post" value=(held.post);
            (actions(ctx, list, false))
        }
        p { a href=(base) { "Back to the held posts" } }
    };
    let title = if m.subject.is_empty() {
        "(no subject)".to_string()
    } else {
        m.subject.clone()
    };
    page(ctx, &title, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hostile_subject_and_body_come_back_as_text() {
        let ctx = Ctx {
            csrf: Some("tok".into()),
            ..Ctx::default()
        };
        let held = HeldView {
            post: 42,
            list: "dev@lists.test".into(),
            from: Some("eve@x.test".into()),
            reason: Some("<b>not a member</b>".into()),
            ..HeldView::default()
        };
        let rows = [HeldLine {
            view: held.clone(),
            subject: "<script>alert(1)</script>".into(),
        }];
        let html = held_page(&ctx, "dev@lists.test", false, &rows);
        assert!(!html.contains("<script>alert") && !html.contains("<b>not"));
        assert!(html.contains("formaction=\"/admin/lists/dev%40lists%2Etest/held/discard\""));
        assert!(
            !html.contains("/members"),
            "a moderator's navigation has no members link"
        );
        let m = MessageView::parse(
            b"Subject: <i>x</i>\r\nContent-Type: text/html\r\n\r\n<iframe src=//evil></iframe>hi",
        );
        let page = held_message(&ctx, "dev@lists.test", true, &held, &m);
        assert!(
            !page.contains("<iframe") && !page.contains("<i>x"),
            "{page}"
        );
        assert!(page.contains("name=\"post\" value=\"42\""));
    }
}
