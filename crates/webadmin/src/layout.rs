//! The frame every administration page shares: head (the dashboard's style sheet and this
//! crate's), a header with the site navigation, who is signed in and the sign-out form, the
//! page heading and the notice of the action just done; plus the small pieces forms reuse
//! (the CSRF field, an error next to a field, links to a list's pages, times).
//!
//! SECURITY: every value reaches the HTML through maud's `(…)` splice, which escapes it; the
//! only unescaped text is this file's own markup. Notices are fixed sentences chosen by a code
//! in the query string ([`notice`]), never text echoed from the request. No page carries a
//! script: the pages work without JavaScript and the CSP (set by the HTTP glue) forbids it.

use maud::{html, Markup, DOCTYPE};
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};

/// Who is looking, and what the frame shows for them.
#[derive(Debug, Clone, Default)]
pub struct Ctx {
    /// The actor's name: an account's address, `token` or `local`.
    pub who: String,
    /// The session's CSRF token; `None` for a bearer-token or local client (no cookie to forge
    /// a request with, so the guard asks for none).
    pub csrf: Option<String>,
    pub site_admin: bool,
    /// The fixed sentence of the action just done (see [`notice`]).
    pub notice: Option<&'static str>,
}

/// The sentence for a `?done=` code after a POST-redirect-GET; unknown codes show nothing.
pub fn notice(code: &str) -> Option<&'static str> {
    Some(match code {
        "created" => "The list was created.",
        "saved" => "The settings were saved.",
        "role" => "The role was given.",
        "added" => "The member was added.",
        "removed" => "The member was removed.",
        "enabled" => "The member was enabled and their bounce score cleared.",
        "disabled" => "The member was disabled.",
        "reset" => "The bounce score was reset.",
        "delivery" => "The delivery mode was changed.",
        "approved" => "Approved: the post is on its way to the members.",
        "rejected" => "Rejected: the sender was told.",
        "discarded" => "Discarded.",
        "none" => "Nothing was selected.",
        "deleted" => "Deleted.",
        "retried" => "The copies were queued for another try.",
        "gave-up" => "The copies were given up.",
        "language" => "The member's language was changed.",
        "text-saved" => "The list's text was saved: its mail and pages use it from now on.",
        "text-removed" => "The shipped text is used again.",
        _ => return None,
    })
}

/// A path segment, percent-encoded (list and member addresses carry `@`, `+`, `/`…).
pub fn enc(segment: &str) -> String {
    utf8_percent_encode(segment, NON_ALPHANUMERIC).to_string()
}

/// `/admin/lists/<list>`.
pub fn list_href(list: &str) -> String {
    format!("/admin/lists/{}", enc(list))
}

/// The hidden CSRF field every POST form carries (nothing for a client without a session).
pub fn csrf_field(ctx: &Ctx) -> Markup {
    html! {
        @if let Some(t) = &ctx.csrf {
            input type="hidden" name="csrf" value=(t);
        }
    }
}

/// The `id` of a field's error text, for the field's `aria-describedby`.
pub fn error_id(field: &str) -> String {
    format!("{field}-error")
}

/// The error text shown next to a field (nothing when there is none).
pub fn field_error(field: &str, error: Option<&str>) -> Markup {
    html! {
        @if let Some(e) = error {
            span.field-error id=(error_id(field)) role="alert" { (e) }
        }
    }
}

/// Unix milliseconds as `YYYY-MM-DD HH:MM:SS` UTC.
pub fn time(ms: u64) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(|m| jiff::Timestamp::from_millisecond(m).ok())
        .map(|t| t.strftime("%Y-%m-%d %H:%M:%S").to_string())
        .unwrap_or_else(|| "-".to_string())
}

/// The navigation of one list's pages; moderators (not owners) get the held posts only.
pub fn list_nav(list: &str, owner: bool) -> Markup {
    let base = list_href(list);
    html! {
        nav.list-nav aria-label="This list" {
            @if owner {
                a href=(base) { "Settings" }
                a href={ (base) "/members" } { "Members" }
            }
            a href={ (base) "/held" } { "Held posts" }
            @if owner {
                a href={ (base) "/bounces" } { "Bounces" }
                a href={ (base) "/texts" } { "Texts" }
                a href={ "/admin/audit?list=" (enc(list)) } { "Audit log" }
            }
        }
    }
}

/// A whole page.
pub fn page(ctx: &Ctx, title: &str, body: Markup) -> String {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "Herald · " (title) }
                link rel="stylesheet" href="/assets/style.css";
                link rel="stylesheet" href="/assets/admin.css";
            }
            body.admin {
                (header(ctx))
                main id="main" {
                    h1 { (title) }
                    @if let Some(n) = ctx.notice {
                        p.notice role="status" { (n) }
                    }
                    (body)
                }
            }
        }
    }
    .into_string()
}

/// The page of a request that failed, with what went wrong.
pub fn error_page(ctx: &Ctx, message: &str) -> String {
    page(
        ctx,
        "Something went wrong",
        html! {
            p role="alert" { (message) }
            p { a href="/admin/lists" { "Back to your lists" } }
        },
    )
}

/// A page with a refresh every `secs` seconds (the import's progress: no script needed).
pub fn refreshing_page(ctx: &Ctx, title: &str, secs: u32, body: Markup) -> String {
    let html = page(ctx, title, body);
    html.replacen(
        "<meta charset=\"utf-8\">",
        &format!("<meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"{secs}\">"),
        1,
    )
}

fn header(ctx: &Ctx) -> Markup {
    html! {
        header {
            a.brand href="/admin/" { "Herald" }
            nav aria-label="Site" {
                a href="/admin/lists" { "Lists" }
                @if ctx.site_admin {
                    a href="/admin/postmaster" { "Postmaster" }
                    a href="/admin/stragglers" { "Stragglers" }
                    a href="/admin/audit" { "Audit log" }
                    a href="/" { "Dashboard" }
                }
            }
            span.right {
                "Signed in as " strong { (ctx.who) }
            }
            @if ctx.csrf.is_some() {
                form.inline method="post" action="/logout" {
                    (csrf_field(ctx))
                    button type="submit" { "Sign out" }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_frame_escapes_and_notices_are_fixed_sentences() {
        let ctx = Ctx {
            who: "<script>alert(1)</script>@x.test".into(),
            csrf: Some("t\"><x".into()),
            site_admin: false,
            notice: notice("<b>"),
        };
        let html = page(&ctx, "A <title>", html! { p { "body" } });
        assert!(!html.contains("<script>"), "{html}");
        assert!(html.contains("&lt;script&gt;"));
        assert!(html.contains("A &lt;title&gt;"));
        assert!(html.contains("value=\"t&quot;&gt;&lt;x\""), "{html}");
        assert!(!html.contains("role=\"status\""), "unknown code: no notice");
        assert!(!html.contains("Audit log"), "site links for the site only");
        assert_eq!(enc("a+b@x.test/.."), "a%2Bb%40x%2Etest%2F%2E%2E");
        assert_eq!(time(0), "1970-01-01 00:00:00");
        assert_eq!(time(u64::MAX), "-");
        let r = refreshing_page(&ctx, "t", 2, html! {});
        assert!(r.contains("http-equiv=\"refresh\" content=\"2\""));
    }
}
