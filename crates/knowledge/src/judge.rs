//! What an exchange writes and what it makes of the answer: pure, so every rule is a unit test.
//!
//! Outgoing: the providers the actor sends to with its pace and what each accepted in the last
//! second, its cuts (the fraction of what the senders accepted that the provider takes now;
//! the store turns it into the cluster's rate), the hosts it marked down — plus whatever a failed exchange
//! could not write (kept for the next one, bounded).
//!
//! Incoming, per provider: its alive senders (at least this node), and — when something
//! changed — this node's share, in copies per second, with how to apply it:
//! - a node (this one too) lowered the cluster's rate since the last exchange (a fresh row,
//!   lowered within [`FRESH_MS`]): the rate divided by the senders, [`ShareChange::Lowered`]
//!   (taken as the pace: the stored rate is what all senders accepted, not what the refused
//!   node alone did);
//! - the senders changed (a node joined or left): the sum of the senders' paces at the last
//!   exchange divided by the senders now, [`ShareChange::Rebalanced`] (taken as the pace), so
//!   what the cluster sends stays what it was and is shared anew;
//! - this node starts sending to a provider others pace: their sum divided by the senders,
//!   [`ShareChange::Joined`] (a newcomer starts at its share at most, not unpaced).
//!
//! A rate is usable when finite, above zero and at most [`MAX_RATE_PER_SEC`]. Per down host:
//! the address must parse, the time left is capped at [`MAX_DOWN_MS`].
//!
//! SECURITY: the store's rows are another node's word, or an operator's hand edit: a rate that
//! is zero, negative, NaN or absurd, or an address that does not parse is ignored (logged once
//! per row version, counted in `herald_knowledge_ignored_rows_total`), never applied and never
//! a crash; a host down "forever" is down for at most an hour here.

use herald_directory::{
    DownHost, KnowledgeIn, KnowledgeOut, LoweredRate, Sending, MAX_KNOWLEDGE_ROWS,
};
use herald_scheduler::messages::knowledge::{
    ClusterKnowledge, LocalKnowledge, ProviderShare, ShareChange, SharedDownHost,
};
use herald_scheduler::messages::HostKey;
use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

/// The highest cluster-wide rate taken from the store (copies per second); above it a row is
/// nonsense, not a provider's limit.
pub const MAX_RATE_PER_SEC: f64 = 1_000_000.0;
/// A lowered rate older than this is history: a provider's limits change, and a node that
/// learns afresh loses little.
pub const FRESH_MS: u64 = 300_000;
/// Longest a host another node marked down is skipped here.
pub const MAX_DOWN_MS: u64 = 3_600_000;

/// What was last seen of a provider.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Seen {
    senders: u32,
    lowered_at_ms: u64,
    /// The sum of its senders' paces then.
    total: Option<f64>,
}

/// A rate from the store, if usable.
fn usable(r: f64) -> bool {
    r.is_finite() && r > 0.0 && r <= MAX_RATE_PER_SEC
}

/// Counts of one incoming answer, for `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Judged {
    /// Shares sent as lowered or rebalanced.
    pub shares_changed: u64,
    pub down_received: u64,
    pub ignored: u64,
}

/// The exchange's memory between intervals.
#[derive(Debug)]
pub struct Judge {
    node: String,
    seen: HashMap<String, Seen>,
    /// Rows ignored already (provider + lowered time, or host + address), so a bad row is
    /// logged once, not every second. Bounded: cleared when it grows past the row bound.
    warned: HashSet<String>,
    carry_lowered: Vec<LoweredRate>,
    carry_down: Vec<DownHost>,
}

impl Judge {
    pub fn new(node: &str) -> Judge {
        Judge {
            node: node.to_string(),
            seen: HashMap::new(),
            warned: HashSet::new(),
            carry_lowered: Vec::new(),
            carry_down: Vec::new(),
        }
    }

