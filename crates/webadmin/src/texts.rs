//! A list's own wording: the page listing every message Herald writes for
//! the list — notices, digest headings, public pages — with the fields each may use and which
//! languages the list has reworded, and the page editing one message in one language: the
//! shipped text beside the fields, a text area holding the list's text (or the shipped one to
//! start from), the error of a refused text next to it, and a button back to the shipped text.
//!
//! SECURITY: texts are shown through maud's escaping (an owner's `<script>` is text); the forms
//! carry the CSRF field; what is stored is checked by the directory, not here.

use crate::layout::{csrf_field, enc, error_id, field_error, list_href, list_nav, page, time, Ctx};
use herald_api_types::{ListTextView, ListTexts};
use maud::{html, Markup};

/// `/admin/lists/<list>/texts/<message>/<language>`.
pub fn text_href(list: &str, message: &str, language: &str) -> String {
    format!(
        "{}/texts/{}/{}",
        list_href(list),
        enc(message),
        enc(language)
    )
}

/// What a message is for, from its id (the catalogue's naming).
fn purpose(id: &str) -> &'static str {
    match id.split('-').next().unwrap_or("") {
        "page" | "subscribe" | "confirm" | "manage" | "unsub" => "public page",
        "digest" => "digest",
        _ => "mail",
    }
}

/// The list of messages.
pub fn texts_page(ctx: &Ctx, list: &str, t: &ListTexts) -> String {
    let body = html! {
        (list_nav(list, true))
        p {
            "Every mail Herald sends for this list and every public page it shows is written from
             these messages, in the member's language (else the list's: " (t.language) "). Give a
             message the list's own wording in any language; fields are written "
            code { "{ $name }" } "."
        }
        table {
            thead { tr {
                th scope="col" { "Message" } th scope="col" { "Used in" }
                th scope="col" { "Fields" } th scope="col" { "Edit" }
            } }
            tbody {
                @for m in &t.messages {
                    tr {
                        th scope="row" { code { (m.id) } }
                        td { (purpose(&m.id)) }
                        td { (fields(m)) }
                        td {
                            @for l in &t.languages {
                                a href=(text_href(list, &m.id, l)) {
                                    (l)
                                    @if m.overrides.iter().any(|o| &o.language == l) { " (the list's)" }
                                }
                                " "
                            }
                        }
                    }
                }
            }
        }
    };
    page(ctx, &format!("Texts of {list}"), body)
}

fn fields(m: &ListTextView) -> Markup {
    html! {
        @if m.fields.is_empty() { "none" }
        @for (i, f) in m.fields.iter().enumerate() {
            @if i > 0 { ", " }
            code { "{ $" (f) " }" }
        }
    }
}

/// The edit form of one message in one language. `draft` and `error`: a refused submission
/// shown again.
pub fn text_page(
    ctx: &Ctx,
    list: &str,
    m: &ListTextView,
    language: &str,
    draft: Option<&str>,
    error: Option<&str>,
) -> String {
    let own = m.overrides.iter().find(|o| o.language == language);
    let text = draft
        .map(str::to_string)
        .or_else(|| own.map(|o| o.text.clone()))
        .unwrap_or_else(|| m.shipped.clone());
    let href = text_href(list, &m.id, language);
    let body = html! {
        (list_nav(list, true))
        p { a href={ (list_href(list)) "/texts" } { "All texts" } }
        dl {
            dt { "Used in" } dd { (purpose(&m.id)) }
            dt { "Fields" } dd { (fields(m)) }
            dt { "Now" } dd {
                @match own {
                    Some(o) => { "the list's own text, saved " (time(o.updated_at_ms)) }
                    None => { "the text Herald ships" }
                }
            }
        }
        h2 { "Shipped text" }
        pre.shipped { (m.shipped) }
        form method="post" action=(href) {
            (csrf_field(ctx))
            p {
                label for="text" { "The list's text (" (language) ")" } br;
                textarea #text name="text" rows="12" cols="80" required
                    aria-describedby=(error_id("text")) aria-invalid=[error.map(|_| "true")] { (text) }
                br; (field_error("text", error))
            }
            p { button type="submit" { "Save" } }
        }
        @if own.is_some() {
            form method="post" action={ (href) "/remove" } {
                (csrf_field(ctx))
                button type="submit" { "Use the shipped text again" }
            }
        }
    };
    page(ctx, &format!("{} ({language}) · {list}", m.id), body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_api_types::TextOverride;

    fn message() -> ListTextView {
        ListTextView {
            id: "welcome-subject".into(),
            fields: vec!["name".into()],
            shipped: "Welcome to { $name }".into(),
            overrides: vec![TextOverride {
                language: "de".into(),
                text: "<script>alert(1)</script> { $name }".into(),
                updated_at_ms: 0,
            }],
        }
    }

    #[test]
    fn an_owners_text_is_escaped_and_the_forms_carry_the_csrf_token() {
        let ctx = Ctx {
            who: "owner@x.test".into(),
            csrf: Some("tok123".into()),
            ..Ctx::default()
        };
        let html = text_page(&ctx, "dev@l.test", &message(), "de", None, None);
        assert!(!html.contains("<script>alert"), "{html}");
        assert!(html.contains("&lt;script&gt;"));
        // The save and remove forms, and the frame's sign-out form.
        assert_eq!(html.matches("name=\"csrf\" value=\"tok123\"").count(), 3);
        assert!(html.contains("Use the shipped text again"));
        // A refused draft is shown with its error next to the field.
        let html = text_page(
            &ctx,
            "dev@l.test",
            &message(),
            "en",
            Some("{ $x }"),
            Some("bad <b>"),
        );
        assert!(html.contains("{ $x }") && html.contains("bad &lt;b&gt;"));
        assert!(html.contains("aria-invalid=\"true\""));
        assert!(!html.contains("Use the shipped text again"));
        let list = ListTexts {
            language: "en".into(),
            languages: vec!["en".into(), "de".into()],
            messages: vec![message()],
        };
        let html = texts_page(&ctx, "dev@l.test", &list);
        assert!(html.contains("/admin/lists/dev%40l%2Etest/texts/welcome%2Dsubject/de"));
        assert!(html.contains("de (the list's)"));
    }
}
