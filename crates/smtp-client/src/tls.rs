//! STARTTLS for the outbound client (rustls with the ring provider).
//!
//! Opportunistic TLS (RFC 7435) between MTAs cannot authenticate the server by name: MX names
//! come from unauthenticated DNS and many servers use self-signed certificates. So the handshake
//! accepts any certificate (while still checking the handshake signatures, so the session key is
//! bound to the certificate presented), and *afterwards* the chain is checked against trust
//! anchors only to record, in [`TlsInfo::verified`], whether it would have verified. Policy that
//! demands verification (a `verify` rule, MTA-STS `enforce`) acts on that record before anything
//! is sent (`connection.rs`). A host whose DANE TLSA records apply is different: its
//! handshake runs with [`crate::dane_verify::DaneVerifier`], so an unauthenticated server fails the
//! handshake itself ([`TlsContext::handshake_dane`]). The trust anchors come from
//! [`herald_routing::trust`], which the MTA-STS policy fetch (HTTPS, must verify) uses too.
//!
//! The rustls configuration and the trust anchors are built once per [`crate::ClientConfig`]
//! (in its [`TlsCache`]) on the first STARTTLS, not per connection.
//!
//! SECURITY: the server's certificate and handshake are hostile input, handled by rustls.
//! Plaintext read-ahead is never carried into the TLS session (checked by the caller).

use crate::dane_verify::{DaneError, DaneVerifier};
use crate::error::TlsError;
use herald_routing::trust::load_roots;
use herald_routing::TlsaSet;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, ProtocolVersion, SignatureScheme};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// What a STARTTLS session negotiated, for the delivery log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsInfo {
    /// `TLSv1.2` or `TLSv1.3`.
    pub version: &'static str,
    /// The rustls name of the cipher suite, e.g. `TLS13_AES_256_GCM_SHA384`.
    pub cipher: String,
    /// True when the certificate chain verifies for the MX name against the trust anchors.
    pub verified: bool,
    /// Why it did not verify (or why it could not be checked).
    pub verify_error: Option<String>,
    /// True when the host's DANE TLSA records authenticated the certificate in the handshake
    /// (independent of `verified`: a DANE-EE certificate is often self-signed).
    pub dane: bool,
}

/// The built TLS client state shared by every connection of one [`crate::ClientConfig`].
#[derive(Debug, Clone, Default)]
pub struct TlsCache(Arc<OnceLock<Arc<TlsContext>>>);

pub(crate) struct TlsContext {
    connector: TlsConnector,
    /// For DANE sessions, which need a verifier per host (its TLSA records).
    provider: Arc<rustls::crypto::CryptoProvider>,
    /// None when no trust anchors could be loaded; the reason is in `no_verifier`.
    verifier: Option<Arc<WebPkiServerVerifier>>,
    no_verifier: String,
}

impl std::fmt::Debug for TlsContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsContext")
            .field("verifier", &self.verifier.is_some())
            .finish_non_exhaustive()
    }
}

impl TlsCache {
    /// The context, built on first use. Concurrent first uses may each build one; one wins.
    pub(crate) fn get(&self, ca_file: Option<&Path>) -> Result<Arc<TlsContext>, TlsError> {
        if let Some(ctx) = self.0.get() {
            return Ok(ctx.clone());
        }
        let built = Arc::new(TlsContext::build(ca_file)?);
        Ok(self.0.get_or_init(|| built).clone())
    }
}

