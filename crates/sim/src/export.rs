//! Streams what a world's [`Recorder`] sees to a run directory, so that a world running in its
//! own process (`herald sim run`) can be reported on afterwards (`herald sim report`, [`crate::report`]).
//!
//! A run directory holds:
//! - `world.toml`: the world as it ran (ports resolved), read back by the report for expectations;
//! - `endpoint.json`: where the world listens ([`Endpoint`]), for scripts;
//! - `members.csv` (optional): the member list (`email,name`), for "missing" and percentiles;
//! - `events.jsonl`: one [`Event`] per line — every accepted copy and every rejection/deferral;
//! - `status.json`: live counters ([`Status`]), rewritten atomically every interval;
//! - `ca.pem` (with `[receiver] tls_ca`): the CA that issued the receivers' certificates;
//! - `t0` (optional, written by whoever starts the work): the Unix ms that times count from.
//!
//! Invariant: the receivers never wait on the disk. [`Exporter`] runs on its own OS thread and
//! only takes the recorder's lock for a [`Recorder::drain`] (two `mem::take`s) per interval; the
//! formatting and writing happen outside it. Lines are flushed every interval, so a report on a
//! live run sees everything up to the last interval; a torn last line is ignored when reading.
//!
//! Limits: ~200 bytes per line; a million-copy run writes ~200 MB.
//!
//! SECURITY: the strings written come from the network (envelope addresses, Message-IDs); JSON
//! escaping keeps each record on one line. Reading treats the file as untrusted: a bad line is an
//! error naming its line number, never a panic.

use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::recorder::{CopyRecord, MimeVerdict, Rejection};
use crate::Recorder;

/// The events file of a run directory.
pub const EVENTS_FILE: &str = "events.jsonl";
/// The world as it ran.
pub const WORLD_FILE: &str = "world.toml";
/// Where the world listens.
pub const ENDPOINT_FILE: &str = "endpoint.json";
/// The member list, if known.
pub const MEMBERS_FILE: &str = "members.csv";
/// Live counters.
pub const STATUS_FILE: &str = "status.json";
/// Unix ms the report's times count from (optional).
pub const T0_FILE: &str = "t0";
/// The world's CA certificate (PEM), when it issued the receivers' certificates.
pub const CA_FILE: &str = "ca.pem";

/// Errors writing or reading a run directory.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}:{line}: not a valid event: {message}")]
    BadLine {
        path: PathBuf,
        line: u64,
        message: String,
    },
    #[error("{path}: {message}")]
    BadFile { path: PathBuf, message: String },
}

impl ExportError {
    pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ExportError + '_ {
        move |source| ExportError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// One line of `events.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "e", rename_all = "snake_case")]
pub enum Event {
    /// An accepted copy.
    Copy {
        /// Milliseconds since the world started.
        ms: u64,
        rcpt: String,
        from: String,
        size: usize,
        /// The Message-ID, when the message had one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        msgid: Option<String>,
        /// Hex of the 128-bit digest, only when there is no Message-ID (it is then the
        /// duplicate key).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        digest: Option<String>,
        /// "ok" (fully checked), "lines" (line-checked), "none", or "bad: <reason>".
        mime: String,
        host: String,
    },
    /// A rejection or deferral.
    Reject {
        ms: u64,
        code: u16,
        status: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rcpt: Option<String>,
        host: String,
    },
}

impl Event {
    fn from_copy(c: &CopyRecord) -> Event {
        let mime = match c.mime {
            MimeVerdict::NotChecked => "none".to_string(),
            MimeVerdict::LinesOk => "lines".to_string(),
            MimeVerdict::WellFormed => "ok".to_string(),
            MimeVerdict::Malformed(why) => format!("bad: {why}"),
        };
        Event::Copy {
            ms: c.at_ms,
            rcpt: c.recipient.to_string(),
            from: c.sender.to_string(),
            size: c.size,
            msgid: c.message_id.as_deref().map(str::to_string),
            digest: c.message_id.is_none().then(|| hex(&c.digest)),
            mime,
            host: c.host.to_string(),
        }
    }

