//! What several listeners share: the global budget of buffered message octets and the count of
//! open sessions per client address and per client network (/24, IPv6 /48). Session slots are
//! not shared: each listener has its own [`crate::board::SessionBoard`].
//!
//! The server makes one [`InboundShared`] and hands it to every listener, so the budget bounds
//! SMTP, submissions and LMTP together, and a client cannot double its sessions by using both
//! the SMTP and the submissions port. [`crate::serve`] without one makes its own.
//!
//! Invariants: a [`ClientSlot`] is taken before a session starts and gives its counts back when
//! dropped (RAII: every exit path of the session task, including a panic, drops it); an address
//! or network with no session has no entry, so each table holds at most one entry per open
//! session. A client refused by either limit is counted in neither.
//!
//! SECURITY: IPv6 clients are counted per /64, the block a single customer usually holds, so a
//! host cannot escape the limit by rotating through its own prefix; IPv4-mapped IPv6 addresses
//! count as the IPv4 address. Networks are IPv4 /24 and IPv6 /48 (a site's usual allocation):
//! a handful of hosts in one provider's block share one limit.

use herald_smtp::BufferBudget;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};

use crate::{InboundConfig, Refusal};

/// State shared by listeners; cheap to clone behind an `Arc`.
#[derive(Debug)]
pub struct InboundShared {
    budget: Arc<BufferBudget>,
    /// Open sessions per client key and per network key. A std Mutex: taken once per accepted
    /// connection and once per ended session, never across `.await`, never per line.
    counts: Mutex<Counts>,
    /// A listener's accepts fail now (out of file descriptors, say): the error's text, until
    /// an accept succeeds again. For readiness probes.
    accept_failure: Mutex<Option<String>>,
    /// `accept_failure` is set (one relaxed load per accepted connection).
    accept_failing: AtomicBool,
}

#[derive(Debug, Default)]
struct Counts {
    /// Per [`client_key`].
    clients: HashMap<IpAddr, usize>,
    /// Per [`network_key`].
    networks: HashMap<IpAddr, usize>,
}

/// Per-client and per-network session limits (0: no limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClientLimits {
    pub per_client: usize,
    pub per_network: usize,
}

impl InboundShared {
    /// A budget of `config.max_buffered_octets`, and an empty client table.
    pub fn new(config: &InboundConfig) -> Arc<InboundShared> {
        Arc::new(InboundShared {
            budget: BufferBudget::new(config.max_buffered_octets),
            counts: Mutex::new(Counts::default()),
            accept_failure: Mutex::new(None),
            accept_failing: AtomicBool::new(false),
        })
    }

    /// A listener could not accept (a listener-level error, not one connection's).
    pub(crate) fn accept_failed(&self, what: &str, e: &std::io::Error) {
        let mut f = self
            .accept_failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *f = Some(format!("{what} listener cannot accept connections: {e}"));
        self.accept_failing.store(true, Relaxed);
    }

    /// An accept succeeded: clears a failure noted before.
    pub(crate) fn accepted(&self) {
        if self.accept_failing.load(Relaxed) {
            let mut f = self
                .accept_failure
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            *f = None;
            self.accept_failing.store(false, Relaxed);
        }
    }

    /// Why a listener cannot accept now, `None` while every one can (readiness).
    pub fn accept_failure(&self) -> Option<String> {
        if !self.accept_failing.load(Relaxed) {
            return None;
        }
        self.accept_failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub fn budget(&self) -> &Arc<BufferBudget> {
        &self.budget
    }

    /// Message octets buffered right now by all sessions (tests, metrics).
    pub fn buffered_octets(&self) -> u64 {
        self.budget.used()
    }

    /// Sessions counted for `ip` right now (tests).
    pub fn sessions_from(&self, ip: IpAddr) -> usize {
        let counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        counts.clients.get(&client_key(ip)).copied().unwrap_or(0)
    }

    /// Sessions counted for the /24 (IPv6 /48) of `ip` right now (tests).
    pub fn sessions_from_network(&self, ip: IpAddr) -> usize {
        let counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        counts.networks.get(&network_key(ip)).copied().unwrap_or(0)
    }

    /// A slot for one more session from `ip`, or the limit that refuses it. A limit of 0 is no
    /// limit; the session is still counted so the numbers stay right if listeners differ.
    pub(crate) fn admit(
        self: &Arc<Self>,
        ip: IpAddr,
        limits: ClientLimits,
    ) -> Result<ClientSlot, Refusal> {
        let (client, network) = (client_key(ip), network_key(ip));
        // A poisoned lock only means another thread panicked between two integer updates;
        // the counts are still consistent enough to keep serving.
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let reached = |table: &HashMap<IpAddr, usize>, key, limit| {
            limit > 0 && table.get(&key).copied().unwrap_or(0) >= limit
        };
        if reached(&counts.clients, client, limits.per_client) {
            return Err(Refusal::TooManyFromClient);
        }
        if reached(&counts.networks, network, limits.per_network) {
            return Err(Refusal::TooManyFromNetwork);
        }
        *counts.clients.entry(client).or_insert(0) += 1;
        *counts.networks.entry(network).or_insert(0) += 1;
        Ok(ClientSlot {
            shared: self.clone(),
            client,
            network,
        })
    }

    fn release(&self, client: IpAddr, network: IpAddr) {
        let mut guard = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let counts = &mut *guard;
        for (table, key) in [
            (&mut counts.clients, client),
            (&mut counts.networks, network),
        ] {
            if let Some(count) = table.get_mut(&key) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    table.remove(&key);
                }
            }
        }
    }
}

