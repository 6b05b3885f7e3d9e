//! The HTTP listener: an accept loop of its own (not `axum::serve`, which has no bound on
//! connections and no header timeout) that admits each connection into the [`Table`] and
//! serves it with hyper's HTTP/1.1 server, plain or behind TLS. See `conn_table.rs` for the
//! bounds; refused connections get a bare `503` (plain HTTP; over TLS they are closed) and are
//! counted in `herald_http_refusals_total`.
//!
//! Shutdown: the loop stops accepting, every connection is asked to finish (a request under way
//! completes, an idle connection closes at once), and the loop waits for them at most
//! [`DRAIN`].
//!
//! SECURITY: every byte here comes from untrusted clients. What a client may hold is bounded
//! (connections, time to send a head, idle time); the peer address handed to handlers is the
//! TCP peer's, never a header; a failed TLS handshake or a broken request closes only that
//! connection.

use crate::conn_table::{Conn, Limits, Table};
use axum::body::Body;
use axum::extract::ConnectInfo;
use bytes::Bytes;
use herald_telemetry::descriptors::{DescriptorMetrics, HttpRefusal};
use herald_types::LocalResource;
use http_body::{Body as HttpBody, Frame, SizeHint};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tower_service::Service;

/// Longest the stop waits for requests under way.
pub const DRAIN: Duration = Duration::from_secs(5);
/// How often timed-out connections are looked for.
const SWEEP_EVERY: Duration = Duration::from_millis(250);
/// What a refused client reads (plain HTTP only): sent without reading its request.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 5\r\nContent-Length: 0\r\n\r\n";

/// Serves `app` on `listener` (through `tls` when set) until `shutdown` is cancelled.
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    tls: Option<TlsAcceptor>,
    limits: Limits,
    metrics: Option<DescriptorMetrics>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let table = Arc::new(Table::new(limits, metrics.clone()));
    let sweeper = tokio::spawn(sweep(table.clone(), shutdown.clone()));
    // Each connection's task holds a receiver: the stop waits for them all to be dropped.
    let (open_tx, open_rx) = tokio::sync::watch::channel(());
    let mut accept_warned: Option<tokio::time::Instant> = None;
    loop {
        let accepted = tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (tcp, peer) = match accepted {
            Ok(c) => c,
            Err(e) => {
                accept_failed(&e, metrics.as_ref(), &mut accept_warned).await;
                continue;
            }
        };
        let conn = match table.admit(peer.ip()) {
            Ok(conn) => conn,
            Err(why) => {
                refuse(tcp, tls.is_some(), why, metrics.as_ref());
                continue;
            }
        };
        let job = Job {
            app: app.clone(),
            table: table.clone(),
            conn,
            peer,
            shutdown: shutdown.clone(),
        };
        let (tls, open) = (tls.clone(), open_rx.clone());
        tokio::spawn(async move {
            let _open = open;
            job.run(tcp, tls).await;
        });
    }
    drop(listener);
    drop(open_rx);
    let _ = tokio::time::timeout(DRAIN, open_tx.closed()).await;
    sweeper.abort();
    Ok(())
}

/// `accept` failed: out of descriptors (or memory) is counted and warned about once a minute;
/// the loop pauses briefly rather than spin on an error that needs a connection to close.
async fn accept_failed(
    e: &std::io::Error,
    metrics: Option<&DescriptorMetrics>,
    warned: &mut Option<tokio::time::Instant>,
) {
    if let Some(resource) = LocalResource::of(e) {
        if let Some(m) = metrics {
            m.count_http_refusal(HttpRefusal::AcceptFailed);
        }
        let now = tokio::time::Instant::now();
        if warned.is_none_or(|t| now.duration_since(t) >= Duration::from_secs(60)) {
            *warned = Some(now);
            tracing::warn!(resource = resource.word(), error = %e, "HTTP accept failed: this server is short of a local resource");
        }
    } else {
        tracing::debug!(error = %e, "HTTP accept failed");
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
}

/// A connection over a cap with nothing idle to close: a bare 503 (when it fits in the socket
/// buffer at once; never waited for) and close.
fn refuse(tcp: TcpStream, tls: bool, why: HttpRefusal, metrics: Option<&DescriptorMetrics>) {
    if let Some(m) = metrics {
        m.count_http_refusal(why);
    }
    if !tls {
        let _ = tcp.try_write(BUSY);
    }
    tracing::debug!(reason = why.word(), "HTTP connection refused");
}

async fn sweep(table: Arc<Table>, shutdown: CancellationToken) {
    let mut every = tokio::time::interval(SWEEP_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = every.tick() => table.sweep(),
        }
    }
}

