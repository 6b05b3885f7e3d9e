//! What several listeners share: the global budget of buffered message octets and the count of
//! open sessions per client address.
//!
//! The server makes one [`InboundShared`] and hands it to every listener, so the budget bounds
//! SMTP, submissions and LMTP together, and a client cannot double its sessions by using both
//! the SMTP and the submissions port. [`crate::serve`] without one makes its own.
//!
//! Invariants: a [`ClientSlot`] is taken before a session starts and gives its count back when
//! dropped (RAII: every exit path of the session task, including a panic, drops it); an address
//! with no session has no entry, so the table holds at most one entry per open session.
//!
//! SECURITY: IPv6 clients are counted per /64, the block a single customer usually holds, so a
//! host cannot escape the limit by rotating through its own prefix; IPv4-mapped IPv6 addresses
//! count as the IPv4 address.

use herald_smtp::BufferBudget;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex, PoisonError};

use crate::InboundConfig;

/// State shared by listeners; cheap to clone behind an `Arc`.
#[derive(Debug)]
pub struct InboundShared {
    budget: Arc<BufferBudget>,
    /// Open sessions per client key (see [`client_key`]). A std Mutex: taken once per accepted
    /// connection and once per ended session, never across `.await`, never per line.
    clients: Mutex<HashMap<IpAddr, usize>>,
}

impl InboundShared {
    /// A budget of `config.max_buffered_octets`, and an empty client table.
    pub fn new(config: &InboundConfig) -> Arc<InboundShared> {
        Arc::new(InboundShared {
            budget: BufferBudget::new(config.max_buffered_octets),
            clients: Mutex::new(HashMap::new()),
        })
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
        let clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        clients.get(&client_key(ip)).copied().unwrap_or(0)
    }

    /// A slot for one more session from `ip`, or `None` when it already has `limit` (0: no
    /// limit; the slot is still counted so the numbers stay right if listeners differ).
    pub(crate) fn admit(self: &Arc<Self>, ip: IpAddr, limit: usize) -> Option<ClientSlot> {
        let key = client_key(ip);
        // A poisoned lock only means another thread panicked between two integer updates;
        // the counts are still consistent enough to keep serving.
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        let count = clients.entry(key).or_insert(0);
        if limit > 0 && *count >= limit {
            if *count == 0 {
                clients.remove(&key);
            }
            return None;
        }
        *count += 1;
        Some(ClientSlot {
            shared: self.clone(),
            key,
        })
    }

    fn release(&self, key: IpAddr) {
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = clients.get_mut(&key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                clients.remove(&key);
            }
        }
    }
}

/// One session counted against its client address; released on drop.
#[derive(Debug)]
pub(crate) struct ClientSlot {
    shared: Arc<InboundShared>,
    key: IpAddr,
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        self.shared.release(self.key);
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

    #[test]
    fn slots_are_counted_per_client_and_released_on_drop() {
        let shared = InboundShared::new(&InboundConfig::default());
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let first = shared.admit(a, 2).unwrap();
        let second = shared.admit(a, 2).unwrap();
        assert!(shared.admit(a, 2).is_none(), "third refused");
        assert!(shared.admit("192.0.2.2".parse().unwrap(), 2).is_some());
        drop(first);
        assert_eq!(shared.sessions_from(a), 1);
        let third = shared.admit(a, 2).unwrap();
        drop((second, third));
        assert_eq!(shared.sessions_from(a), 0);
        assert!(
            shared.clients.lock().unwrap().is_empty(),
            "no stale entries"
        );
        let unlimited: Vec<_> = (0..50).map(|_| shared.admit(a, 0).unwrap()).collect();
        assert_eq!(shared.sessions_from(a), 50);
        drop(unlimited);
        assert_eq!(shared.sessions_from(a), 0);
    }

    #[test]
    fn ipv6_counts_per_64_and_mapped_ipv4_as_ipv4() {
        let shared = InboundShared::new(&InboundConfig::default());
        let _one = shared.admit("2001:db8:1:2::1".parse().unwrap(), 1).unwrap();
        assert!(shared
            .admit("2001:db8:1:2::ffff".parse().unwrap(), 1)
            .is_none());
        assert!(shared
            .admit("2001:db8:1:3::1".parse().unwrap(), 1)
            .is_some());
        let _v4 = shared.admit("198.51.100.7".parse().unwrap(), 1).unwrap();
        assert!(shared
            .admit("::ffff:198.51.100.7".parse().unwrap(), 1)
            .is_none());
    }
}
