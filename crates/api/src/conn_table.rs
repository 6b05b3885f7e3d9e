//! The HTTP listener's connection table: every open connection with its client, whether a
//! request is under way, and since when it is idle. It bounds what the listener may hold, so no
//! crowd of clients can take the descriptors SMTP, LMTP, `/healthz` and `/metrics` need (1,100
//! idle connections once made all of them unreachable at the common limit of 1,024 files).
//!
//! - At most `max_connections` connections, and `max_connections_per_client` from one address
//!   (IPv6: one /64). A newcomer over either cap takes the place of the connection idle longest
//!   with no request under way (of that client, for the per-client cap), which is closed: idle
//!   and slow-header clients can never lock a working client out. With none idle, the newcomer
//!   is refused at once.
//! - [`Table::sweep`] closes a connection that has not sent a complete request head within
//!   `header_read_timeout` (counted from the accept, or from the first byte of a later request),
//!   one kept alive with no request for `idle_timeout`, and one whose request body has stopped
//!   arriving for `idle_timeout` (a stalled upload). A handler at work after its body was read
//!   is never cut off: only the caps bound such connections.
//!
//! One `std::sync::Mutex` over the table: no `.await` happens under it, and it is held for an
//! insert, a removal, or one scan of at most `max_connections` entries when full.
//!
//! SECURITY: everything here is driven by untrusted peers; the only input taken from them is
//! their address (the TCP peer, never a header) and the timing of their bytes.

use herald_telemetry::descriptors::{DescriptorMetrics, HttpRefusal};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// The listener's bounds (`[http]`).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
    /// 0: no per-client cap.
    pub max_per_client: usize,
}

/// One open connection, shared by its task, its byte counter and the table.
pub(crate) struct Conn {
    id: u64,
    client: IpAddr,
    epoch: Instant,
    /// Requests under way: from the complete head to the end of the response body.
    busy: AtomicU32,
    /// Requests completed on this connection.
    served: AtomicU32,
    /// Request bodies still arriving (taken by the handler and not yet at their end).
    reading: AtomicU32,
    /// Milliseconds since `epoch` when the connection last became idle (accept, end of a
    /// response).
    idle_since: AtomicU64,
    /// Milliseconds since `epoch` (+1, so 0 means none) of the first byte of a request head
    /// read while idle.
    head_since: AtomicU64,
    /// Milliseconds since `epoch` of the last byte moved either way.
    last_io: AtomicU64,
    /// Cancelled to close the connection: shed, timed out.
    pub(crate) close: CancellationToken,
}

