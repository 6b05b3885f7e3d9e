//! A list's settings as a form: one field per setting `herald list show` prints (the table
//! [`FIELDS`]; a test checks it names every field of `ListSettings`), the form's values from
//! the stored settings, and a submission checked field by field into the changes
//! `PATCH /api/v1/lists/<list>` takes (a JSON object of setting names and values), with an error
//! per field that is wrong, shown next to it.
//!
//! Why a table and JSON values rather than a struct per form: the settings already travel as
//! JSON by name (the API's merge), so a field here is a name, a label and how its text maps to
//! a JSON value; the server merges and validates the whole exactly as for the API.
//!
//! SECURITY: submissions are untrusted: each value is parsed by its kind (numbers bounded,
//! choices from a fixed list, addresses by `Address::parse`), unknown names are ignored, and
//! the directory validates the merged settings again (control characters, lengths).

use herald_types::Address;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// How a setting is edited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// One line of text.
    Text,
    /// One line; empty means unset (`null`).
    OptText,
    /// Several lines; empty means unset.
    OptArea,
    /// A checkbox.
    Bool,
    /// Unset, yes or no.
    OptBool,
    /// A whole number from 0 to the bound.
    Number(u64),
    /// One of these words.
    Choice(&'static [&'static str]),
    /// `poster`, `list` or `explicit` with an address (field `reply_to_address`).
    ReplyTo,
    /// Addresses, one per line.
    Addresses,
    /// Words, one per line.
    Lines,
}

/// One setting on the form.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    /// The setting's name (as in `herald list set` and the API).
    pub name: &'static str,
    pub label: &'static str,
    /// A sentence under the field.
    pub help: &'static str,
    pub kind: Kind,
}

const U32: u64 = u32::MAX as u64;

