//! STARTTLS for receivers that offer it: one self-signed certificate (rcgen) naming every
//! TLS-offering host, and a rustls server configuration with the ring provider.
//!
//! The certificate is self-signed on purpose: real MX hosts often are, and opportunistic
//! STARTTLS (RFC 3207) does not verify. Herald's tests that want verification can trust
//! [`TlsSetup::certificate_der`].
//!
//! SECURITY: the private key lives only in memory for the world's lifetime. The provider is
//! passed explicitly so that the process-wide default (which other crates may install, or leave
//! ambiguous when several are compiled in) plays no part.

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::sync::Arc;
use tokio_rustls::TlsAcceptor;

use crate::SimError;

/// The certificate and acceptor shared by all TLS-offering receivers of a world.
#[derive(Clone)]
pub(crate) struct TlsSetup {
    pub acceptor: TlsAcceptor,
    pub certificate_der: Vec<u8>,
    /// The certificate's DER SubjectPublicKeyInfo (what TLSA selector 1 names).
    pub spki_der: Vec<u8>,
}

impl TlsSetup {
    /// Generates a certificate for `names` and builds the acceptor.
    pub fn new(names: Vec<String>) -> Result<TlsSetup, SimError> {
        let tls_err = |e: &dyn std::fmt::Display| SimError::Tls(e.to_string());
        let certified = rcgen::generate_simple_self_signed(names).map_err(|e| tls_err(&e))?;
        let cert: CertificateDer<'static> = certified.cert.der().clone();
        let spki_der = certified.key_pair.public_key_der();
        let key =
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(certified.key_pair.serialize_der()));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| tls_err(&e))?
            .with_no_client_auth()
            .with_single_cert(vec![cert.clone()], key)
            .map_err(|e| tls_err(&e))?;
        Ok(TlsSetup {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            certificate_der: cert.to_vec(),
            spki_der,
        })
    }
}