/// One admitted connection.
struct Job {
    app: axum::Router,
    table: Arc<Table>,
    conn: Arc<Conn>,
    peer: SocketAddr,
    shutdown: CancellationToken,
}

impl Job {
    async fn run(self, tcp: TcpStream, tls: Option<TlsAcceptor>) {
        let _ = tcp.set_nodelay(true);
        let io = Tracked {
            inner: tcp,
            conn: self.conn.clone(),
        };
        match tls {
            None => self.serve(io).await,
            Some(acceptor) => {
                let handshake = tokio::select! {
                    () = self.conn.close.cancelled() => None,
                    done = crate::tls::handshake(&acceptor, io, self.peer) => done,
                };
                match handshake {
                    Some(stream) => self.serve(stream).await,
                    None => self.table.release(&self.conn),
                }
            }
        }
    }

    /// Serves HTTP/1.1 on `io` until the client leaves, the table closes the connection or the
    /// server stops (a request under way finishes first).
    async fn serve<S>(self, io: S)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (app, conn, peer) = (self.app, self.conn.clone(), self.peer);
        let service =
            hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(ConnectInfo(peer));
                let guard = conn.begin_request();
                let mut app = app.clone();
                let req = req.map(|body| Body::new(Arriving::new(body, conn.clone())));
                async move {
                    let response = app.call(req).await;
                    response.map(|r| {
                        r.map(|body| {
                            Body::new(Guarded {
                                body,
                                guard: Some(guard),
                            })
                        })
                    })
                }
            });
        let http = hyper::server::conn::http1::Builder::new()
            .serve_connection(hyper_util::rt::TokioIo::new(io), service);
        tokio::pin!(http);
        let mut stopping = false;
        loop {
            tokio::select! {
                done = http.as_mut() => {
                    if let Err(e) = done {
                        tracing::debug!(%peer, error = %e, "HTTP connection ended with an error");
                    }
                    break;
                }
                () = self.conn.close.cancelled() => break,
                () = self.shutdown.cancelled(), if !stopping => {
                    stopping = true;
                    http.as_mut().graceful_shutdown();
                }
            }
        }
        self.table.release(&self.conn);
    }
}

/// The response body, holding the connection busy until its last frame is taken.
struct Guarded {
    body: Body,
    guard: Option<crate::conn_table::RequestGuard>,
}

impl HttpBody for Guarded {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if matches!(polled, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            self.guard = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A request body, telling the table while it is still arriving (its end, an error, or the
/// handler dropping it ends that).
struct Arriving {
    body: hyper::body::Incoming,
    conn: Option<Arc<Conn>>,
}

impl Arriving {
    fn new(body: hyper::body::Incoming, conn: Arc<Conn>) -> Arriving {
        conn.body_started();
        Arriving {
            body,
            conn: Some(conn),
        }
    }

    fn done(&mut self) {
        if let Some(conn) = self.conn.take() {
            conn.body_done();
        }
    }
}

impl Drop for Arriving {
    fn drop(&mut self) {
        self.done();
    }
}

impl HttpBody for Arriving {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if matches!(polled, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            self.done();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The TCP stream, telling the table when bytes move (the idle and header clocks).
pub(crate) struct Tracked {
    inner: TcpStream,
    conn: Arc<Conn>,
}

impl AsyncRead for Tracked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.conn.moved(true);
        }
        polled
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.conn.moved(false);
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
