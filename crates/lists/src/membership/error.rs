//! One error type per member-lifecycle operation ([`super::Membership`]): each names what can
//! go wrong for that operation, so a door matches on "already a member" or "this link was
//! superseded" without reading the store's error. The store's own detail stays inside (the
//! directory's `DirectoryError`, whose client variants are safe to show and whose storage
//! variants belong in the log); `store()` (or `?` into a `DirectoryError`) hands it back to a
//! door that already maps directory errors (the HTTP API), so answers and texts stay as they
//! were.
//!
//! The variants are sorted from the directory's error in one place ([`Sorted`]), so every
//! operation classifies a refusal, a missing list and a store failure the same way.

use herald_directory::DirectoryError;
use herald_types::token::Confirmation;
use herald_types::Address;

/// A directory error sorted into the outcomes a door may care about.
enum Sorted {
    NoSuchList(DirectoryError),
    AlreadyMember(DirectoryError),
    Refused(DirectoryError),
    Invalid(DirectoryError),
    Store(DirectoryError),
}

impl From<DirectoryError> for Sorted {
    fn from(e: DirectoryError) -> Sorted {
        match e {
            DirectoryError::NoSuchList(_) => Sorted::NoSuchList(e),
            DirectoryError::AlreadyMember(_) => Sorted::AlreadyMember(e),
            DirectoryError::Refused { .. } => Sorted::Refused(e),
            DirectoryError::InvalidInput { .. } => Sorted::Invalid(e),
            other => Sorted::Store(other),
        }
    }
}

/// Why [`super::Membership::subscribe`] added nobody.
#[derive(Debug, thiserror::Error)]
pub enum SubscribeError {
    /// The list does not exist (any more).
    #[error(transparent)]
    NoSuchList(DirectoryError),
    /// The address (any case) is already on the list.
    #[error(transparent)]
    AlreadyMember(DirectoryError),
    /// The address is banned or suppressed (the text names which: safe to show).
    #[error(transparent)]
    Refused(DirectoryError),
    /// A name or field the directory refuses.
    #[error(transparent)]
    Invalid(DirectoryError),
    /// The store failed.
    #[error(transparent)]
    Store(DirectoryError),
}

impl From<DirectoryError> for SubscribeError {
    fn from(e: DirectoryError) -> Self {
        match Sorted::from(e) {
            Sorted::NoSuchList(e) => SubscribeError::NoSuchList(e),
            Sorted::AlreadyMember(e) => SubscribeError::AlreadyMember(e),
            Sorted::Refused(e) => SubscribeError::Refused(e),
            Sorted::Invalid(e) => SubscribeError::Invalid(e),
            Sorted::Store(e) => SubscribeError::Store(e),
        }
    }
}

impl SubscribeError {
    /// The directory's error underneath (for a door that maps those already).
    pub fn store(self) -> DirectoryError {
        match self {
            SubscribeError::NoSuchList(e)
            | SubscribeError::AlreadyMember(e)
            | SubscribeError::Refused(e)
            | SubscribeError::Invalid(e)
            | SubscribeError::Store(e) => e,
        }
    }
}

impl From<SubscribeError> for DirectoryError {
    fn from(e: SubscribeError) -> DirectoryError {
        e.store()
    }
}

/// Why [`super::Membership::confirm`] did not carry a confirmed action out. The link is
/// unspent again whenever the action itself failed (the person may try again).
#[derive(Debug, thiserror::Error)]
pub enum ConfirmError {
    /// The link was used before (links are spent on use).
    #[error("this confirmation link was already used")]
    LinkUsed(Box<Confirmation>),
    /// The link was mailed before the address last left the list: it must not undo that.
    #[error("{} left {} after this link was sent", .0.address, .0.list)]
    LinkSuperseded(Box<Confirmation>),
    /// A delivery change for an address that left the list since it asked.
    #[error("{0} is not a member")]
    NotMember(Address),
    /// The list does not exist (any more).
    #[error(transparent)]
    NoSuchList(DirectoryError),
    /// The address is banned or suppressed.
    #[error(transparent)]
    Refused(DirectoryError),
    /// Something the directory refuses to write.
    #[error(transparent)]
    Invalid(DirectoryError),
    /// The store failed.
    #[error(transparent)]
    Store(DirectoryError),
}

