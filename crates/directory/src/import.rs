//! CSV member import.
//!
//! Format: a header row, then one member per line. Header names are trimmed and lower-cased;
//! `email` (or `address`) is required, `name` (or `display_name`) is optional, and every other
//! column becomes a custom field (at most [`MAX_FIELDS`]). Blank lines are skipped. A UTF-8 BOM
//! before the header is ignored. Empty values mean "absent" (no name, no such field).
//!
//! Behaviour: every bad row is rejected with its physical line number and a reason, and the
//! import goes on; good rows are never dropped. A suppressed or banned address is a rejected row
//! too, with the reason (reported after the other rejects of its batch of
//! [`IMPORT_BATCH_ROWS`]). A row whose address is already on the list, or
//! appeared earlier in the file, updates that member (counted as `updated`). Rows are written in
//! transactions of [`IMPORT_BATCH_ROWS`] so a million-row file neither holds the write lock for
//! the whole import nor needs one transaction per row; `progress(rows_processed)` is called after
//! each batch. Only a missing or unusable header, an I/O error, or a storage failure aborts the
//! import; batches committed before that stay committed (re-running the import is idempotent).
//!
//! Limits: lines of at most [`MAX_LINE_BYTES`]; names, field names and values as in
//! [`crate::model`]; at most [`MAX_REPORTED_REJECTS`] rejected rows are detailed in the report
//! (all are counted).
//!
//! SECURITY: the file is untrusted. Addresses go through `Address::parse`; names and field values
//! with control characters (CR/LF header injection, NUL, ESC) are refused; lines are parsed one
//! at a time with bounded memory (see `csvline`); invalid UTF-8 costs only the row it is on.
//!
//! Counting caveat: `added`/`updated` are exact unless another writer adds the same address while
//! the import runs (between two of its batches); such a row is then reported as added.

use crate::consent::{Consent, ConsentSource};
use crate::csvline::{split_fields, LineReader, RawLine};
use crate::error::DirectoryError;
use crate::lists::ensure_list;
use crate::members::{high_water, upsert_members};
use crate::model::{
    check_field_name, check_field_value, check_name, ImportReport, NewMember, RejectedRow,
    MAX_FIELDS,
};
use crate::suppression::refusal_on;
use crate::Directory;
use herald_types::{Address, ListId};
use std::collections::BTreeMap;
use std::io::{BufReader, Read};

/// Rows per write transaction (and per progress callback).
pub const IMPORT_BATCH_ROWS: usize = 10_000;
/// Rejected rows described individually in an [`ImportReport`].
pub const MAX_REPORTED_REJECTS: usize = 10_000;
/// Longest line read: room for an address, a name and 32 maximal fields with quoting.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Which column holds what, from the header row.
#[derive(Debug)]
struct Header {
    width: usize,
    email: usize,
    name: Option<usize>,
    /// (column, field name) for every custom column.
    fields: Vec<(usize, String)>,
}

impl Directory {
    /// Imports members from CSV into `list`. See the module doc for the format and guarantees.
    pub fn import_csv<R: Read>(
        &self,
        list: ListId,
        input: R,
        progress: &mut dyn FnMut(u64),
    ) -> Result<ImportReport, DirectoryError> {
        match self.backend() {
            crate::Backend::Sqlite(store) => ensure_list(&*store.reader()?, list)?,
            crate::Backend::Postgres(pg) => {
                // The list's existence, on the same connections the batches will use.
                if pg.list_by_id(list)?.is_none() {
                    return Err(DirectoryError::no_such_list(list));
                }
            }
        }
        let mut lines = LineReader::new(BufReader::with_capacity(64 * 1024, input), MAX_LINE_BYTES);
        let mut buf = Vec::new();
        let header = read_header(&mut lines, &mut buf)?;
        let mut report = ImportReport::default();
        let mut batch = Vec::with_capacity(IMPORT_BATCH_ROWS);
        let mut fields = Vec::new();
        let mut high = None;
        let mut processed: u64 = 0;
        while let Some(line) = lines.next_line(&mut buf).map_err(read_err)? {
            if line.bytes.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            processed += 1;
            let number = line.number;
            match parse_row(&header, &line, &mut fields) {
                Ok(member) => batch.push((number, member)),
                Err(reason) => reject(&mut report, number, reason),
            }
            if processed % IMPORT_BATCH_ROWS as u64 == 0 {
                self.import_batch(list, &mut batch, &mut high, &mut report)?;
                progress(processed);
            }
        }
        if processed % IMPORT_BATCH_ROWS as u64 != 0 || processed == 0 {
            self.import_batch(list, &mut batch, &mut high, &mut report)?;
            progress(processed);
        }
        tracing::info!(
            list = list.0,
            added = report.added,
            updated = report.updated,
            rejected = report.rejected_total,
            "csv import finished"
        );
        Ok(report)
    }

