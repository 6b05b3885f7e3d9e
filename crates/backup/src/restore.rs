//! `herald restore <dir>`: a verified backup into a fresh machine's data directory, before
//! `herald serve` starts there.
//!
//! Refuses to mix: if the data directory already holds a directory database or the spool a
//! journal segment, nothing is written (restoring over a live server's files would lose both).
//! Every file's size and SHA-256 is checked against the manifest before the first copy. Keys go
//! where the restoring machine's config expects them (matched by role); one that is already
//! there is left as it is, and said so.

use crate::error::BackupError;
use crate::manifest::{
    EntryKind, FileEntry, KeyFile, Manifest, FORMAT, MANIFEST, MAX_MANIFEST_BYTES,
};
use crate::receive::check_against;
use crate::take::hex;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Where the restoring machine keeps things (from its config).
#[derive(Debug, Clone)]
pub struct Targets {
    pub data_dir: PathBuf,
    /// The spool directory (its `journal/` receives the segments).
    pub spool_dir: PathBuf,
    pub keys: Vec<KeyFile>,
    /// Files and directories written are given to this uid/gid (`[server] user` when restore
    /// runs as root, so the service can open them).
    pub owner: Option<(u32, u32)>,
    /// The newest directory schema this Herald reads: a backup from a newer one is refused
    /// before anything is copied.
    pub directory_schema_supported: i64,
}

/// What restore did.
#[derive(Debug, Clone)]
pub struct Restored {
    pub manifest: Manifest,
    pub data_files: usize,
    pub segments: usize,
    /// One line per key: where it went, or why it was left.
    pub keys: Vec<String>,
}

/// Reads `<dir>/manifest.json` and checks every file in `dir` against it.
pub fn verify(dir: &Path) -> Result<Manifest, BackupError> {
    let invalid = |reason: String| BackupError::Invalid {
        path: dir.to_path_buf(),
        reason,
    };
    let path = dir.join(MANIFEST);
    let file = std::fs::File::open(&path).map_err(|e| {
        invalid(format!(
            "no readable {MANIFEST} ({e}): an interrupted or foreign backup"
        ))
    })?;
    let mut json = Vec::new();
    file.take(MAX_MANIFEST_BYTES + 1)
        .read_to_end(&mut json)
        .map_err(BackupError::io("read", &path))?;
    let manifest: Manifest =
        serde_json::from_slice(&json).map_err(|e| invalid(format!("{MANIFEST}: {e}")))?;
    if manifest.format != FORMAT {
        return Err(invalid(format!(
            "format {:?}: this Herald reads {FORMAT:?}",
            manifest.format
        )));
    }
    let mut got = BTreeMap::new();
    for f in &manifest.files {
        crate::manifest::check_name(&f.name).map_err(invalid)?;
        let p = dir.join(&f.name);
        let (bytes, sha256) = hash_file(&p)?;
        got.insert(
            f.name.clone(),
            FileEntry {
                name: f.name.clone(),
                bytes,
                sha256,
            },
        );
    }
    check_against(&manifest, &got).map_err(|e| invalid(e.to_string()))?;
    Ok(manifest)
}

fn hash_file(path: &Path) -> Result<(u64, String), BackupError> {
    let mut file = std::fs::File::open(path).map_err(BackupError::io("open", path))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 << 10];
    let mut bytes = 0u64;
    loop {
        let n = file.read(&mut buf).map_err(BackupError::io("read", path))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        bytes += n as u64;
    }
    Ok((bytes, hex(&hasher.finalize())))
}