impl From<DirectoryError> for ConfirmError {
    fn from(e: DirectoryError) -> Self {
        match Sorted::from(e) {
            Sorted::NoSuchList(e) => ConfirmError::NoSuchList(e),
            Sorted::Refused(e) => ConfirmError::Refused(e),
            // A confirmed subscribe of a member already on the list renews them; an
            // AlreadyMember reaching here is the directory's refusal of something else.
            Sorted::AlreadyMember(e) | Sorted::Invalid(e) => ConfirmError::Invalid(e),
            Sorted::Store(e) => ConfirmError::Store(e),
        }
    }
}

impl From<SubscribeError> for ConfirmError {
    fn from(e: SubscribeError) -> Self {
        ConfirmError::from(e.store())
    }
}

/// The plain operations' errors: the list is gone, the input is refused, or the store failed.
/// One type per operation, so a signature says which operation failed; they share a shape.
macro_rules! plain_error {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, thiserror::Error)]
        pub enum $name {
            /// The list does not exist (any more).
            #[error(transparent)]
            NoSuchList(DirectoryError),
            /// The address is banned or suppressed (re-enabling it is refused).
            #[error(transparent)]
            Refused(DirectoryError),
            /// A value the directory refuses (a reason, a language, a name over its limit).
            #[error(transparent)]
            Invalid(DirectoryError),
            /// The store failed.
            #[error(transparent)]
            Store(DirectoryError),
        }

        impl From<DirectoryError> for $name {
            fn from(e: DirectoryError) -> Self {
                match Sorted::from(e) {
                    Sorted::NoSuchList(e) => $name::NoSuchList(e),
                    Sorted::Refused(e) => $name::Refused(e),
                    Sorted::AlreadyMember(e) | Sorted::Invalid(e) => $name::Invalid(e),
                    Sorted::Store(e) => $name::Store(e),
                }
            }
        }

        impl $name {
            /// The directory's error underneath (for a door that maps those already).
            pub fn store(self) -> DirectoryError {
                match self {
                    $name::NoSuchList(e)
                    | $name::Refused(e)
                    | $name::Invalid(e)
                    | $name::Store(e) => e,
                }
            }
        }

        impl From<$name> for DirectoryError {
            fn from(e: $name) -> DirectoryError {
                e.store()
            }
        }
    };
}

plain_error!(
    /// Why [`super::Membership::unsubscribe`] (or a complaint's removal) failed.
    UnsubscribeError
);
plain_error!(
    /// Why [`super::Membership::change`] (delivery mode, name, language, moderation, options)
    /// failed; nothing after the refused part was written.
    ChangeError
);
plain_error!(
    /// Why [`super::Membership::disable`] (an administrator, an operator, bounces, a
    /// complaint) failed.
    DisableError
);
plain_error!(
    /// Why [`super::Membership::reenable`] or [`super::Membership::clear_bounce_score`]
    /// failed.
    EnableError
);
plain_error!(
    /// Why [`super::Membership::erase`] failed.
    EraseError
);
plain_error!(
    /// Why a bulk write ([`super::Membership::import`], [`super::Membership::import_from_csv`])
    /// failed as a whole (a refused row is an outcome, not an error).
    ImportError
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_error_sorts_into_the_same_outcome_for_every_operation() {
        let a = Address::parse("bob@x.test").expect("address");
        let dup = SubscribeError::from(DirectoryError::AlreadyMember(a.clone()));
        assert!(matches!(dup, SubscribeError::AlreadyMember(_)));
        assert!(matches!(
            dup.store(),
            DirectoryError::AlreadyMember(x) if x == a
        ));
        let gone = || DirectoryError::NoSuchList("dev@l.test".into());
        assert!(matches!(
            UnsubscribeError::from(gone()),
            UnsubscribeError::NoSuchList(_)
        ));
        assert!(matches!(
            ConfirmError::from(gone()),
            ConfirmError::NoSuchList(_)
        ));
        let bad = DirectoryError::InvalidInput {
            field: "reason",
            reason: "control character".into(),
        };
        let e = DisableError::from(bad);
        assert_eq!(e.to_string(), "invalid reason: control character");
        assert!(matches!(e, DisableError::Invalid(_)));
    }
}
