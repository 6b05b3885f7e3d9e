//! Import into the archive: an mbox file (mboxo/mboxrd), a Mailman 2 pipermail monthly
//! archive (`.txt` is mbox, `.txt.gz` gzip'd mbox), a Maildir folder (`cur/` and `new/`), or
//! a directory of such files. Idempotent: a message already archived (same list and
//! Message-ID) is counted as a duplicate, a removed one stays out (tombstone). What it adds is
//! history (`Archive::import_batch`): readable in the archive, never mailed in a digest.
//!
//! SECURITY: the files are the operator's, their contents untrusted mail: every message goes
//! through [`crate::parse`]'s limits; the mbox reader holds at most one capped message.

use crate::mbox::{Entry, Reader};
use crate::parse::Refused;
use crate::store::{Archive, NewMessage, Stored};
use crate::ArchiveError;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

/// Messages stored per transaction.
const BATCH: usize = 500;

/// What an import did.
#[derive(Debug, Default)]
pub struct ImportReport {
    pub added: u64,
    pub duplicates: u64,
    /// Where (file and message number) and why.
    pub refused: Vec<(String, String)>,
}

/// One input file and how to read it.
#[derive(Debug, Clone)]
enum Source {
    Mbox(PathBuf),
    Gzip(PathBuf),
    MaildirFile(PathBuf),
}

/// The files `path` stands for, with their total size in bytes (for a progress bar).
pub fn plan(path: &Path) -> Result<(Vec<PathBuf>, u64), ArchiveError> {
    let sources = sources(path)?;
    let mut total = 0;
    let mut files = Vec::new();
    for s in sources {
        let p = match s {
            Source::Mbox(p) | Source::Gzip(p) | Source::MaildirFile(p) => p,
        };
        total += std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
        files.push(p);
    }
    Ok((files, total))
}

/// Imports `path` into `list`'s archive. `progress` gets the bytes of input read so far.
pub fn import(
    archive: &mut Archive,
    list: &str,
    path: &Path,
    max_message_bytes: usize,
    now_ms: i64,
    mut progress: impl FnMut(u64),
) -> Result<ImportReport, ArchiveError> {
    let mut report = ImportReport::default();
    let mut batch: Vec<(String, NewMessage)> = Vec::with_capacity(BATCH);
    let mut done_bytes = 0u64;
    for source in sources(path)? {
        match source {
            Source::MaildirFile(p) => {
                let len = std::fs::metadata(&p).map_err(io(&p))?.len();
                let where_ = p.display().to_string();
                if len > max_message_bytes as u64 {
                    report
                        .refused
                        .push((where_, Refused::Oversize(len as usize).to_string()));
                } else {
                    let raw = std::fs::read(&p).map_err(io(&p))?;
                    batch.push((where_, new_message(list, raw, now_ms)));
                }
                done_bytes += len;
            }
            Source::Mbox(p) | Source::Gzip(p) => {
                let gz = p.extension().is_some_and(|e| e == "gz");
                let counter = Counting::new(File::open(&p).map_err(io(&p))?);
                let read = counter.count.clone();
                let input: Box<dyn Read> = if gz {
                    Box::new(flate2::read::GzDecoder::new(counter))
                } else {
                    Box::new(counter)
                };
                let mut reader = Reader::new(BufReader::new(input), max_message_bytes);
                let mut n = 0u64;
                while let Some(entry) = reader.next_entry().map_err(io(&p))? {
                    n += 1;
                    let where_ = format!("{} message {n}", p.display());
                    match entry {
                        Entry::Message(raw) => batch.push((where_, new_message(list, raw, now_ms))),
                        Entry::Oversize(size) => report
                            .refused
                            .push((where_, Refused::Oversize(size).to_string())),
                    }
                    if batch.len() >= BATCH {
                        flush(archive, &mut batch, &mut report)?;
                        progress(done_bytes + read.get());
                    }
                }
                done_bytes += read.get();
            }
        }
        if batch.len() >= BATCH {
            flush(archive, &mut batch, &mut report)?;
        }
        progress(done_bytes);
    }
    flush(archive, &mut batch, &mut report)?;
    progress(done_bytes);
    Ok(report)
}

