//! listmonk's subscriber export (Subscribers → Export, `GET /api/v1/subscribers/export`): RFC 4180
//! CSV with the header `uuid,email,name,attributes,status,created_at,updated_at`, `attributes`
//! a JSON object, `status` one of `enabled`, `disabled`, `blocklisted` (listmonk's
//! `cmd/subscribers.go`, `handleExportSubscribers`). Read with the `csv` crate.
//!
//! Mapping (one Herald list, `--list`):
//! - `enabled` → a member receiving every post; `disabled` → a member, disabled ("disabled in
//!   listmonk"); `blocklisted` → not a member, on Herald's **global** suppression list
//!   (listmonk's blocklist stops mail from every list, so does this).
//! - `name` → display name; `attributes` → member fields: a string as is, a number or boolean
//!   as its JSON text, a nested object flattened with dots (`{"a":{"b":1}}` → `a.b`), an array
//!   as its JSON text. A field Herald cannot hold (over [`herald_directory::MAX_FIELDS`], too
//!   long, control characters) is reported and left out; the member still comes.
//! - `uuid`, `created_at`, `updated_at` have no Herald equivalent (members get Herald's own id;
//!   consent is recorded as "import" at the import's time).
//!
//! Every row is accounted for: a row with a wrong number of columns, an invalid address, an
//! unknown status or attributes that are not a JSON object is a skip with its line number.
//!
//! SECURITY: the file is untrusted text; the csv reader bounds nothing by itself, so a record
//! longer than [`MAX_RECORD_BYTES`] is refused (a skip) before its fields are used, and every
//! name and field passes the directory's checks (no control characters) before it is written.

use crate::source::{Skip, SkipKind, Snapshot, SourceList, SourceMember, SourceSuppression};
use crate::ImportError;
use herald_directory::{SuppressionSource, MAX_FIELDS};
use herald_types::Address;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

/// Longest CSV record accepted, in bytes.
pub const MAX_RECORD_BYTES: usize = 64 * 1024;

/// The export's header, in order.
pub const COLUMNS: [&str; 7] = [
    "uuid",
    "email",
    "name",
    "attributes",
    "status",
    "created_at",
    "updated_at",
];

/// Reads the export at `path` for the list `list`.
pub fn read(path: &Path, list: &Address) -> Result<Snapshot, ImportError> {
    let file = std::fs::File::open(path).map_err(ImportError::read(path))?;
    read_from(file, &path.display().to_string(), list)
}

/// Reads an export from `input` (`what` names it in errors and the report).
pub fn read_from(input: impl Read, what: &str, list: &Address) -> Result<Snapshot, ImportError> {
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(true)
        .from_reader(input);
    let header = rdr
        .headers()
        .map_err(|e| ImportError::format(what, format!("header: {e}")))?
        .clone();
    let cols: Vec<&str> = header.iter().map(str::trim).collect();
    if cols != COLUMNS {
        return Err(ImportError::format(
            what,
            format!(
                "the header is {:?}; listmonk's subscriber export starts with {:?}",
                cols.join(","),
                COLUMNS.join(",")
            ),
        ));
    }
    let mut snap = Snapshot {
        source: format!("listmonk export {what}"),
        ..Snapshot::default()
    };
    let mut target = SourceList::new(list.clone());
    let now = herald_types::unix_ms_now();
    let mut record = csv::StringRecord::new();
    loop {
        let line = rdr.position().line();
        match rdr.read_record(&mut record) {
            Ok(false) => break,
            Ok(true) => row(&record, line, now, &mut target, &mut snap),
            Err(e) => {
                let at = e.position().map_or(line, |p| p.line());
                snap.skipped.push(Skip::new(
                    SkipKind::InvalidData,
                    format!("line {at}"),
                    format!("not CSV: {e}"),
                ));
                if matches!(e.kind(), csv::ErrorKind::Io(_)) {
                    return Err(ImportError::format(what, e.to_string()));
                }
            }
        }
    }
    snap.lists.push(target);
    Ok(snap)
}