    fn from_rejection(r: &Rejection) -> Event {
        Event::Reject {
            ms: r.at_ms,
            code: r.code,
            status: r.status.to_string(),
            rcpt: r.recipient.as_deref().map(str::to_string),
            host: r.host.to_string(),
        }
    }

    /// Milliseconds since the world started.
    pub fn ms(&self) -> u64 {
        match self {
            Event::Copy { ms, .. } | Event::Reject { ms, .. } => *ms,
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Where a running world listens (`endpoint.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Endpoint {
    /// The DNS server, "127.0.0.1:5353".
    pub dns_addr: String,
    /// The port every receiver listens on.
    pub smtp_port: u16,
    /// The world's process id.
    pub pid: u32,
    /// Unix ms when the world (its recorder clock) started.
    pub started_unix_ms: u64,
}

/// Live counters (`status.json`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Status {
    pub elapsed_ms: u64,
    pub accepted: u64,
    pub unique_recipients: u64,
    pub duplicates: u64,
    pub rejections: u64,
    /// Deliverable members, when the member list is known.
    pub deliverable: Option<u64>,
    /// STARTTLS handshakes the receivers completed in full, and by resuming a session.
    #[serde(default)]
    pub tls_full_handshakes: u64,
    #[serde(default)]
    pub tls_resumed_handshakes: u64,
}

/// What an exporter wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExportStats {
    pub copies: u64,
    pub rejections: u64,
}

/// Writes `value` as JSON to `path` atomically (temporary file, then rename).
pub fn write_json_atomic<T: Serialize>(path: &Path, value: &T) -> Result<(), ExportError> {
    let tmp = path.with_extension("json.tmp");
    let text = serde_json::to_vec_pretty(value).map_err(|e| ExportError::BadFile {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    std::fs::write(&tmp, text).map_err(ExportError::io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(ExportError::io(path))
}

/// The background writer of `events.jsonl` and `status.json`.
pub struct Exporter {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Result<ExportStats, ExportError>>>,
}

struct Writer {
    recorder: Recorder,
    events: BufWriter<File>,
    events_path: PathBuf,
    status_path: PathBuf,
    deliverable: Option<u64>,
    stats: ExportStats,
}

impl Exporter {
    /// Creates (truncates) `dir/events.jsonl` and starts the writer thread, which drains the
    /// recorder every `interval`. `deliverable` goes into `status.json`.
    pub fn start(
        recorder: Recorder,
        dir: &Path,
        interval: Duration,
        deliverable: Option<u64>,
    ) -> Result<Exporter, ExportError> {
        let events_path = dir.join(EVENTS_FILE);
        let file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(&events_path)
            .map_err(ExportError::io(&events_path))?;
        let mut w = Writer {
            recorder,
            events: BufWriter::with_capacity(1 << 20, file),
            events_path,
            status_path: dir.join(STATUS_FILE),
            deliverable,
            stats: ExportStats::default(),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("sim-export".into())
            .spawn(move || {
                while !flag.load(Ordering::Acquire) {
                    std::thread::park_timeout(interval);
                    w.round()?;
                }
                w.round()?;
                w.events
                    .get_ref()
                    .sync_all()
                    .map_err(ExportError::io(&w.events_path))?;
                Ok(w.stats)
            })
            .map_err(ExportError::io(dir))?;
        Ok(Exporter {
            stop,
            handle: Some(handle),
        })
    }

    /// Writes what is left, syncs the file and stops the thread.
    pub fn finish(mut self) -> Result<ExportStats, ExportError> {
        self.stop.store(true, Ordering::Release);
        let Some(handle) = self.handle.take() else {
            return Ok(ExportStats::default());
        };
        handle.thread().unpark();
        handle.join().unwrap_or_else(|_| {
            Err(ExportError::BadFile {
                path: PathBuf::from(EVENTS_FILE),
                message: "the export thread panicked".into(),
            })
        })
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        // Dropped without finish (an error path): still stop the thread.
        self.stop.store(true, Ordering::Release);
        if let Some(h) = &self.handle {
            h.thread().unpark();
        }
    }
}

impl Writer {
    /// One interval: drain, write, flush, update the status file.
    fn round(&mut self) -> Result<(), ExportError> {
        let (copies, rejections) = self.recorder.drain();
        let io = ExportError::io(&self.events_path);
        let mut line = Vec::with_capacity(256);
        let events = (copies.iter().map(Event::from_copy))
            .chain(rejections.iter().map(Event::from_rejection));
        for event in events {
            line.clear();
            serde_json::to_writer(&mut line, &event).map_err(|e| ExportError::BadFile {
                path: self.events_path.clone(),
                message: e.to_string(),
            })?;
            line.push(b'\n');
            self.events
                .write_all(&line)
                .map_err(ExportError::io(&self.events_path))?;
        }
        self.events.flush().map_err(io)?;
        self.stats.copies += copies.len() as u64;
        self.stats.rejections += rejections.len() as u64;
        let (tls_full_handshakes, tls_resumed_handshakes) = self.recorder.tls_handshakes();
        let status = Status {
            tls_full_handshakes,
            tls_resumed_handshakes,
            elapsed_ms: self.recorder.elapsed_ms(),
            accepted: self.recorder.accepted(),
            unique_recipients: self.recorder.unique_recipients(),
            duplicates: self.recorder.duplicates(),
            rejections: self.stats.rejections,
            deliverable: self.deliverable,
        };
        write_json_atomic(&self.status_path, &status)
    }
}

/// Reads `events.jsonl`, calling `f` for each event in file order. A last line without its
/// newline (a live run caught mid-write) is ignored; any other bad line is an error.
pub fn read_events(path: &Path, mut f: impl FnMut(Event)) -> Result<u64, ExportError> {
    let file = File::open(path).map_err(ExportError::io(path))?;
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut buf = Vec::with_capacity(512);
    let mut n = 0u64;
    loop {
        buf.clear();
        let read = reader
            .read_until(b'\n', &mut buf)
            .map_err(ExportError::io(path))?;
        if read == 0 || buf.last() != Some(&b'\n') {
            return Ok(n);
        }
        n += 1;
        let event = serde_json::from_slice(&buf).map_err(|e| ExportError::BadLine {
            path: path.to_path_buf(),
            line: n,
            message: e.to_string(),
        })?;
        f(event);
    }
}

/// Reads a member list: the first column of each row of a CSV whose header's first column is
/// `email` (as `herald member import` takes it). Blank lines are skipped.
pub fn read_members(path: &Path) -> Result<Vec<String>, ExportError> {
    let text = std::fs::read_to_string(path).map_err(ExportError::io(path))?;
    let mut lines = text.lines();
    let header = lines.next().unwrap_or_default();
    if !header.trim().to_ascii_lowercase().starts_with("email") {
        return Err(ExportError::BadFile {
            path: path.to_path_buf(),
            message: "expected a header row starting with `email`".into(),
        });
    }
    Ok(lines
        .map(|l| l.split(',').next().unwrap_or_default().trim())
        .filter(|a| !a.is_empty())
        .map(str::to_string)
        .collect())
}

/// Writes a member list as `herald member import` reads it: `email,name`.
pub fn write_members(path: &Path, members: &[String]) -> Result<(), ExportError> {
    let file = File::create(path).map_err(ExportError::io(path))?;
    let mut w = BufWriter::new(file);
    let io = ExportError::io(path);
    let mut write = || -> std::io::Result<()> {
        writeln!(w, "email,name")?;
        for (i, m) in members.iter().enumerate() {
            writeln!(w, "{m},Member {i}")?;
        }
        w.flush()
    };
    write().map_err(io)
}

/// Reads the `t0` file of a run directory, if present: Unix ms.
pub fn read_t0(dir: &Path) -> Result<Option<u64>, ExportError> {
    let path = dir.join(T0_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => text
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| ExportError::BadFile {
                path,
                message: "expected Unix milliseconds".into(),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ExportError::Io { path, source }),
    }
}
