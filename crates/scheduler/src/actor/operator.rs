//! Operator actions on queued copies (seeds/000's stragglers, acted on): retry now, or give up.
//! A child module of the actor so it works on the actor's own state, in the actor's task: no
//! locks, and the "every job is in exactly one place" invariant is kept by the same code path
//! (`finish` for final outcomes, `queued` adjusted for every job taken out).
//!
//! A give-up is Herald's verdict, not the recipient's: its copies fail with
//! [`FailureCause::OperatorGaveUp`], which the bounce stage does not score against the member.
//!
//! Limits: copies inside a worker's batch at the moment of the command are not touched (they come
//! back through `Requeue` or end on their own); the command reports how many copies it matched.

use super::{Actor, Route};
use crate::actor::queue::ReadyQueue;
use crate::messages::{Action, Command, Job, Selector};
use herald_types::FailureCause;
use tokio::time::Instant;

impl Selector {
    pub(crate) fn matches(&self, job: &Job) -> bool {
        match self {
            Selector::Recipient(a) => job.member.address.to_string().eq_ignore_ascii_case(a),
            Selector::Domain(d) => job.domain().eq_ignore_ascii_case(d),
            Selector::Post(p) => job.post.id == *p,
        }
    }
}

impl Actor {
    pub(super) async fn on_operator(&mut self, cmd: Command) {
        let matched = match cmd.action {
            Action::RetryNow => self.retry_now(&cmd.selector),
            Action::GiveUp => self.give_up(&cmd.selector).await,
        };
        tracing::info!(selector = ?cmd.selector, action = ?cmd.action, matched, "operator command");
        let _ = cmd.reply.send(matched);
    }

    fn retry_now(&mut self, sel: &Selector) -> u64 {
        let now = Instant::now();
        let now_ms = self.clock.now_ms();
        let mut matched = 0u64;
        let mut touched = Vec::new();
        // Parked copies are due now: they come back from the deferred queue from the next tick.
        for (key, kind, job) in self.take_parked(sel) {
            matched += 1;
            self.park(&key, now, kind, job);
            touched.push(key);
        }
        // Copies waiting for room need no retry time: they go first when there is room.
        matched += self.overflow_first(sel);
        for (key, d) in self.dests.iter_mut() {
            let ready_hits = count_ready(&mut d.fast, sel) + count_ready(&mut d.slow, sel);
            if ready_hits == 0 {
                continue;
            }
            matched += ready_hits;
            touched.push(key.clone());
        }
        touched.sort_unstable();
        touched.dedup();
        for key in &touched {
            // The operator says the hosts are worth a try now: probe them at once.
            if let Some(d) = self.dests.get(key) {
                self.health.probe_now(&d.hosts, now_ms);
            }
        }
        for route in self.routes.values_mut() {
            if let Route::RetryDns { until, jobs } = route {
                let hits = jobs.iter().filter(|j| sel.matches(j)).count() as u64;
                if hits > 0 {
                    matched += hits;
                    *until = now;
                }
            }
        }
        for key in touched {
            self.pump(&key);
        }
        self.retry_routes(now);
        matched
    }

    async fn give_up(&mut self, sel: &Selector) -> u64 {
        let mut taken: Vec<Job> = Vec::new();
        let mut parked: Vec<Job> = Vec::new();
        for (_, _, job) in self.take_parked(sel) {
            parked.push(job);
        }
        parked.extend(self.take_overflow(sel).into_iter().map(|(_, job)| job));
        for d in self.dests.values_mut() {
            taken.extend(take_ready(&mut d.fast, sel));
            taken.extend(take_ready(&mut d.slow, sel));
        }
        for route in self.routes.values_mut() {
            if let Route::RetryDns { jobs, .. } = route {
                let (hit, keep): (Vec<_>, Vec<_>) = std::mem::take(jobs)
                    .into_iter()
                    .partition(|j| sel.matches(j));
                *jobs = keep;
                taken.extend(hit);
            }
        }
        let matched = (taken.len() + parked.len()) as u64;
        for job in taken {
            self.leave_queue(&job);
            self.finish(job, FailureCause::OperatorGaveUp).await;
        }
        // Parked copies were never counted in the in-memory queue.
        for job in parked {
            self.forget_straggler(&job);
            self.finish(job, FailureCause::OperatorGaveUp).await;
        }
        matched
    }
}

/// Matching copies in a ready queue (the queue keeps its per-post order).
fn count_ready(q: &mut ReadyQueue, sel: &Selector) -> u64 {
    let jobs = q.drain();
    let hits = jobs.iter().filter(|j| sel.matches(j)).count() as u64;
    for job in jobs {
        q.push_back(job);
    }
    hits
}

/// Takes the matching copies out of a ready queue, keeping the others in order.
fn take_ready(q: &mut ReadyQueue, sel: &Selector) -> Vec<Job> {
    let (hit, keep): (Vec<_>, Vec<_>) = q.drain().into_iter().partition(|j| sel.matches(j));
    for job in keep {
        q.push_back(job);
    }
    hit
}

impl Actor {
    /// New shaping rules (an operator's SIGHUP): every destination is matched again, moving
    /// to the budget the new rules give it with its open workers (so connection accounting
    /// stays exact), and rule budgets that stay are retuned in place (their learned rate and
    /// AIMD state are kept). Budgets left without destinations are dropped once idle.
    pub(super) fn reshape(&mut self, rules: Vec<crate::ShapingRule>) {
        if rules == self.cfg.shaping {
            return;
        }
        let mut cfg = (*self.cfg).clone();
        cfg.shaping = rules;
        self.cfg = std::sync::Arc::new(cfg);
        for rule in self.cfg.shaping.clone() {
            if let Some(b) = self.budgets.get_mut(&*format!("rule:{}", rule.name)) {
                b.retune(
                    rule.max_connections
                        .unwrap_or(self.cfg.max_connections_per_destination),
                    rule.max_messages_per_connection
                        .unwrap_or(self.cfg.max_messages_per_connection),
                    rule.max_messages_per_minute,
                );
            }
        }
        let keys: Vec<std::sync::Arc<str>> = self.dests.keys().cloned().collect();
        let mut moved = 0usize;
        for key in keys {
            let Some(first) = self
                .dests
                .get(&key)
                .map(|d| d.hosts.first().map_or(String::new(), |h| h.name.clone()))
            else {
                continue;
            };
            let budget = self.budget_for(&first);
            let Some(d) = self.dests.get_mut(&key) else {
                continue;
            };
            if d.budget == budget {
                continue;
            }
            let workers = d.fast_workers + d.slow_workers;
            let old = std::mem::replace(&mut d.budget, budget.clone());
            if let Some(b) = self.budgets.get_mut(&old) {
                b.active = b.active.saturating_sub(workers);
            }
            if let Some(b) = self.budgets.get_mut(&budget) {
                b.active += workers;
            }
            moved += 1;
        }
        let used: std::collections::HashSet<std::sync::Arc<str>> =
            self.dests.values().map(|d| d.budget.clone()).collect();
        self.budgets
            .retain(|name, b| used.contains(name) || b.active > 0);
        tracing::info!(
            rules = self.cfg.shaping.len(),
            destinations_moved = moved,
            "shaping rules replaced"
        );
        let keys: Vec<std::sync::Arc<str>> = self.dests.keys().cloned().collect();
        for key in keys {
            self.pump(&key);
        }
    }
}
