//! STARTTLS for receivers that offer it, with a rustls server configuration (ring provider),
//! in one of two ways (`[receiver] tls_ca`):
//!
//! - self-signed (the default): one certificate (rcgen) naming every TLS-offering host. Real MX
//!   hosts often are self-signed, and opportunistic STARTTLS (RFC 3207) does not verify.
//! - issued by the world's CA ([`crate::pki::TestCa`]), as on today's Internet: each host gets
//!   its own certificate for its own name, chained to the CA, which the world exports
//!   (`ca.pem` in the run directory) so a sender can be told to trust it and verify. All
//!   hosts' certificates share one key pair, so a TLSA record naming the key (selector 1)
//!   holds for every host; computed selector-0 data names the CA certificate (DANE-TA).
//!
//! Either way the servers resume sessions as real ones do: stateless TLS 1.3 tickets (rustls'
//! ring `Ticketer`, 2 tickets per full handshake, rustls' default) and a session cache for
//! TLS 1.2 session ids. The session counts full and resumed handshakes per host
//! ([`crate::HostCounters`]), so a benchmark or test sees whether a sender resumes.
//!
//! SECURITY: the private keys live only in memory for the world's lifetime. The provider is
//! passed explicitly so that the process-wide default (which other crates may install, or leave
//! ambiguous when several are compiled in) plays no part.

use rcgen::KeyPair;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::ServerSessionMemoryCache;
use std::collections::HashMap;
use std::sync::Arc;
use tokio_rustls::TlsAcceptor;

use crate::pki::TestCa;
use crate::SimError;

/// TLS 1.2 sessions each host's server remembers (TLS 1.3 tickets are stateless).
const SESSION_CACHE: usize = 4096;

/// The certificates and acceptors of a world's TLS-offering receivers.
pub(crate) struct TlsSetup {
    /// One acceptor for every host (self-signed), or one per host name (CA).
    shared: Option<TlsAcceptor>,
    per_host: HashMap<String, TlsAcceptor>,
    /// What computed selector-0 TLSA data names: the self-signed certificate, or the CA's.
    pub certificate_der: Vec<u8>,
    /// The receivers' DER SubjectPublicKeyInfo (what TLSA selector 1 names).
    pub spki_der: Vec<u8>,
    /// The CA certificate in PEM, when the certificates are issued by the world's CA.
    pub ca_pem: Option<String>,
}

fn tls_err(e: impl std::fmt::Display) -> SimError {
    SimError::Tls(e.to_string())
}

impl TlsSetup {
    /// Certificates for `names` (self-signed, or issued by a new CA when `ca`) and their
    /// acceptors.
    pub fn new(names: Vec<String>, ca: bool) -> Result<TlsSetup, SimError> {
        if ca {
            return TlsSetup::issued(names);
        }
        let certified = rcgen::generate_simple_self_signed(names).map_err(tls_err)?;
        let cert: CertificateDer<'static> = certified.cert.der().clone();
        let key =
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(certified.key_pair.serialize_der()));
        Ok(TlsSetup {
            shared: Some(acceptor(vec![cert.clone()], key)?),
            per_host: HashMap::new(),
            certificate_der: cert.to_vec(),
            spki_der: certified.key_pair.public_key_der(),
            ca_pem: None,
        })
    }

    fn issued(names: Vec<String>) -> Result<TlsSetup, SimError> {
        let ca = TestCa::new("Herald simulated Internet CA")?;
        let key = KeyPair::generate().map_err(tls_err)?;
        let mut per_host = HashMap::with_capacity(names.len());
        for name in names {
            let issued = ca.issue_with_key(std::slice::from_ref(&name), &key)?;
            per_host.insert(
                name.to_ascii_lowercase(),
                acceptor(issued.chain, issued.key)?,
            );
        }
        Ok(TlsSetup {
            shared: None,
            per_host,
            certificate_der: ca.der().to_vec(),
            spki_der: key.public_key_der(),
            ca_pem: Some(ca.pem()),
        })
    }

    /// The acceptor of host `name`.
    pub fn acceptor(&self, name: &str) -> Option<TlsAcceptor> {
        match &self.shared {
            Some(a) => Some(a.clone()),
            None => self.per_host.get(&name.to_ascii_lowercase()).cloned(),
        }
    }
}

/// A server configuration presenting `chain`, resuming sessions (see the module docs).
fn acceptor(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<TlsAcceptor, SimError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(tls_err)?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(tls_err)?;
    config.ticketer = rustls::crypto::ring::Ticketer::new().map_err(tls_err)?;
    config.session_storage = ServerSessionMemoryCache::new(SESSION_CACHE);
    Ok(TlsAcceptor::from(Arc::new(config)))
}
