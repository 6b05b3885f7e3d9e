//! Password hashing with argon2id (RFC 9106) in the PHC string format, so a hash records its
//! own parameters and old hashes keep verifying after the parameters change.
//!
//! SECURITY: the input is bounded before it reaches argon2 ([`MAX_PASSWORD_BYTES`]): a 1 MB
//! "password" is refused without hashing, so nobody can make the server hash megabytes per
//! request. Unknown accounts and accounts without a password are verified against a dummy
//! hash ([`verify_dummy`]) so the answer takes as long as for a real one (no account
//! enumeration through timing). Verification compares in constant time (the argon2 crate's
//! `PasswordVerifier`).

use crate::error::AccountsError;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};
use std::sync::OnceLock;

/// Shortest password accepted when one is set (NIST SP 800-63B asks for at least 8).
pub const MIN_PASSWORD_CHARS: usize = 8;
/// Longest password accepted, in bytes: far above any passphrase, far below a cost problem.
pub const MAX_PASSWORD_BYTES: usize = 1024;

/// argon2id with OWASP's first recommended configuration (Password Storage Cheat Sheet):
/// 19 MiB of memory, 2 passes, 1 lane — about 20–40 ms per hash on a current core, enough to
/// make offline guessing expensive without letting a burst of logins exhaust the machine (the
/// login throttle bounds the burst).
fn hasher() -> Argon2<'static> {
    // The constants are valid by construction; `Params::DEFAULT` is the fallback the crate
    // documents should they ever be refused.
    let params = Params::new(19 * 1024, 2, 1, None).unwrap_or(Params::DEFAULT);
    Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
}

/// Checks an administrator-chosen password: bounded, long enough, no control characters (they
/// cannot be typed into the form and usually mean a pasted mistake).
pub fn check(password: &str) -> Result<(), AccountsError> {
    if password.len() > MAX_PASSWORD_BYTES {
        return Err(AccountsError::Invalid(format!(
            "password: longer than {MAX_PASSWORD_BYTES} bytes"
        )));
    }
    if password.chars().count() < MIN_PASSWORD_CHARS {
        return Err(AccountsError::Invalid(format!(
            "password: shorter than {MIN_PASSWORD_CHARS} characters"
        )));
    }
    if password.chars().any(char::is_control) {
        return Err(AccountsError::Invalid(
            "password: contains control characters".into(),
        ));
    }
    Ok(())
}

/// The PHC string of `password` under a fresh random salt.
pub fn hash(password: &str) -> Result<String, AccountsError> {
    check(password)?;
    let salt_bytes: [u8; 16] = rand::random();
    let salt =
        SaltString::encode_b64(&salt_bytes).map_err(|e| AccountsError::Hash(e.to_string()))?;
    hasher()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| AccountsError::Hash(e.to_string()))
}

/// True when `password` matches the stored PHC string. An over-long password or a stored
/// string that does not parse is simply "no".
pub fn verify(stored: &str, password: &str) -> bool {
    if password.len() > MAX_PASSWORD_BYTES {
        return false;
    }
    match PasswordHash::new(stored) {
        Ok(parsed) => hasher()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok(),
        Err(_) => false,
    }
}

/// Spends the time a real verification would, and answers no: for unknown accounts.
pub fn verify_dummy(password: &str) {
    static DUMMY: OnceLock<Option<String>> = OnceLock::new();
    let dummy = DUMMY.get_or_init(|| hash("not a password of anyone's").ok());
    if let Some(d) = dummy {
        let _ = verify(d, password);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_verify_and_carry_their_parameters() {
        let h = hash("correct horse battery").expect("hash");
        assert!(h.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"), "{h}");
        assert!(verify(&h, "correct horse battery"));
        assert!(!verify(&h, "correct horse batterY"));
        assert_ne!(h, hash("correct horse battery").expect("hash"), "salted");
    }

    #[test]
    fn hostile_passwords_are_bounded_and_refused() {
        let huge = "x".repeat(1 << 20);
        assert!(check(&huge).is_err());
        assert!(hash(&huge).is_err());
        let h = hash("a fine password").expect("hash");
        let started = std::time::Instant::now();
        assert!(!verify(&h, &huge), "1 MB is refused before hashing");
        assert!(started.elapsed() < std::time::Duration::from_millis(50));
        assert!(check("short").is_err());
        assert!(check("with\u{0}nul inside").is_err());
        assert!(check("pässwörd-ünïcødé").is_ok(), "unicode is fine");
        for garbage in [
            "",
            "$argon2id$",
            "plain text",
            "$argon2id$v=19$m=1,t=1,p=1$AAAA$AAAA",
        ] {
            assert!(!verify(garbage, "a fine password"), "{garbage}");
        }
        verify_dummy("anything");
    }
}
