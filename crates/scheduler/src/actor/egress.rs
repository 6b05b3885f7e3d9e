//! Egress pools in the actor: a copy's pool — its list's `egress_pool`, else
//! the pool for its recipient domain, else the default (`herald_egress::Egress::pool_for`) —
//! is part of its destination's key, `<route key>|egress=<pool>`. So copies of lists bound to
//! different pools never share a connection, each such destination's workers lease a source of
//! its pool (`workers/smtp.rs`), and the queue, backoff and host health work as for any other
//! destination. A variant shares its route's hosts, policies and shaping budget (so the
//! provider's connection limit still spans every pool); it is created on first use and
//! follows its route when the route changes.

use crate::actor::queue::Destination;
use crate::actor::Actor;
use crate::messages::Job;
use herald_types::LaneKind;
use std::sync::Arc;

/// The marker between a route's key and its pool.
const MARK: &str = "|egress=";

/// True when `key` is an egress variant of destination `base`.
pub(crate) fn is_variant_of(key: &str, base: &str) -> bool {
    key.strip_prefix(base)
        .is_some_and(|rest| rest.starts_with(MARK))
}

impl Actor {
    /// The destination `job` goes to under the route `base`: `base` without egress pools (or
    /// when the copy has none), else its pool's variant, created from `base` when new.
    pub(crate) fn pooled(&mut self, base: &Arc<str>, job: &Job) -> Arc<str> {
        let Some(egress) = &self.ctx.egress else {
            return base.clone();
        };
        let Some(pool) = egress.pool_for(job.post.egress_pool.as_deref(), job.domain()) else {
            return base.clone();
        };
        let key: Arc<str> = Arc::from(format!("{base}{MARK}{pool}"));
        if self.dests.contains_key(&key) {
            return key;
        }
        let Some(b) = self.dests.get(base) else {
            return base.clone();
        };
        let mut d = Destination::new(key.clone(), b.hosts.clone(), b.budget.clone());
        d.sts = b.sts.clone();
        d.dane = b.dane.clone();
        d.egress_pool = Some(pool);
        self.dests.insert(key.clone(), d);
        key
    }

    /// Takes `domain`'s copies out of `key` and all its egress variants.
    pub(super) fn take_domain_everywhere(&mut self, key: &Arc<str>, domain: &str) -> Vec<Job> {
        let mut ready = self.take_domain(key, domain);
        for variant in self.variants_of(key) {
            ready.extend(self.take_domain(&variant, domain));
        }
        ready
    }

    fn variants_of(&self, key: &Arc<str>) -> Vec<Arc<str>> {
        self.dests
            .keys()
            .filter(|k| is_variant_of(k, key))
            .cloned()
            .collect()
    }

    /// A route change with egress pools: `domain`'s ready copies leave `from` and its variants
    /// for `to`'s variant of each copy's pool, keeping their lane (parked ones follow when
    /// their time comes).
    pub(super) fn reroute_pooled(&mut self, domain: &str, from: &Arc<str>, to: &Arc<str>) {
        let ready = self.take_domain_everywhere(from, domain);
        if ready.is_empty() {
            return;
        }
        tracing::info!(domain, from = %from, to = %to, copies = ready.len(), "route changed: queued copies moved");
        let mut touched = Vec::new();
        for job in ready {
            let at = self.pooled(to, &job);
            if let Some(d) = self.dests.get_mut(&at) {
                match job.lane {
                    LaneKind::Fast => d.fast.push_back(job),
                    LaneKind::Slow => d.slow.push_back(job),
                }
            }
            touched.push(at);
        }
        touched.sort_unstable();
        touched.dedup();
        for at in touched {
            self.pump(&at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::is_variant_of;

    #[test]
    fn variants_are_recognised_by_their_marker() {
        assert!(is_variant_of("mx.a.test|egress=main", "mx.a.test"));
        assert!(!is_variant_of("mx.a.test", "mx.a.test"));
        assert!(!is_variant_of("mx.a.test.evil|egress=x", "mx.a.test"));
        assert!(!is_variant_of("mx.a.test|dane|egress=x", "mx.a.test"));
        assert!(is_variant_of("mx.a.test|dane|egress=x", "mx.a.test|dane"));
    }
}