/// Every setting, in the order the form shows them.
pub const FIELDS: &[Field] = &[
    Field { name: "display_name", label: "Display name", help: "Shown in List-Id and in rewritten From lines.", kind: Kind::Text },
    Field { name: "posting_policy", label: "Who may post", help: "members, anyone, or moderators only.", kind: Kind::Choice(&["members", "anyone", "moderators"]) },
    Field { name: "subject_prefix", label: "Subject prefix", help: "For example [dev]; empty for none.", kind: Kind::OptText },
    Field { name: "reply_to", label: "Reply-To", help: "Where replies go: the poster, the list, or an address.", kind: Kind::ReplyTo },
    Field { name: "footer", label: "Footer", help: "Added to each copy. Placeholders: {{name}}, {{email}}, {{unsubscribe_url}}, {{list_name}}, {{list_address}}.", kind: Kind::OptArea },
    Field { name: "personalize", label: "Personalize each copy", help: "Address To: to each member and fill the footer per member.", kind: Kind::Bool },
    Field { name: "moderators", label: "Moderators", help: "One address per line.", kind: Kind::Addresses },
    Field { name: "max_message_bytes", label: "Largest post (bytes)", help: "0: the server's limit.", kind: Kind::Number(u64::MAX >> 1) },
    Field { name: "max_age_secs", label: "Give up on a copy after (seconds)", help: "Default 432000 (5 days).", kind: Kind::Number(u64::MAX >> 1) },
    Field { name: "bounce_threshold", label: "Bounce score that disables a member", help: "0 never disables.", kind: Kind::Number(U32) },
    Field { name: "bounce_stale_days", label: "Bounce score forgotten after (days)", help: "Days without a counted bounce.", kind: Kind::Number(U32) },
    Field { name: "bounce_notify", label: "Tell members when bouncing disables them", help: "", kind: Kind::Bool },
    Field { name: "subscription", label: "Subscriptions", help: "confirm: anyone, with double opt-in; closed: administrators add members.", kind: Kind::Choice(&["confirm", "closed"]) },
    Field { name: "held_expiry_days", label: "Discard held posts after (days)", help: "", kind: Kind::Number(U32) },
    Field { name: "allowed_content_types", label: "Allowed content types", help: "One per line, e.g. text/plain or image/*; empty allows any.", kind: Kind::Lines },
    Field { name: "hold_executables", label: "Hold posts with executable attachments", help: "", kind: Kind::Bool },
    Field { name: "from_rewrite", label: "From rewriting (DMARC)", help: "", kind: Kind::Choice(&["when_needed", "always", "never"]) },
    Field { name: "poster_dkim", label: "The poster's DKIM signature", help: "", kind: Kind::Choice(&["keep", "rename_when_rewritten", "remove"]) },
    Field { name: "guard_action", label: "Loops, auto-replies and floods are", help: "held for a moderator, or refused.", kind: Kind::Choice(&["hold", "reject"]) },
    Field { name: "max_posts_per_hour", label: "Posts per sender per hour", help: "0: no limit.", kind: Kind::Number(U32) },
    Field { name: "require_aligned_from", label: "Require an authenticated From", help: "Unset: on for members and moderators lists.", kind: Kind::OptBool },
    Field { name: "digest_size_threshold_kb", label: "Send a digest at (kilobytes)", help: "0: on schedule only.", kind: Kind::Number(U32) },
    Field { name: "digest_schedule", label: "Digest schedule", help: "", kind: Kind::Choice(&["daily", "weekly", "none"]) },
    Field { name: "digest_volume_frequency", label: "New digest volume", help: "", kind: Kind::Choice(&["yearly", "monthly", "never"]) },
    Field { name: "complaint_action", label: "A spam complaint", help: "unsubscribes or disables the member.", kind: Kind::Choice(&["unsubscribe", "disable"]) },
    Field { name: "send_welcome", label: "Welcome new members", help: "", kind: Kind::Bool },
    Field { name: "send_goodbye", label: "Say goodbye to members who unsubscribe", help: "After a confirmed unsubscribe; never after one-click unsubscribe or an administrator's removal.", kind: Kind::Bool },
    Field { name: "welcome_message", label: "Welcome text", help: "Placeholders: {{list_name}}, {{list_address}}, {{email}}.", kind: Kind::OptArea },
    Field { name: "language", label: "Language of the list's mail and pages", help: "Confirmations, welcome, notices and the subscribe page.", kind: Kind::Choice(herald_i18n::CODES) },
    Field { name: "egress_pool", label: "Egress pool", help: "A [[delivery.egress_pool]] name; empty: chosen by destination.", kind: Kind::OptText },
];

/// The form field of the Reply-To address.
pub const REPLY_TO_ADDRESS: &str = "reply_to_address";

/// The form's text per field name, and the error per field name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SettingsForm {
    pub values: BTreeMap<String, String>,
    pub errors: BTreeMap<String, String>,
}

impl SettingsForm {
    /// The form filled from stored settings (`ListSettings` as JSON).
    pub fn from_settings(settings: &Value) -> SettingsForm {
        let mut values = BTreeMap::new();
        for f in FIELDS {
            let v = settings.get(f.name).unwrap_or(&Value::Null);
            let text = match (f.kind, v) {
                (_, Value::Null) => String::new(),
                (Kind::ReplyTo, v) => {
                    if let Some(a) = v.get("address").and_then(Value::as_str) {
                        values.insert(REPLY_TO_ADDRESS.to_string(), a.to_string());
                    }
                    v.get("kind")
                        .and_then(Value::as_str)
                        .unwrap_or("poster")
                        .to_string()
                }
                (_, Value::String(s)) => s.clone(),
                (_, Value::Bool(b)) => b.to_string(),
                (_, Value::Number(n)) => n.to_string(),
                (_, Value::Array(items)) => items
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join("\n"),
                (_, other) => other.to_string(),
            };
            values.insert(f.name.to_string(), text);
        }
        SettingsForm {
            values,
            errors: BTreeMap::new(),
        }
    }

