//! Inbound TLS: the server certificate (loaded at start-up, replaced on SIGHUP after a renewal
//! without dropping a connection: [`ServedCert`]), and the byte stream a session runs over
//! (plaintext TCP, or TLS after STARTTLS or on an implicit-TLS listener).
//!
//! Two ways in: STARTTLS on the SMTP listener (RFC 3207; offered in EHLO only when a certificate
//! is configured, never in LMTP) and implicit TLS (RFC 8314 submissions: the handshake comes
//! first, then the same SMTP session).
//!
//! Invariants: the certificate chain and key are read and checked against each other by
//! [`load_server_config`] (and again by [`ServedCert::reload`], which keeps the old pair when
//! the new one is unusable); a listener never starts with an unusable certificate. Every
//! handshake is bounded by the session's command timeout.
//!
//! SECURITY: TLS 1.2 and 1.3 only (rustls safe defaults, ring provider), no client
//! certificates. The key file is read once and kept in memory; keep it readable by Herald only.
//! Plaintext pipelined after STARTTLS is discarded (CVE-2011-0411, see `herald_smtp::session`),
//! and the session forgets everything learned before the handshake.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, PoisonError, RwLock};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

/// The server's `[tls]` table. Both files set: SMTP offers STARTTLS (RFC 3207) and
/// `listen.submissions` may be used. Neither set: no TLS (STARTTLS answers 502).
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsSection {
    /// PEM certificate chain, leaf first.
    pub cert_file: Option<PathBuf>,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1). Keep it 0600.
    pub key_file: Option<PathBuf>,
}

/// TLS for one listener.
#[derive(Clone)]
pub struct InboundTls {
    /// The server configuration from [`load_server_config`].
    pub config: Arc<rustls::ServerConfig>,
    /// True: TLS from the first byte (RFC 8314); false: STARTTLS is offered in EHLO.
    pub implicit: bool,
}

impl std::fmt::Debug for InboundTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InboundTls")
            .field("implicit", &self.implicit)
            .finish_non_exhaustive()
    }
}

/// Why the certificate or key could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    #[error("cannot read {path}: {message}")]
    Read { path: PathBuf, message: String },
    #[error("{path} holds no PEM certificate")]
    NoCertificate { path: PathBuf },
    #[error("certificate and key do not make a usable TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// A listener's TLS configuration and the certificate it presents, which [`ServedCert::reload`]
/// replaces from the same files while the listener runs: handshakes from then on present the
/// new certificate, connections already open keep theirs (nothing is dropped).
#[derive(Clone, Debug)]
pub struct ServedCert {
    pub config: Arc<rustls::ServerConfig>,
    current: Arc<CurrentCert>,
    cert_file: PathBuf,
    key_file: PathBuf,
}

impl ServedCert {
    /// Reads the files again; on success the new pair is presented from the next handshake
    /// on. On error the old one stays (a half-written renewal must not take TLS down).
    pub fn reload(&self) -> Result<(), TlsSetupError> {
        let key = certified_key(&self.cert_file, &self.key_file)?;
        *self
            .current
            .key
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(key);
        Ok(())
    }

    /// The certificate file, for the log.
    pub fn cert_file(&self) -> &Path {
        &self.cert_file
    }
}

/// The certified key handed to each handshake (rustls asks per ClientHello).
#[derive(Debug)]
struct CurrentCert {
    key: RwLock<Arc<CertifiedKey>>,
}

impl ResolvesServerCert for CurrentCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.key
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        )
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Reads a PEM certificate chain (leaf first) and a PEM private key (PKCS#8, PKCS#1 or SEC1)
/// and checks that they belong together.
fn certified_key(cert_file: &Path, key_file: &Path) -> Result<CertifiedKey, TlsSetupError> {
    let read_err = |path: &Path, e: &dyn std::fmt::Display| TlsSetupError::Read {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let certs = CertificateDer::pem_file_iter(cert_file)
        .map_err(|e| read_err(cert_file, &e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| read_err(cert_file, &e))?;
    if certs.is_empty() {
        return Err(TlsSetupError::NoCertificate {
            path: cert_file.to_path_buf(),
        });
    }
    let key = PrivateKeyDer::from_pem_file(key_file).map_err(|e| read_err(key_file, &e))?;
    let signing = provider().key_provider.load_private_key(key)?;
    let certified = CertifiedKey::new(certs, signing);
    certified.keys_match()?;
    Ok(certified)
}

/// Reads the certificate and key and builds the server configuration (ring provider, TLS 1.2
/// and 1.3) presenting them, reloadable (see [`ServedCert`]).
pub fn load_server_config(cert_file: &Path, key_file: &Path) -> Result<ServedCert, TlsSetupError> {
    let current = Arc::new(CurrentCert {
        key: RwLock::new(Arc::new(certified_key(cert_file, key_file)?)),
    });
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(current.clone());
    Ok(ServedCert {
        config: Arc::new(config),
        current,
        cert_file: cert_file.to_path_buf(),
        key_file: key_file.to_path_buf(),
    })
}

/// The byte stream under a session.
pub(crate) enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
    /// A handshake consumed the plaintext stream and failed: every operation fails.
    Gone,
}

impl Stream {
    /// `TLSv1.3` and the cipher suite, for the log and the `Received:` header.
    pub(crate) fn tls_description(&self) -> Option<(String, String)> {
        let Stream::Tls(tls) = self else {
            return None;
        };
        let (_, conn) = tls.get_ref();
        let version = conn
            .protocol_version()
            .and_then(|v| v.as_str())
            .unwrap_or("TLS")
            .replace("TLSv1_", "TLSv1.");
        let cipher = conn
            .negotiated_cipher_suite()
            .and_then(|c| c.suite().as_str())
            .unwrap_or("unknown")
            .to_string();
        Some((version, cipher))
    }
}

fn gone() -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, "TLS handshake failed")
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            Stream::Gone => Poll::Ready(Err(gone())),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            Stream::Gone => Poll::Ready(Err(gone())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            Stream::Gone => Poll::Ready(Err(gone())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            Stream::Gone => Poll::Ready(Err(gone())),
        }
    }
}
