//! The members pages: `/admin/lists/<list>/members` (search by address or name prefix, a page
//! at a time by keyset — the "Next page" link carries `after=<last member id>`, never an offset
//! or a count —, each member's actions, the add form, CSV import and export) and the import's
//! progress and result (`/admin/lists/<list>/import/<job>`).
//!
//! Every action is its own small POST form with the CSRF field, so the page works without
//! JavaScript; after it the browser is sent back (POST-redirect-GET) to the member's row.
//!
//! SECURITY: addresses, names and reasons are member data (from imports and subscribers):
//! spliced escaped; in URLs, percent-encoded.

use crate::layout::{
    csrf_field, enc, error_id, field_error, list_href, list_nav, page, refreshing_page, Ctx,
};
use herald_api_types::{ImportReport, MemberView};
use herald_types::{DeliveryMode, MemberStatus};
use maud::{html, Markup};

/// Members per page.
pub const PAGE_SIZE: usize = 50;
/// Largest CSV upload the import form accepts (the glue enforces it; the page says it).
pub const MAX_IMPORT_BYTES: usize = 32 * 1024 * 1024;

/// One member on the page.
#[derive(Debug, Clone)]
pub struct MemberLine {
    pub member: MemberView,
    pub delivery: DeliveryMode,
    /// The member's own language; `None`: the list's.
    pub language: Option<String>,
}

/// What the search asked for.
#[derive(Debug, Clone, Default)]
pub struct Search {
    pub q: String,
    /// `address` or `name`.
    pub by: String,
    /// Its error (a prefix too long, a control character).
    pub error: Option<String>,
}

/// The add form after a refused add.
#[derive(Debug, Clone, Default)]
pub struct AddForm {
    pub address: String,
    pub name: String,
    pub error: Option<String>,
}

/// `/admin/lists/<list>/members`. `next`: the `after` of the next page, when there is one.
pub fn members_page(
    ctx: &Ctx,
    list: &str,
    search: &Search,
    rows: &[MemberLine],
    next: Option<i64>,
    add: &AddForm,
) -> String {
    let base = format!("{}/members", list_href(list));
    let body = html! {
        (list_nav(list, true))
        form.search method="get" action=(base) role="search" {
            label for="q" { "Find members whose" } " "
            select name="by" aria-label="Search in" {
                option value="address" selected[search.by != "name"] { "address" }
                option value="name" selected[search.by == "name"] { "name" }
            }
            " " label for="q" { "starts with" } " "
            input #q name="q" type="search" size="30" value=(search.q)
                aria-describedby=[search.error.as_ref().map(|_| error_id("q"))]
                aria-invalid=[search.error.as_ref().map(|_| "true")];
            " " button type="submit" { "Search" }
            " " (field_error("q", search.error.as_deref()))
        }
        @if rows.is_empty() {
            p { "No member matches." }
        } @else {
            table.members {
                caption.visually-hidden { "Members" }
                thead { tr {
                    th scope="col" { "Address" } th scope="col" { "Name" } th scope="col" { "Status" }
                    th scope="col" { "Delivery" } th scope="col" { "Language" } th scope="col" { "Actions" }
                } }
                tbody {
                    @for r in rows { (row(ctx, list, r)) }
                }
            }
        }
        @if let Some(after) = next {
            p { a rel="next" href={ (base) "?by=" (enc(&search.by)) "&q=" (enc(&search.q)) "&after=" (after) } { "Next page" } }
        }
        h2 { "Add a member" }
        form method="post" action=(base) {
            (csrf_field(ctx))
            p {
                label for="add-address" { "E-mail address" } br;
                input #add-address name="address" type="email" required size="40" value=(add.address)
                    aria-describedby=[add.error.as_ref().map(|_| error_id("add-address"))]
                    aria-invalid=[add.error.as_ref().map(|_| "true")];
                " " (field_error("add-address", add.error.as_deref()))
            }
            p {
                label for="add-name" { "Name (optional)" } br;
                input #add-name name="name" size="40" value=(add.name);
            }
            p { button type="submit" { "Add" } }
        }
        h2 { "Import and export" }
        (import_form(ctx, list))
        p { a href={ (list_href(list)) "/export" } download { "Export the members as CSV" } }
    };
    page(ctx, &format!("Members of {list}"), body)
}