    /// Writes one batch in its own transaction and empties it.
    fn import_batch(
        &self,
        list: ListId,
        batch: &mut Vec<(u64, NewMember)>,
        high: &mut Option<i64>,
        report: &mut ImportReport,
    ) -> Result<(), DirectoryError> {
        if batch.is_empty() {
            return Ok(());
        }
        let store = match self.backend() {
            crate::Backend::Sqlite(store) => store,
            crate::Backend::Postgres(pg) => {
                let (tally, refused) = pg.import_batch(list, batch, high)?;
                finish_batch(report, tally, refused);
                batch.clear();
                return Ok(());
            }
        };
        let tally = store.write(|tx| {
            // Re-checked per batch: the list may be deleted while a long import runs.
            ensure_list(tx, list)?;
            // The high-water mark is taken once, before the first insert of this import, so a
            // later duplicate of a row added by an earlier batch counts as an update.
            let mut h = match *high {
                Some(h) => h,
                None => high_water(tx)?,
            };
            // Consent by import, for rows new to the list (an existing member keeps theirs).
            let consent = Consent::now(ConsentSource::Import, None);
            // Suppressed and banned addresses are rejected rows, with the reason.
            let mut refused = Vec::new();
            let mut ok = Vec::with_capacity(batch.len());
            for (line, m) in batch.iter() {
                match refusal_on(store, tx, list, &m.address)? {
                    Some(why) => {
                        refused.push((*line, format!("{} cannot be added: {why}", m.address)))
                    }
                    None => ok.push(m),
                }
            }
            let tally = upsert_members(tx, list, ok, &mut h, Some(&consent))?;
            *high = Some(h);
            Ok((tally, refused))
        })?;
        let (tally, refused) = tally;
        finish_batch(report, tally, refused);
        batch.clear();
        Ok(())
    }
}

/// Adds one written batch to the report: its refused rows, then its counts.
fn finish_batch(
    report: &mut ImportReport,
    tally: crate::members::Upserted,
    refused: Vec<(u64, String)>,
) {
    for (line, reason) in refused {
        reject(report, line, reason);
    }
    report.added += tally.added;
    report.updated += tally.updated;
}

fn read_err(source: std::io::Error) -> DirectoryError {
    DirectoryError::Read { source }
}

fn reject(report: &mut ImportReport, line: u64, reason: String) {
    report.rejected_total += 1;
    if report.rejected.len() < MAX_REPORTED_REJECTS {
        report.rejected.push(RejectedRow { line, reason });
    }
}

/// Reads the first non-blank line and maps its columns. Any problem here aborts the import with
/// `InvalidInput { field: "csv header", .. }`: without a header no row can be interpreted.
fn read_header<R: std::io::BufRead>(
    lines: &mut LineReader<R>,
    buf: &mut Vec<u8>,
) -> Result<Header, DirectoryError> {
    let bad = |reason: String| DirectoryError::invalid("csv header", reason);
    let line = loop {
        match lines.next_line(buf).map_err(read_err)? {
            None => return Err(bad("the file is empty; a header row is required".into())),
            Some(l) => {
                let bytes = l.bytes.strip_prefix(BOM).unwrap_or(l.bytes);
                if !bytes.iter().all(u8::is_ascii_whitespace) {
                    break RawLine { bytes, ..l };
                }
            }
        }
    };
    if line.too_long {
        return Err(bad(format!(
            "line {} is longer than {MAX_LINE_BYTES} bytes",
            line.number
        )));
    }
    if line.bytes.starts_with(b"\xFF\xFE") || line.bytes.starts_with(b"\xFE\xFF") {
        // Spreadsheets' "Unicode text" export: say so rather than "invalid UTF-8 at byte 1".
        return Err(bad("the file is UTF-16; save it as CSV in UTF-8".into()));
    }
    let text = std::str::from_utf8(line.bytes)
        .map_err(|e| bad(format!("line {} is not valid UTF-8: {e}", line.number)))?;
    let mut names = Vec::new();
    split_fields(text, &mut names).map_err(|e| bad(format!("line {}: {e}", line.number)))?;
    map_columns(&names).map_err(|mut reason| {
        if names.len() == 1 && text.contains(';') {
            // Spreadsheets in many locales export with semicolons.
            reason.push_str("; fields must be separated by commas, not semicolons");
        }
        bad(format!("line {}: {reason}", line.number))
    })
}

