//! The running egress: pools, per-source connection counts and warm-up volume, leases.

use crate::config::{check, domain_matches, EgressConfig};
use crate::ledger::{self, Ledger, LedgerError, SourceCount};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// Why the egress could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

/// Why no source was leased for a connection. The scheduler defers the destination's copies
/// with [`Refusal::text`]; none of these is the receiving host's doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A list names a pool that is not configured (on this node).
    UnknownPool(String),
    /// Every source of the pool reached its warm-up cap for the UTC day.
    WarmupCapped(String),
    /// Every source of the pool has its `max_connections` open, for as long as we waited.
    Busy(String),
}

impl Refusal {
    /// The text of the deferral reply (the delivery log shows it).
    pub fn text(&self) -> String {
        match self {
            Refusal::UnknownPool(p) => {
                format!("egress pool {p} is not configured on this node ([[delivery.egress_pool]])")
            }
            Refusal::WarmupCapped(p) => format!(
                "egress pool {p}: every source address reached its warm-up cap for today (UTC); \
                 deferred until tomorrow"
            ),
            Refusal::Busy(p) => {
                format!("egress pool {p}: every source address has its max_connections open")
            }
        }
    }
}

/// One source's configuration.
#[derive(Debug)]
struct Source {
    name: Arc<str>,
    addr: IpAddr,
    max_connections: Option<usize>,
    warmup: Vec<u64>,
}

#[derive(Debug)]
struct Pool {
    name: Arc<str>,
    sources: Vec<usize>,
    domains: Vec<String>,
}

/// What changes, behind one lock (a few integer updates per connection and per batch).
#[derive(Debug)]
struct State {
    /// The UTC day `sent` counts.
    day: i64,
    active: Vec<usize>,
    sent: Vec<u64>,
    first_day: Vec<Option<i64>>,
    /// Where the next tie-break starts (round-robin among equally loaded sources).
    rr: usize,
    /// Changed since the ledger was last written.
    dirty: bool,
    /// Ledger entries of addresses not configured now: kept so a source that comes back
    /// resumes its warm-up where it was.
    others: BTreeMap<IpAddr, SourceCount>,
}

impl State {
    fn roll(&mut self, today: i64) {
        if today != self.day {
            self.day = today;
            self.sent.iter_mut().for_each(|s| *s = 0);
            self.dirty = true;
        }
    }
}

struct Inner {
    sources: Vec<Source>,
    pools: Vec<Pool>,
    default_pool: Option<Arc<str>>,
    ledger_path: Option<PathBuf>,
    state: Mutex<State>,
    /// Woken when a lease is returned (a connection waiting for a free source tries again).
    freed: tokio::sync::Notify,
}

/// The egress of this node: cheap to clone, shared by the scheduler's actor and workers.
#[derive(Clone)]
pub struct Egress {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Egress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Egress")
            .field("sources", &self.inner.sources.len())
            .field("pools", &self.inner.pools.len())
            .finish_non_exhaustive()
    }
}

