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