fn row(r: &csv::StringRecord, line: u64, now: u64, list: &mut SourceList, snap: &mut Snapshot) {
    let item = format!("line {line}");
    let skip = |snap: &mut Snapshot, kind, reason: String| {
        snap.skipped.push(Skip::new(kind, item.clone(), reason));
    };
    if r.as_slice().len() > MAX_RECORD_BYTES {
        return skip(
            snap,
            SkipKind::InvalidData,
            format!("row longer than {MAX_RECORD_BYTES} bytes"),
        );
    }
    if r.len() != COLUMNS.len() {
        return skip(
            snap,
            SkipKind::InvalidData,
            format!("{} columns, the export has {}", r.len(), COLUMNS.len()),
        );
    }
    let email = r.get(1).unwrap_or_default().trim();
    let address = match Address::parse(email) {
        Ok(a) => a,
        Err(e) => return skip(snap, SkipKind::InvalidAddress, format!("{email:?}: {e}")),
    };
    let origin = format!("line {line}");
    let status = r.get(4).unwrap_or_default().trim();
    match status {
        "blocklisted" => {
            snap.global_suppressions.push(SourceSuppression {
                address,
                reason: "blocklisted in listmonk".into(),
                source: SuppressionSource::Operator,
                at_ms: now,
            });
            return;
        }
        "enabled" | "disabled" => {}
        other => {
            return skip(
                snap,
                SkipKind::InvalidData,
                format!("{address}: unknown status {other:?} (listmonk writes enabled, disabled or blocklisted)"),
            )
        }
    }
    let attributes = r.get(3).unwrap_or_default().trim();
    let attrs: Value = if attributes.is_empty() {
        Value::Object(serde_json::Map::new())
    } else {
        match serde_json::from_str(attributes) {
            Ok(v @ Value::Object(_)) => v,
            Ok(_) | Err(_) => {
                return skip(
                    snap,
                    SkipKind::InvalidData,
                    format!("{address}: attributes are not a JSON object"),
                )
            }
        }
    };
    let mut m = SourceMember::new(address, origin.clone());
    let name = r.get(2).unwrap_or_default().trim();
    if !name.is_empty() {
        m.display_name = Some(name.to_string());
    }
    if status == "disabled" {
        m.disabled = Some("disabled in listmonk".into());
    }
    let mut flat = BTreeMap::new();
    flatten("", &attrs, &mut flat);
    for (k, v) in flat {
        if m.fields.len() >= MAX_FIELDS {
            snap.skipped.push(Skip::new(
                SkipKind::InvalidData,
                format!("attribute {k:?} of {} ({origin})", m.address),
                format!("Herald keeps at most {MAX_FIELDS} fields per member"),
            ));
            continue;
        }
        m.fields.insert(k, v);
    }
    list.members.push(m);
}

/// `value`'s leaves as `prefix.key` → text.
fn flatten(prefix: &str, value: &Value, out: &mut BTreeMap<String, String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        Value::String(s) => {
            out.insert(prefix.to_string(), s.clone());
        }
        Value::Null => {}
        other => {
            out.insert(prefix.to_string(), other.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list() -> Address {
        Address::parse("news@lists.example.org").unwrap()
    }

    #[test]
    fn a_wrong_header_is_refused_as_a_whole() {
        let err = read_from("email,name\na@b.test,A\n".as_bytes(), "x.csv", &list()).unwrap_err();
        assert!(
            err.to_string().contains("listmonk's subscriber export"),
            "{err}"
        );
    }

    #[test]
    fn attributes_flatten_and_statuses_map() {
        let csv = "uuid,email,name,attributes,status,created_at,updated_at\n\
            u1,a@x.test,Ann,\"{\"\"city\"\":\"\"Oslo\"\",\"\"n\"\":3,\"\"p\"\":{\"\"vip\"\":true},\"\"tags\"\":[1,2]}\",enabled,2024-01-02 10:00:00 +0000 UTC,2024-01-02 10:00:00 +0000 UTC\n\
            u2,b@x.test,,{},disabled,t,t\n\
            u3,c@x.test,C,{},blocklisted,t,t\n";
        let s = read_from(csv.as_bytes(), "x.csv", &list()).unwrap();
        assert!(s.skipped.is_empty(), "{:?}", s.skipped);
        let ms = &s.lists[0].members;
        assert_eq!(ms.len(), 2);
        assert_eq!(ms[0].fields["city"], "Oslo");
        assert_eq!(ms[0].fields["n"], "3");
        assert_eq!(ms[0].fields["p.vip"], "true");
        assert_eq!(ms[0].fields["tags"], "[1,2]");
        assert_eq!(ms[1].disabled.as_deref(), Some("disabled in listmonk"));
        assert_eq!(s.global_suppressions[0].address.to_string(), "c@x.test");
    }
}
