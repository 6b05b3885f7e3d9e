//! The backup boundary's errors: each says which file or step failed.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("copying the SQLite store {path}: {source}")]
    Sqlite {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("the spool's cut: {0}")]
    Spool(#[from] herald_spool::SpoolError),
    #[error("the backup stream: {0}")]
    Stream(String),
    #[error("{path} is not a usable backup: {reason}")]
    Invalid { path: PathBuf, reason: String },
    #[error("{0}")]
    Refused(String),
}

impl BackupError {
    pub(crate) fn io(
        op: &'static str,
        path: &std::path::Path,
    ) -> impl FnOnce(std::io::Error) -> BackupError {
        let path = path.to_path_buf();
        move |source| BackupError::Io { op, path, source }
    }
}
