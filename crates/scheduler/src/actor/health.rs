//! Host health: per destination host, keyed by (MX name, address) — providers rotate addresses
//! behind one name and share addresses between names, so neither alone identifies a host.
//!
//! For each host: EWMAs of connect, banner and reply latency; consecutive failures; last success;
//! and, once `down_after_failures` consecutive failures (refused, timed out, broken greeting) are
//! seen, a down period that doubles on each further failed probe up to `down_max_secs`. No new
//! connection goes to a down host before its probe time; then exactly one connection (the probe)
//! may try it, and its result moves the host up or down again.
//!
//! Owned by the scheduler actor (no locks); shared by every list and post because every
//! destination queue consults the one table. Persisted as a small JSON file written atomically
//! (temp file + rename) every `persist_interval_secs` and at shutdown, and read at start. A file,
//! not a SQLite table: the state is a cache (losing it costs a few probes), is written whole in
//! one shot, and must not contend with the directory's database on the delivery path.
//!
//! Tarpits: a host whose replies trickle past the first pass's patience is marked a
//! tarpit for `tarpit_remember_secs` ([`HostHealth::record_tarpit`]): up, not failing, planned
//! only for the slow lane and after any other host ([`HostHealth::plan_lane`]).
//!
//! Bounds: at most `max_hosts` records; beyond that the up hosts with the oldest activity are
//! evicted (a tenth at a time, so eviction is amortized). Times are wall-clock ms so that a
//! restart keeps down periods.

use crate::messages::{ConnectTimings, HostKey, Target};
use herald_routing::MxHost;
use herald_telemetry::SchedulerEvent;
use herald_types::{HostStateKind, LaneKind};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Host health settings (`[scheduler]` keys `host_*`).
#[derive(Debug, Clone)]
pub struct HealthConfig {
    pub down_after_failures: u32,
    pub down_initial: Duration,
    pub down_max: Duration,
    pub max_hosts: usize,
}

/// Weight of a new sample in the latency averages.
const EWMA_ALPHA: f64 = 0.3;

/// What is known about one host.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HostRecord {
    pub connect_ms: Option<f64>,
    pub banner_ms: Option<f64>,
    /// Per copy, from writing MAIL FROM to the final reply (pipelined batches averaged).
    pub reply_ms: Option<f64>,
    pub consecutive_failures: u32,
    pub last_success_ms: Option<u64>,
    /// Down until this wall-clock time (ms); `None` when up.
    pub down_until_ms: Option<u64>,
    /// Down periods in a row (the backoff exponent).
    pub down_count: u32,
    pub last_error: Option<String>,
    /// A tarpit (replies trickle, slow but steady) until this wall-clock time (ms): served by
    /// the slow lane only, never counted down for its slowness.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tarpit_until_ms: Option<u64>,
    /// A probe connection is out (not persisted: a restart forgets in-flight probes).
    #[serde(skip)]
    pub probing: bool,
    #[serde(skip)]
    touched_ms: u64,
}

impl HostRecord {
    pub fn is_down(&self) -> bool {
        self.down_until_ms.is_some()
    }

    /// True while the host is remembered as a tarpit.
    pub fn is_tarpit(&self, now_ms: u64) -> bool {
        self.tarpit_until_ms.is_some_and(|t| t > now_ms)
    }

    /// Estimated cost of a copy to this host (ms): set-up plus one reply. Unknown hosts get a
    /// middle value so that known-fast hosts go first and known-slow ones last.
    pub fn latency_ms(&self) -> f64 {
        let setup = self.connect_ms.unwrap_or(200.0) + self.banner_ms.unwrap_or(200.0);
        setup + self.reply_ms.unwrap_or(200.0)
    }
}

/// One host as written to the health file: MX name, address, record.
pub type PersistedHost = (String, IpAddr, HostRecord);

/// The health table.
pub struct HostHealth {
    cfg: HealthConfig,
    hosts: HashMap<HostKey, HostRecord>,
    path: Option<PathBuf>,
}

fn ewma(old: Option<f64>, sample: f64) -> Option<f64> {
    Some(old.map_or(sample, |o| o + EWMA_ALPHA * (sample - o)))
}

