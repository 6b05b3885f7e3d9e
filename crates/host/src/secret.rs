//! The installation's secret (the HMAC key of every token, `herald_types::token`) and the
//! helper that writes private files.
//!
//! One node: the secret is read from the config or `<data_dir>/secret` (created 0600 with 32
//! random bytes on first start, so links survive restarts).
//!
//! A cluster (a PostgreSQL store) is one list service, so it has one secret, kept in the
//! shared store ([`shared`]): the first node to start stores its own (the configured one, else
//! its `<data_dir>/secret` if it has one, so its links keep working, else 32 random bytes),
//! and every other node reads it. A node whose configured `secret` differs refuses to start
//! ([`SecretError::Mismatch`]) rather than mint links the other nodes refuse.
//!
//! SECURITY: the secret is never logged; in a cluster, whoever can read the store can mint
//! links (the store holds every member already and is guarded as the secret is).

use herald_config::Config;
use herald_directory::{Directory, DirectoryError};
use std::path::Path;

/// Why this node has no secret it may use.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("directory: {0}")]
    Directory(#[from] DirectoryError),
    /// The configured `secret` is not the cluster's (kept in the shared store since its first
    /// node started): links minted by this node would be refused by the others.
    #[error(
        "the configured `secret` differs from the cluster's (kept in the shared store since \
         the first node started): give every node the same `secret`, or none (a node without \
         one uses the cluster's)"
    )]
    Mismatch,
}

/// The token secret: from the config, else `<data_dir>/secret`, created on first start.
pub fn load_or_create(cfg: &Config) -> std::io::Result<Vec<u8>> {
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

/// The cluster's secret from the shared store at `dir` (see the module doc). Blocking.
pub fn shared(cfg: &Config, dir: &Directory) -> Result<Vec<u8>, SecretError> {
    let configured = (!cfg.secret.is_empty()).then(|| cfg.secret.as_bytes().to_vec());
    let path = cfg.data_dir.join("secret");
    let local = match std::fs::read(&path) {
        Ok(bytes) if bytes.len() >= 16 => Some(bytes),
        _ => None,
    };
    let candidate = configured
        .clone()
        .or_else(|| local.clone())
        .unwrap_or_else(|| rand::random::<[u8; 32]>().to_vec());
    let stored = dir.cluster_secret(&candidate)?;
    match (&configured, &local) {
        (Some(c), _) if *c != stored => return Err(SecretError::Mismatch),
        (None, Some(l)) if *l != stored => tracing::warn!(
            file = %path.display(),
            "this node's own secret file is not the cluster's: links it minted before it \
             joined the cluster no longer work; it uses the cluster's secret from now on"
        ),
        _ => {}
    }
    Ok(stored)
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