    /// What to write for `local` (and what a failed exchange left).
    pub fn outgoing(&mut self, local: &LocalKnowledge, prune: bool) -> KnowledgeOut {
        let mut lowered = std::mem::take(&mut self.carry_lowered);
        let mut down = std::mem::take(&mut self.carry_down);
        let mut sending = Vec::with_capacity(local.sending.len());
        for s in &local.sending {
            let rate = s.rate.filter(|r| r.is_finite());
            sending.push(Sending {
                provider: s.budget.clone(),
                rate_per_sec: rate,
                accepted_per_sec: if s.accepted.is_finite() {
                    s.accepted
                } else {
                    0.0
                },
            });
            let cut = s.cut.filter(|f| f.is_finite() && *f > 0.0 && *f <= 1.0);
            if let (Some(fraction), Some(rate)) = (cut, rate) {
                // A newer cut replaces one carried over.
                lowered.retain(|l| l.provider != s.budget);
                lowered.push(LoweredRate {
                    provider: s.budget.clone(),
                    fraction,
                    node_rate_per_sec: rate,
                });
            }
        }
        for h in &local.down {
            down.push(DownHost {
                mx_host: h.key.name.to_string(),
                address: h.key.addr.to_string(),
                remaining_ms: u64::try_from(h.remaining.as_millis()).unwrap_or(u64::MAX),
                reason: h.reason.clone(),
                marked_by: String::new(),
            });
        }
        lowered.truncate(MAX_KNOWLEDGE_ROWS);
        down.truncate(MAX_KNOWLEDGE_ROWS);
        KnowledgeOut {
            node: self.node.clone(),
            sending,
            lowered,
            down,
            prune,
        }
    }

    /// The exchange failed: its news is written next time (the providers are said anew).
    pub fn failed(&mut self, out: KnowledgeOut) {
        self.carry_lowered = out.lowered;
        self.carry_down = out.down;
    }

