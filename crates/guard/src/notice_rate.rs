//! Limits on mail Herald sends on others' behalf: confirmations, held-post
//! notices, request replies, rejection and bounce-disabled notices. Each of them goes to an
//! address a stranger may have named (a forged `subscribe`, a forged envelope sender), so an
//! unlimited server is a spam cannon aimed at that address. A notice is admitted only when it
//! is under every limit: per recipient address and kind (in the kind's window), per client that
//! caused it (where known), per list, and for the whole server. What is over is *dropped* by the
//! caller with a log line and a counter: a notice is a courtesy, and queueing it for later
//! would only delay the flood.
//!
//! Why in memory and per process (like [`crate::PostRate`]): a brake, not an accounting record;
//! a restart forgets at most one window's worth.
//!
//! Limits: each table holds at most `max_tracked` keys. When a table is full of live windows a
//! new key is refused ([`NoticeLimit::Full`]: fail closed, a flood of fresh addresses is dropped,
//! not sent uncounted). A dropped notice uses up no budget of the other limits.
//!
//! SECURITY: the recipient is whatever a request or an envelope claims; it is only a counter's
//! name, compared case-insensitively (so `Victim@X` and `victim@x` share a budget). IPv6 clients
//! count per /64, the block one host usually controls.

use herald_types::{ListId, NoticeKind, NoticeLimit};
use serde::Deserialize;
use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::Mutex;

const HOUR_MS: u64 = 3_600_000;
const DAY_MS: u64 = 24 * HOUR_MS;

/// The `[notice_limits]` section. Every count is "at most this many"; 0 turns that limit off.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NoticeLimits {
    /// Confirmation requests to one address per day (all lists together).
    pub confirmations_per_address_per_day: u32,
    /// Held-post notices to one poster per hour.
    pub held_notices_per_address_per_hour: u32,
    /// Answers to request mail to one address per hour.
    pub request_replies_per_address_per_hour: u32,
    /// Rejection notices to one poster per hour.
    pub rejected_notices_per_address_per_hour: u32,
    /// Bounce-disabled notices to one address per day.
    pub disabled_notices_per_address_per_day: u32,
    /// Notices of every kind caused by one client (SMTP peer, per /64 for IPv6) per hour.
    pub per_client_per_hour: u32,
    /// Notices of every kind from one list per hour.
    pub per_list_per_hour: u32,
    /// Notices of every kind from the whole server per hour.
    pub global_per_hour: u32,
    /// Most keys each counting table holds (recipients, clients, lists).
    pub max_tracked: usize,
}

impl Default for NoticeLimits {
    fn default() -> Self {
        NoticeLimits {
            confirmations_per_address_per_day: 3,
            held_notices_per_address_per_hour: 3,
            request_replies_per_address_per_hour: 5,
            rejected_notices_per_address_per_hour: 5,
            disabled_notices_per_address_per_day: 3,
            per_client_per_hour: 30,
            per_list_per_hour: 300,
            global_per_hour: 3000,
            max_tracked: 100_000,
        }
    }
}

/// Bounds on `max_tracked`: a table too small refuses nearly everything, too large is memory.
pub const MAX_TRACKED_RANGE: std::ops::RangeInclusive<usize> = 1..=10_000_000;

impl NoticeLimits {
    /// Checked when the configuration is loaded; the error names the key.
    pub fn check(&self) -> Result<(), String> {
        if !MAX_TRACKED_RANGE.contains(&self.max_tracked) {
            return Err(format!(
                "notice_limits.max_tracked must be between {} and {}",
                MAX_TRACKED_RANGE.start(),
                MAX_TRACKED_RANGE.end()
            ));
        }
        Ok(())
    }

