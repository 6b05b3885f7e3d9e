//! The lists stage's one error type. The HTTP API maps it to its own responses at its
//! boundary (`herald_api`); the stage itself answers mail and never speaks HTTP. Expected
//! refusals (a bad token in a mail, a non-moderator's reply) are answers, not errors.

use herald_directory::DirectoryError;
use herald_enqueue::EnqueueError;
use herald_spool::SpoolError;
use herald_types::token::Confirmation;
use herald_types::{Address, PostId};

/// Why a list operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ListsError {
    #[error("no such list: {0}")]
    NoSuchList(Address),
    #[error("no held post {0}")]
    NoHeldPost(PostId),
    #[error("invalid or expired confirmation")]
    InvalidToken,
    /// A confirmation link that was already used: links are spent on use.
    #[error("this confirmation link was already used")]
    LinkUsed(Box<Confirmation>),
    /// A confirmation link sent before the address last left the list: it must not undo the
    /// departure.
    #[error("{} left {} after this link was sent", .0.address, .0.list)]
    LinkSuperseded(Box<Confirmation>),
    #[error("the list is closed")]
    ClosedList,
    #[error("unknown action {0}")]
    UnknownAction(String),
    #[error("{0} is not a member")]
    NotMember(Address),
    #[error("directory: {0}")]
    Directory(#[from] DirectoryError),
    #[error("enqueue: {0}")]
    Enqueue(#[from] EnqueueError),
    #[error("spool: {0}")]
    Spool(#[from] SpoolError),
    #[error("internal task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// A confirmation's own refusals keep their names; what the directory refused or failed at
/// stays a directory error, classified as before.
impl From<crate::membership::ConfirmError> for ListsError {
    fn from(e: crate::membership::ConfirmError) -> Self {
        use crate::membership::ConfirmError as C;
        match e {
            C::LinkUsed(c) => ListsError::LinkUsed(c),
            C::LinkSuperseded(c) => ListsError::LinkSuperseded(c),
            C::NotMember(a) => ListsError::NotMember(a),
            C::NoSuchList(e) | C::Refused(e) | C::Invalid(e) | C::Store(e) => {
                ListsError::Directory(e)
            }
        }
    }
}

impl ListsError {
    /// The list or held post named does not exist (or no longer does).
    pub fn is_not_found(&self) -> bool {
        match self {
            ListsError::NoSuchList(_) | ListsError::NoHeldPost(_) | ListsError::NotMember(_) => {
                true
            }
            ListsError::Directory(e) => e.is_not_found(),
            _ => false,
        }
    }

    /// The caller's input is at fault (a bad token or action, a closed list): not worth a retry.
    pub fn is_invalid(&self) -> bool {
        match self {
            ListsError::InvalidToken
            | ListsError::LinkUsed(_)
            | ListsError::LinkSuperseded(_)
            | ListsError::ClosedList
            | ListsError::UnknownAction(_) => true,
            ListsError::Directory(e) => e.is_client_error() && !e.is_not_found(),
            _ => false,
        }
    }

    /// A store or task failed: nothing about the request itself; it may succeed later.
    pub fn is_internal(&self) -> bool {
        match self {
            ListsError::Directory(e) => !e.is_client_error(),
            ListsError::Enqueue(_) | ListsError::Spool(_) | ListsError::Task(_) => true,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifiers_split_not_found_invalid_and_internal() {
        let list = Address::parse("dev@l.test").expect("address");
        let gone = ListsError::NoSuchList(list.clone());
        assert!(gone.is_not_found() && !gone.is_internal() && !gone.is_invalid());
        assert!(ListsError::NoHeldPost(PostId(1)).is_not_found());
        assert!(ListsError::InvalidToken.is_invalid());
        assert!(!ListsError::ClosedList.is_internal());
        let dir = ListsError::Directory(DirectoryError::NoSuchList(list.to_string()));
        assert!(dir.is_not_found() && !dir.is_internal());
        let full = ListsError::Enqueue(EnqueueError::TooBig { limit: 1 });
        assert!(full.is_internal() && !full.is_not_found());
    }
}
