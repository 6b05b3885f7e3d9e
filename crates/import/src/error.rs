//! The importer's one error type: what stopped an import as a whole. Items that cannot be
//! brought over (a broken row, a suppressed address, a setting with no Herald equivalent) are
//! not errors: they are [`crate::Skip`]s in the report, and the import goes on.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The input is not in the format the source writes (the file or answer named in `what`).
    #[error("{what} is not readable: {reason}")]
    Format { what: String, reason: String },
    /// A Herald export written by a newer Herald.
    #[error("{what} is export format version {found}; this Herald reads up to version {supported}: upgrade Herald to import it")]
    TooNew {
        what: String,
        found: u32,
        supported: u32,
    },
    /// A pickle that asks for code to run, or is too large, too deep or cut short.
    #[error("{path}: refused: {reason}")]
    Pickle { path: PathBuf, reason: String },
    /// The source reported more (or fewer) items than it handed over: a roster cut short by
    /// a failing page, or one that changed while it was read. Nothing is written.
    #[error("{what}: the source reports {reported} but {read} were read; nothing was written (run the import again; if it recurs, check the source's logs)")]
    Incomplete {
        what: String,
        reported: u64,
        read: u64,
    },
    #[error("{0}")]
    Usage(String),
    #[error("directory: {0}")]
    Directory(#[from] herald_directory::DirectoryError),
    #[error("archive: {0}")]
    Archive(#[from] herald_archive::ArchiveError),
}

/// A bulk write the member lifecycle refused or failed at is the directory's error underneath:
/// reported as before.
impl From<herald_lists::ImportError> for ImportError {
    fn from(e: herald_lists::ImportError) -> Self {
        ImportError::Directory(e.store())
    }
}

impl ImportError {
    pub(crate) fn format(what: impl Into<String>, reason: impl Into<String>) -> ImportError {
        ImportError::Format {
            what: what.into(),
            reason: reason.into(),
        }
    }

    pub(crate) fn read(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> ImportError + '_ {
        move |source| ImportError::Read {
            path: path.to_path_buf(),
            source,
        }
    }

    pub(crate) fn write(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> ImportError + '_ {
        move |source| ImportError::Write {
            path: path.to_path_buf(),
            source,
        }
    }
}