impl TlsContext {
    fn build(ca_file: Option<&Path>) -> Result<TlsContext, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let accept_any = Arc::new(AcceptAnyCert {
            algs: provider.signature_verification_algorithms,
        });
        let config = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(TlsError::Config)?
            .dangerous()
            .with_custom_certificate_verifier(accept_any)
            .with_no_client_auth();
        let (verifier, no_verifier) = match load_roots(ca_file) {
            Ok(roots) => {
                match WebPkiServerVerifier::builder_with_provider(roots, provider.clone()).build() {
                    Ok(v) => (Some(v), String::new()),
                    Err(e) => (None, format!("trust anchors unusable: {e}")),
                }
            }
            Err(why) => (None, why),
        };
        Ok(TlsContext {
            connector: TlsConnector::from(Arc::new(config)),
            provider,
            verifier,
            no_verifier,
        })
    }

    /// Runs the handshake over `tcp` (the caller bounds it with a timeout).
    pub(crate) async fn handshake(
        &self,
        tcp: TcpStream,
        mx_name: &str,
        addr: SocketAddr,
    ) -> Result<(TlsStream<TcpStream>, TlsInfo), TlsError> {
        let name = server_name(mx_name, addr);
        let stream = self
            .connector
            .connect(name.clone(), tcp)
            .await
            .map_err(TlsError::Handshake)?;
        let info = self.describe(&stream, &name);
        Ok((stream, info))
    }

    /// Runs the handshake with `mx_name`'s DANE TLSA records as the only authority: a server
    /// they do not authenticate fails the handshake. The rustls configuration is built per
    /// call (it holds the records); that costs microseconds against a handshake's milliseconds.
    pub(crate) async fn handshake_dane(
        &self,
        tcp: TcpStream,
        mx_name: &str,
        addr: SocketAddr,
        tlsa: Arc<TlsaSet>,
    ) -> Result<(TlsStream<TcpStream>, TlsInfo), TlsError> {
        let verifier = DaneVerifier::new(tlsa, self.provider.signature_verification_algorithms);
        let config = rustls::ClientConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(TlsError::Config)?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_no_client_auth();
        // RFC 7672 §8.1: SNI names the TLSA base domain, the MX host (rustls sends it for a
        // DNS name).
        let name = server_name(mx_name, addr);
        let stream = TlsConnector::from(Arc::new(config))
            .connect(name.clone(), tcp)
            .await
            .map_err(|e| match dane_error(&e) {
                Some(d) => TlsError::NotAuthenticated(d),
                None => TlsError::Handshake(e),
            })?;
        let mut info = self.describe(&stream, &name);
        info.dane = true;
        Ok((stream, info))
    }

    fn describe(&self, stream: &TlsStream<TcpStream>, name: &ServerName<'static>) -> TlsInfo {
        let (_, conn) = stream.get_ref();
        let version = match conn.protocol_version() {
            Some(ProtocolVersion::TLSv1_3) => "TLSv1.3",
            Some(ProtocolVersion::TLSv1_2) => "TLSv1.2",
            _ => "unknown",
        };
        let cipher = conn
            .negotiated_cipher_suite()
            .map(|s| format!("{:?}", s.suite()))
            .unwrap_or_default();
        let verdict = match (&self.verifier, conn.peer_certificates()) {
            (None, _) => Err(self.no_verifier.clone()),
            (Some(_), None) | (Some(_), Some([])) => Err("no certificate presented".to_string()),
            (Some(v), Some([leaf, chain @ ..])) => v
                .verify_server_cert(leaf, chain, name, &[], UnixTime::now())
                .map(|_| ())
                .map_err(|e| e.to_string()),
        };
        TlsInfo {
            version,
            cipher,
            verified: verdict.is_ok(),
            verify_error: verdict.err(),
            dane: false,
        }
    }
}

/// The verifier's own error inside a failed handshake (tokio-rustls wraps the rustls error in
/// an `io::Error`), when that is why it failed.
fn dane_error(e: &std::io::Error) -> Option<DaneError> {
    let rustls::Error::InvalidCertificate(rustls::CertificateError::Other(other)) =
        e.get_ref()?.downcast_ref::<rustls::Error>()?
    else {
        return None;
    };
    other.0.downcast_ref::<DaneError>().cloned()
}

/// The name the certificate is checked against: the MX name, or the address when the name is
/// not a valid DNS name (a hostile DNS answer could carry anything).
fn server_name(mx_name: &str, addr: SocketAddr) -> ServerName<'static> {
    let trimmed = mx_name.trim_end_matches('.').to_string();
    ServerName::try_from(trimmed).unwrap_or_else(|_| ServerName::IpAddress(addr.ip().into()))
}

/// Accepts any certificate chain but checks handshake signatures with real crypto, so the peer
/// must hold the private key of the certificate it presents.
#[derive(Debug)]
struct AcceptAnyCert {
    algs: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for AcceptAnyCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs.supported_schemes()
    }
}