/// The CSV upload form. The CSRF token rides in the action's query: a multipart body is not
/// read by the guard (it may be megabytes), and a form without script cannot set a header.
pub fn import_form(ctx: &Ctx, list: &str) -> Markup {
    let action = match &ctx.csrf {
        Some(t) => format!("{}/import?csrf={}", list_href(list), enc(t)),
        None => format!("{}/import", list_href(list)),
    };
    html! {
        form method="post" action=(action) enctype="multipart/form-data" {
            p {
                label for="csv" { "CSV file (header row: email, name, custom fields)" } br;
                input #csv name="file" type="file" accept=".csv,text/csv" required aria-describedby="csv-help";
                br; small #csv-help { "At most " (MAX_IMPORT_BYTES / (1024 * 1024)) " MiB. Addresses already on the list are updated; rejected rows are listed after the import." }
            }
            p { button type="submit" { "Import" } }
        }
    }
}

fn row(ctx: &Ctx, list: &str, r: &MemberLine) -> Markup {
    let m = &r.member;
    let action = |verb: &str| format!("{}/members/{}/{verb}", list_href(list), enc(&m.address));
    let (status, enabled) = match &m.status {
        MemberStatus::Enabled => ("enabled".to_string(), true),
        MemberStatus::Disabled(why) => (format!("disabled: {why}"), false),
    };
    let select_id = format!("delivery-{}", m.id);
    let lang_id = format!("language-{}", m.id);
    html! {
        tr {
            th scope="row" { (m.address) }
            td { (m.display_name.as_deref().unwrap_or("")) }
            td { (status) }
            td {
                form.inline method="post" action=(action("delivery")) {
                    (csrf_field(ctx))
                    label.visually-hidden for=(select_id) { "Delivery of " (m.address) }
                    select id=(select_id) name="delivery" {
                        @for d in DeliveryMode::ALL {
                            option value=(d.as_str()) selected[d == r.delivery] { (d.as_str()) }
                        }
                    }
                    " " button type="submit" { "Change" }
                }
            }
            td {
                form.inline method="post" action=(action("language")) {
                    (csrf_field(ctx))
                    label.visually-hidden for=(lang_id) { "Language of " (m.address) }
                    select id=(lang_id) name="language" {
                        option value="" selected[r.language.is_none()] { "the list's" }
                        @for (code, name) in herald_i18n::LANGUAGES {
                            option value=(code) selected[r.language.as_deref() == Some(*code)] { (name) }
                        }
                    }
                    " " button type="submit" { "Change" }
                }
            }
            td.actions {
                @if enabled {
                    (button(ctx, &action("disable"), "Disable", &m.address))
                } @else {
                    (button(ctx, &action("enable"), "Enable", &m.address))
                }
                (button(ctx, &action("reset-bounces"), "Reset bounce score", &m.address))
                (button(ctx, &action("remove"), "Remove", &m.address))
            }
        }
    }
}

/// A one-button form; the accessible name says which member it acts on.
fn button(ctx: &Ctx, action: &str, label: &str, member: &str) -> Markup {
    html! {
        form.inline method="post" action=(action) {
            (csrf_field(ctx))
            button type="submit" aria-label={ (label) " " (member) } { (label) }
        }
    }
}

/// Where an import is.
#[derive(Debug, Clone, Default)]
pub struct ImportProgress {
    /// Data rows read so far.
    pub done: u64,
    /// Data rows in the file (its line count less the header).
    pub total: u64,
    /// The report once finished.
    pub report: Option<ImportReport>,
    /// Why it stopped, if it failed as a whole (no header row, the list is gone).
    pub failed: Option<String>,
}