/// One source as `/metrics` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceView {
    pub name: String,
    pub address: IpAddr,
    pub connections: usize,
    pub sent_today: u64,
    /// Today's warm-up cap; None once the schedule is over (or without one).
    pub cap_today: Option<u64>,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    // A panic under the lock leaves only counters, which stay usable.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Egress {
    /// Checks `cfg`, reads the warm-up ledger at `ledger_path` (None: not persisted) and
    /// starts counting from `today` (a UTC day, [`crate::utc_day`]).
    pub fn open(
        cfg: &EgressConfig,
        ledger_path: Option<PathBuf>,
        today: i64,
    ) -> Result<Egress, EgressError> {
        check(cfg).map_err(EgressError::Config)?;
        let stored = match &ledger_path {
            Some(p) => ledger::load(p)?,
            None => Ledger::default(),
        };
        let sources: Vec<Source> = cfg
            .sources
            .iter()
            .map(|s| Source {
                name: Arc::from(s.name.as_str()),
                addr: s.source,
                max_connections: s.max_connections,
                warmup: s.warmup.clone(),
            })
            .collect();
        let index = |name: &str| sources.iter().position(|s| &*s.name == name);
        let pools = cfg
            .pools
            .iter()
            .map(|p| Pool {
                name: Arc::from(p.name.as_str()),
                sources: p.sources.iter().filter_map(|s| index(s)).collect(),
                domains: p.domains.clone(),
            })
            .collect();
        let mut others = stored.sources.clone();
        let mut state = State {
            day: stored.day,
            active: vec![0; sources.len()],
            sent: vec![0; sources.len()],
            first_day: vec![None; sources.len()],
            rr: 0,
            dirty: false,
            others: BTreeMap::new(),
        };
        for (i, s) in sources.iter().enumerate() {
            if let Some(c) = others.remove(&s.addr) {
                state.first_day[i] = Some(c.first_day);
                state.sent[i] = c.sent;
            }
        }
        state.others = others;
        state.roll(today);
        Ok(Egress {
            inner: Arc::new(Inner {
                sources,
                pools,
                default_pool: cfg.default_pool.as_deref().map(Arc::from),
                ledger_path,
                state: Mutex::new(state),
                freed: tokio::sync::Notify::new(),
            }),
        })
    }

    /// The pool a copy uses: its list's (`list_pool`, even when unknown here: the copy then
    /// waits, rather than leave from an address the list was not meant to use), else the first
    /// pool whose domain patterns match the recipient `domain`, else the default pool, else
    /// none (the system chooses the source address).
    pub fn pool_for(&self, list_pool: Option<&str>, domain: &str) -> Option<Arc<str>> {
        if let Some(p) = list_pool {
            return Some(
                self.inner
                    .pools
                    .iter()
                    .find(|x| &*x.name == p)
                    .map_or_else(|| Arc::from(p), |x| x.name.clone()),
            );
        }
        self.inner
            .pools
            .iter()
            .find(|p| p.domains.iter().any(|d| domain_matches(d, domain)))
            .map(|p| p.name.clone())
            .or_else(|| self.inner.default_pool.clone())
    }

    /// A lease on a source of `pool` for one connection: the least-loaded source under its
    /// connection limit and its warm-up cap for `today`. Waits up to `wait` while every such
    /// source is at its connection limit.
    pub async fn acquire(&self, pool: &str, today: i64, wait: Duration) -> Result<Lease, Refusal> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let freed = self.inner.freed.notified();
            tokio::pin!(freed);
            // Registered before trying, so a lease returned in between is not missed.
            freed.as_mut().enable();
            match self.try_acquire(pool, today) {
                Err(Refusal::Busy(p)) => {
                    if tokio::time::timeout_at(deadline, freed).await.is_err() {
                        return Err(Refusal::Busy(p));
                    }
                }
                other => return other,
            }
        }
    }

    fn try_acquire(&self, pool: &str, today: i64) -> Result<Lease, Refusal> {
        let inner = &self.inner;
        let Some(p) = inner.pools.iter().find(|p| &*p.name == pool) else {
            return Err(Refusal::UnknownPool(pool.to_string()));
        };
        let mut st = lock(&inner.state);
        st.roll(today);
        let n = p.sources.len();
        let mut under_cap = false;
        let mut best: Option<usize> = None;
        for k in 0..n {
            let i = p.sources[(st.rr + k) % n];
            if self.remaining(&st, i, today) == 0 {
                continue;
            }
            under_cap = true;
            let src = &inner.sources[i];
            if src.max_connections.is_some_and(|m| st.active[i] >= m) {
                continue;
            }
            if best.is_none_or(|b| st.active[i] < st.active[b]) {
                best = Some(i);
            }
        }
        match best {
            Some(i) => {
                st.active[i] += 1;
                st.rr = st.rr.wrapping_add(1);
                Ok(Lease {
                    egress: self.clone(),
                    index: i,
                    reserved: None,
                })
            }
            None if under_cap => Err(Refusal::Busy(pool.to_string())),
            None => Err(Refusal::WarmupCapped(pool.to_string())),
        }
    }

    /// Copies source `i` may still send on `today` (u64::MAX without a cap).
    fn remaining(&self, st: &State, i: usize, today: i64) -> u64 {
        match self.cap(st, i, today) {
            Some(cap) => cap.saturating_sub(st.sent[i]),
            None => u64::MAX,
        }
    }

    /// Source `i`'s cap on `today`: its schedule's entry for the days since it first sent.
    fn cap(&self, st: &State, i: usize, today: i64) -> Option<u64> {
        let warmup = &self.inner.sources[i].warmup;
        let first = st.first_day[i].unwrap_or(today);
        let age = usize::try_from(today.saturating_sub(first)).unwrap_or(0);
        warmup.get(age).copied()
    }

    /// Writes the warm-up ledger if anything changed since the last write (blocking).
    pub fn flush(&self) -> Result<(), LedgerError> {
        let Some(path) = &self.inner.ledger_path else {
            return Ok(());
        };
        let ledger = {
            let mut st = lock(&self.inner.state);
            if !st.dirty {
                return Ok(());
            }
            st.dirty = false;
            let mut l = Ledger {
                day: st.day,
                sources: st.others.clone(),
            };
            for (i, s) in self.inner.sources.iter().enumerate() {
                if let Some(first_day) = st.first_day[i] {
                    let sent = st.sent[i];
                    l.sources.insert(s.addr, SourceCount { first_day, sent });
                }
            }
            l
        };
        let out = ledger::store(path, &ledger);
        if out.is_err() {
            lock(&self.inner.state).dirty = true;
        }
        out
    }

    /// Every source's connections, volume and cap on `today`.
    pub fn sources(&self, today: i64) -> Vec<SourceView> {
        let mut st = lock(&self.inner.state);
        st.roll(today);
        self.inner
            .sources
            .iter()
            .enumerate()
            .map(|(i, s)| SourceView {
                name: s.name.to_string(),
                address: s.addr,
                connections: st.active[i],
                sent_today: st.sent[i],
                cap_today: self.cap(&st, i, today),
            })
            .collect()
    }
}

