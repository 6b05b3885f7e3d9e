//! The I/O half of the DNS server: sockets, the UDP loop, TCP framing, truncation, shutdown.
//! The answers themselves come from [`super::zone::answer`], a pure function.
//!
//! SECURITY: input is untrusted network bytes: decoding errors produce FORMERR (when an id can
//! be read) or nothing; TCP messages are length-prefixed and at most 65,535 octets by framing.

use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tracing::debug;

use super::zone::{answer, Zone};
use crate::{ensure_loopback, SimError};

/// Most concurrent TCP connections; more are closed at once (resolvers fall back to retrying).
pub const MAX_TCP_CONNECTIONS: usize = 64;
/// A TCP connection with no query for this long is closed.
pub const TCP_IDLE_SECS: u64 = 10;
/// UDP payload limit without EDNS (RFC 1035).
const UDP_PLAIN_LIMIT: usize = 512;
/// Upper bound on the EDNS payload size we honour; larger answers go over TCP.
const UDP_EDNS_LIMIT: usize = 4096;
/// Attempts at finding a port free for both UDP and TCP when asked for port 0.
const PORT_ATTEMPTS: usize = 16;

/// The zone shared between the serving tasks and [`DnsServer::update_zone`]. A std lock:
/// nothing awaits while holding it, and answering is a short in-memory lookup.
type SharedZone = Arc<RwLock<Zone>>;

/// A running DNS server. Dropping it stops serving (tasks are aborted); [`DnsServer::shutdown`]
/// also waits until the sockets are closed.
#[derive(Debug)]
pub struct DnsServer {
    local_addr: SocketAddr,
    zone: SharedZone,
    tasks: JoinSet<()>,
}

impl DnsServer {
    /// Binds UDP and TCP on `addr` (a 127.0.0.0/8 address; port 0 picks a port free for both)
    /// and starts answering from `zone`.
    pub async fn start(addr: SocketAddr, zone: Zone) -> Result<DnsServer, SimError> {
        ensure_loopback(addr.ip())?;
        zone.check()?;
        let (udp, tcp) = bind_pair(addr).await?;
        let local_addr = udp.local_addr().map_err(|source| SimError::Bind {
            what: "DNS (UDP)",
            addr,
            source,
        })?;
        let zone: SharedZone = Arc::new(RwLock::new(zone));
        let mut tasks = JoinSet::new();
        tasks.spawn(serve_udp(udp, zone.clone()));
        tasks.spawn(serve_tcp(tcp, zone.clone()));
        debug!(%local_addr, "simulated DNS server started");
        Ok(DnsServer {
            local_addr,
            zone,
            tasks,
        })
    }

    /// The address both UDP and TCP listen on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Changes the zone while serving (e.g. to make a domain SERVFAIL mid-test). The change is
    /// applied to a copy and checked first; on error the zone is left as it was.
    pub fn update_zone(&self, f: impl FnOnce(&mut Zone)) -> Result<(), SimError> {
        let mut next = self.zone().clone();
        f(&mut next);
        next.check()?;
        *self.zone.write().unwrap_or_else(|p| p.into_inner()) = next;
        Ok(())
    }

