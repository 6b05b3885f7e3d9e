//! DKIM (RFC 6376; RFC 8463 for Ed25519): list-domain keys, key generation, the fan-out
//! body hasher and the per-copy signer.
//!
//! Place in the flow: the server loads one [`DkimSigner`] per list domain from the `[dkim]`
//! config section into [`DkimKeys`]; fan-out hands the list domain's signer to each
//! `Template`, which hashes the shared body once at render time ([`BodyHasher`], resumable)
//! and signs each spliced copy's header block ([`DkimSigner::sign`]).
//!
//! Limits: RSA keys of 2048–8192 bits (keygen makes 2048); Ed25519 keys in PKCS#8 (v1 or v2).
//!
//! SECURITY: private keys are read from operator-supplied PEM files, never logged, and never
//! part of any `Debug` output.

mod canon;
pub mod config;
mod key;
mod keygen;
mod sign;

pub use canon::{relaxed_header, BodyHasher};
pub use config::{DkimConfigError, DkimDomainConfig, DkimKeyConfig};
pub use keygen::{generate, GeneratedKey};
pub(crate) use sign::canonical_signed_fields;
pub use sign::{header_fields, DkimSigner, SIGNED_FIELDS};

use rustls_pki_types::{pem::PemObject, PrivateKeyDer};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

/// The signing algorithm of a key (`a=` tag).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DkimAlgorithm {
    /// rsa-sha256: universally verified; ~0.23 ms per signature at 2048 bits (one x86-64 core).
    #[default]
    Rsa,
    /// ed25519-sha256 (RFC 8463): ~30× cheaper to sign; not every receiver verifies it yet,
    /// so operators usually publish both.
    Ed25519,
}

impl DkimAlgorithm {
    /// The `a=` tag value.
    pub fn tag(self) -> &'static str {
        match self {
            DkimAlgorithm::Rsa => "rsa-sha256",
            DkimAlgorithm::Ed25519 => "ed25519-sha256",
        }
    }

    /// The `k=` tag value of the DNS record.
    pub fn key_type(self) -> &'static str {
        match self {
            DkimAlgorithm::Rsa => "rsa",
            DkimAlgorithm::Ed25519 => "ed25519",
        }
    }
}

/// Why a key could not be loaded or a copy could not be signed.
#[derive(Debug, thiserror::Error)]
pub enum DkimError {
    /// The PEM is not a private key of the configured algorithm. The message never quotes
    /// the key material.
    #[error("not a usable {algorithm:?} private key: {reason}")]
    BadKey {
        algorithm: DkimAlgorithm,
        reason: String,
    },
    #[error("key generation failed: {0}")]
    Generate(String),
    #[error("signing failed: {0}")]
    Sign(String),
    #[error("the message has no From field to sign")]
    NoFrom,
    #[error("{0}")]
    Second(String),
}

impl DkimSigner {
    /// Loads a private key from PEM text (PKCS#1 or PKCS#8 for RSA, PKCS#8 for Ed25519).
    pub fn from_pem(
        domain: &str,
        selector: &str,
        algorithm: DkimAlgorithm,
        pem: &[u8],
    ) -> Result<DkimSigner, DkimError> {
        let bad = |reason: String| DkimError::BadKey { algorithm, reason };
        let der = PrivateKeyDer::from_pem_slice(pem).map_err(|e| bad(e.to_string()))?;
        let key = key::PrivateKey::from_der(algorithm, der).map_err(bad)?;
        Ok(DkimSigner::new(domain, selector, algorithm, key))
    }
}

/// The signers of all list domains, shared by every template (cheap to clone). Every clone
/// sees [`DkimKeys::replace_with`]: a SIGHUP after a key rotation reaches every stage at once,
/// and posts whose template is already built finish with the key they started with.
#[derive(Clone, Default)]
pub struct DkimKeys {
    by_domain: Arc<RwLock<Arc<SignerMap>>>,
}

type SignerMap = HashMap<String, Arc<DkimSigner>>;

impl std::fmt::Debug for DkimKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.current().values()).finish()
    }
}

impl DkimKeys {
    pub fn new(signers: impl IntoIterator<Item = DkimSigner>) -> DkimKeys {
        let by_domain: SignerMap = signers
            .into_iter()
            .map(|s| (s.domain().to_string(), Arc::new(s)))
            .collect();
        DkimKeys {
            by_domain: Arc::new(RwLock::new(Arc::new(by_domain))),
        }
    }

    /// The map now: a read lock held for one `Arc` clone.
    fn current(&self) -> Arc<SignerMap> {
        self.by_domain
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The signer for a list domain (case-insensitive), if one is configured.
    pub fn get(&self, domain: &str) -> Option<Arc<DkimSigner>> {
        self.current().get(&domain.to_ascii_lowercase()).cloned()
    }

    pub fn is_empty(&self) -> bool {
        self.current().is_empty()
    }

    /// Makes every clone of `self` sign with `other`'s keys from now on.
    pub fn replace_with(&self, other: &DkimKeys) {
        let next = other.current();
        *self
            .by_domain
            .write()
            .unwrap_or_else(PoisonError::into_inner) = next;
    }
}
