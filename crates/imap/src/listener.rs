//! The IMAP listeners' accept loop: a slot per session (`max_connections` over both
//! listeners), `max_connections_per_client` per address, implicit TLS on the `tls_listen`
//! socket and STARTTLS on the plain one; each session in its own task.
//!
//! Shutdown: at `stop` the loops stop accepting, every session says `* BYE` and closes, and
//! [`serve`] returns once the last one has.
//!
//! SECURITY: anyone may connect. A newcomer over a limit gets `* BYE` and is closed before any
//! command is read; a TLS handshake has [`HANDSHAKE_TIMEOUT`].

use crate::session::{End, Io, Session, Shared};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Longest TLS handshake (implicit TLS and after STARTTLS).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(15);

/// The session slots both listeners share.
pub struct Slots {
    total: Arc<Semaphore>,
    /// Sessions per client address. A std mutex: held for a map update, never across an await.
    per_client: Mutex<HashMap<IpAddr, usize>>,
    max_per_client: usize,
}

impl Slots {
    pub fn new(max: usize, max_per_client: usize) -> Arc<Slots> {
        Arc::new(Slots {
            total: Arc::new(Semaphore::new(max)),
            per_client: Mutex::new(HashMap::new()),
            max_per_client,
        })
    }

    fn take(self: &Arc<Self>, ip: IpAddr) -> Option<Slot> {
        let permit = self.total.clone().try_acquire_owned().ok()?;
        let mut map = self
            .per_client
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let n = map.entry(ip).or_insert(0);
        if *n >= self.max_per_client {
            return None;
        }
        *n += 1;
        Some(Slot {
            slots: self.clone(),
            ip,
            _permit: permit,
        })
    }
}

/// A taken slot, given back on drop.
struct Slot {
    slots: Arc<Slots>,
    ip: IpAddr,
    _permit: OwnedSemaphorePermit,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut map = self
            .slots
            .per_client
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = map.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.ip);
            }
        }
    }
}

/// Accepts on `listener` until `stop`, then waits for its sessions. `implicit_tls`: the
/// connection starts with a TLS handshake (`shared.tls` must be set).
pub async fn serve(
    listener: TcpListener,
    implicit_tls: bool,
    shared: Arc<Shared>,
    slots: Arc<Slots>,
    stop: CancellationToken,
) {
    let tracker = TaskTracker::new();
    loop {
        let (tcp, peer) = tokio::select! {
            _ = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors and the like: wait a little instead of spinning.
                    tracing::warn!(error = %e, "IMAP accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let Some(slot) = slots.take(peer.ip()) else {
            tracker.spawn(refuse(tcp));
            continue;
        };
        tracker.spawn(connection(
            tcp,
            peer,
            implicit_tls,
            shared.clone(),
            stop.clone(),
            slot,
        ));
    }
    tracker.close();
    tracker.wait().await;
}

async fn refuse(mut tcp: TcpStream) {
    let bye = b"* BYE too many connections, try again later\r\n";
    let _ = tokio::time::timeout(Duration::from_secs(5), tcp.write_all(bye)).await;
}

/// Counts the session on `herald_imap_sessions` while it lives.
struct Counted(Option<herald_telemetry::imap::ImapMetrics>);

impl Drop for Counted {
    fn drop(&mut self) {
        if let Some(m) = &self.0 {
            m.session_closed();
        }
    }
}

async fn connection(
    tcp: TcpStream,
    peer: SocketAddr,
    implicit_tls: bool,
    shared: Arc<Shared>,
    stop: CancellationToken,
    _slot: Slot,
) {
    let _ = tcp.set_nodelay(true);
    if let Some(m) = &shared.metrics {
        m.session_opened();
    }
    let _counted = Counted(shared.metrics.clone());
    let mut io: Box<dyn Io> = Box::new(tcp);
    if implicit_tls {
        match start_tls(&shared, io).await {
            Some(tls) => io = tls,
            None => return,
        }
    }
    let mut session = Session::new(shared.clone(), peer, implicit_tls, stop);
    loop {
        match session.run(&mut *io).await {
            End::Close => break,
            End::StartTls => match start_tls(&shared, io).await {
                Some(tls) => {
                    io = tls;
                    session.tls_started();
                }
                None => return,
            },
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), io.shutdown()).await;
}

/// The TLS handshake over `io`, bounded by [`HANDSHAKE_TIMEOUT`].
async fn start_tls(shared: &Shared, io: Box<dyn Io>) -> Option<Box<dyn Io>> {
    let cfg = shared.tls.clone()?;
    let acceptor = tokio_rustls::TlsAcceptor::from(cfg);
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(io)).await {
        Ok(Ok(tls)) => Some(Box::new(tls)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client over its share is refused while others still get in; slots come back on drop.
    #[test]
    fn slots_bound_sessions_per_client_and_in_total() {
        let slots = Slots::new(3, 2);
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "127.0.0.2".parse().unwrap();
        let a1 = slots.take(a).expect("first");
        let _a2 = slots.take(a).expect("second");
        assert!(slots.take(a).is_none(), "per-client limit");
        let b1 = slots.take(b).expect("another client");
        assert!(slots.take(b).is_none(), "total limit");
        drop(a1);
        assert!(slots.take(a).is_some(), "a slot came back");
        drop(b1);
        assert!(!slots
            .per_client
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(&b));
    }
}
