//! The server's `[dkim."<domain>"]` tables: which key signs each list domain's copies, an
//! optional second key, and whether an ARC set is added. Loading a table gives the domain's
//! [`DkimSigner`]; every error names the key of the table at fault.

use super::{DkimAlgorithm, DkimSigner};
use serde::Deserialize;
use std::path::PathBuf;

/// One list domain's DKIM key, and optionally a second one.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DkimDomainConfig {
    #[serde(flatten)]
    pub key: DkimKeyConfig,
    /// Also add an ARC set (RFC 8617) to every copy, vouching for the arrival results. Two
    /// more signatures per copy with the first key: with RSA-2048 about 0.5 ms of CPU a copy.
    #[serde(default = "yes")]
    pub arc: bool,
    /// A second key that signs every copy too (`[dkim."<domain>".second]`), typically Ed25519
    /// beside RSA (RFC 8463 §3), under its own selector.
    #[serde(default)]
    pub second: Option<DkimKeyConfig>,
}

/// A DKIM key: where its public half is published and where the private half is.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DkimKeyConfig {
    /// The DNS selector: the public key is at `<selector>._domainkey.<domain>`.
    pub selector: String,
    /// PEM private key (PKCS#1 or PKCS#8; `herald dkim keygen` writes one). Keep it 0600.
    pub key_file: PathBuf,
    /// `rsa` (rsa-sha256, default) or `ed25519` (ed25519-sha256).
    #[serde(default)]
    pub algorithm: DkimAlgorithm,
}

fn yes() -> bool {
    true
}

/// A `[dkim]` table that parsed but cannot be used, named by its configuration key.
#[derive(Debug, thiserror::Error)]
#[error("{key}: {message}")]
pub struct DkimConfigError {
    pub key: String,
    pub message: String,
}

impl DkimDomainConfig {
    /// Reads the table's key files into the signer of `domain`: the first key, the second
    /// when set, ARC as configured.
    pub fn signer(&self, domain: &str) -> Result<DkimSigner, DkimConfigError> {
        let key = format!("dkim.\"{domain}\"");
        let signer = self.key.load(domain, &key)?.with_arc(self.arc);
        let Some(second) = &self.second else {
            return Ok(signer);
        };
        let key = format!("{key}.second");
        let other = second.load(domain, &key)?;
        signer.with_second(other).map_err(|e| DkimConfigError {
            key: format!("{key}.selector"),
            message: e.to_string(),
        })
    }
}

impl DkimKeyConfig {
    /// Reads and parses the key file; errors name `key` (the config table).
    fn load(&self, domain: &str, key: &str) -> Result<DkimSigner, DkimConfigError> {
        let pem = std::fs::read(&self.key_file).map_err(|e| DkimConfigError {
            key: key.to_string(),
            message: format!("cannot read {}: {e}", self.key_file.display()),
        })?;
        DkimSigner::from_pem(domain, &self.selector, self.algorithm, &pem).map_err(|e| {
            DkimConfigError {
                key: key.to_string(),
                message: format!("{}: {e}", self.key_file.display()),
            }
        })
    }
}