impl HostHealth {
    /// A table restored from `path` when it exists and parses (otherwise empty, with a warning).
    pub fn open(cfg: HealthConfig, path: Option<PathBuf>) -> HostHealth {
        let mut h = HostHealth {
            cfg,
            hosts: HashMap::new(),
            path,
        };
        if let Some(p) = h.path.clone() {
            match load(&p) {
                Ok(rows) => {
                    for (name, addr, v) in rows.into_iter().take(h.cfg.max_hosts) {
                        let key = HostKey {
                            name: Arc::from(name.as_str()),
                            addr,
                        };
                        h.hosts.insert(key, v);
                    }
                    if !h.hosts.is_empty() {
                        tracing::info!(hosts = h.hosts.len(), path = %p.display(), "host health restored");
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(path = %p.display(), error = %e, "host health not restored; starting empty")
                }
            }
        }
        h
    }

    pub fn get(&self, key: &HostKey) -> Option<&HostRecord> {
        self.hosts.get(key)
    }

    /// Hosts down now.
    pub fn down_count(&self) -> usize {
        self.hosts.values().filter(|r| r.is_down()).count()
    }

    /// The down hosts, soonest probe first, at most `limit`.
    pub fn down_hosts(&self, limit: usize) -> Vec<(&HostKey, &HostRecord)> {
        let mut v: Vec<_> = self.hosts.iter().filter(|(_, r)| r.is_down()).collect();
        v.sort_by_key(|(_, r)| r.down_until_ms);
        v.truncate(limit);
        v
    }

    /// Best (lowest) latency estimate over a destination's hosts.
    pub fn latency_ms(&self, hosts: &[MxHost]) -> f64 {
        let mut best = f64::MAX;
        for h in hosts {
            for a in &h.addrs {
                let key = HostKey {
                    name: Arc::from(h.name.as_str()),
                    addr: *a,
                };
                let l = self
                    .hosts
                    .get(&key)
                    .map_or(HostRecord::default().latency_ms(), |r| r.latency_ms());
                best = best.min(l);
            }
        }
        best
    }

    /// True when some host of the set has answered before and is not failing now.
    pub fn proven(&self, hosts: &[MxHost]) -> bool {
        keys(hosts).any(|k| {
            self.hosts
                .get(&k)
                .is_some_and(|r| r.last_success_ms.is_some() && r.consecutive_failures == 0)
        })
    }

    /// Where to connect now, in order: a due probe of a down host first (one at a time; it is
    /// marked as probing), then the up hosts, healthy before failing, each group in MX preference
    /// order. Empty when every host is down and not due (or already being probed).
    pub fn plan(&mut self, hosts: &[MxHost], port: u16, now_ms: u64) -> Vec<Target> {
        let mut probe = None;
        let mut healthy = Vec::new();
        let mut failing = Vec::new();
        for key in keys(hosts) {
            let addr = SocketAddr::new(key.addr, port);
            match self.hosts.get(&key) {
                Some(r) if r.is_down() => {
                    let due = r.down_until_ms.is_some_and(|t| t <= now_ms);
                    if due && !r.probing && probe.is_none() {
                        probe = Some(Target {
                            key,
                            addr,
                            probe: true,
                        });
                    }
                }
                Some(r) if r.consecutive_failures > 0 => failing.push(Target {
                    key,
                    addr,
                    probe: false,
                }),
                _ => healthy.push(Target {
                    key,
                    addr,
                    probe: false,
                }),
            }
        }
        if let Some(p) = &probe {
            if let Some(r) = self.hosts.get_mut(&p.key) {
                r.probing = true;
            }
        }
        probe.into_iter().chain(healthy).chain(failing).collect()
    }

    /// True when every host of the set is down (whether or not a probe is due).
    pub fn plan_is_empty(&self, hosts: &[MxHost], _now_ms: u64) -> bool {
        keys(hosts).all(|k| self.hosts.get(&k).is_some_and(|r| r.is_down()))
    }

    /// An operator asked for a retry now: every down host of the set may be probed at once (still
    /// one probe at a time; a failed probe starts the next, longer backoff as usual).
    pub fn probe_now(&mut self, hosts: &[MxHost], now_ms: u64) {
        for k in keys(hosts) {
            if let Some(r) = self.hosts.get_mut(&k) {
                if let Some(t) = r.down_until_ms.as_mut() {
                    *t = (*t).min(now_ms);
                }
            }
        }
    }

    /// Earliest probe time (ms) among the set's down hosts that are not being probed.
    pub fn next_probe_ms(&self, hosts: &[MxHost]) -> Option<u64> {
        keys(hosts)
            .filter_map(|k| self.hosts.get(&k))
            .filter(|r| !r.probing)
            .filter_map(|r| r.down_until_ms)
            .min()
    }

    /// A connection was set up. Returns the state change when the host was down.
    pub fn record_success(
        &mut self,
        key: &HostKey,
        t: &ConnectTimings,
        now_ms: u64,
    ) -> Option<SchedulerEvent> {
        let r = self.entry(key, now_ms);
        r.connect_ms = ewma(r.connect_ms, t.connect.as_secs_f64() * 1000.0);
        r.banner_ms = ewma(r.banner_ms, t.banner.as_secs_f64() * 1000.0);
        let was_down = r.is_down() || r.probing;
        r.consecutive_failures = 0;
        r.down_count = 0;
        r.down_until_ms = None;
        r.probing = false;
        r.last_success_ms = Some(now_ms);
        was_down.then(|| event(key, r, HostStateKind::Up, "answered", now_ms))
    }

    /// Per-copy reply latency observed on an open connection.
    pub fn record_reply(&mut self, key: &HostKey, per_copy: Duration, now_ms: u64) {
        let r = self.entry(key, now_ms);
        r.reply_ms = ewma(r.reply_ms, per_copy.as_secs_f64() * 1000.0);
    }

    /// A connection attempt failed because of the host. Returns the state change when the host
    /// is now (again) down.
    pub fn record_failure(
        &mut self,
        key: &HostKey,
        error: &str,
        now_ms: u64,
    ) -> Option<SchedulerEvent> {
        let (threshold, initial, max) = (
            self.cfg.down_after_failures.max(1),
            self.cfg.down_initial,
            self.cfg.down_max,
        );
        let r = self.entry(key, now_ms);
        r.consecutive_failures = r.consecutive_failures.saturating_add(1);
        r.last_error = Some(error.chars().take(300).collect());
        let probe_failed = r.probing || r.is_down();
        r.probing = false;
        if !probe_failed && r.consecutive_failures < threshold {
            return None;
        }
        r.down_count = r.down_count.saturating_add(1);
        let down_for = crate::actor::backoff::retry_delay(r.down_count, initial, max, 0.0, 0.5);
        r.down_until_ms = Some(now_ms + down_for.as_millis() as u64);
        Some(event(key, r, HostStateKind::Down, error, now_ms))
    }

    /// Another node of the cluster marked this host down for `remaining`:
    /// down here too, with its probe due then — unless this node already has it down for
    /// longer or is probing it. A host this node never met is taken only while the table has
    /// room: another node's news never evicts this node's own knowledge. True when adopted.
    pub fn adopt_down(
        &mut self,
        key: &HostKey,
        remaining: Duration,
        reason: &str,
        now_ms: u64,
    ) -> bool {
        if !self.hosts.contains_key(key) && self.hosts.len() >= self.cfg.max_hosts {
            return false;
        }
        let until = now_ms.saturating_add(u64::try_from(remaining.as_millis()).unwrap_or(u64::MAX));
        let r = self.entry(key, now_ms);
        if r.probing || r.down_until_ms.is_some_and(|t| t >= until) {
            return false;
        }
        r.down_until_ms = Some(until);
        r.down_count = r.down_count.max(1);
        r.last_error = Some(reason.chars().take(300).collect());
        true
    }

    /// The host answered, but its replies trickle (a tarpit): up (it answers, so not a failure
    /// and not down), and remembered as a tarpit for `remember`. True when newly marked.
    pub fn record_tarpit(&mut self, key: &HostKey, remember: Duration, now_ms: u64) -> bool {
        let r = self.entry(key, now_ms);
        let newly = !r.is_tarpit(now_ms);
        r.tarpit_until_ms = Some(now_ms.saturating_add(remember.as_millis() as u64));
        r.consecutive_failures = 0;
        r.down_count = 0;
        r.down_until_ms = None;
        r.probing = false;
        r.last_success_ms = Some(now_ms);
        newly
    }

    /// True when every host of the set that may be tried (not down) is a tarpit: the set is
    /// served by the slow lane alone.
    pub fn all_tarpits(&self, hosts: &[MxHost], now_ms: u64) -> bool {
        let mut any = false;
        for k in keys(hosts) {
            match self.hosts.get(&k) {
                Some(r) if r.is_down() => {}
                Some(r) if r.is_tarpit(now_ms) => any = true,
                _ => return false,
            }
        }
        any
    }

    /// [`HostHealth::plan`] for a lane: tarpits go last (any other host first), and the first
    /// pass never gets them at all (their replies outlast its patience).
    pub fn plan_lane(
        &mut self,
        hosts: &[MxHost],
        port: u16,
        now_ms: u64,
        lane: LaneKind,
    ) -> Vec<Target> {
        let plan = self.plan(hosts, port, now_ms);
        let (tarpits, mut rest): (Vec<Target>, Vec<Target>) = plan
            .into_iter()
            .partition(|t| self.hosts.get(&t.key).is_some_and(|r| r.is_tarpit(now_ms)));
        match lane {
            LaneKind::Slow => rest.extend(tarpits),
            LaneKind::Fast => {
                for t in tarpits.iter().filter(|t| t.probe) {
                    self.release_probe(&t.key);
                }
            }
        }
        rest
    }

    /// A probe ended without a verdict (the worker tried another host first, or gave up).
    pub fn release_probe(&mut self, key: &HostKey) {
        if let Some(r) = self.hosts.get_mut(key) {
            r.probing = false;
        }
    }

    fn entry(&mut self, key: &HostKey, now_ms: u64) -> &mut HostRecord {
        if !self.hosts.contains_key(key) && self.hosts.len() >= self.cfg.max_hosts {
            self.evict();
        }
        let r = self.hosts.entry(key.clone()).or_default();
        r.touched_ms = now_ms;
        r
    }

    /// Drops a tenth of the up hosts, least recently touched first.
    fn evict(&mut self) {
        let mut up: Vec<(u64, HostKey)> = self
            .hosts
            .iter()
            .filter(|(_, r)| !r.is_down() && !r.probing)
            .map(|(k, r)| (r.touched_ms, k.clone()))
            .collect();
        let n = (self.cfg.max_hosts / 10).max(1).min(up.len());
        if n == 0 {
            return;
        }
        up.select_nth_unstable_by_key(n - 1, |(t, _)| *t);
        for (_, k) in up.into_iter().take(n) {
            self.hosts.remove(&k);
        }
    }

    /// The persisted form (serialized by the caller off the actor's hot path).
    pub fn to_rows(&self) -> Vec<PersistedHost> {
        self.hosts
            .iter()
            .map(|(k, v)| (k.name.to_string(), k.addr, v.clone()))
            .collect()
    }

    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }
}