    /// A copy of the zone being served.
    pub fn zone(&self) -> Zone {
        self.zone.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Stops serving and waits until the sockets are closed.
    pub async fn shutdown(mut self) {
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
    }
}

/// Binds UDP and TCP on the same port. For port 0 the UDP port is chosen by the kernel and TCP
/// tried on it; a clash (someone holds that TCP port) retries with a new UDP port.
async fn bind_pair(addr: SocketAddr) -> Result<(UdpSocket, TcpListener), SimError> {
    let bind_err = |what, source| SimError::Bind { what, addr, source };
    let mut last_err = None;
    for _ in 0..PORT_ATTEMPTS {
        let udp = UdpSocket::bind(addr)
            .await
            .map_err(|e| bind_err("DNS (UDP)", e))?;
        let port_addr = udp.local_addr().map_err(|e| bind_err("DNS (UDP)", e))?;
        match TcpListener::bind(port_addr).await {
            Ok(tcp) => return Ok((udp, tcp)),
            Err(e) if addr.port() == 0 => last_err = Some(e),
            Err(e) => return Err(bind_err("DNS (TCP)", e)),
        }
    }
    let e = last_err.unwrap_or_else(|| std::io::Error::other("no free port"));
    Err(bind_err("DNS (TCP)", e))
}

/// Decodes a query and encodes the answer. `limit` is the transport's size limit (None for
/// TCP); an answer over it is replaced by its truncated form (TC set, question only).
fn respond(zone: &SharedZone, query: &[u8], udp: bool) -> Option<Vec<u8>> {
    let request = match Message::from_vec(query) {
        Ok(m) => m,
        Err(e) => {
            debug!(error = %e, "undecodable DNS query");
            return format_error(query);
        }
    };
    if request.message_type() != MessageType::Query {
        return None; // never answer a response: that is how reflection loops start
    }
    let resp = {
        let zone = zone.read().unwrap_or_else(|p| p.into_inner());
        answer(&zone, &request)
    };
    let bytes = resp.to_vec().ok()?;
    let limit = match request.extensions() {
        Some(edns) => (edns.max_payload() as usize).clamp(UDP_PLAIN_LIMIT, UDP_EDNS_LIMIT),
        None => UDP_PLAIN_LIMIT,
    };
    if udp && bytes.len() > limit {
        return resp.truncate().to_vec().ok();
    }
    Some(bytes)
}

/// FORMERR for a query that could not be decoded, when at least its id is readable.
fn format_error(query: &[u8]) -> Option<Vec<u8>> {
    let id = u16::from_be_bytes([*query.first()?, *query.get(1)?]);
    if query.len() < 12 {
        return None;
    }
    Message::error_msg(id, OpCode::Query, ResponseCode::FormErr)
        .to_vec()
        .ok()
}

async fn serve_udp(sock: UdpSocket, zone: SharedZone) {
    let mut buf = vec![0u8; 65_535];
    loop {
        let (n, peer) = match sock.recv_from(&mut buf).await {
            Ok(x) => x,
            Err(e) => {
                // ICMP errors from earlier sends surface here on Linux; they concern one peer.
                debug!(error = %e, "DNS UDP receive error");
                continue;
            }
        };
        if let Some(resp) = respond(&zone, &buf[..n], true) {
            if let Err(e) = sock.send_to(&resp, peer).await {
                debug!(error = %e, %peer, "DNS UDP send error");
            }
        }
    }
}

async fn serve_tcp(listener: TcpListener, zone: SharedZone) {
    let permits = Arc::new(Semaphore::new(MAX_TCP_CONNECTIONS));
    let mut conns = JoinSet::new();
    loop {
        while conns.try_join_next().is_some() {}
        let (stream, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                debug!(error = %e, "DNS TCP accept error");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            debug!(%peer, "too many DNS TCP connections; closing");
            continue;
        };
        let zone = zone.clone();
        conns.spawn(async move {
            if let Err(e) = serve_tcp_conn(stream, &zone).await {
                debug!(error = %e, %peer, "DNS TCP connection ended");
            }
            drop(permit);
        });
    }
}

/// Length-prefixed queries (RFC 1035 §4.2.2), answered in order until EOF or idle timeout.
async fn serve_tcp_conn(mut stream: TcpStream, zone: &SharedZone) -> std::io::Result<()> {
    let idle = Duration::from_secs(TCP_IDLE_SECS);
    let mut buf = vec![0u8; 65_535];
    loop {
        let mut len = [0u8; 2];
        match tokio::time::timeout(idle, stream.read_exact(&mut len)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Ok(Err(e)) => return Err(e),
            Err(_) => return Ok(()),
        }
        let n = u16::from_be_bytes(len) as usize;
        let body = &mut buf[..n];
        tokio::time::timeout(idle, stream.read_exact(body))
            .await
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
        let Some(resp) = respond(zone, body, false) else {
            continue;
        };
        let Ok(rlen) = u16::try_from(resp.len()) else {
            continue; // cannot frame; the zone would need >64 KiB of records for one name
        };
        let mut out = Vec::with_capacity(resp.len() + 2);
        out.extend_from_slice(&rlen.to_be_bytes());
        out.extend_from_slice(&resp);
        stream.write_all(&out).await?;
    }
}
