//! The accounts store's one error type. Expected results (a wrong password, an unknown
//! session, a used link) are values of their own types, not errors.

/// What can go wrong in `accounts.db` or with an administrator's input.
#[derive(Debug, thiserror::Error)]
pub enum AccountsError {
    /// Opening failed, or the file is from a newer Herald (the message says what to do).
    #[error(transparent)]
    Open(#[from] herald_store::OpenError),
    #[error("accounts database: {0}")]
    Db(#[from] rusqlite::Error),
    #[error("no account {0}")]
    NoSuchAccount(String),
    #[error("account {0} already exists")]
    AlreadyExists(String),
    /// An administrator's input that cannot be stored (a password out of bounds, an unknown
    /// role word); the text names the field.
    #[error("{0}")]
    Invalid(String),
    #[error("password hashing: {0}")]
    Hash(String),
}

impl AccountsError {
    /// True when the thing named does not exist (HTTP 404).
    pub fn is_not_found(&self) -> bool {
        matches!(self, AccountsError::NoSuchAccount(_))
    }

    /// True when the administrator's input is at fault (HTTP 400 / 409).
    pub fn is_invalid(&self) -> bool {
        matches!(
            self,
            AccountsError::Invalid(_) | AccountsError::AlreadyExists(_)
        )
    }
}
