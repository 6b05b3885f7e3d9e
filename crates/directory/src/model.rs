//! Plain data crossing the directory's API: what callers hand in ([`NewMember`]) and the reports
//! they get back. All of it is serde-serializable so the HTTP API can send it as JSON.
//!
//! SECURITY: names and fields come from CSV imports and the HTTP API and end up in headers and
//! footers of every copy; [`check_name`] refuses control characters, also when they hide inside
//! an RFC 2047 encoded word (a lenient reader decodes `=?utf-8?q?Eve=0D=0ABcc=3A_x?=` even in a
//! quoted string and sees a header break).

use herald_types::Address;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Longest display name accepted, in characters.
pub const MAX_NAME_CHARS: usize = 256;
/// Longest custom field value accepted, in characters.
pub const MAX_FIELD_VALUE_CHARS: usize = 1024;
/// Longest custom field name accepted, in characters.
pub const MAX_FIELD_NAME_CHARS: usize = 64;
/// Longest disabled reason (and suppression reason), in characters.
pub const MAX_REASON_CHARS: usize = 256;
/// Most custom fields one member may carry.
pub const MAX_FIELDS: usize = 32;

/// A member to add (or update, when the address is already on the list).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewMember {
    pub address: Address,
    /// Shown in personalized `To:` headers; no control characters, at most [`MAX_NAME_CHARS`].
    #[serde(default)]
    pub display_name: Option<String>,
    /// Values for footer placeholders; at most [`MAX_FIELDS`] entries.
    #[serde(default)]
    pub fields: BTreeMap<String, String>,
}

impl NewMember {
    /// A member with just an address.
    pub fn new(address: Address) -> NewMember {
        NewMember {
            address,
            display_name: None,
            fields: BTreeMap::new(),
        }
    }
}

/// How many members a list has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct MemberCounts {
    pub total: u64,
    pub enabled: u64,
    pub disabled: u64,
}

/// What a CSV import did.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ImportReport {
    /// Addresses new to the list.
    pub added: u64,
    /// Rows whose address was already on the list, or appeared earlier in the same file; the
    /// member keeps its id and status, its name and fields are replaced.
    pub updated: u64,
    /// The first [`MAX_REPORTED_REJECTS`](crate::MAX_REPORTED_REJECTS) rejected rows, in
    /// file order. Bounded so a garbage file cannot make the report (and the HTTP response)
    /// as large as the file.
    pub rejected: Vec<RejectedRow>,
    /// Every rejected row, including those beyond the detailed list.
    pub rejected_total: u64,
}

/// One row the import refused, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RejectedRow {
    /// 1-based physical line in the file (the header is line 1 unless blank lines precede it).
    pub line: u64,
    pub reason: String,
}

/// True for characters that must never reach a header or a footer from member data: C0/C1
/// controls (CR, LF, NUL, ESC, …), DEL and the Unicode line/paragraph separators.
pub(crate) fn is_forbidden_char(c: char) -> bool {
    c.is_control() || c == '\u{2028}' || c == '\u{2029}'
}

/// Checks a display name; the error text is a reason fit for an import report.
pub(crate) fn check_name(name: &str) -> Result<(), String> {
    if name.chars().count() > MAX_NAME_CHARS {
        return Err(format!("name is longer than {MAX_NAME_CHARS} characters"));
    }
    if let Some(c) = name.chars().find(|&c| is_forbidden_char(c)) {
        return Err(format!("name contains control character {c:?}"));
    }
    if let Some(c) = control_in_encoded_words(name) {
        return Err(format!(
            "name contains an encoded word that decodes to control character {c:?}"
        ));
    }
    Ok(())
}

/// The first forbidden character in what a lenient reader would decode `name` to, reading
/// every RFC 2047 encoded word in it. mail-parser's unstructured-field decoder is that lenient
/// reader (it decodes words anywhere, any charset it knows), so we ask it rather than write a
/// second decoder that might disagree with the ones members run.
fn control_in_encoded_words(name: &str) -> Option<char> {
    if !name.contains("=?") {
        return None;
    }
    let mut line = String::with_capacity(name.len() + 2);
    line.push_str(name);
    line.push_str("\r\n");
    let value = mail_parser::parsers::MessageStream::new(line.as_bytes()).parse_unstructured();
    let decoded = value.as_text()?;
    decoded.chars().find(|&c| is_forbidden_char(c))
}

/// Checks a custom field name (a footer placeholder).
pub(crate) fn check_field_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("field name is empty".into());
    }
    if name.chars().count() > MAX_FIELD_NAME_CHARS {
        return Err(format!(
            "field name is longer than {MAX_FIELD_NAME_CHARS} characters"
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|&c| is_forbidden_char(c) || c == '{' || c == '}')
    {
        return Err(format!("field name {name:?} contains {c:?}"));
    }
    Ok(())
}

/// Checks a custom field value.
pub(crate) fn check_field_value(name: &str, value: &str) -> Result<(), String> {
    if value.chars().count() > MAX_FIELD_VALUE_CHARS {
        return Err(format!(
            "field {name:?} is longer than {MAX_FIELD_VALUE_CHARS} characters"
        ));
    }
    if let Some(c) = value.chars().find(|&c| is_forbidden_char(c)) {
        return Err(format!("field {name:?} contains control character {c:?}"));
    }
    Ok(())
}

/// Validates a member handed in through the API (the address is already a valid `Address`).
pub(crate) fn validate_new_member(m: &NewMember) -> Result<(), crate::DirectoryError> {
    use crate::DirectoryError;
    if let Some(name) = &m.display_name {
        check_name(name).map_err(|r| DirectoryError::invalid("display_name", r))?;
    }
    if m.fields.len() > MAX_FIELDS {
        return Err(DirectoryError::invalid(
            "fields",
            format!("more than {MAX_FIELDS} custom fields"),
        ));
    }
    for (k, v) in &m.fields {
        check_field_name(k).map_err(|r| DirectoryError::invalid("fields", r))?;
        check_field_value(k, v).map_err(|r| DirectoryError::invalid("fields", r))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_name;

    /// Hostile names whose encoded words decode to a header break: spliced into a `To:` they
    /// would let a member's name forge header fields in every copy.
    #[test]
    fn encoded_words_decoding_to_controls_are_refused() {
        for evil in [
            "=?utf-8?q?Evil=0D=0ABcc=3A_victim@x.example?=",
            "Eve =?UTF-8?Q?=0A?= Adams",
            "=?utf-8?b?RXZlDQpCY2M6IHg=?=",
            "=?iso-8859-1?q?a=00b?=",
            "=?utf-8?q?=7F?=",
            "=?utf-8?q?=C2=85?=",
        ] {
            let err = check_name(evil).expect_err(evil);
            assert!(err.contains("encoded word"), "{evil}: {err}");
        }
    }

    #[test]
    fn honest_and_broken_encoded_words_are_kept() {
        for ok in [
            "=?utf-8?q?J=C3=BCrgen_M=C3=BCller?=",
            "=?utf-8?b?SsO8cmdlbg==?=",
            "a =? b ?= c",
            "=?",
            "=?utf-8?q?",
            "=?utf-8?x?abc?=",
            "=?utf-8?b?!!!?=",
            "Plain Name",
        ] {
            assert_eq!(check_name(ok), Ok(()), "{ok}");
        }
    }
}