impl Conn {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Bytes arrived (`read`) or left.
    pub(crate) fn moved(&self, read: bool) {
        let now = self.now_ms();
        self.last_io.store(now, Ordering::Relaxed);
        if read && self.busy.load(Ordering::Relaxed) == 0 {
            let _ =
                self.head_since
                    .compare_exchange(0, now + 1, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// A complete request head: the connection is busy until the guard is dropped (the end of
    /// the response body).
    pub(crate) fn begin_request(self: &Arc<Self>) -> RequestGuard {
        self.busy.fetch_add(1, Ordering::Relaxed);
        self.head_since.store(0, Ordering::Relaxed);
        RequestGuard(self.clone())
    }

    /// A request body starts arriving: until [`Conn::body_done`], a stall of `idle_timeout`
    /// closes the connection.
    pub(crate) fn body_started(&self) {
        self.reading.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn body_done(&self) {
        self.reading.fetch_sub(1, Ordering::Relaxed);
    }

    fn idle_ms(&self, now: u64) -> Option<u64> {
        (self.busy.load(Ordering::Relaxed) == 0)
            .then(|| now.saturating_sub(self.idle_since.load(Ordering::Relaxed)))
    }
}

/// Held while a request is under way (see [`Conn::begin_request`]).
pub(crate) struct RequestGuard(Arc<Conn>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let c = &self.0;
        c.idle_since.store(c.now_ms(), Ordering::Relaxed);
        c.served.fetch_add(1, Ordering::Relaxed);
        c.busy.fetch_sub(1, Ordering::Relaxed);
    }
}

#[derive(Default)]
struct Inner {
    conns: HashMap<u64, Arc<Conn>>,
    per_client: HashMap<IpAddr, usize>,
    next_id: u64,
}

/// The table (see the module docs).
pub(crate) struct Table {
    limits: Limits,
    epoch: Instant,
    inner: Mutex<Inner>,
    metrics: Option<DescriptorMetrics>,
}

impl Table {
    pub(crate) fn new(limits: Limits, metrics: Option<DescriptorMetrics>) -> Table {
        Table {
            limits,
            epoch: Instant::now(),
            inner: Mutex::new(Inner::default()),
            metrics,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic under the lock leaves a table that is still consistent enough to bound.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn count(&self, why: HttpRefusal) {
        if let Some(m) = &self.metrics {
            m.count_http_refusal(why);
        }
    }

    /// Admits a connection from `peer`, closing an idle one when a cap is reached; `Err` names
    /// the cap that refused it (nothing idle to close).
    pub(crate) fn admit(&self, peer: IpAddr) -> Result<Arc<Conn>, HttpRefusal> {
        let client = client_key(peer);
        let now = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        let mut inner = self.lock();
        let max_client = self.limits.max_per_client;
        if max_client > 0 && inner.per_client.get(&client).copied().unwrap_or(0) >= max_client {
            match inner.oldest_idle(now, |c| c.client == client) {
                Some(id) => self.close(&mut inner, id, HttpRefusal::Shed),
                None => return Err(HttpRefusal::PerClientLimit),
            }
        }
        if inner.conns.len() >= self.limits.max_connections.max(1) {
            match inner.oldest_idle(now, |_| true) {
                Some(id) => self.close(&mut inner, id, HttpRefusal::Shed),
                None => return Err(HttpRefusal::TotalLimit),
            }
        }
        inner.next_id += 1;
        let conn = Arc::new(Conn {
            id: inner.next_id,
            client,
            epoch: self.epoch,
            busy: AtomicU32::new(0),
            served: AtomicU32::new(0),
            reading: AtomicU32::new(0),
            idle_since: AtomicU64::new(now),
            head_since: AtomicU64::new(0),
            last_io: AtomicU64::new(now),
            close: CancellationToken::new(),
        });
        inner.conns.insert(conn.id, conn.clone());
        *inner.per_client.entry(client).or_default() += 1;
        if let Some(m) = &self.metrics {
            m.http_opened();
        }
        Ok(conn)
    }

    /// The connection's task ended: its place is free (nothing if it was closed already).
    pub(crate) fn release(&self, conn: &Conn) {
        let removed = self.lock().remove(conn.id);
        if let (true, Some(m)) = (removed, &self.metrics) {
            m.http_closed();
        }
    }

    fn close(&self, inner: &mut Inner, id: u64, why: HttpRefusal) {
        if let Some(c) = inner.conns.get(&id) {
            c.close.cancel();
        }
        if inner.remove(id) {
            if let Some(m) = &self.metrics {
                m.http_closed();
            }
            self.count(why);
        }
    }

    /// Closes the connections past their time (see the module docs).
    pub(crate) fn sweep(&self) {
        let now = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        let header = ms(self.limits.header_read_timeout);
        let idle = ms(self.limits.idle_timeout);
        let mut inner = self.lock();
        let mut expired = Vec::new();
        for c in inner.conns.values() {
            let verdict = match c.idle_ms(now) {
                None => (c.reading.load(Ordering::Relaxed) > 0
                    && now.saturating_sub(c.last_io.load(Ordering::Relaxed)) > idle)
                    .then_some(HttpRefusal::IdleTimeout),
                Some(idle_for) => match c.head_since.load(Ordering::Relaxed) {
                    0 if c.served.load(Ordering::Relaxed) == 0 => {
                        (idle_for > header).then_some(HttpRefusal::HeaderTimeout)
                    }
                    0 => (idle_for > idle).then_some(HttpRefusal::IdleTimeout),
                    since => (now.saturating_sub(since - 1) > header)
                        .then_some(HttpRefusal::HeaderTimeout),
                },
            };
            if let Some(why) = verdict {
                expired.push((c.id, why));
            }
        }
        for (id, why) in expired {
            self.close(&mut inner, id, why);
        }
    }

    /// Connections open now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().conns.len()
    }
}

impl Inner {
    fn remove(&mut self, id: u64) -> bool {
        let Some(c) = self.conns.remove(&id) else {
            return false;
        };
        if let Some(n) = self.per_client.get_mut(&c.client) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_client.remove(&c.client);
            }
        }
        true
    }

    /// The connection idle longest with no request under way, among those `which` picks.
    fn oldest_idle(&self, now: u64, which: impl Fn(&Conn) -> bool) -> Option<u64> {
        self.conns
            .values()
            .filter(|c| which(c))
            .filter_map(|c| c.idle_ms(now).map(|idle| (idle, c.id)))
            .max()
            .map(|(_, id)| id)
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The address a client is counted by: IPv4 as is (IPv4-mapped IPv6 too), IPv6 by its /64
/// (one subscriber's allocation).
fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(
                u128::from(v6) & 0xffff_ffff_ffff_ffff_0000_0000_0000_0000,
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max: usize, per_client: usize) -> Limits {
        Limits {
            header_read_timeout: Duration::from_millis(50),
            idle_timeout: Duration::from_secs(60),
            max_connections: max,
            max_per_client: per_client,
        }
    }

    #[test]
    fn a_full_table_closes_the_longest_idle_and_refuses_when_all_are_busy() {
        let t = Table::new(limits(2, 0), None);
        let a = t.admit("192.0.2.1".parse().expect("ip")).expect("a");
        std::thread::sleep(Duration::from_millis(2));
        let b = t.admit("192.0.2.2".parse().expect("ip")).expect("b");
        let _c = t
            .admit("192.0.2.3".parse().expect("ip"))
            .expect("c sheds a");
        assert!(a.close.is_cancelled() && !b.close.is_cancelled());
        assert_eq!(t.len(), 2);
        let _busy_b = b.begin_request();
        let _busy_c = _c.begin_request();
        let refused = t.admit("192.0.2.4".parse().expect("ip"));
        assert_eq!(refused.err(), Some(HttpRefusal::TotalLimit));
    }

    #[test]
    fn the_per_client_cap_sheds_that_clients_idle_connection_only() {
        let t = Table::new(limits(10, 1), None);
        let other = t.admit("192.0.2.9".parse().expect("ip")).expect("other");
        let first = t.admit("2001:db8::1".parse().expect("ip")).expect("first");
        // The same /64: the same client.
        let second = t.admit("2001:db8::2".parse().expect("ip")).expect("second");
        assert!(first.close.is_cancelled() && !other.close.is_cancelled());
        let _busy = second.begin_request();
        let refused = t.admit("2001:db8::3".parse().expect("ip"));
        assert_eq!(refused.err(), Some(HttpRefusal::PerClientLimit));
    }

    #[test]
    fn the_sweep_closes_connections_without_a_request_head_in_time() {
        let t = Table::new(limits(10, 0), None);
        let silent = t.admit("192.0.2.1".parse().expect("ip")).expect("silent");
        let busy = t.admit("192.0.2.2".parse().expect("ip")).expect("busy");
        let _guard = busy.begin_request();
        std::thread::sleep(Duration::from_millis(80));
        t.sweep();
        assert!(
            silent.close.is_cancelled(),
            "no head within the header timeout"
        );
        assert!(
            !busy.close.is_cancelled(),
            "a request under way is not a header wait"
        );
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn a_stalled_upload_is_closed_and_a_handler_at_work_is_not() {
        let mut l = limits(10, 0);
        l.idle_timeout = Duration::from_millis(50);
        let t = Table::new(l, None);
        let upload = t.admit("192.0.2.1".parse().expect("ip")).expect("upload");
        let _uploading = upload.begin_request();
        upload.body_started();
        let working = t.admit("192.0.2.2".parse().expect("ip")).expect("working");
        let _working = working.begin_request();
        std::thread::sleep(Duration::from_millis(80));
        t.sweep();
        assert!(upload.close.is_cancelled(), "its body stopped arriving");
        assert!(
            !working.close.is_cancelled(),
            "its request was read: never cut off"
        );
    }
}
