//! Fetching a policy: `GET https://mta-sts.<domain>/.well-known/mta-sts.txt` (RFC 8461 §3.3).
//!
//! The host's addresses come from Herald's resolver; each is tried in turn until one accepts
//! the TCP connection. The TLS handshake verifies the certificate for `mta-sts.<domain>` against
//! the configured trust anchors (rustls, ring). One HTTP/1.1 request with `Connection: close`;
//! the response is read by [`super::http`] (200 only, no redirects, body ≤ 64 KiB) and the body
//! parsed by [`super::policy`].
//!
//! Limits: the whole fetch — address lookup, connects, handshake, request, response — is bounded
//! by one timeout; the raw response by [`MAX_RESPONSE_BYTES`]; at most [`MAX_ADDRS`] addresses
//! are tried.
//!
//! SECURITY: the server is hostile until its certificate verifies, and its response stays
//! untrusted input after that (a compromised or misconfigured web server is still one).

use super::http::{self, HttpError, Parsed};
use super::policy::{self, Policy, PolicyError};
use crate::resolve::{fqdn, lookup_addrs};
use hickory_resolver::TokioResolver;
use rustls::pki_types::ServerName;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// Largest raw response read: the header block plus a chunked body of many tiny chunks.
pub const MAX_RESPONSE_BYTES: usize = http::MAX_HEADER_BYTES + 8 * http::MAX_BODY_BYTES;
/// Most addresses of the policy host tried.
pub const MAX_ADDRS: usize = 4;

/// Why no policy could be fetched.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("no trust anchors for the policy host's certificate: {0}")]
    NoTrustAnchors(String),
    #[error("{host} is not a valid host name")]
    BadName { host: String },
    #[error("cannot resolve {host}: {detail}")]
    Dns { host: String, detail: String },
    #[error("{host} has no address")]
    NoAddress { host: String },
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("TLS with {host} failed: {source}")]
    Tls {
        host: String,
        source: std::io::Error,
    },
    #[error("reading from {host}: {source}")]
    Io {
        host: String,
        source: std::io::Error,
    },
    #[error("fetch from {host} timed out after {secs:.1} s")]
    Timeout { host: String, secs: f64 },
    #[error("response from {host}: {source}")]
    Http { host: String, source: HttpError },
    #[error("response from {host} is longer than {MAX_RESPONSE_BYTES} octets")]
    ResponseTooLarge { host: String },
    #[error("policy from {host} is not UTF-8 text")]
    NotText { host: String },
    #[error("policy from {host} is invalid: {source}")]
    Policy { host: String, source: PolicyError },
}

/// Fetches policies over HTTPS. Built once; the rustls configuration is shared.
pub(crate) struct Fetcher {
    /// Err: why no trust anchors could be loaded (every fetch then fails with it).
    tls: Result<TlsConnector, String>,
    port: u16,
    timeout: Duration,
}

impl Fetcher {
    pub fn new(ca_file: Option<&Path>, port: u16, timeout: Duration) -> Fetcher {
        let tls = crate::trust::verifying_config(ca_file).map(TlsConnector::from);
        Fetcher { tls, port, timeout }
    }

    /// The policy of `domain` (lower case, valid), fetched within the timeout.
    pub async fn fetch(
        &self,
        resolver: &TokioResolver,
        domain: &str,
    ) -> Result<Policy, FetchError> {
        let host = format!("mta-sts.{domain}");
        match tokio::time::timeout(self.timeout, self.fetch_inner(resolver, &host)).await {
            Ok(result) => result,
            Err(_elapsed) => Err(FetchError::Timeout {
                host,
                secs: self.timeout.as_secs_f64(),
            }),
        }
    }

    async fn fetch_inner(
        &self,
        resolver: &TokioResolver,
        host: &str,
    ) -> Result<Policy, FetchError> {
        let connector = self
            .tls
            .as_ref()
            .map_err(|why| FetchError::NoTrustAnchors(why.clone()))?;
        let bad_name = || FetchError::BadName { host: host.into() };
        let name = fqdn(host).ok_or_else(bad_name)?;
        let server_name = ServerName::try_from(host.to_string()).map_err(|_| bad_name())?;
        let addrs = lookup_addrs(resolver, name)
            .await
            .map_err(|f| FetchError::Dns {
                host: host.into(),
                detail: f.describe(),
            })?;
        let tcp = self.connect_any(host, &addrs).await?;
        let mut tls = connector
            .connect(server_name, tcp)
            .await
            .map_err(|source| FetchError::Tls {
                host: host.into(),
                source,
            })?;
        let authority = match self.port {
            443 => host.to_string(),
            port => format!("{host}:{port}"),
        };
        let request = format!(
            "GET /.well-known/mta-sts.txt HTTP/1.1\r\nHost: {authority}\r\nUser-Agent: herald\r\nAccept: text/plain\r\nConnection: close\r\n\r\n"
        );
        let io = |source| FetchError::Io {
            host: host.into(),
            source,
        };
        tls.write_all(request.as_bytes()).await.map_err(io)?;
        tls.flush().await.map_err(io)?;
        let body = read_body(&mut tls, host).await?;
        let text =
            String::from_utf8(body).map_err(|_| FetchError::NotText { host: host.into() })?;
        policy::parse(&text).map_err(|source| FetchError::Policy {
            host: host.into(),
            source,
        })
    }

    /// Connects to the first address that accepts, in the resolver's order.
    async fn connect_any(
        &self,
        host: &str,
        addrs: &[std::net::IpAddr],
    ) -> Result<TcpStream, FetchError> {
        let mut last = FetchError::NoAddress { host: host.into() };
        for &ip in addrs.iter().take(MAX_ADDRS) {
            let addr = SocketAddr::new(ip, self.port);
            match TcpStream::connect(addr).await {
                Ok(tcp) => return Ok(tcp),
                Err(source) => last = FetchError::Connect { addr, source },
            }
        }
        Err(last)
    }
}

/// Reads until the response is complete (or refused), within [`MAX_RESPONSE_BYTES`].
async fn read_body<S: tokio::io::AsyncRead + Unpin>(
    stream: &mut S,
    host: &str,
) -> Result<Vec<u8>, FetchError> {
    let http_err = |source| FetchError::Http {
        host: host.into(),
        source,
    };
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 8192];
    loop {
        let (n, clean_eof) = match stream.read(&mut chunk).await {
            Ok(0) => (0, true),
            Ok(n) => (n, false),
            // No TLS close_notify: the stream may have been cut short, so a close-delimited
            // body is not trusted to be complete (Content-Length and chunked ones can tell).
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return match http::parse_response(&buf, false).map_err(http_err)? {
                    Parsed::Body(body) => Ok(body),
                    Parsed::Incomplete => Err(http_err(HttpError::Truncated)),
                };
            }
            Err(source) => {
                return Err(FetchError::Io {
                    host: host.into(),
                    source,
                })
            }
        };
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > MAX_RESPONSE_BYTES {
            return Err(FetchError::ResponseTooLarge { host: host.into() });
        }
        match http::parse_response(&buf, clean_eof).map_err(http_err)? {
            Parsed::Body(body) => return Ok(body),
            Parsed::Incomplete if clean_eof => return Err(http_err(HttpError::Truncated)),
            Parsed::Incomplete => {}
        }
    }
}
