//! Taking a backup of the running server: the cut ([`stage`]) and the tar stream
//! ([`Staged::write_tar`], [`stream`]).
//!
//! Staging lives beside the data it copies (`<data_dir>/.backup-…`, `<spool_dir>/.backup-…`,
//! so the journal's hard links stay on its file system) and is removed when the [`Staged`] is
//! dropped, whether the stream finished or the client went away.
//!
//! SECURITY: the staged copies hold the secret; the staging directories are created `0700`.

use crate::error::BackupError;
use crate::manifest::{FileEntry, KeyEntry, KeyFile, Manifest, DATA_FILES, FORMAT};
use bytes::Bytes;
use herald_spool::{SnapshotSegment, Spool};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// Largest key or certificate file carried (a PEM chain is a few KB).
pub const MAX_KEY_BYTES: u64 = 1 << 20;
/// Size of the chunks sent to the HTTP body.
const CHUNK: usize = 256 << 10;

/// What the running server backs up.
#[derive(Clone)]
pub struct Source {
    pub data_dir: PathBuf,
    pub spool: Spool,
    /// `[spool] dir`'s parent of `journal/` (by default `<data_dir>/spool`).
    pub spool_dir: PathBuf,
    pub keys: Vec<KeyFile>,
    pub hostname: String,
}

/// Removes staging left by a backup that was cut short by a crash (its hard links would keep
/// old journal segments on disk forever). Called at start-up, before anything is staged.
pub fn remove_stale_staging(dirs: &[&Path]) {
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry
                .file_name()
                .to_string_lossy()
                .starts_with(STAGING_PREFIX)
            {
                let path = entry.path();
                match std::fs::remove_dir_all(&path) {
                    Ok(()) => {
                        tracing::info!(path = %path.display(), "removed an interrupted backup's staging")
                    }
                    Err(e) => {
                        tracing::warn!(path = %path.display(), error = %e, "could not remove an interrupted backup's staging")
                    }
                }
            }
        }
    }
}

/// Names of staging directories start with this.
const STAGING_PREFIX: &str = ".backup-";

/// A cut, staged and ready to be written out.
pub struct Staged {
    data_stage: PathBuf,
    spool_links: PathBuf,
    segments: Vec<SnapshotSegment>,
    /// (name in the backup, staged copy)
    data: Vec<(String, PathBuf)>,
    keys: Vec<KeyFile>,
    hostname: String,
    taken_at: String,
    directory_schema: Option<i64>,
}

impl Drop for Staged {
    fn drop(&mut self) {
        for dir in [&self.data_stage, &self.spool_links] {
            if let Err(e) = std::fs::remove_dir_all(dir) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(dir = %dir.display(), error = %e, "could not remove backup staging");
                }
            }
        }
    }
}

fn private_dir(path: &Path) -> Result<(), BackupError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(BackupError::io("create", path))
}

/// Takes the cut: the journal first (its commit point is the backup's moment), then the SQLite
/// stores and the small files. Delivery goes on meanwhile: the journal is only paused for its
/// hard links, SQLite copies read a snapshot while writers continue (WAL).
pub async fn stage(source: &Source) -> Result<Staged, BackupError> {
    let nonce = format!(
        "{STAGING_PREFIX}{}-{}",
        std::process::id(),
        jiff::Timestamp::now().as_millisecond()
    );
    let mut staged = Staged {
        data_stage: source.data_dir.join(&nonce),
        spool_links: source.spool_dir.join(&nonce),
        segments: Vec::new(),
        data: Vec::new(),
        keys: source.keys.clone(),
        hostname: source.hostname.clone(),
        taken_at: String::new(),
        directory_schema: None,
    };
    private_dir(&staged.spool_links)?;
    staged.segments = source.spool.snapshot(&staged.spool_links).await?;
    staged.taken_at = jiff::Timestamp::now().to_string();
    let data_dir = source.data_dir.clone();
    tokio::task::spawn_blocking(move || {
        staged.copy_data(&data_dir)?;
        Ok(staged)
    })
    .await
    .map_err(|e| BackupError::Stream(format!("staging task: {e}")))?
}

