//! The lists pages: `/admin/lists` (the lists you may administer, and for a site administrator
//! the form creating one) and `/admin/lists/<list>` (every setting, with its error next to it
//! after a submission, the member counts, and for a site administrator the form giving an
//! account a role on the list).
//!
//! SECURITY: list addresses, names and every setting value are data, spliced escaped by maud.

use crate::layout::{csrf_field, error_id, field_error, list_href, list_nav, page, Ctx};
use crate::settings::{Field, Kind, SettingsForm, FIELDS, REPLY_TO_ADDRESS};
use herald_api_types::ListView;
use maud::{html, Markup};

/// One row of the lists page.
#[derive(Debug, Clone)]
pub struct ListRow {
    pub address: String,
    pub display_name: String,
    /// `site administrator`, `owner` or `moderator`.
    pub role: &'static str,
}

/// The create form's text and error (after a refused creation).
#[derive(Debug, Clone, Default)]
pub struct CreateForm {
    pub address: String,
    pub display_name: String,
    pub error: Option<String>,
}

/// `/admin/lists`.
pub fn lists_page(ctx: &Ctx, rows: &[ListRow], create: &CreateForm) -> String {
    let body = html! {
        @if rows.is_empty() {
            p { "You administer no list here." }
        } @else {
            table {
                caption.visually-hidden { "Your lists" }
                thead { tr { th scope="col" { "List" } th scope="col" { "Name" } th scope="col" { "Your role" } th scope="col" { "Pages" } } }
                tbody {
                    @for r in rows {
                        tr {
                            td { a href=(page_of(r)) { (r.address) } }
                            td { (r.display_name) }
                            td { (r.role) }
                            td { (list_nav(&r.address, r.role != "moderator")) }
                        }
                    }
                }
            }
        }
        @if ctx.site_admin {
            h2 { "Create a list" }
            form method="post" action="/admin/lists" {
                (csrf_field(ctx))
                p {
                    label for="address" { "Posting address" } br;
                    input #address name="address" type="email" required size="40" value=(create.address)
                        aria-describedby=[create.error.as_ref().map(|_| error_id("address"))]
                        aria-invalid=[create.error.as_ref().map(|_| "true")];
                    " " (field_error("address", create.error.as_deref()))
                }
                p {
                    label for="display_name" { "Display name" } br;
                    input #display_name name="display_name" size="40" value=(create.display_name);
                }
                p { button type="submit" { "Create the list" } }
            }
        }
    };
    page(ctx, "Lists", body)
}

fn page_of(r: &ListRow) -> String {
    let base = list_href(&r.address);
    if r.role == "moderator" {
        format!("{base}/held")
    } else {
        base
    }
}

/// `/admin/lists/<list>`: `form` is the stored settings, or a refused submission with its
/// errors; `role_error` the role form's.
pub fn list_page(
    ctx: &Ctx,
    view: &ListView,
    form: &SettingsForm,
    role_error: Option<&str>,
) -> String {
    let list = &view.list.address;
    let body = html! {
        (list_nav(list, true))
        p {
            "Members: " strong { (view.members.total) } " (" (view.members.enabled) " enabled, "
            (view.members.disabled) " disabled). Complaints since the server started: " (view.complaints) "."
        }
        @if !form.errors.is_empty() {
            p.form-errors role="alert" { "Some settings are not valid; nothing was saved. See the messages next to the fields." }
        }
        form.settings method="post" action=(list_href(list)) novalidate {
            (csrf_field(ctx))
            @for f in FIELDS {
                (field(f, form))
            }
            p { button type="submit" { "Save the settings" } }
        }
        @if ctx.site_admin {
            h2 { "Owners and moderators" }
            form method="post" action={ (list_href(list)) "/roles" } {
                (csrf_field(ctx))
                p {
                    label for="account" { "Account (e-mail address)" } br;
                    input #account name="account" type="email" required size="40"
                        aria-describedby=[role_error.map(|_| error_id("account"))];
                    " " (field_error("account", role_error))
                }
                p {
                    label for="role" { "Role" } br;
                    select #role name="role" {
                        option value="owner" { "owner" }
                        option value="moderator" { "moderator" }
                        option value="none" { "none (remove)" }
                    }
                }
                p { button type="submit" { "Give the role" } }
            }
        }
    };
    page(ctx, list, body)
}