/// Assigns header names to roles; pure so it is easy to test.
fn map_columns(names: &[String]) -> Result<Header, String> {
    let mut email = None;
    let mut name = None;
    let mut fields = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (i, raw) in names.iter().enumerate() {
        let col = raw.trim().to_lowercase();
        let (slot, role) = match col.as_str() {
            "email" | "address" => (&mut email, "email"),
            "name" | "display_name" => (&mut name, "name"),
            _ => {
                check_field_name(&col).map_err(|r| format!("column {}: {r}", i + 1))?;
                if !seen.insert(col.clone()) {
                    return Err(format!("column {col:?} appears more than once"));
                }
                fields.push((i, col));
                continue;
            }
        };
        if slot.replace(i).is_some() {
            return Err(format!("more than one {role} column"));
        }
    }
    let Some(email) = email else {
        return Err(
            "no email column (a header row naming an `email` or `address` column is \
                    required)"
                .into(),
        );
    };
    if fields.len() > MAX_FIELDS {
        return Err(format!("more than {MAX_FIELDS} custom field columns"));
    }
    Ok(Header {
        width: names.len(),
        email,
        name,
        fields,
    })
}

/// Turns one data line into a member, or says why not. `scratch` is reused across rows.
fn parse_row(
    header: &Header,
    line: &RawLine<'_>,
    scratch: &mut Vec<String>,
) -> Result<NewMember, String> {
    if line.too_long {
        return Err(format!("line is longer than {MAX_LINE_BYTES} bytes"));
    }
    let text = std::str::from_utf8(line.bytes)
        .map_err(|e| format!("not valid UTF-8 (byte {})", e.valid_up_to() + 1))?;
    split_fields(text, scratch).map_err(|e| e.to_string())?;
    if scratch.len() != header.width {
        return Err(format!(
            "wrong number of fields: expected {}, found {}",
            header.width,
            scratch.len()
        ));
    }
    let email = scratch[header.email].trim();
    if email.is_empty() {
        return Err("missing email".into());
    }
    let address = Address::parse(email).map_err(|e| format!("invalid address: {e}"))?;
    let display_name = match header.name.map(|i| scratch[i].trim()) {
        Some(n) if !n.is_empty() => {
            check_name(n)?;
            Some(n.to_string())
        }
        _ => None,
    };
    let mut fields = BTreeMap::new();
    for (i, key) in &header.fields {
        let value = scratch[*i].trim();
        if !value.is_empty() {
            check_field_value(key, value)?;
            fields.insert(key.clone(), value.to_string());
        }
    }
    Ok(NewMember {
        address,
        display_name,
        fields,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cols(names: &[&str]) -> Result<Header, String> {
        map_columns(&names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn maps_header_columns() {
        let h = cols(&[" Name ", "ADDRESS", "City"]).unwrap();
        assert_eq!((h.width, h.email, h.name), (3, 1, Some(0)));
        assert_eq!(h.fields, vec![(2, "city".to_string())]);
    }

    #[test]
    fn refuses_bad_headers() {
        assert!(cols(&["name", "city"])
            .unwrap_err()
            .contains("no email column"));
        assert!(cols(&["email", "address"])
            .unwrap_err()
            .contains("more than one email"));
        assert!(cols(&["email", "x", "X"])
            .unwrap_err()
            .contains("more than once"));
        assert!(cols(&["email", ""]).unwrap_err().contains("empty"));
        let many: Vec<String> = (0..=MAX_FIELDS).map(|i| format!("f{i}")).collect();
        let mut names = vec!["email".to_string()];
        names.extend(many);
        assert!(map_columns(&names).unwrap_err().contains("custom field"));
    }
}
