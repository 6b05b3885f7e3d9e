//! HTTPS for the admin/API listener (issue 15): the admin token, the dashboard cookie and member
//! data no longer cross the network in clear when the API is reached from elsewhere.
//!
//! [`TlsListener`] is an `axum::serve::Listener`: a task accepts TCP connections and runs each
//! TLS handshake in its own task (so one slow or silent client cannot hold the accept loop),
//! under a bounded number of concurrent handshakes and a handshake time limit; finished
//! streams reach axum through a bounded channel. axum then serves them exactly as plain TCP.
//!
//! Limits: at most [`MAX_HANDSHAKES`] handshakes at once (further connections wait in the
//! kernel's backlog), each at most [`HANDSHAKE_TIMEOUT`].
//!
//! SECURITY: trusts nothing from the peer before the handshake completes; a failed or slow
//! handshake only closes that connection. The certificate is the operator's (`[tls]` or
//! `http.tls_cert_file`); no client certificates are asked for (the admin token is the
//! credential). The peer address handed on is the TCP peer, never a header.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinHandle;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// Most TLS handshakes in progress at once.
pub const MAX_HANDSHAKES: usize = 256;
/// Longest a client may take to complete its handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Finished handshakes waiting for axum to take them.
const READY_QUEUE: usize = 64;

/// A TCP listener that hands on TLS streams.
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
    accept_task: JoinHandle<()>,
}

impl TlsListener {
    /// Starts accepting on `listener` with the server configuration `tls`.
    pub fn new(
        listener: TcpListener,
        tls: Arc<rustls::ServerConfig>,
    ) -> std::io::Result<TlsListener> {
        let local = listener.local_addr()?;
        let (tx, ready) = mpsc::channel(READY_QUEUE);
        let accept_task = tokio::spawn(accept_loop(listener, TlsAcceptor::from(tls), tx));
        Ok(TlsListener {
            ready,
            local,
            accept_task,
        })
    }
}

impl Drop for TlsListener {
    /// The accept loop owns the socket: stopping the server closes the port.
    fn drop(&mut self) {
        self.accept_task.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    ready: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
) {
    let permits = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    loop {
        // The permit is taken before accepting: at the cap, new clients wait in the backlog.
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let (tcp, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Out of file descriptors and the like: pause rather than spin.
                tracing::warn!(error = %e, "HTTPS accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        if ready.is_closed() {
            return;
        }
        let (acceptor, ready) = (acceptor.clone(), ready.clone());
        tokio::spawn(async move {
            let _permit = permit;
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(stream)) => {
                    let _ = ready.send((stream, peer)).await;
                }
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "HTTPS handshake failed"),
                Err(_) => tracing::debug!(%peer, "HTTPS handshake timed out"),
            }
        });
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(conn) => conn,
            // The accept loop ended (it only does when the channel closes): no more clients.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.local)
    }
}
