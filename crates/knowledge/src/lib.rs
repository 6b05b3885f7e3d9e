//! herald-knowledge: what the nodes of a cluster tell each other about the outside world
//!, so three nodes do not push a throttling provider three times as hard
//! and do not each discover a dead host for themselves.
//!
//! Place in the flow: a side stage beside the scheduler, started by `server/steps.rs` when the
//! store is PostgreSQL and `[cluster] shared_knowledge` is on (the default there; a SQLite node
//! has nobody to tell and runs exactly as before). Its loop ([`run`], every `[cluster]
//! knowledge_interval_ms`) is one exchange:
//!
//! 1. the scheduler's actor gets what the cluster said last time and answers with what this
//!    node learned since (`Scheduler::exchange_knowledge`, a message on the actor's inbox:
//!    the actor's state stays the actor's);
//! 2. one transaction on the shared store (`Directory::exchange_knowledge`): this node's
//!    providers, its rate cuts and the hosts it marked down are written, and the providers'
//!    cluster-wide rates with their alive senders and the hosts others marked down are read;
//! 3. the answer is judged (`judge.rs`: hostile values ignored) for the next interval.
//!
//! So a provider's rate is one number for the cluster, divided among the alive nodes sending to
//! it (liveness is the node registry's heartbeat: a dead node stops counting within the dead
//! window), and the first refusal anywhere slows every sender down. Cost: one transaction of
//! three to six statements per node per interval whatever the traffic (`/metrics`
//! `herald_knowledge_statements_total`; measured in BENCHMARKS.md).
//!
//! A failed exchange (store down) is logged and counted; the node keeps its own knowledge and
//! writes what it could not at the next one. The loop ends with the scheduler. What the
//! cluster says reaches the actor at the exchange after it was read: within two intervals.
//!
//! Message-IDs are shared too, but per post rather than per interval: enqueue's
//! `ClusterDedup` reads and writes the store's `cluster_dedup` table itself (this loop only
//! prunes it).
//!
//! SECURITY: the store's rows come from other nodes or an operator's hand; `judge.rs` decides
//! what of them is usable, and the actor never sees a raw row.

mod judge;
pub mod metrics;

pub use judge::{Judge, Judged, FRESH_MS, MAX_DOWN_MS, MAX_RATE_PER_SEC};

use herald_cluster::ClusterConfig;
use herald_directory::{Directory, KnowledgeWindows};
use herald_scheduler::messages::knowledge::ClusterKnowledge;
use herald_scheduler::Scheduler;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

/// Exchanges between two prunings of rows nobody needs any more.
const PRUNE_EVERY: u64 = 600;

/// This node's counters, for `/metrics`.
#[derive(Debug, Default)]
pub struct Counters {
    pub exchanges: AtomicU64,
    pub failures: AtomicU64,
    pub statements: AtomicU64,
    pub rates_lowered: AtomicU64,
    pub shares_changed: AtomicU64,
    pub down_sent: AtomicU64,
    pub down_received: AtomicU64,
    pub ignored_rows: AtomicU64,
}

/// What the loop needs.
pub struct KnowledgeDeps {
    pub directory: Directory,
    pub scheduler: Scheduler,
    /// This node's id (the node registry's).
    pub node: String,
    pub cfg: ClusterConfig,
}

/// The shared knowledge of this node: its loop's dependencies and counters.
pub struct Knowledge {
    deps: KnowledgeDeps,
    pub counters: Counters,
}

impl Knowledge {
    pub fn new(deps: KnowledgeDeps) -> Arc<Knowledge> {
        Arc::new(Knowledge {
            deps,
            counters: Counters::default(),
        })
    }

    /// The windows of an exchange: a node is a provider's sender while it said so within three
    /// intervals (at least three seconds), alive by the registry's dead window.
    fn windows(&self) -> KnowledgeWindows {
        let every = self.deps.cfg.knowledge_interval_ms;
        KnowledgeWindows {
            sender_ms: every.saturating_mul(3).max(3000),
            dead_after_ms: u64::try_from(self.deps.cfg.dead_after().as_millis())
                .unwrap_or(u64::MAX),
        }
    }
}

/// The loop: one exchange per interval until `stop` or the scheduler stops.
pub async fn run(k: Arc<Knowledge>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(k.deps.cfg.knowledge_interval());
    // A slow store delays the next exchange; it never makes a burst of them.
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut judge = Judge::new(&k.deps.node);
    let mut pending = ClusterKnowledge::default();
    let c = &k.counters;
    for n in 0u64.. {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tick.tick() => {}
        }
        let Ok(local) = k
            .deps
            .scheduler
            .exchange_knowledge(std::mem::take(&mut pending))
            .await
        else {
            break; // the scheduler has stopped
        };
        let out = judge.outgoing(&local, n % PRUNE_EVERY == 0);
        let lowered = out.lowered.len() as u64;
        let down = out.down.len() as u64;
        let (d, w, sent) = (k.deps.directory.clone(), k.windows(), out.clone());
        let answer = tokio::task::spawn_blocking(move || d.exchange_knowledge(&sent, w)).await;
        c.exchanges.fetch_add(1, Ordering::Relaxed);
        match answer {
            Ok(Ok(got)) => {
                c.statements
                    .fetch_add(u64::from(got.statements), Ordering::Relaxed);
                c.rates_lowered.fetch_add(lowered, Ordering::Relaxed);
                c.down_sent.fetch_add(down, Ordering::Relaxed);
                let (k2, judged) = judge.incoming(got);
                c.shares_changed
                    .fetch_add(judged.shares_changed, Ordering::Relaxed);
                c.down_received
                    .fetch_add(judged.down_received, Ordering::Relaxed);
                c.ignored_rows.fetch_add(judged.ignored, Ordering::Relaxed);
                pending = k2;
            }
            Ok(Err(e)) => {
                c.failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, "shared knowledge exchange failed; retried next interval");
                judge.failed(out);
            }
            Err(e) => {
                c.failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, "shared knowledge task failed");
                judge.failed(out);
            }
        }
    }
}

/// Starts shared knowledge when the cluster shares it ([`ClusterConfig::shares_knowledge`]);
/// otherwise a row with nothing running. `stop` is the scheduler's: its exchanges go through
/// the actor's inbox, so it ends with the scheduler.
pub fn start(
    deps: KnowledgeDeps,
    stop: CancellationToken,
) -> herald_stage::Started<Option<Arc<Knowledge>>> {
    let at = herald_stage::StopAt::Stages;
    if !deps.cfg.shares_knowledge(&deps.directory) {
        return herald_stage::Started::new("shared knowledge", at, stop, None);
    }
    let k = Knowledge::new(deps);
    let task = tokio::spawn(run(k.clone(), stop.clone()));
    herald_stage::Started::new("shared knowledge", at, stop, Some(k)).with_task(task)
}
