//! Unpacking a backup stream into a directory (`herald backup <dir>`), trusting nothing in it.
//!
//! Every entry's name must fit the layout ([`crate::manifest::check_name`]), must be a regular
//! file, and is written with `create_new` (no entry overwrites another); the manifest must come
//! last and list exactly the files received, with their sizes and SHA-256. The manifest is
//! written to the directory only after all of that holds, so a directory with a manifest is a
//! verified, complete backup.
//!
//! SECURITY: the stream comes from the server over the admin API (TLS when configured); a
//! hostile stream can waste disk space in `<dir>` but cannot write outside it or pass as a
//! complete backup.

use crate::error::BackupError;
use crate::manifest::{
    check_name, EntryKind, FileEntry, Manifest, FORMAT, MANIFEST, MAX_MANIFEST_BYTES,
};
use crate::take::hex;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

/// Unpacks the tar read from `reader` into `dir` (created; must be empty if it exists).
pub fn unpack(reader: impl Read, dir: &Path) -> Result<Manifest, BackupError> {
    prepare(dir)?;
    let mut archive = tar::Archive::new(reader);
    let entries = archive
        .entries()
        .map_err(|e| BackupError::Stream(format!("reading the tar: {e}")))?;
    let mut got: BTreeMap<String, FileEntry> = BTreeMap::new();
    let mut manifest: Option<Manifest> = None;
    for entry in entries {
        let mut entry = entry.map_err(|e| BackupError::Stream(format!("reading the tar: {e}")))?;
        let name = String::from_utf8(entry.path_bytes().into_owned())
            .map_err(|_| BackupError::Stream("an entry name is not UTF-8".into()))?;
        if manifest.is_some() {
            return Err(BackupError::Stream(format!(
                "{name:?} after the manifest: the manifest must be last"
            )));
        }
        if entry.header().entry_type() != tar::EntryType::Regular {
            return Err(BackupError::Stream(format!(
                "{name:?} is not a regular file"
            )));
        }
        let kind = check_name(&name).map_err(BackupError::Stream)?;
        if kind == EntryKind::Manifest {
            let mut json = Vec::new();
            (&mut entry)
                .take(MAX_MANIFEST_BYTES + 1)
                .read_to_end(&mut json)
                .map_err(|e| BackupError::Stream(format!("reading the manifest: {e}")))?;
            if json.len() as u64 > MAX_MANIFEST_BYTES {
                return Err(BackupError::Stream("the manifest is too large".into()));
            }
            let m: Manifest = serde_json::from_slice(&json)
                .map_err(|e| BackupError::Stream(format!("the manifest: {e}")))?;
            check_against(&m, &got)?;
            let path = dir.join(MANIFEST);
            write_new(&path, &mut &json[..])?;
            manifest = Some(m);
            continue;
        }
        if got.contains_key(&name) {
            return Err(BackupError::Stream(format!("{name:?} appears twice")));
        }
        let path = dir.join(&name);
        if let Some(parent) = path.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .map_err(BackupError::io("create", parent))?;
        }
        let (bytes, sha256) = write_new(&path, &mut entry)?;
        got.insert(
            name.clone(),
            FileEntry {
                name,
                bytes,
                sha256,
            },
        );
    }
    manifest.ok_or_else(|| {
        BackupError::Stream(
            "the stream ended before the manifest: the backup is incomplete (the server \
             stopped or the connection dropped); nothing in this directory can be restored"
                .into(),
        )
    })
}

fn prepare(dir: &Path) -> Result<(), BackupError> {
    if dir.exists() {
        let mut entries = std::fs::read_dir(dir).map_err(BackupError::io("read", dir))?;
        if entries.next().is_some() {
            return Err(BackupError::Refused(format!(
                "{} is not empty: a backup goes into a new or empty directory",
                dir.display()
            )));
        }
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(BackupError::io("create", dir))
}

/// Writes a new file (never replacing one), `0600`, fsync'd; returns its size and SHA-256.
fn write_new(path: &Path, data: &mut impl Read) -> Result<(u64, String), BackupError> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(BackupError::io("create", path))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 << 10];
    let mut bytes = 0u64;
    loop {
        let n = data
            .read(&mut buf)
            .map_err(BackupError::io("read the stream for", path))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        file.write_all(&buf[..n])
            .map_err(BackupError::io("write", path))?;
        bytes += n as u64;
    }
    file.sync_all().map_err(BackupError::io("sync", path))?;
    Ok((bytes, hex(&hasher.finalize())))
}

/// The manifest lists exactly the files received, each with the same size and hash.
pub(crate) fn check_against(
    m: &Manifest,
    got: &BTreeMap<String, FileEntry>,
) -> Result<(), BackupError> {
    if m.format != FORMAT {
        return Err(BackupError::Stream(format!(
            "format {:?}: this Herald reads {FORMAT:?}",
            m.format
        )));
    }
    let listed: BTreeMap<&str, &FileEntry> = m.files.iter().map(|f| (f.name.as_str(), f)).collect();
    if listed.len() != m.files.len() {
        return Err(BackupError::Stream(
            "the manifest lists a file twice".into(),
        ));
    }
    for (name, f) in got {
        match listed.get(name.as_str()) {
            Some(l) if *l == f => {}
            Some(l) => {
                return Err(BackupError::Stream(format!(
                    "{name}: {} bytes sha256 {} received, the manifest says {} bytes sha256 {}",
                    f.bytes, f.sha256, l.bytes, l.sha256
                )))
            }
            None => {
                return Err(BackupError::Stream(format!(
                    "{name} is not in the manifest"
                )))
            }
        }
    }
    if let Some(missing) = m.files.iter().find(|f| !got.contains_key(&f.name)) {
        return Err(BackupError::Stream(format!(
            "{} is in the manifest but not in the stream",
            missing.name
        )));
    }
    for key in &m.keys {
        if !got.contains_key(&key.name) {
            return Err(BackupError::Stream(format!("key {} is missing", key.name)));
        }
    }
    Ok(())
}