    /// What the store answered, for the actor.
    pub fn incoming(&mut self, got: KnowledgeIn) -> (ClusterKnowledge, Judged) {
        let mut judged = Judged::default();
        if self.warned.len() > MAX_KNOWLEDGE_ROWS {
            self.warned.clear();
        }
        let mut seen = HashMap::with_capacity(got.providers.len());
        let mut providers = Vec::with_capacity(got.providers.len());
        for row in got.providers {
            let senders = row.senders.max(1);
            let mut judge = |what: &str, r: Option<f64>| match r {
                Some(r) if usable(r) => Some(r),
                Some(r) => {
                    judged.ignored += 1;
                    let key = format!("{}@{}/{what}", row.provider, row.lowered_at_ms);
                    if self.warned.insert(key) {
                        tracing::warn!(provider = %row.provider, what, rate = r, by = ?row.lowered_by, "shared provider rate is not a usable number: ignored");
                    }
                    None
                }
                None => None,
            };
            let rate = judge("lowered rate", row.rate_per_sec);
            let total = judge("senders' paces", row.paced_total);
            let fresh = got.now_ms.saturating_sub(row.lowered_at_ms) <= FRESH_MS;
            let prev = self.seen.get(&row.provider).copied();
            // This node's own cut too: the stored rate is what all senders accepted, its own
            // pace only what it did.
            let newly_lowered = rate.is_some()
                && fresh
                && prev.is_none_or(|p| p.lowered_at_ms != row.lowered_at_ms);
            let per = |r: f64| r / f64::from(senders);
            let (share, change) = match (rate, prev, total) {
                // A node was refused: its share of the new rate is every sender's pace.
                (Some(r), _, _) if newly_lowered => (Some(per(r)), ShareChange::Lowered),
                // A node joined or left: what the cluster sent, shared among the senders now.
                (_, Some(p), _) if p.senders != senders => match p.total {
                    Some(t) => (Some(per(t)), ShareChange::Rebalanced),
                    None => (None, ShareChange::None),
                },
                // This node starts sending to a paced provider: no more than its share.
                (_, None, Some(t)) => (Some(per(t)), ShareChange::Joined),
                _ => (None, ShareChange::None),
            };
            if change != ShareChange::None {
                judged.shares_changed += 1;
            }
            seen.insert(
                row.provider.clone(),
                Seen {
                    senders,
                    lowered_at_ms: row.lowered_at_ms,
                    total,
                },
            );
            providers.push(ProviderShare {
                budget: row.provider,
                senders,
                share,
                change,
            });
        }
        self.seen = seen;
        let mut down = Vec::with_capacity(got.down.len());
        for h in got.down {
            match h.address.parse::<IpAddr>() {
                Ok(addr) if !h.mx_host.is_empty() => {
                    judged.down_received += 1;
                    down.push(SharedDownHost {
                        key: HostKey {
                            name: Arc::from(h.mx_host.to_ascii_lowercase().as_str()),
                            addr,
                        },
                        remaining: Duration::from_millis(h.remaining_ms.min(MAX_DOWN_MS)),
                        reason: format!("{} (down at node {})", h.reason, h.marked_by),
                    });
                }
                _ => {
                    judged.ignored += 1;
                    if self.warned.insert(format!("{}/{}", h.mx_host, h.address)) {
                        tracing::warn!(host = %h.mx_host, address = %h.address, by = %h.marked_by, "shared down host has no usable name or address: ignored");
                    }
                }
            }
        }
        (ClusterKnowledge { providers, down }, judged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_directory::ProviderRow;
    use herald_scheduler::messages::knowledge::SendingTo;

    fn row(rate: Option<f64>, at: u64, by: &str, senders: u32) -> ProviderRow {
        ProviderRow {
            provider: "provider.test".into(),
            rate_per_sec: rate,
            lowered_at_ms: at,
            lowered_by: Some(by.into()),
            senders,
            paced_total: None,
        }
    }

    fn paced(total: f64, senders: u32) -> ProviderRow {
        ProviderRow {
            paced_total: Some(total),
            ..row(None, 0, "", senders)
        }
    }

    fn answer(providers: Vec<ProviderRow>, down: Vec<DownHost>) -> KnowledgeIn {
        KnowledgeIn {
            now_ms: 1_000_000,
            providers,
            down,
            statements: 3,
        }
    }

    fn one(j: &mut Judge, r: ProviderRow) -> ProviderShare {
        j.incoming(answer(vec![r], vec![])).0.providers.remove(0)
    }

    /// Another node's cut is adopted once (its share), the node's own cut is not news to it,
    /// a stale rate is history.
    #[test]
    fn another_nodes_cut_is_sent_once_as_lowered() {
        let mut j = Judge::new("me");
        let p = one(&mut j, row(Some(90.0), 999_000, "a", 3));
        assert_eq!((p.share, p.change), (Some(30.0), ShareChange::Lowered));
        let p = one(&mut j, row(Some(90.0), 999_000, "a", 3));
        assert_eq!(p.change, ShareChange::None, "nothing new");
        let p = one(&mut j, row(Some(60.0), 999_500, "me", 3));
        assert_eq!(
            (p.share, p.change),
            (Some(20.0), ShareChange::Lowered),
            "its own cut: the cluster's estimate beats its own"
        );
        let p = one(&mut j, row(Some(60.0), 999_500, "me", 0));
        assert_eq!(p.senders, 1, "never fewer than one");
        let mut k = Judge::new("me");
        let p = one(&mut k, row(Some(60.0), 1_000_000 - FRESH_MS - 1, "a", 1));
        assert_eq!((p.share, p.change), (None, ShareChange::None), "stale");
    }

    /// When a node joins or leaves, what the senders sent is shared among the senders now; a
    /// node that starts sending to a paced provider starts at its share.
    #[test]
    fn senders_joining_and_leaving_rebalance_the_total() {
        let mut j = Judge::new("me");
        let p = one(&mut j, paced(60.0, 2));
        assert_eq!(
            (p.share, p.change),
            (Some(30.0), ShareChange::Joined),
            "newcomer"
        );
        let p = one(&mut j, paced(90.0, 2));
        assert_eq!(p.change, ShareChange::None, "paces grow: nothing to do");
        let p = one(&mut j, paced(90.0, 3));
        assert_eq!(
            (p.share, p.change),
            (Some(30.0), ShareChange::Rebalanced),
            "joined"
        );
        let p = one(&mut j, paced(60.0, 2));
        assert_eq!(
            (p.share, p.change),
            (Some(45.0), ShareChange::Rebalanced),
            "left"
        );
        let mut unpaced = Judge::new("me");
        one(&mut unpaced, row(None, 0, "", 1));
        let p = one(&mut unpaced, row(None, 0, "", 2));
        assert_eq!(
            (p.share, p.change),
            (None, ShareChange::None),
            "nobody paced"
        );
    }

    /// Hostile rates and addresses are ignored and counted; the rest of the answer stands.
    #[test]
    fn hostile_rows_are_ignored_not_applied() {
        let mut j = Judge::new("me");
        for bad in [0.0, -5.0, f64::NAN, f64::INFINITY, 1e300] {
            let mut r = row(Some(bad), 999_000, "a", 3);
            r.paced_total = Some(bad);
            let (k, judged) = j.incoming(answer(vec![r], vec![]));
            assert_eq!(judged.ignored, 2, "{bad}");
            assert_eq!(k.providers[0].share, None, "{bad}");
            assert_eq!(k.providers[0].senders, 3);
        }
        let host = |name: &str, addr: &str, left: u64| DownHost {
            mx_host: name.into(),
            address: addr.into(),
            remaining_ms: left,
            reason: "refused".into(),
            marked_by: "a".into(),
        };
        let (k, judged) = j.incoming(answer(
            vec![],
            vec![
                host("mx1.provider.test", "not an address", 1000),
                host("", "127.1.0.1", 1000),
                host("MX2.provider.test", "127.1.0.2", u64::MAX),
            ],
        ));
        assert_eq!((judged.ignored, judged.down_received), (2, 1));
        assert_eq!(k.down.len(), 1);
        assert_eq!(k.down[0].key.name.as_ref(), "mx2.provider.test");
        assert_eq!(k.down[0].remaining, Duration::from_millis(MAX_DOWN_MS));
        assert!(k.down[0].reason.contains("node a"), "{}", k.down[0].reason);
    }

    /// Cuts and down hosts go out; what a failed exchange could not write goes out next time,
    /// replaced by a newer cut of the same provider.
    #[test]
    fn news_of_a_failed_exchange_is_written_next_time() {
        let mut j = Judge::new("me");
        let local = LocalKnowledge {
            sending: vec![
                SendingTo {
                    budget: "provider.test".into(),
                    rate: Some(20.0),
                    accepted: 25.0,
                    cut: Some(0.9),
                },
                SendingTo {
                    budget: "other.test".into(),
                    rate: Some(f64::NAN),
                    accepted: f64::NAN,
                    cut: Some(f64::NAN),
                },
            ],
            down: vec![SharedDownHost {
                key: HostKey {
                    name: "mx1.provider.test".into(),
                    addr: "127.1.20.1".parse().expect("ip"),
                },
                remaining: Duration::from_secs(30),
                reason: "refused".into(),
            }],
        };
        let out = j.outgoing(&local, false);
        assert_eq!(out.sending.len(), 2);
        assert_eq!(out.sending[0].rate_per_sec, Some(20.0));
        assert_eq!(out.sending[0].accepted_per_sec, 25.0);
        assert_eq!(
            (out.sending[1].rate_per_sec, out.sending[1].accepted_per_sec),
            (None, 0.0)
        );
        assert_eq!(out.lowered.len(), 1, "a NaN cut is not news");
        assert_eq!(out.down[0].address, "127.1.20.1");
        assert_eq!(out.down[0].remaining_ms, 30_000);
        j.failed(out);
        let again = j.outgoing(&LocalKnowledge::default(), true);
        assert_eq!(again.lowered[0].fraction, 0.9);
        assert_eq!(again.lowered[0].node_rate_per_sec, 20.0);
        assert_eq!(again.down.len(), 1);
        assert!(again.prune);
        j.failed(again);
        let local = LocalKnowledge {
            sending: vec![SendingTo {
                budget: "provider.test".into(),
                rate: Some(10.0),
                accepted: 12.0,
                cut: Some(0.7),
            }],
            down: vec![],
        };
        let out = j.outgoing(&local, false);
        assert_eq!(out.lowered.len(), 1);
        assert_eq!(out.lowered[0].fraction, 0.7);
        let out = j.outgoing(&LocalKnowledge::default(), false);
        assert!(
            out.lowered.is_empty() && out.down.is_empty(),
            "written once"
        );
    }
}
