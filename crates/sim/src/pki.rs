//! A test certificate authority (rcgen): one CA certificate that tests give Herald as a trust
//! anchor, and leaf certificates it signs for simulated hosts (e.g. `mta-sts.<domain>` policy
//! servers). Real chains, so verification in Herald follows the same path as on the Internet.
//!
//! SECURITY: keys live in memory for the test's lifetime only; nothing here is for production.

use crate::SimError;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A CA that signs test certificates.
pub struct TestCa {
    key: KeyPair,
    cert: rcgen::Certificate,
}

/// A leaf certificate with its chain (leaf first, then the CA) and private key.
pub struct Issued {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

impl Clone for Issued {
    fn clone(&self) -> Self {
        Issued {
            chain: self.chain.clone(),
            key: self.key.clone_key(),
        }
    }
}

fn tls_err(e: impl std::fmt::Display) -> SimError {
    SimError::Tls(e.to_string())
}

impl TestCa {
    /// A new CA named `name` (its subject's common name).
    pub fn new(name: &str) -> Result<TestCa, SimError> {
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(tls_err)?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().map_err(tls_err)?;
        let cert = params.self_signed(&key).map_err(tls_err)?;
        Ok(TestCa { key, cert })
    }

    /// The CA certificate in PEM, for a trust-anchor file.
    pub fn pem(&self) -> String {
        self.cert.pem()
    }

    /// Signs a leaf certificate for `names` (DNS names).
    pub fn issue(&self, names: &[String]) -> Result<Issued, SimError> {
        let key = KeyPair::generate().map_err(tls_err)?;
        self.issue_with_key(names, &key)
    }

    /// Signs a leaf certificate for `names` whose key is `key`: the world's receivers each get
    /// their own certificate over one key pair, so a TLSA record naming the key (selector 1)
    /// holds for all of them.
    pub fn issue_with_key(&self, names: &[String], key: &KeyPair) -> Result<Issued, SimError> {
        let params = CertificateParams::new(names.to_vec()).map_err(tls_err)?;
        let leaf = params
            .signed_by(key, &self.cert, &self.key)
            .map_err(tls_err)?;
        Ok(Issued {
            chain: vec![leaf.der().clone(), self.cert.der().clone()],
            key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        })
    }

    /// The CA certificate in DER.
    pub fn der(&self) -> &[u8] {
        self.cert.der()
    }
}
