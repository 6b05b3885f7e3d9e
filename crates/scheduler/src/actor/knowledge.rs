//! The actor's side of the cluster's shared knowledge (the exchange loop is
//! `herald-knowledge`): one [`Ctrl::Knowledge`](crate::messages::Ctrl) message per interval
//! applies what the cluster knows and answers with what this node learned since the last one.
//!
//! Applied: a provider's alive senders (its budget's configured rate is divided among them:
//! `Budget::set_senders`); this node's share of the provider's cluster-wide rate — when a node
//! lowered it after a refusal, taken as the pace (every sender slows down at the first refusal
//! anywhere, to its share of what the provider took from all of them), when the senders
//! changed likewise (rebalanced as nodes join and leave), and when this node starts sending
//! to a paced provider, adopted if lower than its own pace; hosts another node marked down (down here too for
//! the time left, before this node ever tries them; hosts it never met only while its host
//! table has room).
//!
//! Answered: the budgets of destinations with copies queued or connections open, each with its
//! pace, the copies accepted in the last second (mostly before the cut, when there was one:
//! the exchange follows within an interval), and the fraction of a cut since the last
//! exchange; the hosts marked down here since (bounded by
//! [`MAX_PENDING_DOWN`]: beyond it the oldest news is the cluster's to miss, the hosts are
//! still down here).

use crate::actor::Actor;
use crate::messages::knowledge::{
    ClusterKnowledge, LocalKnowledge, SendingTo, ShareChange, SharedDownHost,
};
use crate::messages::HostKey;
use herald_telemetry::SchedulerEvent;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Down hosts kept for the next exchange at most.
pub const MAX_PENDING_DOWN: usize = 256;

impl Actor {
    pub(crate) fn on_knowledge(&mut self, k: ClusterKnowledge) -> LocalKnowledge {
        let now = Instant::now();
        for p in k.providers {
            let Some(b) = self.budgets.get_mut(p.budget.as_str()) else {
                continue;
            };
            if b.set_senders(p.senders) {
                tracing::info!(budget = %b.name, senders = p.senders, "nodes sending to this provider changed: its budget is shared among them");
            }
            let Some(share) = p.share else { continue };
            let changed = match p.change {
                ShareChange::None => false,
                ShareChange::Joined => b.pace.adopt(share, now),
                ShareChange::Lowered | ShareChange::Rebalanced => {
                    b.pace.rebalance(share, now);
                    true
                }
            };
            if changed {
                b.end_slow_start();
                let connections = b.connection_limit() as u32;
                tracing::info!(budget = %b.name, copies_per_sec = share, connections, why = ?p.change, "paced to this node's share of the provider's rate in the cluster");
                let e = SchedulerEvent::Shaped {
                    budget: b.name.to_string(),
                    connections,
                    per_minute: Some((share * 60.0).round() as u32),
                    throttled: p.change == ShareChange::Lowered,
                };
                self.emit(e);
            }
        }
        if !k.down.is_empty() {
            self.adopt_down_hosts(k.down);
        }
        self.local_knowledge()
    }

    /// Marks down here the hosts other nodes found down (see `HostHealth::adopt_down`).
    fn adopt_down_hosts(&mut self, down: Vec<SharedDownHost>) {
        let now_ms = self.clock.now_ms();
        for h in down {
            if self
                .health
                .adopt_down(&h.key, h.remaining, &h.reason, now_ms)
            {
                tracing::info!(host = %h.key.name, addr = %h.key.addr, secs = h.remaining.as_secs(), reason = %h.reason, "host down at another node: skipped here too");
            }
        }
    }

    /// The providers this node sends to, their cuts, and the hosts it marked down.
    fn local_knowledge(&mut self) -> LocalKnowledge {
        let mut names: BTreeSet<Arc<str>> = self
            .dests
            .values()
            .filter(|d| d.queued() > 0 || d.workers() > 0)
            .map(|d| d.budget.clone())
            .collect();
        names.extend(
            self.budgets
                .iter()
                .filter(|(_, b)| b.cut.is_some())
                .map(|(n, _)| n.clone()),
        );
        let now = Instant::now();
        let sending = names
            .into_iter()
            .map(|name| SendingTo {
                rate: self.budgets.get(&name).and_then(|b| b.pace.rate()),
                accepted: self.budgets.get_mut(&name).map_or(0.0, |b| {
                    b.pace.accepted_recently(now) as f64 / crate::actor::pace::WINDOW.as_secs_f64()
                }),
                cut: self.budgets.get_mut(&name).and_then(|b| b.cut.take()),
                budget: name.to_string(),
            })
            .collect();
        LocalKnowledge {
            sending,
            down: std::mem::take(&mut self.shared_down),
        }
    }

    /// This node marked `key` down: news for the cluster at the next exchange.
    pub(crate) fn tell_down(&mut self, key: &HostKey, reason: &str) {
        if self.shared_down.len() >= MAX_PENDING_DOWN {
            return;
        }
        let now_ms = self.clock.now_ms();
        let Some(until) = self.health.get(key).and_then(|r| r.down_until_ms) else {
            return;
        };
        self.shared_down.push(SharedDownHost {
            key: key.clone(),
            remaining: Duration::from_millis(until.saturating_sub(now_ms)),
            reason: reason.chars().take(300).collect(),
        });
    }
}
