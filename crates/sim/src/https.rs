//! A scripted HTTPS server for MTA-STS policies (RFC 8461 §3.3): one listener on a 127.x
//! address serving `/.well-known/mta-sts.txt` for any number of `mta-sts.<domain>` hosts,
//! chosen by the request's Host header, each with its own scripted [`PolicyResponse`] — a good
//! policy, another status, hostile bytes, or silence.
//!
//! The certificate is whatever the test hands in (usually [`crate::pki::TestCa::issue`] for the
//! `mta-sts.*` names), so tests can make verification succeed or fail.
//!
//! It also takes uploads: a `POST` with a `Content-Length` body (at most [`MAX_UPLOAD`]) is kept
//! as an [`Upload`] and answered with the host's scripted response — a TLS reporting
//! (RFC 8460) `https:` destination.
//!
//! Limits: request heads up to 8 KiB, read within 10 s; a hanging response holds its connection
//! for at most [`HANG_SECS`]; connections end when the server is shut down or dropped.
//!
//! SECURITY: binds only 127.0.0.0/8. Requests are read as untrusted input (bounded).

use crate::pki::Issued;
use crate::{ensure_loopback, SimError};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

/// How long a [`PolicyResponse::Hang`] holds its connection.
pub const HANG_SECS: u64 = 60;
const MAX_REQUEST_HEAD: usize = 8 * 1024;
/// Largest upload body kept.
pub const MAX_UPLOAD: usize = 1 << 20;

/// One `POST` the server received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upload {
    /// The Host header (lower case, without port).
    pub host: String,
    /// The request target.
    pub path: String,
    /// The Content-Type header, if any.
    pub content_type: Option<String>,
    pub body: Vec<u8>,
}

type Uploads = Arc<std::sync::Mutex<Vec<Upload>>>;

/// What one policy host answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyResponse {
    /// `200`, `text/plain`, with a Content-Length.
    Policy(String),
    /// `200` with the body in chunks of at most `chunk` octets.
    Chunked { body: String, chunk: usize },
    /// `200` without length: the body ends when the connection closes.
    CloseDelimited(String),
    /// This status with an empty body (a `3xx` also gets a Location header).
    Status(u16),
    /// These bytes, verbatim, then close.
    Raw(Vec<u8>),
    /// Read the request, then say nothing (a stalled server).
    Hang,
    /// This response one octet at a time, `interval_ms` apart (a server that is never quite
    /// silent, so only a timeout on the whole fetch stops it).
    Trickle { bytes: Vec<u8>, interval_ms: u64 },
}

type Routes = Arc<RwLock<HashMap<String, PolicyResponse>>>;

/// A running policy server.
pub struct PolicyServer {
    addr: SocketAddr,
    routes: Routes,
    uploads: Uploads,
    requests: Arc<AtomicU64>,
    tasks: JoinSet<()>,
}