fn keys(hosts: &[MxHost]) -> impl Iterator<Item = HostKey> + '_ {
    hosts.iter().flat_map(|h| {
        let name: Arc<str> = Arc::from(h.name.as_str());
        h.addrs.iter().map(move |a| HostKey {
            name: name.clone(),
            addr: *a,
        })
    })
}

fn event(
    key: &HostKey,
    r: &HostRecord,
    state: HostStateKind,
    reason: &str,
    now_ms: u64,
) -> SchedulerEvent {
    SchedulerEvent::HostState {
        host: key.name.to_string(),
        addr: key.addr.to_string(),
        state,
        consecutive_failures: r.consecutive_failures,
        down_for_secs: r.down_until_ms.map(|t| t.saturating_sub(now_ms) / 1000),
        reason: reason.chars().take(300).collect(),
    }
}

/// Writes rows atomically: a temp file in the same directory, then rename. No fsync: the table
/// is a cache, and a torn or old file only costs a few extra probes.
pub fn save(path: &Path, rows: &[PersistedHost]) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(rows).map_err(std::io::Error::other)?;
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

/// Largest health file read (a corrupt or hostile file cannot make start-up allocate without
/// bound).
const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

fn load(path: &Path) -> std::io::Result<Vec<PersistedHost>> {
    let len = std::fs::metadata(path)?.len();
    if len > MAX_FILE_BYTES {
        return Err(std::io::Error::other(format!(
            "larger than {MAX_FILE_BYTES} bytes"
        )));
    }
    let bytes = std::fs::read(path)?;
    serde_json::from_slice(&bytes).map_err(std::io::Error::other)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> HealthConfig {
        HealthConfig {
            down_after_failures: 2,
            down_initial: Duration::from_secs(10),
            down_max: Duration::from_secs(40),
            max_hosts: 100,
        }
    }

    fn mx(name: &str, addrs: &[&str]) -> MxHost {
        MxHost {
            name: name.into(),
            preference: 10,
            addrs: addrs.iter().map(|a| a.parse().expect("ip")).collect(),
        }
    }

    /// A host another node marked down is skipped here until its time, then probed once; a
    /// shorter report than what this node knows changes nothing.
    #[test]
    fn a_host_down_at_another_node_is_skipped_here_then_probed() {
        let mut h = HostHealth::open(cfg(), None);
        let hosts = vec![mx("mx.a", &["127.1.0.1"]), mx("mx.b", &["127.1.0.2"])];
        let a = HostKey {
            name: "mx.a".into(),
            addr: "127.1.0.1".parse().expect("ip"),
        };
        assert!(h.adopt_down(&a, Duration::from_secs(30), "refused (node-1)", 1000));
        let plan = h.plan(&hosts, 25, 1000);
        assert_eq!(plan.len(), 1, "{plan:?}");
        assert_eq!(plan[0].key.name.as_ref(), "mx.b");
        assert!(!h.adopt_down(&a, Duration::from_secs(5), "older news", 2000));
        assert_eq!(h.get(&a).and_then(|r| r.down_until_ms), Some(31_000));
        let plan = h.plan(&hosts, 25, 31_000);
        assert!(plan[0].probe && plan[0].key == a, "{plan:?}");
        assert!(
            !h.adopt_down(&a, Duration::from_secs(60), "x", 31_000),
            "probing"
        );
        let mut full = HostHealth::open(
            HealthConfig {
                max_hosts: 1,
                ..cfg()
            },
            None,
        );
        assert!(full.adopt_down(&a, Duration::from_secs(30), "x", 0));
        let b = HostKey {
            name: "mx.b".into(),
            addr: "127.1.0.2".parse().expect("ip"),
        };
        assert!(
            !full.adopt_down(&b, Duration::from_secs(30), "x", 0),
            "no room: news of a stranger is dropped"
        );
        assert!(full.get(&b).is_none());
    }

    #[test]
    fn down_after_threshold_then_one_probe_then_up() {
        let mut h = HostHealth::open(cfg(), None);
        let hosts = vec![mx("mx.a", &["127.1.0.1"]), mx("mx.b", &["127.1.0.2"])];
        let a = HostKey {
            name: "mx.a".into(),
            addr: "127.1.0.1".parse().expect("ip"),
        };
        assert!(h.record_failure(&a, "refused", 0).is_none());
        // One failure: still usable, but after the healthy host.
        let plan = h.plan(&hosts, 25, 0);
        assert_eq!(plan[0].key.name.as_ref(), "mx.b");
        assert!(h.record_failure(&a, "refused", 0).is_some());
        let plan = h.plan(&hosts, 25, 5_000);
        assert_eq!(plan.len(), 1, "down host skipped before its probe time");
        let plan = h.plan(&hosts, 25, 10_000);
        assert!(plan[0].probe && plan[0].key == a);
        let plan = h.plan(&hosts, 25, 10_000);
        assert!(plan.iter().all(|t| !t.probe), "one probe at a time");
        // The probe fails: down for twice as long.
        assert!(h.record_failure(&a, "refused", 10_000).is_some());
        assert_eq!(h.get(&a).and_then(|r| r.down_until_ms), Some(30_000));
        let up = h.record_success(&a, &ConnectTimings::default(), 30_000);
        assert!(matches!(
            up,
            Some(SchedulerEvent::HostState {
                state: HostStateKind::Up,
                ..
            })
        ));
        assert_eq!(h.down_count(), 0);
    }

    #[test]
    fn survives_a_save_and_load() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("host-health.json");
        let mut h = HostHealth::open(cfg(), Some(path.clone()));
        let a = HostKey {
            name: "mx.a".into(),
            addr: "127.1.0.1".parse().expect("ip"),
        };
        h.record_failure(&a, "refused", 0);
        h.record_failure(&a, "refused", 0);
        save(&path, &h.to_rows()).expect("save");
        let h2 = HostHealth::open(cfg(), Some(path));
        assert!(h2.get(&a).is_some_and(|r| r.is_down()));
    }

    #[test]
    fn table_is_bounded() {
        let mut h = HostHealth::open(
            HealthConfig {
                max_hosts: 10,
                ..cfg()
            },
            None,
        );
        for i in 0..100u8 {
            let k = HostKey {
                name: "mx".into(),
                addr: IpAddr::from([127, 1, 0, i]),
            };
            h.record_reply(&k, Duration::from_millis(1), u64::from(i));
        }
        assert!(h.hosts.len() <= 10);
    }
}
