//! `herald dkim keygen`: a new key pair as PEM plus the DNS TXT record to publish.
//!
//! RSA keys are 2048 bits (RFC 8301 minimum 1024, 2048 recommended; larger keys do not fit
//! one TXT string and cost 4× more per signature). The RSA public key is published as a
//! SubjectPublicKeyInfo, the form every verifier accepts (dkimpy accepts only that one).
//!
//! SECURITY: the private key is returned to the caller to be written with mode 0600; it is
//! never printed.

use super::{DkimAlgorithm, DkimError};
use base64::Engine;
use mail_auth::dkim::generate::DkimKeyPair;

/// A generated key pair.
pub struct GeneratedKey {
    /// The private key, PEM (`RSA PRIVATE KEY` = PKCS#1, or `PRIVATE KEY` = PKCS#8).
    pub private_pem: String,
    /// The value of the `<selector>._domainkey.<domain>` TXT record.
    pub dns_txt: String,
}

/// Generates a key pair for `algorithm`.
pub fn generate(algorithm: DkimAlgorithm) -> Result<GeneratedKey, DkimError> {
    let err = |e: mail_auth::Error| DkimError::Generate(e.to_string());
    let b64 = base64::engine::general_purpose::STANDARD;
    let (label, private, public) = match algorithm {
        DkimAlgorithm::Rsa => {
            let pair = DkimKeyPair::generate_rsa(2048).map_err(err)?;
            let (private, pkcs1) = pair.into_inner();
            ("RSA PRIVATE KEY", private, rsa_spki(&pkcs1))
        }
        DkimAlgorithm::Ed25519 => {
            let pair = DkimKeyPair::generate_ed25519().map_err(err)?;
            let (private, public) = pair.into_inner();
            ("PRIVATE KEY", private, public)
        }
    };
    Ok(GeneratedKey {
        private_pem: pem(label, &private),
        dns_txt: format!(
            "v=DKIM1; k={}; p={}",
            algorithm.key_type(),
            b64.encode(public)
        ),
    })
}

/// PEM armor with 64-character lines (RFC 7468).
pub(crate) fn pem(label: &str, der: &[u8]) -> String {
    let body = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in body.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// Wraps a PKCS#1 RSAPublicKey in a SubjectPublicKeyInfo (RFC 5280 §4.1, RFC 3279 §2.3.1).
pub(crate) fn rsa_spki(pkcs1: &[u8]) -> Vec<u8> {
    // SEQUENCE { OID 1.2.840.113549.1.1.1, NULL }
    const ALGORITHM: &[u8] = &[
        0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01, 0x05, 0x00,
    ];
    let mut bits = vec![0x00];
    bits.extend_from_slice(pkcs1);
    let mut inner = ALGORITHM.to_vec();
    der_tlv(0x03, &bits, &mut inner);
    let mut out = Vec::with_capacity(inner.len() + 4);
    der_tlv(0x30, &inner, &mut out);
    out
}

fn der_tlv(tag: u8, value: &[u8], out: &mut Vec<u8>) {
    out.push(tag);
    let len = value.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|&&b| b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(value);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dkim::DkimSigner;

    #[test]
    fn ed25519_pair_loads_back() {
        let k = generate(DkimAlgorithm::Ed25519).expect("generates");
        assert!(k.dns_txt.starts_with("v=DKIM1; k=ed25519; p="));
        DkimSigner::from_pem(
            "example.org",
            "s",
            DkimAlgorithm::Ed25519,
            k.private_pem.as_bytes(),
        )
        .expect("loads");
    }

    #[test]
    fn a_loaded_key_gives_back_the_record_it_was_made_with() {
        for algorithm in [DkimAlgorithm::Ed25519, DkimAlgorithm::Rsa] {
            let k = generate(algorithm).expect("generates");
            let signer =
                DkimSigner::from_pem("example.org", "s", algorithm, k.private_pem.as_bytes())
                    .expect("loads");
            assert_eq!(signer.dns_record(), k.dns_txt);
        }
    }

    #[test]
    fn der_lengths() {
        let mut out = Vec::new();
        der_tlv(0x04, &[0u8; 300], &mut out);
        assert_eq!(&out[..4], &[0x04, 0x82, 0x01, 0x2c]);
    }
}
