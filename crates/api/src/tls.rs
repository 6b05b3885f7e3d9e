//! HTTPS for the admin/API listener: the admin token, the dashboard cookie and member data do
//! not cross the network in clear when the API is reached from elsewhere.
//!
//! The listener (`serve.rs`) admits each TCP connection into its connection table first, so
//! handshakes in progress count against `http.max_connections` like any connection; each
//! handshake runs in the connection's own task (one slow or silent client cannot hold the
//! accept loop) and has at most [`HANDSHAKE_TIMEOUT`].
//!
//! SECURITY: trusts nothing from the peer before the handshake completes; a failed or slow
//! handshake only closes that connection. The certificate is the operator's (`[tls]` or
//! `http.tls_cert_file`); no client certificates are asked for (the admin token is the
//! credential). The peer address handed on is the TCP peer, never a header.

use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// Longest a client may take to complete its handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The TLS handshake over `io`; `None` when it failed or took too long.
pub(crate) async fn handshake<S>(
    acceptor: &TlsAcceptor,
    io: S,
    peer: SocketAddr,
) -> Option<TlsStream<S>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(io)).await {
        Ok(Ok(stream)) => Some(stream),
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "HTTPS handshake failed");
            None
        }
        Err(_) => {
            tracing::debug!(%peer, "HTTPS handshake timed out");
            None
        }
    }
}
