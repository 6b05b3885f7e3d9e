//! The installation's secret (the HMAC key of every token, `herald_types::token`) and the
//! helper that writes private files.
//!
//! SECURITY: the secret is read from the config or `<data_dir>/secret` (created 0600 with 32
//! random bytes on first start, so links survive restarts) and never logged.

use crate::config::Config;
use std::path::Path;

/// The token secret: from the config, else `<data_dir>/secret`, created on first start.
pub(crate) fn load_or_create(cfg: &Config) -> std::io::Result<Vec<u8>> {
    if !cfg.secret.is_empty() {
        return Ok(cfg.secret.as_bytes().to_vec());
    }
    let path = cfg.data_dir.join("secret");
    match std::fs::read(&path) {
        Ok(bytes) if bytes.len() >= 16 => return Ok(bytes),
        Ok(_) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{} is shorter than 16 bytes", path.display()),
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let secret: [u8; 32] = rand::random();
    write_private(&path, &secret)?;
    Ok(secret.to_vec())
}

/// Creates `path` (it must not exist) readable by its owner only (0600), writes `bytes` and
/// syncs: for secrets and private keys.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}