    /// A submitted form: its values kept as sent (to show them again), each field checked, and
    /// the changes for the API's merge (complete only when the form has no error).
    pub fn submitted(pairs: &[(String, String)]) -> (SettingsForm, Map<String, Value>) {
        let sent = |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        let mut form = SettingsForm::default();
        let mut changes = Map::new();
        for f in FIELDS {
            let raw = sent(f.name);
            // A field the form did not send at all keeps its value (a partial form). A
            // checkbox comes with a hidden "false" before it (an unticked box sends nothing),
            // so it is on when any of its values is "true".
            let Some(raw) = raw else { continue };
            let text = match f.kind {
                Kind::Bool => {
                    let on = pairs.iter().any(|(k, v)| k == f.name && v == "true");
                    on.to_string()
                }
                _ => raw.to_string(),
            };
            match parse(f, &text, sent(REPLY_TO_ADDRESS).unwrap_or("")) {
                Ok(v) => {
                    changes.insert(f.name.to_string(), v);
                }
                Err((field, e)) => {
                    form.errors.insert(field.to_string(), e);
                }
            }
            form.values.insert(f.name.to_string(), text);
        }
        if let Some(a) = sent(REPLY_TO_ADDRESS) {
            form.values.insert(REPLY_TO_ADDRESS.into(), a.to_string());
        }
        (form, changes)
    }
}

/// One field's text as its JSON value; `Err((field, message))` names the form field at fault.
fn parse(f: &Field, text: &str, reply_address: &str) -> Result<Value, (&'static str, String)> {
    let err = |m: String| (f.name, m);
    Ok(match f.kind {
        Kind::Text => Value::String(text.trim().to_string()),
        Kind::OptText => match text.trim() {
            "" => Value::Null,
            t => Value::String(t.to_string()),
        },
        Kind::OptArea => match text.trim() {
            "" => Value::Null,
            // Browsers send CRLF line breaks; the footer is stored with LF.
            _ => Value::String(text.replace("\r\n", "\n")),
        },
        Kind::Bool => Value::Bool(text == "true"),
        Kind::OptBool => match text {
            "" => Value::Null,
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            _ => return Err(err("Choose unset, yes or no.".into())),
        },
        Kind::Number(max) => match text.trim().parse::<u64>() {
            Ok(n) if n <= max => Value::from(n),
            _ => return Err(err(format!("Enter a whole number from 0 to {max}."))),
        },
        Kind::Choice(words) => match words.iter().find(|w| **w == text) {
            Some(w) => Value::String(w.to_string()),
            None => return Err(err(format!("Choose one of: {}.", words.join(", ")))),
        },
        Kind::ReplyTo => match text {
            "poster" | "list" => serde_json::json!({ "kind": text }),
            "explicit" => match Address::parse(reply_address.trim()) {
                Ok(a) => serde_json::json!({ "kind": "explicit", "address": a.to_string() }),
                Err(e) => {
                    return Err((
                        REPLY_TO_ADDRESS,
                        format!("Reply-To needs an address here: {e}."),
                    ))
                }
            },
            _ => return Err(err("Choose poster, list or explicit.".into())),
        },
        Kind::Addresses => {
            let mut out = Vec::new();
            for (i, line) in text.lines().enumerate() {
                let line = line.trim();
                if line.is_empty() {
                    continue;
                }
                match Address::parse(line) {
                    Ok(a) => out.push(Value::String(a.to_string())),
                    Err(e) => {
                        return Err(err(format!(
                            "Line {}: {line:?} is not an address ({e}).",
                            i + 1
                        )))
                    }
                }
            }
            Value::Array(out)
        }
        Kind::Lines => Value::Array(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(|l| Value::String(l.to_string()))
                .collect(),
        ),
    })
}