/// One setting: label, control, help and error, tied together for screen readers.
fn field(f: &Field, form: &SettingsForm) -> Markup {
    let value = form.values.get(f.name).map(String::as_str).unwrap_or("");
    let error = form.errors.get(f.name).map(String::as_str);
    let help_id = format!("{}-help", f.name);
    let described = match error {
        Some(_) => format!("{} {help_id}", error_id(f.name)),
        None => help_id.clone(),
    };
    let invalid = error.map(|_| "true");
    html! {
        div.field {
            @match f.kind {
                Kind::Bool => {
                    input type="hidden" name=(f.name) value="false";
                    input id=(f.name) name=(f.name) type="checkbox" value="true" checked[value == "true"]
                        aria-describedby=(described);
                    " " label for=(f.name) { (f.label) }
                }
                _ => {
                    label for=(f.name) { (f.label) } br;
                    (control(f, value, &described, invalid))
                }
            }
            " " (field_error(f.name, error))
            @if !f.help.is_empty() {
                br; small id=(help_id) { (f.help) }
            }
            @if f.kind == Kind::ReplyTo {
                @let err = form.errors.get(REPLY_TO_ADDRESS).map(String::as_str);
                br;
                label for=(REPLY_TO_ADDRESS) { "Reply-To address (for explicit)" } br;
                input id=(REPLY_TO_ADDRESS) name=(REPLY_TO_ADDRESS) type="email" size="40"
                    value=(form.values.get(REPLY_TO_ADDRESS).map(String::as_str).unwrap_or(""))
                    aria-describedby=[err.map(|_| error_id(REPLY_TO_ADDRESS))]
                    aria-invalid=[err.map(|_| "true")];
                " " (field_error(REPLY_TO_ADDRESS, err))
            }
        }
    }
}

fn control(f: &Field, value: &str, described: &str, invalid: Option<&str>) -> Markup {
    html! {
        @match f.kind {
            Kind::Choice(words) => {
                select id=(f.name) name=(f.name) aria-describedby=(described) aria-invalid=[invalid] {
                    @if !words.contains(&value) {
                        option value=(value) selected { (value) }
                    }
                    @for w in words {
                        option value=(w) selected[*w == value] { (w) }
                    }
                }
            }
            Kind::ReplyTo => {
                select id=(f.name) name=(f.name) aria-describedby=(described) aria-invalid=[invalid] {
                    @for w in ["poster", "list", "explicit"] {
                        option value=(w) selected[w == value] { (w) }
                    }
                }
            }
            Kind::OptBool => {
                select id=(f.name) name=(f.name) aria-describedby=(described) aria-invalid=[invalid] {
                    option value="" selected[value.is_empty()] { "unset (the default)" }
                    option value="true" selected[value == "true"] { "yes" }
                    option value="false" selected[value == "false"] { "no" }
                }
            }
            Kind::OptArea | Kind::Addresses | Kind::Lines => {
                textarea id=(f.name) name=(f.name) rows="4" cols="60" aria-describedby=(described) aria-invalid=[invalid] { (value) }
            }
            Kind::Number(_) => {
                input id=(f.name) name=(f.name) inputmode="numeric" size="20" value=(value)
                    aria-describedby=(described) aria-invalid=[invalid];
            }
            _ => {
                input id=(f.name) name=(f.name) size="40" value=(value)
                    aria-describedby=(described) aria-invalid=[invalid];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_sits_next_to_its_field_and_hostile_names_are_escaped() {
        let mut view = ListView::default();
        view.list.address = "dev@lists.test".into();
        let mut form = SettingsForm::from_settings(
            &serde_json::to_value(herald_types::ListSettings::default()).expect("json"),
        );
        form.values
            .insert("display_name".into(), "<img src=x onerror=alert(1)>".into());
        form.errors
            .insert("bounce_threshold".into(), "Enter a whole number.".into());
        let ctx = Ctx {
            who: "o@x.test".into(),
            csrf: Some("tok".into()),
            ..Ctx::default()
        };
        let html = list_page(&ctx, &view, &form, None);
        assert!(!html.contains("<img"), "escaped");
        assert!(html.contains("aria-describedby=\"bounce_threshold-error bounce_threshold-help\""));
        assert!(html.contains("id=\"bounce_threshold-error\""));
        assert!(html.contains("name=\"csrf\" value=\"tok\""));
        assert!(!html.contains("<script"), "no script");
        for f in FIELDS {
            assert!(
                html.contains(&format!("for=\"{}\"", f.name)),
                "label for {}",
                f.name
            );
        }
    }
}