/// `/admin/lists/<list>/import/<job>`: a progress bar that refreshes itself (no script) until
/// the report, with the rejected rows.
pub fn import_page(ctx: &Ctx, list: &str, p: &ImportProgress) -> String {
    let finished = p.report.is_some() || p.failed.is_some();
    let body = html! {
        (list_nav(list, true))
        @if let Some(why) = &p.failed {
            p.form-errors role="alert" { "The import failed: " (why) }
        } @else if let Some(r) = &p.report {
            p role="status" {
                "Done: " strong { (r.added) } " added, " strong { (r.updated) } " updated, "
                strong { (r.rejected_total) } " rejected."
            }
            @if !r.rejected.is_empty() {
                table {
                    caption { "Rejected rows" @if r.rejected_total > r.rejected.len() as u64 { " (the first " (r.rejected.len()) ")" } }
                    thead { tr { th scope="col" { "Line" } th scope="col" { "Why" } } }
                    tbody {
                        @for row in &r.rejected {
                            tr { td { (row.line) } td { (row.reason) } }
                        }
                    }
                }
            }
        } @else {
            p {
                label for="import-progress" { "Importing: " (p.done) " of " (p.total) " rows" } br;
                progress #import-progress max=(p.total.max(1)) value=(p.done) { (p.done) " of " (p.total) }
            }
            p.muted { "This page refreshes itself every second." }
        }
        p { a href={ (list_href(list)) "/members" } { "Back to the members" } }
    };
    let title = format!("Import into {list}");
    if finished {
        page(ctx, &title, body)
    } else {
        refreshing_page(ctx, &title, 1, body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(address: &str, name: &str, status: MemberStatus) -> MemberLine {
        MemberLine {
            member: MemberView {
                id: 7,
                address: address.into(),
                display_name: Some(name.into()),
                status,
                ..MemberView::default()
            },
            delivery: DeliveryMode::DigestMime,
            language: Some("de".into()),
        }
    }

    #[test]
    fn member_data_is_escaped_and_each_action_carries_the_csrf_token() {
        let ctx = Ctx {
            who: "o@x.test".into(),
            csrf: Some("tok".into()),
            ..Ctx::default()
        };
        let rows = [
            line(
                "a+b@x.test",
                "<script>alert(1)</script>",
                MemberStatus::Enabled,
            ),
            line(
                "c@x.test",
                "C",
                MemberStatus::Disabled("<b>bounces</b>".into()),
            ),
        ];
        let search = Search {
            q: "\"><svg onload=x>".into(),
            by: "name".into(),
            error: None,
        };
        let html = members_page(
            &ctx,
            "dev@lists.test",
            &search,
            &rows,
            Some(7),
            &AddForm::default(),
        );
        assert!(
            !html.contains("<script>alert")
                && !html.contains("<svg")
                && !html.contains("<b>bounces")
        );
        assert!(html.contains("/admin/lists/dev%40lists%2Etest/members/a%2Bb%40x%2Etest/disable"));
        assert!(html.contains("/members/c%40x%2Etest/enable"));
        assert!(html.contains("after=7"), "keyset link");
        assert!(html.contains("value=\"digest-mime\" selected"));
        let forms = html.matches("<form method=\"post\"").count()
            + html
                .matches("<form class=\"inline\" method=\"post\"")
                .count();
        let tokens = html.matches("name=\"csrf\" value=\"tok\"").count();
        assert!(
            tokens >= 9,
            "every POST form has its token: {forms} forms, {tokens} tokens"
        );
        assert!(html.contains("import?csrf=tok"));
    }

    #[test]
    fn the_import_page_refreshes_until_done_then_lists_rejects() {
        let ctx = Ctx::default();
        let running = import_page(
            &ctx,
            "l@x.test",
            &ImportProgress {
                done: 5,
                total: 10,
                ..Default::default()
            },
        );
        assert!(running.contains("http-equiv=\"refresh\"") && running.contains("<progress"));
        let report = ImportReport {
            added: 2,
            rejected: vec![herald_api_types::RejectedRow {
                line: 3,
                reason: "<i>bad</i>".into(),
            }],
            rejected_total: 1,
            ..ImportReport::default()
        };
        let done = import_page(
            &ctx,
            "l@x.test",
            &ImportProgress {
                report: Some(report),
                ..Default::default()
            },
        );
        assert!(!done.contains("http-equiv") && done.contains("&lt;i&gt;bad"));
    }
}
