//! Sliding-window counters in memory: failed sign-ins per account and per client, mailed
//! sign-in links per address and per client.
//!
//! In memory on purpose: the windows are minutes long, a restart forgetting them costs an
//! attacker's guesser one more window at most, and no attempt pays for a disk write. Every map
//! is bounded ([`MAX_KEYS`]): when full, expired keys are dropped first, then the key with the
//! fewest hits (the oldest of those) — a flood of fresh client addresses cannot grow memory,
//! and evicts keys with one hit before a guesser's key at its limit.
//!
//! SECURITY: a client is counted by its address from the socket; an IPv6 client by its /64,
//! since one host usually holds the whole /64 and could otherwise step through it.

use crate::AccountsConfig;
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;

/// Most keys one window keeps.
pub const MAX_KEYS: usize = 65_536;

/// One sliding window: at most `limit` hits per key within `span_ms`.
pub struct Window {
    limit: u32,
    span_ms: u64,
    /// std mutex: short, synchronous critical sections only.
    hits: Mutex<HashMap<String, VecDeque<u64>>>,
}

impl Window {
    pub fn new(limit: u32, span_ms: u64) -> Window {
        Window {
            limit: limit.max(1),
            span_ms: span_ms.max(1),
            hits: Mutex::new(HashMap::new()),
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, VecDeque<u64>>> {
        // Counters only: a poisoned lock still holds usable counts.
        self.hits
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `Err(ms to wait)` when `key` is at its limit now.
    pub fn check(&self, key: &str, now_ms: u64) -> Result<(), u64> {
        let mut map = self.map();
        let Some(q) = map.get_mut(key) else {
            return Ok(());
        };
        expire(q, now_ms, self.span_ms);
        if q.len() >= self.limit as usize {
            let oldest = q.front().copied().unwrap_or(now_ms);
            return Err((oldest + self.span_ms).saturating_sub(now_ms).max(1));
        }
        Ok(())
    }

    /// Counts one hit for `key`.
    pub fn hit(&self, key: &str, now_ms: u64) {
        let mut map = self.map();
        if !map.contains_key(key) && map.len() >= MAX_KEYS {
            make_room(&mut map, now_ms, self.span_ms);
        }
        let q = map.entry(key.to_string()).or_default();
        expire(q, now_ms, self.span_ms);
        q.push_back(now_ms);
        // A key never needs more than `limit` entries to answer.
        while q.len() > self.limit as usize {
            q.pop_front();
        }
    }

    pub fn clear(&self, key: &str) {
        self.map().remove(key);
    }

    /// Keys held now (tests, and the bound's proof).
    pub fn len(&self) -> usize {
        self.map().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn expire(q: &mut VecDeque<u64>, now_ms: u64, span_ms: u64) {
    while q.front().is_some_and(|&t| t + span_ms <= now_ms) {
        q.pop_front();
    }
}

fn make_room(map: &mut HashMap<String, VecDeque<u64>>, now_ms: u64, span_ms: u64) {
    map.retain(|_, q| {
        expire(q, now_ms, span_ms);
        !q.is_empty()
    });
    if map.len() >= MAX_KEYS {
        let quietest = map
            .iter()
            .min_by_key(|(_, q)| (q.len(), q.back().copied().unwrap_or(0)))
            .map(|(k, _)| k.clone());
        if let Some(k) = quietest {
            map.remove(&k);
        }
    }
}

/// The key a client is counted under.
pub fn client_key(ip: IpAddr) -> String {
    match ip.to_canonical() {
        IpAddr::V4(v4) => format!("ip:{v4}"),
        IpAddr::V6(v6) => {
            let s = v6.segments();
            format!("ip:{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
        }
    }
}

/// A pair of windows: one keyed by account/address, one by client.
pub struct Pair {
    pub by_address: Window,
    pub by_client: Window,
}

impl Pair {
    /// `Err(ms to wait)` when either the address or the client is at its limit.
    pub fn check_both(&self, address: &str, client: IpAddr, now_ms: u64) -> Result<(), u64> {
        let a = self.by_address.check(&format!("a:{address}"), now_ms);
        let c = self.by_client.check(&client_key(client), now_ms);
        match (a, c) {
            (Ok(()), Ok(())) => Ok(()),
            (Err(x), Ok(())) | (Ok(()), Err(x)) => Err(x),
            (Err(x), Err(y)) => Err(x.max(y)),
        }
    }

    pub fn hit_both(&self, address: &str, client: IpAddr, now_ms: u64) {
        self.by_address.hit(&format!("a:{address}"), now_ms);
        self.by_client.hit(&client_key(client), now_ms);
    }

    /// Forgets the address's count (a successful sign-in); the client's stays.
    pub fn clear_key(&self, address: &str) {
        self.by_address.clear(&format!("a:{address}"));
    }
}

/// Every window the accounts store keeps.
pub struct Throttles {
    /// Failed password sign-ins.
    pub logins: Pair,
    /// Sign-in links asked for.
    pub links: Pair,
}

impl Throttles {
    pub fn new(cfg: &AccountsConfig) -> Throttles {
        let window = cfg.failed_login_window_secs.saturating_mul(1000);
        let hour = 3_600_000;
        Throttles {
            logins: Pair {
                by_address: Window::new(cfg.max_failed_logins, window),
                by_client: Window::new(cfg.max_failed_logins, window),
            },
            links: Pair {
                by_address: Window::new(cfg.login_links_per_address_per_hour, hour),
                by_client: Window::new(cfg.login_links_per_client_per_hour, hour),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_counts_slides_and_says_how_long_to_wait() {
        let w = Window::new(3, 1000);
        for t in [0, 10, 20] {
            assert!(w.check("k", t).is_ok());
            w.hit("k", t);
        }
        assert_eq!(w.check("k", 500), Err(500));
        assert!(w.check("other", 500).is_ok());
        assert!(w.check("k", 1000).is_ok(), "the first hit left the window");
        w.clear("k");
        assert!(w.is_empty());
    }

    #[test]
    fn a_flood_of_keys_stays_bounded() {
        let w = Window::new(5, 1 << 40);
        w.hit("guesser", 0);
        w.hit("guesser", 1);
        for i in 0..(MAX_KEYS + 500) {
            w.hit(&format!("client-{i}"), 2 + i as u64);
        }
        assert!(w.len() <= MAX_KEYS);
        assert!(w.check("guesser", 100).is_ok() && w.map().contains_key("guesser"));
    }

    #[test]
    fn ipv6_clients_count_by_their_64() {
        let a: IpAddr = "2001:db8:1:2::1".parse().expect("ip");
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().expect("ip");
        assert_eq!(client_key(a), client_key(b));
        let mapped: IpAddr = "::ffff:192.0.2.1".parse().expect("ip");
        assert_eq!(client_key(mapped), "ip:192.0.2.1");
    }
}