/// The form field a directory validation error names (`settings.footer` → `footer`).
pub fn field_of(directory_field: &str) -> Option<&'static str> {
    let name = directory_field
        .strip_prefix("settings.")
        .unwrap_or(directory_field);
    FIELDS.iter().find(|f| f.name == name).map(|f| f.name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_types::ListSettings;

    fn pairs(kv: &[(&str, &str)]) -> Vec<(String, String)> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// The form shows every setting `herald list show` prints, and every choice it offers is
    /// a word the settings accept.
    #[test]
    fn every_setting_has_a_field_and_every_choice_decodes() {
        let json = serde_json::to_value(ListSettings::default()).expect("json");
        let names: Vec<&str> = json
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        for n in &names {
            assert!(FIELDS.iter().any(|f| f.name == *n), "no field for {n}");
        }
        assert_eq!(FIELDS.len(), names.len());
        for f in FIELDS {
            if let Kind::Choice(words) = f.kind {
                for w in words {
                    let mut v = json.clone();
                    v[f.name] = Value::String(w.to_string());
                    serde_json::from_value::<ListSettings>(v)
                        .unwrap_or_else(|e| panic!("{}={w}: {e}", f.name));
                }
            }
        }
    }

    #[test]
    fn a_form_round_trips_the_stored_settings() {
        let s = ListSettings {
            subject_prefix: Some("[dev]".into()),
            moderators: vec![Address::parse("m@x.test").expect("a")],
            require_aligned_from: Some(false),
            ..ListSettings::default()
        };
        let json = serde_json::to_value(&s).expect("json");
        let form = SettingsForm::from_settings(&json);
        let mut sent: Vec<(String, String)> = form
            .values
            .iter()
            .filter(|(k, v)| !(matches!(kind(k), Some(Kind::Bool)) && *v == "false"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        sent.push(("csrf".into(), "ignored".into()));
        let (form, changes) = SettingsForm::submitted(&sent);
        assert!(form.errors.is_empty(), "{:?}", form.errors);
        let mut merged = json.as_object().expect("object").clone();
        merged.extend(changes);
        let back: ListSettings = serde_json::from_value(Value::Object(merged)).expect("decode");
        assert_eq!(back, s);
    }

    #[test]
    fn a_checkbox_is_its_hidden_false_and_its_true_and_absent_keeps() {
        let (_, off) = SettingsForm::submitted(&pairs(&[("personalize", "false")]));
        assert_eq!(off["personalize"], Value::Bool(false));
        let (_, on) =
            SettingsForm::submitted(&pairs(&[("personalize", "false"), ("personalize", "true")]));
        assert_eq!(on["personalize"], Value::Bool(true));
        let (_, none) = SettingsForm::submitted(&pairs(&[("subject_prefix", "[x]")]));
        assert!(!none.contains_key("personalize") && none.len() == 1);
    }

    fn kind(name: &str) -> Option<Kind> {
        FIELDS.iter().find(|f| f.name == name).map(|f| f.kind)
    }

    #[test]
    fn hostile_values_get_an_error_next_to_their_field() {
        let bad = pairs(&[
            ("bounce_threshold", "-1"),
            ("max_posts_per_hour", "99999999999999999999999"),
            ("posting_policy", "everyone\"><script>"),
            ("moderators", "ok@x.test\nnot an address"),
            ("reply_to", "explicit"),
            ("reply_to_address", ""),
            ("require_aligned_from", "maybe"),
            ("max_age_secs", "12"),
        ]);
        let (form, _) = SettingsForm::submitted(&bad);
        for f in [
            "bounce_threshold",
            "max_posts_per_hour",
            "posting_policy",
            "moderators",
            REPLY_TO_ADDRESS,
            "require_aligned_from",
        ] {
            assert!(form.errors.contains_key(f), "{f}: {:?}", form.errors);
        }
        assert!(!form.errors.contains_key("max_age_secs"));
        assert!(form.errors["moderators"].contains("Line 2"));
        assert_eq!(
            form.values["posting_policy"], "everyone\"><script>",
            "kept as sent"
        );
        assert_eq!(field_of("settings.footer"), Some("footer"));
        assert_eq!(field_of("settings.nope"), None);
    }
}
