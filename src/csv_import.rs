//! `herald member import`: a CSV file of members sent to the API in chunks of
//! [`IMPORT_CHUNK_ROWS`] rows, each with the header line, under a progress bar; the rows the
//! server rejected are reported with their line numbers in the whole file.

use crate::client::{enc, Api};
use anyhow::{Context, Result};
use herald_api_types::ImportReport;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::Path;

/// Rows sent per request: small enough for a smooth progress bar, big enough to be fast.
const IMPORT_CHUNK_ROWS: usize = 5000;

/// Splits a CSV document into chunks of `rows` lines, each chunk starting with the header line.
/// Herald's importer reads one record per line (member data has no line breaks, and a stray
/// quote must cost one row, not swallow the rest of the file), so splitting on lines keeps every
/// record whole. Returns (line number of the chunk's first data line, chunk).
pub fn csv_chunks(text: &[u8], rows: usize) -> Vec<(u64, Vec<u8>)> {
    let mut lines = text.split_inclusive(|&b| b == b'\n');
    let Some(header) = lines.next() else {
        return Vec::new();
    };
    let mut header = header.to_vec();
    if !header.ends_with(b"\n") {
        header.push(b'\n');
    }
    let mut chunks = Vec::new();
    let mut current = header.clone();
    let (mut count, mut line_no, mut chunk_start) = (0usize, 1u64, 2u64);
    for line in lines {
        line_no += 1;
        current.extend_from_slice(line);
        count += 1;
        if count >= rows.max(1) {
            chunks.push((chunk_start, std::mem::replace(&mut current, header.clone())));
            count = 0;
            chunk_start = line_no + 1;
        }
    }
    if current.len() > header.len() {
        chunks.push((chunk_start, current));
    }
    chunks
}

pub async fn import(api: &Api, list: &str, file: &Path) -> Result<()> {
    let text = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    import_bytes(api, list, &text).await
}

/// Imports a CSV document in chunks, with a progress bar and a report of rejected rows.
pub async fn import_bytes(api: &Api, list: &str, text: &[u8]) -> Result<()> {
    let chunks = csv_chunks(text, IMPORT_CHUNK_ROWS);
    let total_lines = text.iter().filter(|&&b| b == b'\n').count().max(1) as u64;
    let bar = ProgressBar::new(total_lines.saturating_sub(1));
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} importing [{bar:40}] {pos}/{len} rows {per_sec} {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let (mut added, mut updated, mut rejected) = (0u64, 0u64, Vec::new());
    let path = format!("/api/v1/lists/{}/import", enc(list));
    for (start, chunk) in chunks {
        let lines_in_chunk = chunk.iter().filter(|&&b| b == b'\n').count() as u64;
        let r: ImportReport = api.post_bytes(&path, chunk, "text/csv").await?;
        added += r.added;
        updated += r.updated;
        for row in r.rejected {
            // The server numbers lines within the chunk, whose line 1 is the header.
            let line = start + row.line.saturating_sub(2);
            rejected.push((line, row.reason));
        }
        bar.inc(lines_in_chunk.saturating_sub(1));
        bar.set_message(format!("{} rejected", rejected.len()));
    }
    bar.finish_and_clear();
    outln!(
        "imported into {list}: {added} added, {updated} updated, {} rejected",
        rejected.len()
    );
    for (line, reason) in &rejected {
        outln!("  line {line}: {reason}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_chunks_repeat_the_header_and_number_lines() {
        let text = b"email,name\na@x.example,A\nb@x.example,\"B\nc@x.example,C";
        let chunks = csv_chunks(text, 2);
        assert_eq!(chunks.len(), 2);
        assert_eq!(
            chunks[0],
            (2, b"email,name\na@x.example,A\nb@x.example,\"B\n".to_vec())
        );
        assert_eq!(chunks[1], (4, b"email,name\nc@x.example,C".to_vec()));
        assert!(csv_chunks(b"", 10).is_empty());
        assert!(csv_chunks(b"email\n", 10).is_empty());
    }
}
