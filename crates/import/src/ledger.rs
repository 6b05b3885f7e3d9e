//! The importer's own small state in the data directory, `import-ledger.json`: the archive
//! files already imported (by list, path, size and modification time, so a second run does not
//! read years of mail again only to find every message a duplicate) and the import under way
//! (source, members planned, members written), so a run after a crash can say it is finishing
//! an interrupted import. Members need no ledger of their own: the plan is computed from the
//! directory, which holds every batch committed before the crash.
//!
//! With `--send-welcome`, the member-id range each list's import added (`welcome`): recorded
//! before the list's members are written and narrowed page by page as the running server sends
//! the welcomes, so a crash at any point neither loses a welcome nor sends more than one page
//! twice.
//!
//! Written atomically (a temporary file renamed over the old one), so a crash leaves the old
//! or the new ledger, never half of one; an unreadable ledger is an error, not a fresh start.

use crate::ImportError;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

const FILE: &str = "import-ledger.json";

/// An import that started applying and has not finished.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnderWay {
    pub source: String,
    pub started_ms: u64,
    pub members_planned: u64,
    pub members_written: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct ArchivedFile {
    list: String,
    path: PathBuf,
    len: u64,
    modified_ms: u64,
}

/// The ledger, loaded.
/// Welcomes still to send for one list: its members with `after_member_id < id <=
/// up_to_member_id` (ids only grow, so the members an import adds are the ids above the list's
/// highest before it). `up_to_member_id` is `None` while the list's members are being written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingWelcome {
    pub list: String,
    pub after_member_id: i64,
    pub up_to_member_id: Option<i64>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Ledger {
    #[serde(default)]
    pub welcome: Vec<PendingWelcome>,
    #[serde(default)]
    archived: Vec<ArchivedFile>,
    #[serde(default)]
    pub under_way: Option<UnderWay>,
    #[serde(skip)]
    path: PathBuf,
}

fn stamp(file: &Path) -> Option<(u64, u64)> {
    let meta = std::fs::metadata(file).ok()?;
    let modified = meta
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?;
    Some((
        meta.len(),
        u64::try_from(modified.as_millis()).unwrap_or(u64::MAX),
    ))
}

impl Ledger {
    /// The ledger of `data_dir` (empty when there is none yet).
    pub fn load(data_dir: &Path) -> Result<Ledger, ImportError> {
        let path = data_dir.join(FILE);
        let mut ledger = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice::<Ledger>(&bytes)
                .map_err(|e| ImportError::format(path.display().to_string(), e.to_string()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ledger::default(),
            Err(e) => return Err(ImportError::read(&path)(e)),
        };
        ledger.path = path;
        Ok(ledger)
    }

    /// True when `file` was imported into `list`'s archive and has not changed since.
    pub fn archived(&self, list: &str, file: &Path) -> bool {
        let Some((len, modified_ms)) = stamp(file) else {
            return false;
        };
        self.archived.iter().any(|a| {
            a.list == list && a.path == file && a.len == len && a.modified_ms == modified_ms
        })
    }

    pub(crate) fn mark_archived(&mut self, list: &str, file: &Path) -> Result<(), ImportError> {
        if let Some((len, modified_ms)) = stamp(file) {
            self.archived.push(ArchivedFile {
                list: list.to_string(),
                path: file.to_path_buf(),
                len,
                modified_ms,
            });
        }
        self.save()
    }

    /// Records that `list`'s members above `after` are to be welcomed, unless a crashed run
    /// already did (its lower start covers what it wrote).
    pub(crate) fn welcome_from(&mut self, list: &str, after: i64) -> Result<(), ImportError> {
        if !self.welcome.iter().any(|w| w.list == list) {
            self.welcome.push(PendingWelcome {
                list: list.to_string(),
                after_member_id: after,
                up_to_member_id: None,
            });
        }
        self.save()
    }

    /// Closes `list`'s welcome range at `up_to` once its members are written.
    /// An empty range (the import added nobody) is dropped at once.
    pub(crate) fn welcome_up_to(&mut self, list: &str, up_to: i64) -> Result<(), ImportError> {
        for w in self.welcome.iter_mut().filter(|w| w.list == list) {
            w.up_to_member_id = Some(up_to);
        }
        self.welcome
            .retain(|w| w.list != list || w.after_member_id < up_to);
        self.save()
    }

    /// After a page of welcomes went out: the next starts after `last`; `done` drops the list.
    pub fn welcome_sent(&mut self, list: &str, last: i64, done: bool) -> Result<(), ImportError> {
        if done {
            self.welcome.retain(|w| w.list != list);
        } else {
            for w in self.welcome.iter_mut().filter(|w| w.list == list) {
                w.after_member_id = last;
            }
        }
        self.save()
    }

    pub(crate) fn save(&self) -> Result<(), ImportError> {
        let tmp = self.path.with_extension("json.tmp");
        let bytes = serde_json::to_vec_pretty(self)
            .map_err(|e| ImportError::format("import ledger", e.to_string()))?;
        std::fs::write(&tmp, bytes).map_err(ImportError::write(&tmp))?;
        std::fs::rename(&tmp, &self.path).map_err(ImportError::write(&self.path))
    }
}
