//! Plain data crossing the directory's API: what callers hand in ([`NewMember`]) and the reports
//! they get back. All of it is serde-serializable so the HTTP API can send it as JSON.

use herald_types::Address;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Longest display name accepted, in characters.
pub const MAX_NAME_CHARS: usize = 256;
/// Longest custom field value accepted, in characters.
pub const MAX_FIELD_VALUE_CHARS: usize = 1024;
/// Longest custom field name accepted, in characters.
pub const MAX_FIELD_NAME_CHARS: usize = 64;
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
    Ok(())
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
