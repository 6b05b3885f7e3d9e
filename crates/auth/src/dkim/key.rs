//! A list domain's private key and the one call that signs with it.
//!
//! Why not mail-auth's key types (ring): every copy needs its own signature (RFC 8058: the
//! per-member List-Unsubscribe must be covered), three with ARC, so signing speed is fan-out
//! speed. aws-lc-rs signs RSA-2048 about 2.1× and Ed25519 about 2.6× faster than ring on the
//! x86-64 machines we measured (docs/benchmarks/, DKIM signing). Verification stays with mail-auth
//! (ring) everywhere: an independent check of what aws-lc-rs signs.
//!
//! Limits: RSA of 2048–8192 bits. RFC 8301 §3.2 still allows 1024-bit keys, but both
//! aws-lc-rs and ring refuse to sign with them, and the big receivers ask for 2048.
//!
//! SECURITY: the key material never appears in `Debug` output or errors.

use super::{DkimAlgorithm, DkimError};
use aws_lc_rs::signature::{Ed25519KeyPair, RsaKeyPair, RSA_PKCS1_SHA256};
use rustls_pki_types::PrivateKeyDer;

pub(crate) enum PrivateKey {
    /// RSA of 2048–8192 bits.
    Rsa(RsaKeyPair),
    Ed25519(Ed25519KeyPair),
}

impl PrivateKey {
    /// Parses a DER key of the configured algorithm: PKCS#1 or PKCS#8 for RSA, PKCS#8 (v1 or
    /// v2) for Ed25519. The error reason never quotes key material.
    pub(crate) fn from_der(
        algorithm: DkimAlgorithm,
        der: PrivateKeyDer<'_>,
    ) -> Result<PrivateKey, String> {
        match (algorithm, der) {
            (DkimAlgorithm::Rsa, der) => {
                let parsed = match &der {
                    PrivateKeyDer::Pkcs1(k) => RsaKeyPair::from_der(k.secret_pkcs1_der()),
                    PrivateKeyDer::Pkcs8(k) => RsaKeyPair::from_pkcs8(k.secret_pkcs8_der()),
                    _ => return Err("RSA keys must be PKCS#1 or PKCS#8".into()),
                };
                parsed.map(PrivateKey::Rsa).map_err(|e| {
                    format!("{e} (RSA keys must be 2048–8192 bits; `herald dkim keygen` makes one)")
                })
            }
            (DkimAlgorithm::Ed25519, PrivateKeyDer::Pkcs8(der)) => {
                Ed25519KeyPair::from_pkcs8_maybe_unchecked(der.secret_pkcs8_der())
                    .map(PrivateKey::Ed25519)
                    .map_err(|e| e.to_string())
            }
            (DkimAlgorithm::Ed25519, _) => Err("Ed25519 keys must be PKCS#8".into()),
        }
    }

    /// The public key as a DKIM record's `p=` carries it (base64 of an RSA SubjectPublicKeyInfo,
    /// or of the raw Ed25519 key, RFC 8463 §4.2).
    pub(crate) fn public_p(&self) -> String {
        use aws_lc_rs::signature::KeyPair;
        use base64::Engine;
        let der = match self {
            PrivateKey::Rsa(key) => super::keygen::rsa_spki(key.public_key().as_ref()),
            PrivateKey::Ed25519(key) => key.public_key().as_ref().to_vec(),
        };
        base64::engine::general_purpose::STANDARD.encode(der)
    }

    /// Signs `data`: RSASSA-PKCS1-v1_5 with SHA-256, or Ed25519 over the SHA-256 digest of
    /// `data` (RFC 8463 §3: ed25519-sha256 signs the hash, not the data).
    pub(crate) fn sign(&self, data: &[u8]) -> Result<Vec<u8>, DkimError> {
        match self {
            PrivateKey::Rsa(key) => {
                let mut signature = vec![0; key.public_modulus_len()];
                let rng = aws_lc_rs::rand::SystemRandom::new();
                key.sign(&RSA_PKCS1_SHA256, &rng, data, &mut signature)
                    .map_err(|_| DkimError::Sign("RSA signing failed".into()))?;
                Ok(signature)
            }
            PrivateKey::Ed25519(key) => {
                use sha2::Digest;
                Ok(key.sign(&sha2::Sha256::digest(data)).as_ref().to_vec())
            }
        }
    }
}