fn new_message(list: &str, raw: Vec<u8>, now_ms: i64) -> NewMessage {
    NewMessage {
        list: list.to_string(),
        raw,
        received_ms: now_ms,
    }
}

fn flush(
    archive: &mut Archive,
    batch: &mut Vec<(String, NewMessage)>,
    report: &mut ImportReport,
) -> Result<(), ArchiveError> {
    if batch.is_empty() {
        return Ok(());
    }
    let messages: Vec<NewMessage> = batch.iter().map(|(_, m)| m.clone()).collect();
    let results = archive.import_batch(&messages)?;
    for ((where_, _), r) in batch.drain(..).zip(results) {
        match r {
            Stored::Added { .. } => report.added += 1,
            Stored::Duplicate { .. } => report.duplicates += 1,
            Stored::Refused(why) => report.refused.push((where_, why.to_string())),
        }
    }
    Ok(())
}

fn io(p: &Path) -> impl Fn(std::io::Error) -> ArchiveError + '_ {
    move |source| ArchiveError::Io {
        path: p.to_path_buf(),
        source,
    }
}

/// A file is an mbox (gzip'd when it ends in `.gz`); a directory with `cur/` or `new/` is a
/// Maildir; another directory is read file by file, in name order.
fn sources(path: &Path) -> Result<Vec<Source>, ArchiveError> {
    let meta = std::fs::metadata(path).map_err(io(path))?;
    if meta.is_file() {
        let gz = path.extension().is_some_and(|e| e == "gz");
        return Ok(vec![if gz {
            Source::Gzip(path.to_path_buf())
        } else {
            Source::Mbox(path.to_path_buf())
        }]);
    }
    let (cur, new) = (path.join("cur"), path.join("new"));
    if cur.is_dir() || new.is_dir() {
        let mut out = Vec::new();
        for d in [cur, new] {
            if d.is_dir() {
                out.extend(sorted_files(&d)?.into_iter().map(Source::MaildirFile));
            }
        }
        return Ok(out);
    }
    let mut out = Vec::new();
    for f in sorted_files(path)? {
        out.extend(sources(&f)?);
    }
    Ok(out)
}

fn sorted_files(dir: &Path) -> Result<Vec<PathBuf>, ArchiveError> {
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir).map_err(io(dir))? {
        let e = e.map_err(io(dir))?;
        let p = e.path();
        let name = e.file_name();
        // Dot files (Maildir's tmp leftovers, editors' backups) are not mail.
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        if p.is_file() {
            files.push(p);
        }
    }
    files.sort();
    Ok(files)
}

/// Counts the bytes read from a file (progress for compressed input too).
struct Counting<R> {
    inner: R,
    count: std::rc::Rc<std::cell::Cell<u64>>,
}

impl<R> Counting<R> {
    fn new(inner: R) -> Self {
        Counting {
            inner,
            count: Default::default(),
        }
    }
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.set(self.count.get() + n as u64);
        Ok(n)
    }
}

/// Writes `list`'s messages dated in `[since_ms, until_ms)` as mboxrd, a page at a time.
/// Returns the number of messages written.
pub fn export<W: std::io::Write>(
    archive: &Archive,
    list: &str,
    since_ms: i64,
    until_ms: i64,
    out: &mut W,
) -> Result<u64, ArchiveError> {
    let mut after = 0;
    let mut n = 0;
    let stdout = || PathBuf::from("<output>");
    loop {
        let page = archive.range_page(list, since_ms, until_ms, after, 200)?;
        let Some(last) = page.last() else { break };
        after = last.summary.id;
        for m in &page {
            let sender = sender_address(&m.summary.from);
            crate::mbox::write_message(out, &sender, m.summary.date_ms, &m.raw).map_err(
                |source| ArchiveError::Io {
                    path: stdout(),
                    source,
                },
            )?;
            n += 1;
        }
    }
    Ok(n)
}

/// The bare address of a `Name <addr>` sender.
fn sender_address(from: &str) -> String {
    match (from.rfind('<'), from.rfind('>')) {
        (Some(a), Some(b)) if a < b => from[a + 1..b].to_string(),
        _ => from.to_string(),
    }
}

#[cfg(test)]
mod tests;
