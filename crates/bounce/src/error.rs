//! The bounce stage's error type (a leaf, so the stage and the complaint handling share it
//! without importing each other).

use herald_directory::DirectoryError;
use herald_spool::SpoolError;

/// Why one bounce could not be processed (it stays in the spool and is retried at the next
/// start).
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    #[error("directory: {0}")]
    Directory(#[from] DirectoryError),
    #[error("spool: {0}")]
    Spool(#[from] SpoolError),
    #[error("internal task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// The member lifecycle's refusals and failures are the directory's underneath: kept as such,
/// so a store that is down is classified as before (the bounce is retried).
impl From<herald_lists::DisableError> for StageError {
    fn from(e: herald_lists::DisableError) -> Self {
        StageError::Directory(e.store())
    }
}
