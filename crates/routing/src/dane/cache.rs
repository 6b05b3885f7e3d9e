//! The per-host DANE cache: what an MX host's address and TLSA lookups concluded, kept for the
//! smallest TTL of the answers (clamped to [`MIN_TTL_SECS`]..=[`MAX_TTL_SECS`]). Failures
//! (bogus, timeouts) are never cached: the next route resolution asks again. No async: callers
//! hold the lock only for one map operation.
//!
//! Limits: at most `max_hosts` entries; when full, expired entries go first, then the one that
//! expires soonest (it would be asked again first anyway), like the MTA-STS policy cache.

use super::verdict::HostDane;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Shortest time an answer is kept (a TTL of 0 would mean a lookup per route resolution).
pub const MIN_TTL_SECS: u32 = 5;
/// Longest time an answer is kept, whatever its TTL: a rotated key is seen within an hour.
pub const MAX_TTL_SECS: u32 = 3600;

#[derive(Debug)]
struct Entry {
    dane: HostDane,
    expires: Instant,
}

/// Host name (lower case) → its cached conclusion.
#[derive(Debug)]
pub(crate) struct HostCache {
    map: HashMap<String, Entry>,
    max_hosts: usize,
}

impl HostCache {
    pub fn new(max_hosts: usize) -> HostCache {
        HostCache {
            map: HashMap::new(),
            max_hosts: max_hosts.max(1),
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// The unexpired conclusion for `host` and how long it stays valid; an expired one is
    /// removed.
    pub fn get(&mut self, host: &str, now: Instant) -> Option<(HostDane, Duration)> {
        match self.map.get(host) {
            Some(e) if e.expires > now => Some((e.dane.clone(), e.expires - now)),
            Some(_) => {
                self.map.remove(host);
                None
            }
            None => None,
        }
    }

    /// Keeps `dane` for `host` for `ttl_secs` (clamped), making room if the cache is full.
    /// Failures are not kept.
    pub fn insert(&mut self, host: &str, dane: HostDane, ttl_secs: u32, now: Instant) {
        if matches!(dane, HostDane::Failed(_)) {
            return;
        }
        if !self.map.contains_key(host) && self.map.len() >= self.max_hosts {
            self.map.retain(|_, e| e.expires > now);
            if self.map.len() >= self.max_hosts {
                let soonest = self
                    .map
                    .iter()
                    .min_by_key(|(_, e)| e.expires)
                    .map(|(h, _)| h.clone());
                if let Some(h) = soonest {
                    self.map.remove(&h);
                }
            }
        }
        let ttl = ttl_secs.clamp(MIN_TTL_SECS, MAX_TTL_SECS);
        let expires = now + Duration::from_secs(u64::from(ttl));
        self.map.insert(host.to_string(), Entry { dane, expires });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_live_for_their_clamped_ttl() {
        let t0 = Instant::now();
        let mut c = HostCache::new(10);
        c.insert("a", HostDane::NoRecords, 0, t0);
        c.insert("b", HostDane::NoRecords, 1_000_000, t0);
        let (_, left) = c.get("a", t0).expect("cached");
        assert_eq!(left, Duration::from_secs(u64::from(MIN_TTL_SECS)));
        assert!(c.get("a", t0 + Duration::from_secs(5)).is_none());
        let (_, left) = c.get("b", t0).expect("cached");
        assert_eq!(left, Duration::from_secs(u64::from(MAX_TTL_SECS)));
        assert_eq!(c.len(), 1, "the expired entry is gone");
    }

    #[test]
    fn failures_are_not_cached_and_a_full_cache_evicts() {
        let t0 = Instant::now();
        let mut c = HostCache::new(2);
        c.insert("bogus", HostDane::Failed("SERVFAIL".into()), 60, t0);
        assert!(c.get("bogus", t0).is_none());
        c.insert("a", HostDane::NoRecords, 10, t0);
        c.insert("b", HostDane::NoRecords, 100, t0);
        c.insert("c", HostDane::NoRecords, 50, t0);
        assert!(c.get("a", t0).is_none(), "the soonest to expire went");
        assert_eq!(c.len(), 2);
        c.insert("c", HostDane::NoRecords, 60, t0);
        assert_eq!(c.len(), 2, "replacing an entry evicts nothing");
    }
}