    /// The per-recipient limit of `kind` and its window.
    fn per_recipient(&self, kind: NoticeKind) -> (u32, u64) {
        match kind {
            NoticeKind::Confirmation => (self.confirmations_per_address_per_day, DAY_MS),
            NoticeKind::Held => (self.held_notices_per_address_per_hour, HOUR_MS),
            NoticeKind::RequestReply => (self.request_replies_per_address_per_hour, HOUR_MS),
            NoticeKind::Rejected => (self.rejected_notices_per_address_per_hour, HOUR_MS),
            NoticeKind::Disabled => (self.disabled_notices_per_address_per_day, DAY_MS),
            // A welcome follows a confirmation, so it can never be sent more often than one.
            NoticeKind::Welcome | NoticeKind::Goodbye => {
                (self.confirmations_per_address_per_day, DAY_MS)
            }
        }
    }
}

/// One notice about to be sent.
#[derive(Debug, Clone, Copy)]
pub struct NoticeTo<'a> {
    pub kind: NoticeKind,
    /// The recipient address.
    pub to: &'a str,
    /// The client whose request or post caused it, where known.
    pub client: Option<IpAddr>,
    pub list: ListId,
}

/// Counts notices against [`NoticeLimits`].
#[derive(Debug)]
pub struct NoticeRate {
    limits: NoticeLimits,
    /// A std Mutex: held for a few map lookups only, never across an `.await`.
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    recipients: HashMap<(NoticeKind, String), Window>,
    clients: HashMap<IpAddr, Window>,
    lists: HashMap<ListId, Window>,
    global: Option<Window>,
}

#[derive(Debug, Clone, Copy)]
struct Window {
    start_ms: u64,
    len_ms: u64,
    count: u32,
}

impl Window {
    fn live(&self, now_ms: u64) -> bool {
        now_ms.saturating_sub(self.start_ms) < self.len_ms
    }
}

impl NoticeRate {
    pub fn new(limits: NoticeLimits) -> NoticeRate {
        NoticeRate {
            limits,
            state: Mutex::default(),
        }
    }

    pub fn limits(&self) -> &NoticeLimits {
        &self.limits
    }

    /// Counts `n` at `now_ms` when it is under every limit; otherwise counts nothing and names
    /// the first limit it is over (recipient, client, list, global).
    pub fn admit(&self, n: NoticeTo<'_>, now_ms: u64) -> Result<(), NoticeLimit> {
        let l = &self.limits;
        let mut state = match self.state.lock() {
            Ok(s) => s,
            // A panic elsewhere while holding it left plain counters: still usable.
            Err(poisoned) => poisoned.into_inner(),
        };
        let (per_to, to_window) = l.per_recipient(n.kind);
        let to_key = (n.kind, n.to.to_ascii_lowercase());
        let client_key = n.client.map(client_key);
        let cap = l.max_tracked;
        let s = &mut *state;
        // Check everything first, so that a dropped notice spends no other budget.
        peek(&mut s.recipients, &to_key, per_to, cap, now_ms)
            .map_err(|full| full.unwrap_or(NoticeLimit::Recipient))?;
        if let Some(c) = &client_key {
            peek(&mut s.clients, c, l.per_client_per_hour, cap, now_ms)
                .map_err(|full| full.unwrap_or(NoticeLimit::Client))?;
        }
        peek(&mut s.lists, &n.list, l.per_list_per_hour, cap, now_ms)
            .map_err(|full| full.unwrap_or(NoticeLimit::List))?;
        if l.global_per_hour > 0 {
            if let Some(g) = s.global.filter(|g| g.live(now_ms)) {
                if g.count >= l.global_per_hour {
                    return Err(NoticeLimit::Global);
                }
            }
        }
        bump(&mut s.recipients, to_key, per_to, to_window, now_ms);
        if let Some(c) = client_key {
            bump(&mut s.clients, c, l.per_client_per_hour, HOUR_MS, now_ms);
        }
        bump(&mut s.lists, n.list, l.per_list_per_hour, HOUR_MS, now_ms);
        if l.global_per_hour > 0 {
            let g = s.global.get_or_insert(Window {
                start_ms: now_ms,
                len_ms: HOUR_MS,
                count: 0,
            });
            if !g.live(now_ms) {
                *g = Window {
                    start_ms: now_ms,
                    len_ms: HOUR_MS,
                    count: 0,
                };
            }
            g.count += 1;
        }
        Ok(())
    }