impl PolicyServer {
    /// Binds `addr` (127.0.0.0/8; port 0 picks one) and serves with `cert`.
    pub async fn start(addr: SocketAddr, cert: Issued) -> Result<PolicyServer, SimError> {
        ensure_loopback(addr.ip())?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| SimError::Tls(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(cert.chain, cert.key)
            .map_err(|e| SimError::Tls(e.to_string()))?;
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| SimError::Bind {
                what: "MTA-STS policy server",
                addr,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| SimError::Bind {
            what: "MTA-STS policy server",
            addr,
            source,
        })?;
        let routes: Routes = Arc::default();
        let uploads: Uploads = Arc::default();
        let requests = Arc::new(AtomicU64::new(0));
        let mut tasks = JoinSet::new();
        tasks.spawn(accept_loop(
            listener,
            acceptor,
            (routes.clone(), uploads.clone()),
            requests.clone(),
        ));
        Ok(PolicyServer {
            addr,
            routes,
            uploads,
            requests,
            tasks,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sets what `host` (e.g. `mta-sts.example.test`) answers; unknown hosts get 404.
    pub fn set(&self, host: &str, response: PolicyResponse) {
        self.routes
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(host.to_ascii_lowercase(), response);
    }

    /// The uploads (`POST` requests) received so far, oldest first.
    pub fn uploads(&self) -> Vec<Upload> {
        self.uploads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Requests answered so far (every host).
    pub fn requests(&self) -> u64 {
        self.requests.load(Relaxed)
    }

    /// Stops serving and waits until the listener and every connection are closed.
    pub async fn shutdown(mut self) {
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
    }
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    (routes, uploads): (Routes, Uploads),
    requests: Arc<AtomicU64>,
) {
    // Connections live in this set: aborting the accept loop drops it, which ends them all.
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((tcp, _)) = accepted else { continue };
                let (acceptor, routes, requests) = (acceptor.clone(), routes.clone(), requests.clone());
                let uploads = uploads.clone();
                conns.spawn(async move {
                    let _ = tokio::time::timeout(
                        Duration::from_secs(HANG_SECS + 10),
                        serve(tcp, acceptor, (routes, uploads), requests),
                    )
                    .await;
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

async fn serve(
    tcp: TcpStream,
    acceptor: TlsAcceptor,
    (routes, uploads): (Routes, Uploads),
    requests: Arc<AtomicU64>,
) {
    let Ok(Ok(mut tls)) = tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await
    else {
        return;
    };
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    let read_head = async {
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_REQUEST_HEAD {
            match tls.read(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        true
    };
    if !matches!(
        tokio::time::timeout(Duration::from_secs(10), read_head).await,
        Ok(true)
    ) {
        return;
    }
    requests.fetch_add(1, Relaxed);
    let host = host_of(&head);
    if head.starts_with(b"POST ") {
        let Some(upload) = read_upload(&mut tls, &head, &host).await else {
            return;
        };
        uploads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(upload);
    }
    let response = routes
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .get(&host)
        .cloned()
        .unwrap_or(PolicyResponse::Status(404));
    let bytes = match response {
        PolicyResponse::Hang => {
            tokio::time::sleep(Duration::from_secs(HANG_SECS)).await;
            return;
        }
        PolicyResponse::Trickle { bytes, interval_ms } => {
            for b in bytes {
                if tls.write_all(&[b]).await.is_err() || tls.flush().await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(interval_ms)).await;
            }
            return;
        }
        other => render(&other),
    };
    let _ = tls.write_all(&bytes).await;
    let _ = tls.shutdown().await;
}

/// The body of a `POST` (its `Content-Length`, at most [`MAX_UPLOAD`], read within 10 s) with
/// its target and type. `None`: no usable length, too big, or cut short.
async fn read_upload<S: tokio::io::AsyncRead + Unpin>(
    tls: &mut S,
    head: &[u8],
    host: &str,
) -> Option<Upload> {
    let end = head.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let text = String::from_utf8_lossy(&head[..end]).into_owned();
    let header = |name: &str| {
        text.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    };
    let length: usize = header("content-length")?.parse().ok()?;
    if length > MAX_UPLOAD {
        return None;
    }
    let mut body = head[end..].to_vec();
    let mut buf = [0u8; 4096];
    let read = async {
        while body.len() < length {
            match tls.read(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => body.extend_from_slice(&buf[..n]),
            }
        }
        true
    };
    if !matches!(
        tokio::time::timeout(Duration::from_secs(10), read).await,
        Ok(true)
    ) {
        return None;
    }
    body.truncate(length);
    Some(Upload {
        host: host.to_string(),
        path: text.split(' ').nth(1).unwrap_or("").to_string(),
        content_type: header("content-type"),
        body,
    })
}

/// The Host header's name, lower case, without a port; empty when absent.
fn host_of(head: &[u8]) -> String {
    let text = String::from_utf8_lossy(head);
    text.split("\r\n")
        .filter_map(|l| l.split_once(':'))
        .find(|(name, _)| name.eq_ignore_ascii_case("host"))
        .map(|(_, v)| {
            v.trim()
                .rsplit_once(':')
                .map_or(v.trim(), |(h, _)| h)
                .to_ascii_lowercase()
        })
        .unwrap_or_default()
}

fn render(response: &PolicyResponse) -> Vec<u8> {
    match response {
        PolicyResponse::Policy(body) => format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
        PolicyResponse::Chunked { body, chunk } => {
            let mut out = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n".to_vec();
            for piece in body.as_bytes().chunks((*chunk).max(1)) {
                out.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
                out.extend_from_slice(piece);
                out.extend_from_slice(b"\r\n");
            }
            out.extend_from_slice(b"0\r\n\r\n");
            out
        }
        PolicyResponse::CloseDelimited(body) => {
            format!("HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n{body}").into_bytes()
        }
        PolicyResponse::Status(code) if (300..400).contains(code) => format!(
            "HTTP/1.1 {code} Moved\r\nLocation: https://elsewhere.test/.well-known/mta-sts.txt\r\nContent-Length: 0\r\n\r\n"
        )
        .into_bytes(),
        PolicyResponse::Status(code) => {
            format!("HTTP/1.1 {code} Status\r\nContent-Length: 0\r\n\r\n").into_bytes()
        }
        PolicyResponse::Raw(bytes) => bytes.clone(),
        PolicyResponse::Hang | PolicyResponse::Trickle { .. } => Vec::new(), // served in `serve`
    }
}