/// One session counted against its client address and network; released on drop.
#[derive(Debug)]
pub(crate) struct ClientSlot {
    shared: Arc<InboundShared>,
    client: IpAddr,
    network: IpAddr,
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        self.shared.release(self.client, self.network);
    }
}

/// The network sessions are also counted under: IPv4 by its /24, IPv6 by its /48, an
/// IPv4-mapped IPv6 address as its IPv4 /24.
pub(crate) fn network_key(ip: IpAddr) -> IpAddr {
    match client_key(ip) {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            IpAddr::V4([a, b, c, 0].into())
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], 0, 0, 0, 0, 0))
        }
    }
}

/// The address sessions are counted under: IPv4 as is, IPv6 by its /64.
fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn per_client(limit: usize) -> ClientLimits {
        ClientLimits {
            per_client: limit,
            per_network: 0,
        }
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn slots_are_counted_per_client_and_released_on_drop() {
        let shared = InboundShared::new(&InboundConfig::default());
        let a = ip("192.0.2.1");
        let first = shared.admit(a, per_client(2)).unwrap();
        let second = shared.admit(a, per_client(2)).unwrap();
        assert_eq!(
            shared.admit(a, per_client(2)).unwrap_err(),
            Refusal::TooManyFromClient,
            "third refused"
        );
        assert!(shared.admit(ip("192.0.2.2"), per_client(2)).is_ok());
        drop(first);
        assert_eq!(shared.sessions_from(a), 1);
        let third = shared.admit(a, per_client(2)).unwrap();
        drop((second, third));
        assert_eq!(shared.sessions_from(a), 0);
        let counts = shared.counts.lock().unwrap();
        assert!(
            counts.clients.is_empty() && counts.networks.is_empty(),
            "no stale entries"
        );
        drop(counts);
        let unlimited: Vec<_> = (0..50)
            .map(|_| shared.admit(a, per_client(0)).unwrap())
            .collect();
        assert_eq!(shared.sessions_from(a), 50);
        drop(unlimited);
        assert_eq!(shared.sessions_from(a), 0);
    }

    #[test]
    fn ipv6_counts_per_64_and_mapped_ipv4_as_ipv4() {
        let shared = InboundShared::new(&InboundConfig::default());
        let _one = shared.admit(ip("2001:db8:1:2::1"), per_client(1)).unwrap();
        assert!(shared
            .admit(ip("2001:db8:1:2::ffff"), per_client(1))
            .is_err());
        assert!(shared.admit(ip("2001:db8:1:3::1"), per_client(1)).is_ok());
        let _v4 = shared.admit(ip("198.51.100.7"), per_client(1)).unwrap();
        assert!(shared
            .admit(ip("::ffff:198.51.100.7"), per_client(1))
            .is_err());
    }

    #[test]
    fn networks_are_ipv4_24_and_ipv6_48() {
        assert_eq!(network_key(ip("192.0.2.77")), ip("192.0.2.0"));
        assert_eq!(network_key(ip("192.0.3.77")), ip("192.0.3.0"));
        assert_eq!(network_key(ip("::ffff:192.0.2.9")), ip("192.0.2.0"));
        assert_eq!(network_key(ip("2001:db8:7:ffff:1::1")), ip("2001:db8:7::"));
        assert_ne!(
            network_key(ip("2001:db8:7::1")),
            network_key(ip("2001:db8:8::1"))
        );
    }

    #[test]
    fn a_network_is_limited_beside_its_addresses_and_refusals_count_nowhere() {
        let shared = InboundShared::new(&InboundConfig::default());
        let limits = ClientLimits {
            per_client: 2,
            per_network: 3,
        };
        let held: Vec<_> = ["198.51.100.1", "198.51.100.1", "198.51.100.2"]
            .iter()
            .map(|a| shared.admit(ip(a), limits).unwrap())
            .collect();
        // A fresh address in the same /24 is refused for its network, and is not counted.
        assert_eq!(
            shared.admit(ip("198.51.100.200"), limits).unwrap_err(),
            Refusal::TooManyFromNetwork
        );
        assert_eq!(shared.sessions_from(ip("198.51.100.200")), 0);
        assert_eq!(shared.sessions_from_network(ip("198.51.100.9")), 3);
        // The per-client limit is checked first; the next /24 is another network.
        assert_eq!(
            shared.admit(ip("198.51.100.1"), limits).unwrap_err(),
            Refusal::TooManyFromClient
        );
        let _next = shared.admit(ip("198.51.101.1"), limits).unwrap();
        // IPv6: one /48, several /64s.
        let v6: Vec<_> = ["2001:db8:5:1::1", "2001:db8:5:2::1", "2001:db8:5:3::1"]
            .iter()
            .map(|a| shared.admit(ip(a), limits).unwrap())
            .collect();
        assert_eq!(
            shared.admit(ip("2001:db8:5:4::1"), limits).unwrap_err(),
            Refusal::TooManyFromNetwork
        );
        drop((held, v6));
        assert_eq!(shared.sessions_from_network(ip("198.51.100.1")), 0);
        assert!(shared.admit(ip("2001:db8:5:4::1"), limits).is_ok());
    }
}