/// A source held for one connection; returned when dropped.
#[derive(Debug)]
pub struct Lease {
    egress: Egress,
    index: usize,
    /// The UTC day of the last reservation (volume handed back counts against that day only).
    reserved: Option<i64>,
}

impl Lease {
    /// The local address to bind.
    pub fn source(&self) -> IpAddr {
        self.egress.inner.sources[self.index].addr
    }

    pub fn name(&self) -> &str {
        &self.egress.inner.sources[self.index].name
    }

    /// Reserves up to `want` copies of today's warm-up volume (all of them without a cap);
    /// 0 when the source is at its cap: the connection should end.
    pub fn reserve(&mut self, want: usize, today: i64) -> usize {
        let e = &self.egress;
        let mut st = lock(&e.inner.state);
        st.roll(today);
        let i = self.index;
        let n = e.remaining(&st, i, today).min(want as u64);
        if n > 0 {
            st.first_day[i].get_or_insert(today);
            st.sent[i] += n;
            st.dirty = true;
        }
        self.reserved = Some(today);
        usize::try_from(n).unwrap_or(want)
    }

    /// Gives back `n` reserved copies that were not sent.
    pub fn unreserve(&mut self, n: usize) {
        let e = &self.egress;
        let mut st = lock(&e.inner.state);
        if n > 0 && self.reserved == Some(st.day) {
            let i = self.index;
            st.sent[i] = st.sent[i].saturating_sub(n as u64);
            st.dirty = true;
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut st = lock(&self.egress.inner.state);
        st.active[self.index] = st.active[self.index].saturating_sub(1);
        drop(st);
        self.egress.inner.freed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{EgressPoolConfig, EgressSource};

    const DAY: i64 = 20_000;

    fn cfg(max: Option<usize>, warmup: Vec<u64>) -> EgressConfig {
        let src = |name: &str, ip: &str| EgressSource {
            name: name.into(),
            source: ip.parse().expect("ip"),
            max_connections: max,
            warmup: warmup.clone(),
        };
        EgressConfig {
            sources: vec![src("a", "127.0.0.5"), src("b", "127.0.0.6")],
            pools: vec![
                EgressPoolConfig {
                    name: "both".into(),
                    sources: vec!["a".into(), "b".into()],
                    domains: vec![".big.test".into()],
                },
                EgressPoolConfig {
                    name: "only-b".into(),
                    sources: vec!["b".into()],
                    domains: vec![],
                },
            ],
            default_pool: Some("only-b".into()),
        }
    }

    #[test]
    fn pool_choice_list_then_domain_then_default() {
        let e = Egress::open(&cfg(None, vec![]), None, DAY).expect("open");
        assert_eq!(e.pool_for(Some("both"), "x.test").as_deref(), Some("both"));
        assert_eq!(e.pool_for(Some("gone"), "x.test").as_deref(), Some("gone"));
        assert_eq!(e.pool_for(None, "mx.big.test").as_deref(), Some("both"));
        assert_eq!(e.pool_for(None, "x.test").as_deref(), Some("only-b"));
        let mut none = cfg(None, vec![]);
        none.default_pool = None;
        let e = Egress::open(&none, None, DAY).expect("open");
        assert_eq!(e.pool_for(None, "x.test"), None);
    }

    /// Least loaded first, ties rotate; the limit per source holds; a returned lease frees
    /// its slot for a waiting connection.
    #[tokio::test(start_paused = true)]
    async fn leases_spread_respect_limits_and_wait() {
        let e = Egress::open(&cfg(Some(2), vec![]), None, DAY).expect("open");
        let w = Duration::from_secs(5);
        let l1 = e.acquire("both", DAY, w).await.expect("1");
        let l2 = e.acquire("both", DAY, w).await.expect("2");
        assert_ne!(l1.source(), l2.source(), "spread over both");
        let l3 = e.acquire("both", DAY, w).await.expect("3");
        let l4 = e.acquire("both", DAY, w).await.expect("4");
        let views = e.sources(DAY);
        assert_eq!(views[0].connections, 2);
        assert_eq!(views[1].connections, 2);
        assert_eq!(
            e.acquire("both", DAY, Duration::from_millis(10))
                .await
                .err(),
            Some(Refusal::Busy("both".into()))
        );
        let freed = l3.source();
        let e2 = e.clone();
        let waiter = tokio::spawn(async move { e2.acquire("both", DAY, w).await });
        tokio::task::yield_now().await;
        drop(l3);
        let l5 = waiter.await.expect("task").expect("got the freed slot");
        assert_eq!(l5.source(), freed);
        assert_eq!(
            e.acquire("nope", DAY, w).await.err(),
            Some(Refusal::UnknownPool("nope".into()))
        );
        drop((l1, l2, l4, l5));
        assert!(e.sources(DAY).iter().all(|v| v.connections == 0));
    }

    /// The warm-up cap counts per source per UTC day, grows with the schedule, defers when
    /// the whole pool is capped, and survives a restart through the ledger.
    #[tokio::test]
    async fn warmup_caps_per_day_and_survive_a_restart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("egress-warmup.json");
        let w = Duration::from_secs(1);
        let e = Egress::open(&cfg(None, vec![3, 5]), Some(path.clone()), DAY).expect("open");
        let mut a = e.acquire("only-b", DAY, w).await.expect("lease");
        assert_eq!(a.reserve(2, DAY), 2);
        assert_eq!(a.reserve(2, DAY), 1, "cap 3 on day 0");
        a.unreserve(1);
        assert_eq!(a.reserve(5, DAY), 1);
        assert_eq!(a.reserve(5, DAY), 0);
        drop(a);
        assert_eq!(
            e.acquire("only-b", DAY, w).await.err(),
            Some(Refusal::WarmupCapped("only-b".into()))
        );
        // Source a (in `both`) has not sent yet: the pool still has room.
        let l = e.acquire("both", DAY, w).await.expect("a has room");
        assert_eq!(l.name(), "a");
        drop(l);
        e.flush().expect("flush");

        // A restart on the same day keeps the count; the next day the cap grows to 5.
        let e = Egress::open(&cfg(None, vec![3, 5]), Some(path.clone()), DAY).expect("reopen");
        assert!(e.acquire("only-b", DAY, w).await.is_err(), "count kept");
        let mut b = e.acquire("only-b", DAY + 1, w).await.expect("new day");
        assert_eq!(b.reserve(10, DAY + 1), 5);
        assert_eq!(e.sources(DAY + 1)[1].cap_today, Some(5));
        // After the schedule, no cap.
        assert_eq!(b.reserve(1000, DAY + 2), 1000);
        assert_eq!(e.sources(DAY + 2)[1].cap_today, None);
    }
}