    /// Keys tracked now in all tables (for the bounded-memory tests).
    pub fn tracked(&self) -> usize {
        self.state
            .lock()
            .map_or(0, |s| s.recipients.len() + s.clients.len() + s.lists.len())
    }
}

/// IPv4 as is; IPv6 by its /64 (one host usually holds a whole /64 and can rotate in it).
fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

/// Whether `key` may count one more under `max` (0: no limit, nothing tracked). `Err(None)`:
/// over the limit; `Err(Some(Full))`: a new key and the table is full of live windows.
fn peek<K: Hash + Eq>(
    map: &mut HashMap<K, Window>,
    key: &K,
    max: u32,
    cap: usize,
    now_ms: u64,
) -> Result<(), Option<NoticeLimit>> {
    if max == 0 {
        return Ok(());
    }
    match map.get(key) {
        Some(w) if w.live(now_ms) => {
            if w.count >= max {
                Err(None)
            } else {
                Ok(())
            }
        }
        Some(_) => Ok(()), // expired: starts again
        None => {
            if map.len() >= cap {
                map.retain(|_, w| w.live(now_ms));
                if map.len() >= cap {
                    return Err(Some(NoticeLimit::Full));
                }
            }
            Ok(())
        }
    }
}

/// Counts one for `key` (after [`peek`] said yes).
fn bump<K: Hash + Eq>(map: &mut HashMap<K, Window>, key: K, max: u32, window_ms: u64, now_ms: u64) {
    if max == 0 {
        return;
    }
    let w = map.entry(key).or_insert(Window {
        start_ms: now_ms,
        len_ms: window_ms,
        count: 0,
    });
    if !w.live(now_ms) {
        *w = Window {
            start_ms: now_ms,
            len_ms: window_ms,
            count: 0,
        };
    }
    w.count += 1;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn to(kind: NoticeKind, to: &str) -> NoticeTo<'_> {
        NoticeTo {
            kind,
            to,
            client: None,
            list: ListId(1),
        }
    }

    #[test]
    fn three_confirmations_per_address_per_day() {
        let r = NoticeRate::new(NoticeLimits::default());
        let c = NoticeKind::Confirmation;
        for i in 0..3 {
            assert_eq!(r.admit(to(c, "victim@x.test"), i), Ok(()));
        }
        assert_eq!(
            r.admit(to(c, "victim@x.test"), 10),
            Err(NoticeLimit::Recipient)
        );
        assert_eq!(
            r.admit(to(c, "victim@x.test"), HOUR_MS * 23),
            Err(NoticeLimit::Recipient),
            "still the same day"
        );
        assert_eq!(r.admit(to(c, "victim@x.test"), DAY_MS), Ok(()), "a new day");
        // Other kinds and other addresses have their own budgets.
        assert_eq!(r.admit(to(NoticeKind::Held, "victim@x.test"), 10), Ok(()));
        assert_eq!(r.admit(to(c, "other@x.test"), 10), Ok(()));
    }

    #[test]
    fn held_notices_per_hour() {
        let r = NoticeRate::new(NoticeLimits::default());
        let h = NoticeKind::Held;
        for i in 0..3 {
            assert_eq!(r.admit(to(h, "poster@x.test"), i), Ok(()));
        }
        assert_eq!(
            r.admit(to(h, "poster@x.test"), 5),
            Err(NoticeLimit::Recipient)
        );
        assert_eq!(r.admit(to(h, "poster@x.test"), HOUR_MS), Ok(()));
    }

    /// Hostile: case variants of one address share its budget.
    #[test]
    fn case_variants_share_a_budget() {
        let r = NoticeRate::new(NoticeLimits::default());
        let c = NoticeKind::Confirmation;
        for a in ["Victim@X.test", "VICTIM@x.TEST", "victim@x.test"] {
            assert_eq!(r.admit(to(c, a), 0), Ok(()));
        }
        assert_eq!(
            r.admit(to(c, "vIcTiM@X.Test"), 0),
            Err(NoticeLimit::Recipient)
        );
    }

    /// Hostile: many distinct addresses from one client are stopped by the client's limit,
    /// then the list's, then the server's; a dropped notice spends no other budget.
    #[test]
    fn client_list_and_global_caps() {
        let limits = NoticeLimits {
            per_client_per_hour: 5,
            per_list_per_hour: 8,
            global_per_hour: 10,
            ..NoticeLimits::default()
        };
        let r = NoticeRate::new(limits);
        let attacker: IpAddr = "127.0.0.9".parse().expect("ip");
        let n = |i: usize, client, list| {
            let a = format!("v{i}@x.test");
            r.admit(
                NoticeTo {
                    kind: NoticeKind::Confirmation,
                    to: &a,
                    client,
                    list: ListId(list),
                },
                0,
            )
        };
        for i in 0..5 {
            assert_eq!(n(i, Some(attacker), 1), Ok(()));
        }
        for i in 5..50 {
            assert_eq!(n(i, Some(attacker), 1), Err(NoticeLimit::Client));
        }
        // The client's refusals spent none of the list's budget: 3 more from elsewhere.
        for i in 50..53 {
            assert_eq!(n(i, None, 1), Ok(()));
        }
        assert_eq!(n(53, None, 1), Err(NoticeLimit::List));
        assert_eq!(n(54, None, 2), Ok(()));
        assert_eq!(n(55, None, 3), Ok(()));
        assert_eq!(n(56, None, 4), Err(NoticeLimit::Global));
    }

    /// Hostile: an IPv6 client rotating through its /64 is one client.
    #[test]
    fn ipv6_counts_per_slash_64() {
        let limits = NoticeLimits {
            per_client_per_hour: 2,
            ..NoticeLimits::default()
        };
        let r = NoticeRate::new(limits);
        let results: Vec<_> = (1..=4)
            .map(|i| {
                let ip: IpAddr = format!("2001:db8:1:2::{i:x}").parse().expect("ip");
                let a = format!("v{i}@x.test");
                r.admit(
                    NoticeTo {
                        kind: NoticeKind::Confirmation,
                        to: &a,
                        client: Some(ip),
                        list: ListId(1),
                    },
                    0,
                )
            })
            .collect();
        assert_eq!(
            results,
            vec![
                Ok(()),
                Ok(()),
                Err(NoticeLimit::Client),
                Err(NoticeLimit::Client)
            ]
        );
    }

    /// Hostile: a flood of distinct recipients fills the table; then new ones are refused until
    /// windows expire, memory stays bounded, and known addresses keep their budget.
    #[test]
    fn a_flood_of_addresses_stays_bounded_and_fails_closed() {
        let limits = NoticeLimits {
            max_tracked: 1000,
            per_list_per_hour: 0,
            global_per_hour: 0,
            ..NoticeLimits::default()
        };
        let r = NoticeRate::new(limits);
        let h = NoticeKind::Held;
        for i in 0..1000 {
            assert_eq!(r.admit(to(h, &format!("s{i}@flood.test")), 0), Ok(()));
        }
        assert_eq!(r.admit(to(h, "new@flood.test"), 1), Err(NoticeLimit::Full));
        assert_eq!(r.admit(to(h, "s1@flood.test"), 1), Ok(()));
        assert_eq!(r.tracked(), 1000);
        assert_eq!(r.admit(to(h, "new@flood.test"), HOUR_MS), Ok(()));
        assert!(r.tracked() < 10, "expired windows were dropped");
    }

    #[test]
    fn zero_is_no_limit_and_nothing_is_tracked() {
        let limits = NoticeLimits {
            confirmations_per_address_per_day: 0,
            per_list_per_hour: 0,
            global_per_hour: 0,
            ..NoticeLimits::default()
        };
        let r = NoticeRate::new(limits);
        for _ in 0..100 {
            assert_eq!(r.admit(to(NoticeKind::Confirmation, "a@x.test"), 0), Ok(()));
        }
        assert_eq!(r.tracked(), 0);
    }

    #[test]
    fn config_is_checked() {
        assert!(NoticeLimits::default().check().is_ok());
        let bad = NoticeLimits {
            max_tracked: 0,
            ..NoticeLimits::default()
        };
        assert!(bad
            .check()
            .is_err_and(|e| e.contains("notice_limits.max_tracked")));
    }
}