/// Restores the verified backup in `dir` into `targets`.
pub fn restore(dir: &Path, targets: &Targets) -> Result<Restored, BackupError> {
    let manifest = verify(dir)?;
    if let Some(found) = manifest.directory_schema {
        if found > targets.directory_schema_supported {
            return Err(BackupError::Refused(format!(
                "the backup was taken by Herald {} (directory schema {found}); this Herald reads \
                 up to schema {}: restore it with that version or newer",
                manifest.herald_version, targets.directory_schema_supported
            )));
        }
    }
    refuse_to_mix(targets)?;
    let journal = targets.spool_dir.join("journal");
    let mut made = Vec::new();
    for d in [&targets.data_dir, &targets.spool_dir, &journal] {
        if !d.exists() {
            std::fs::create_dir_all(d).map_err(BackupError::io("create", d))?;
        }
        made.push(d.clone());
    }
    let (mut data_files, mut segments) = (0, 0);
    let key_names: BTreeMap<&str, &crate::manifest::KeyEntry> =
        manifest.keys.iter().map(|k| (k.name.as_str(), k)).collect();
    for f in &manifest.files {
        let from = dir.join(&f.name);
        let kind = crate::manifest::check_name(&f.name).map_err(BackupError::Stream)?;
        let to = match kind {
            EntryKind::Data => {
                data_files += 1;
                targets.data_dir.join(f.name.trim_start_matches("data/"))
            }
            EntryKind::Segment => {
                segments += 1;
                journal.join(f.name.trim_start_matches("spool/journal/"))
            }
            // Keys are placed below, by role.
            EntryKind::Key | EntryKind::Manifest => continue,
        };
        copy_new(&from, &to, 0o600)?;
        made.push(to);
    }
    let mut keys = Vec::new();
    for (name, key) in key_names {
        let from = dir.join(name);
        let wanted = targets.keys.iter().find(|k| k.role == key.role);
        let (to, note) = match wanted {
            Some(k) => (k.path.clone(), "the config's path"),
            None => (
                targets
                    .data_dir
                    .join("restored-keys")
                    .join(name.trim_start_matches("keys/")),
                "not named by this config",
            ),
        };
        if to.exists() {
            let same = std::fs::read(&to).ok() == std::fs::read(&from).ok();
            keys.push(format!(
                "{}: {} already exists; left as it is{}",
                key.role,
                to.display(),
                if same {
                    " (same as the backup's)"
                } else {
                    " (it differs from the backup's)"
                }
            ));
            continue;
        }
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).map_err(BackupError::io("create", parent))?;
        }
        copy_new(&from, &to, 0o600)?;
        made.push(to.clone());
        keys.push(format!(
            "{}: restored to {} ({note})",
            key.role,
            to.display()
        ));
    }
    if let Some((uid, gid)) = targets.owner {
        for p in &made {
            nix::unistd::chown(
                p.as_path(),
                Some(nix::unistd::Uid::from_raw(uid)),
                Some(nix::unistd::Gid::from_raw(gid)),
            )
            .map_err(|e| BackupError::Io {
                op: "chown",
                path: p.clone(),
                source: std::io::Error::from(e),
            })?;
        }
    }
    sync_dir(&targets.data_dir)?;
    sync_dir(&journal)?;
    Ok(Restored {
        manifest,
        data_files,
        segments,
        keys,
    })
}

fn refuse_to_mix(t: &Targets) -> Result<(), BackupError> {
    let db = t.data_dir.join("herald.db");
    if db.exists() {
        return Err(BackupError::Refused(format!(
            "{} exists: restore goes into a fresh data directory (move the old one away first)",
            db.display()
        )));
    }
    let journal = t.spool_dir.join("journal");
    if journal.exists() {
        let mut entries = std::fs::read_dir(&journal).map_err(BackupError::io("read", &journal))?;
        if entries.next().is_some() {
            return Err(BackupError::Refused(format!(
                "{} holds a journal: restore goes into a fresh spool (move the old one away first)",
                journal.display()
            )));
        }
    }
    Ok(())
}

fn copy_new(from: &Path, to: &Path, mode: u32) -> Result<(), BackupError> {
    let mut src = std::fs::File::open(from).map_err(BackupError::io("open", from))?;
    let mut dst = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(to)
        .map_err(BackupError::io("create", to))?;
    std::io::copy(&mut src, &mut dst).map_err(BackupError::io("copy to", to))?;
    dst.flush().map_err(BackupError::io("write", to))?;
    dst.sync_all().map_err(BackupError::io("sync", to))
}

fn sync_dir(dir: &Path) -> Result<(), BackupError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(BackupError::io("sync", dir))
}