impl Staged {
    fn copy_data(&mut self, data_dir: &Path) -> Result<(), BackupError> {
        private_dir(&self.data_stage)?;
        for &(name, sqlite) in DATA_FILES {
            let from = data_dir.join(name);
            if !from.exists() {
                continue;
            }
            let to = self.data_stage.join(name);
            if sqlite {
                let schema = vacuum_into(&from, &to)?;
                if name == "herald.db" {
                    self.directory_schema = Some(schema);
                }
            } else {
                // Small files that may be rewritten meanwhile (the dedup log is compacted by
                // rename): one read gives a whole version of each.
                let bytes = std::fs::read(&from).map_err(BackupError::io("read", &from))?;
                std::fs::write(&to, bytes).map_err(BackupError::io("write", &to))?;
            }
            self.data.push((format!("data/{name}"), to));
        }
        Ok(())
    }

    /// Writes the tar: data files, journal segments, keys, then the manifest (last: its
    /// presence tells the reader the stream is complete). Returns the manifest.
    pub fn write_tar(&self, out: impl Write) -> Result<Manifest, BackupError> {
        let mut tar = tar::Builder::new(out);
        let mut files = Vec::new();
        for (name, path) in &self.data {
            let len = std::fs::metadata(path)
                .map_err(BackupError::io("stat", path))?
                .len();
            let file = std::fs::File::open(path).map_err(BackupError::io("open", path))?;
            files.push(append(&mut tar, name, file, len)?);
        }
        for seg in &self.segments {
            let file =
                std::fs::File::open(&seg.path).map_err(BackupError::io("open", &seg.path))?;
            let name = format!("spool/journal/{}", seg.name);
            files.push(append(&mut tar, &name, file, seg.bytes)?);
        }
        let mut keys = Vec::new();
        let mut skipped = Vec::new();
        for (n, key) in self.keys.iter().enumerate() {
            let bytes = match read_bounded(&key.path, MAX_KEY_BYTES) {
                Ok(b) => b,
                Err(e) => {
                    // The rest of the backup is still worth having; the operator is told.
                    tracing::warn!(role = %key.role, error = %e, "key file not in the backup");
                    skipped.push(format!("{}: {e}", key.role));
                    continue;
                }
            };
            let base = key
                .path
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default();
            let safe: String = base
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || ".-_".contains(c) {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            let name = format!("keys/{n}-{safe}");
            files.push(append(&mut tar, &name, &bytes[..], bytes.len() as u64)?);
            keys.push(KeyEntry {
                role: key.role.clone(),
                name,
                original_path: key.path.display().to_string(),
            });
        }
        let manifest = Manifest {
            format: FORMAT.into(),
            herald_version: env!("CARGO_PKG_VERSION").into(),
            directory_schema: self.directory_schema,
            hostname: self.hostname.clone(),
            taken_at: self.taken_at.clone(),
            spool_segments: self.segments.len(),
            files,
            keys,
            skipped,
        };
        let json = serde_json::to_vec_pretty(&manifest)
            .map_err(|e| BackupError::Stream(format!("manifest: {e}")))?;
        append(
            &mut tar,
            crate::manifest::MANIFEST,
            &json[..],
            json.len() as u64,
        )?;
        let mut out = tar
            .into_inner()
            .map_err(|e| BackupError::Stream(format!("finishing the tar: {e}")))?;
        out.flush()
            .map_err(|e| BackupError::Stream(format!("finishing the tar: {e}")))?;
        Ok(manifest)
    }
}

/// `VACUUM INTO`: a consistent, compact copy read from one snapshot while the server keeps
/// writing (SQLite's documented way to back up a live WAL database). Returns the copy's
/// `user_version` (the schema version).
fn vacuum_into(from: &Path, to: &Path) -> Result<i64, BackupError> {
    let sqlite = |source| BackupError::Sqlite {
        path: from.to_path_buf(),
        source,
    };
    let target = to.to_str().ok_or_else(|| BackupError::Invalid {
        path: to.to_path_buf(),
        reason: "the staging path is not UTF-8".into(),
    })?;
    let conn = rusqlite::Connection::open_with_flags(
        from,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(sqlite)?;
    conn.busy_timeout(std::time::Duration::from_secs(30))
        .map_err(sqlite)?;
    conn.execute("VACUUM INTO ?1", [target]).map_err(sqlite)?;
    let copy =
        rusqlite::Connection::open_with_flags(to, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .map_err(sqlite)?;
    copy.pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(sqlite)
}

fn read_bounded(path: &Path, max: u64) -> Result<Vec<u8>, BackupError> {
    let file = std::fs::File::open(path).map_err(BackupError::io("open", path))?;
    let mut bytes = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(BackupError::io("read", path))?;
    if bytes.len() as u64 > max {
        return Err(BackupError::Invalid {
            path: path.to_path_buf(),
            reason: format!("larger than {max} bytes: not a key file"),
        });
    }
    Ok(bytes)
}

/// Appends `len` bytes of `data` as `name`, hashing them on the way. A source shorter than
/// it said is an error (tar would otherwise pad it silently into a corrupt entry).
fn append<W: Write>(
    tar: &mut tar::Builder<W>,
    name: &str,
    data: impl Read,
    len: u64,
) -> Result<FileEntry, BackupError> {
    let mut header = tar::Header::new_gnu();
    header.set_size(len);
    header.set_mode(0o600);
    header.set_entry_type(tar::EntryType::Regular);
    header.set_mtime(jiff::Timestamp::now().as_second().max(0) as u64);
    let mut hashing = Hashing {
        inner: data.take(len),
        hasher: Sha256::new(),
        count: 0,
    };
    tar.append_data(&mut header, name, &mut hashing)
        .map_err(|e| BackupError::Stream(format!("writing {name}: {e}")))?;
    if hashing.count != len {
        return Err(BackupError::Stream(format!(
            "{name} gave {} bytes where {len} were cut",
            hashing.count
        )));
    }
    Ok(FileEntry {
        name: name.to_string(),
        bytes: len,
        sha256: hex(&hashing.hasher.finalize()),
    })
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

struct Hashing<R> {
    inner: R,
    hasher: Sha256,
    count: u64,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.count += n as u64;
        Ok(n)
    }
}

/// The tar as a stream of chunks for an HTTP body: written by a blocking thread, handed over
/// on a small channel (a slow client slows the writer, memory stays at a few chunks). If the
/// receiver goes away the writer stops and the staging is removed.
pub fn stream(staged: Staged) -> tokio::sync::mpsc::Receiver<Result<Bytes, std::io::Error>> {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let failed = tx.clone();
    // A thread of its own, not the runtime's blocking pool: it lives as long as the client takes
    // to read the backup, and must not hold a pool thread that queries wait for meanwhile.
    let spawned = std::thread::Builder::new()
        .name("backup-stream".into())
        .spawn(move || {
            let mut out = ChunkWriter {
                tx: tx.clone(),
                buf: Vec::with_capacity(CHUNK),
            };
            match staged.write_tar(&mut out) {
                Ok(m) => tracing::info!(
                    files = m.files.len(),
                    segments = m.spool_segments,
                    "backup streamed"
                ),
                Err(e) => {
                    tracing::warn!(error = %e, "backup stream stopped");
                    let _ = tx.blocking_send(Err(std::io::Error::other(e.to_string())));
                }
            }
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot start the backup stream's thread");
        let _ = failed.try_send(Err(e));
    }
    rx
}

struct ChunkWriter {
    tx: tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
    buf: Vec<u8>,
}

impl ChunkWriter {
    fn send(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK)));
        self.tx.blocking_send(Ok(chunk)).map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the client went away")
        })
    }
}

impl Write for ChunkWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= CHUNK {
            self.send()?;
        }
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.send()
    }
}
