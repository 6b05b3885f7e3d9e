//! This node's side of the shared fan-out: the handle ([`Shards`]) the server and the API hold,
//! and the node's loop (`run`): report and renew, then claim, every `shard_report_ms` and
//! whenever a held shard completes here or this node publishes a post.
//!
//! A node never waits on another: claims skip locked rows, reports and renewals are one
//! statement each per interval, whatever the number of copies.
//!
//! A store outage ends nothing here: a failed report or claim is tried again at the next
//! interval, and for a lease after the last failure the node claims only open shards
//! ([`ReclaimGate`]), so the leases that lapsed during the outage go back to their owners'
//! renewals rather than to a second sender.

use crate::error::{store, ShardError};
use crate::share::Share;
use crate::tracker::{Held, Tracker};
use bytes::Bytes;
use herald_directory::{ClaimedShard, Directory, ShardKey, MAX_DONE_BYTES};
use herald_scheduler::{Action, Scheduler, Selector};
use herald_spool::{DoneSet, PostKind, PostMeta, Spool, SpooledPost};
use herald_telemetry::{Event, Telemetry};
use herald_types::PostId;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Posts waiting for the publisher at most; beyond, a post is fanned out locally instead.
const QUEUE: usize = 256;
/// Stored posts kept in memory per node (each node fetches a post's body once for all the
/// shards of it that it claims).
const POST_CACHE: usize = 16;
/// How often finished posts older than [`PRUNE_AGE`] are deleted from the shared store.
const PRUNE_EVERY: Duration = Duration::from_secs(60);
const PRUNE_AGE: Duration = Duration::from_secs(3600);

/// What the shared fan-out works with.
pub struct ShardsDeps {
    pub directory: Directory,
    pub spool: Spool,
    pub telemetry: Telemetry,
    pub scheduler: Scheduler,
    /// The same tracker the scheduler reports final outcomes to (`SchedulerDeps::finals`).
    pub tracker: Arc<Tracker>,
    /// This node's id (`herald-cluster`).
    pub node: String,
    pub cfg: herald_cluster::ClusterConfig,
}

/// A counter this node keeps (read by `/metrics`).
#[derive(Debug, Default)]
pub(crate) struct Count(AtomicU64);

impl Count {
    pub(crate) fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// This node's counts since start.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub published: Count,
    pub claimed: Count,
    pub reclaimed: Count,
    pub done: Count,
    pub handed_back: Count,
    pub lost: Count,
    pub bad: Count,
    pub reports: Count,
    pub report_failures: Count,
    pub copies_reported: Count,
}

/// What a drain did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrainReport {
    /// Shards this node held when the drain began.
    pub held: u64,
    /// Given back open, from their reported position.
    pub handed_back: u64,
    /// Finished here during the drain.
    pub finished: u64,
    /// Still held when the drain's wait ran out (the next drain call goes on).
    pub remaining: u64,
}

/// This node's shared fan-out.
pub struct Shards {
    pub(crate) directory: Directory,
    pub(crate) spool: Spool,
    pub(crate) telemetry: Telemetry,
    pub(crate) scheduler: Scheduler,
    pub(crate) tracker: Arc<Tracker>,
    pub(crate) node: String,
    pub(crate) shard_members: u32,
    lease_ms: u64,
    interval: Duration,
    max_held: usize,
    draining: AtomicBool,
    /// One report at a time (the node's loop and a drain both report): a report written twice
    /// at once would find its own shard already moved and call it lost.
    reporting: tokio::sync::Mutex<()>,
    pub(crate) counters: Counters,
    pub(crate) publish_tx: mpsc::Sender<Share>,
    /// Posts enqueue already handed to the publisher ([`herald_enqueue::SharedIntake`]); the
    /// fan-out hand-over that follows skips them. Bounded by the posts between the two (an
    /// entry is removed when its post comes by).
    shared: Mutex<std::collections::HashSet<PostId>>,
    publish_rx: Mutex<Option<mpsc::Receiver<Share>>>,
}

impl std::fmt::Debug for Shards {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shards")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ShardError> {
    Ok(tokio::task::spawn_blocking(f).await?)
}

impl Shards {
    pub fn new(deps: ShardsDeps) -> Arc<Shards> {
        let (publish_tx, rx) = mpsc::channel(QUEUE);
        Arc::new(Shards {
            directory: deps.directory,
            spool: deps.spool,
            telemetry: deps.telemetry,
            scheduler: deps.scheduler,
            tracker: deps.tracker,
            node: deps.node,
            shard_members: deps.cfg.shard_members,
            lease_ms: deps.cfg.lease_secs.saturating_mul(1000),
            interval: deps.cfg.shard_report_interval(),
            max_held: deps.cfg.max_shards_per_node,
            draining: AtomicBool::new(false),
            reporting: tokio::sync::Mutex::new(()),
            counters: Counters::default(),
            publish_tx,
            shared: Mutex::default(),
            publish_rx: Mutex::new(Some(rx)),
        })
    }

    pub fn node_id(&self) -> &str {
        &self.node
    }

    /// Starts the publisher and the node's loop (once): `to_publish` are the list posts the
    /// spool recovered, `stale` the local posts of shards a previous life held (completed
    /// here; their leases are handed back before the first claim).
    pub fn start(
        self: &Arc<Self>,
        to_publish: Vec<SpooledPost>,
        stale: Vec<PostId>,
        stop: CancellationToken,
    ) -> Vec<JoinHandle<()>> {
        let rx = self
            .publish_rx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let mut tasks = Vec::new();
        if let Some(rx) = rx {
            let (me, s) = (self.clone(), stop.clone());
            tasks.push(tokio::spawn(async move {
                if !to_publish.is_empty() {
                    tracing::info!(posts = to_publish.len(), "republishing recovered posts");
                    let batch = to_publish
                        .into_iter()
                        .map(|post| Share {
                            post,
                            committed: None,
                        })
                        .collect();
                    me.publish(batch, &s).await;
                }
                me.publish_loop(rx, s).await;
            }));
            let (me, s) = (self.clone(), stop);
            tasks.push(tokio::spawn(async move {
                for post in stale {
                    if let Err(e) = me.spool.complete(post).await {
                        tracing::warn!(%post, error = %e, "cannot drop a stale shard post");
                    }
                }
                me.run(s).await;
            }));
        }
        tasks
    }

    /// Marks `post` as handed to the publisher by enqueue.
    pub(crate) fn taken(&self, post: PostId) {
        self.shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(post);
    }

    /// Where enqueue's fan-out hand-over goes in shared mode: a list post of this node's to
    /// the publisher (unless enqueue already gave it), anything else (generated mail) to the
    /// local scheduler. A full publisher queue (the store far behind) fans the post out here:
    /// never lost, only not shared.
    pub fn submit(&self, post: SpooledPost) {
        if post.meta.kind != PostKind::ListPost || post.meta.member_range.is_some() {
            self.scheduler.submit(post);
            return;
        }
        let already = self
            .shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&post.id);
        if already {
            return;
        }
        let share = Share {
            post,
            committed: None,
        };
        if let Err(e) = self.publish_tx.try_send(share) {
            let share = match e {
                mpsc::error::TrySendError::Full(s) | mpsc::error::TrySendError::Closed(s) => s,
            };
            tracing::warn!(post = %share.post.id, "publisher queue full; post fanned out here only");
            self.scheduler.submit(share.post);
        }
    }

    /// The node's loop: every interval, report and renew; then (unless draining) claim.
    async fn run(self: Arc<Self>, stop: CancellationToken) {
        let node = self.node.clone();
        let d = self.directory.clone();
        match blocking(move || d.release_node_shards(&node)).await {
            Ok(Ok(0)) => {}
            Ok(Ok(n)) => tracing::info!(
                shards = n,
                "handed back the shards of this node's previous run"
            ),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cannot hand back earlier shards; they are reclaimed when their lease ends")
            }
            Err(e) => tracing::warn!(error = %e, "release task failed"),
        }
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut cache = PostCache::default();
        let mut pruned = Instant::now();
        let mut gate = ReclaimGate::new(Duration::from_millis(self.lease_ms));
        loop {
            // Every interval (renewals, reclaims, other nodes' posts), and at once when a shard
            // completed here or this node published a post (the tracker's wake).
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tick.tick() => {}
                _ = self.tracker.woken() => {}
            }
            if !self.report().await {
                gate.store_failed(Instant::now());
            }
            self.give_up_handed_back().await;
            if !self.draining.load(Ordering::Relaxed) {
                self.claim(&mut cache, gate.is_open(Instant::now())).await;
            }
            if pruned.elapsed() >= PRUNE_EVERY {
                pruned = Instant::now();
                let d = self.directory.clone();
                let age = PRUNE_AGE.as_millis() as u64;
                if let Ok(Err(e)) = blocking(move || d.prune_cluster_posts(age)).await {
                    tracing::warn!(error = %e, "cannot prune finished cluster posts");
                }
            }
        }
    }

    /// One batched report of every shard with news, and the renewal of every lease held.
    /// Shards another node took over (this node's lease ran out) are given up here. False when
    /// the store did not take it (retried at the next interval).
    pub(crate) async fn report(&self) -> bool {
        let _one = self.reporting.lock().await;
        let reports = self.tracker.reports();
        let batch: Vec<_> = reports.iter().map(|(_, r)| r.clone()).collect();
        let (d, node, lease) = (self.directory.clone(), self.node.clone(), self.lease_ms);
        let lost = match blocking(move || d.report_shards(&node, lease, &batch)).await {
            Ok(Ok(lost)) => lost,
            Ok(Err(e)) => {
                self.counters.report_failures.add(1);
                tracing::warn!(error = %e, "cannot report shards; retrying next interval");
                return false;
            }
            Err(e) => {
                self.counters.report_failures.add(1);
                tracing::warn!(error = %e, "report task failed");
                return false;
            }
        };
        self.counters.reports.add(1);
        let (written, _): (Vec<_>, Vec<_>) = reports
            .into_iter()
            .partition(|(_, r)| !lost.contains(&r.key));
        for (_, r) in &written {
            match r.next {
                herald_directory::ShardNext::Done => self.counters.done.add(1),
                herald_directory::ShardNext::HandBack => self.counters.handed_back.add(1),
                herald_directory::ShardNext::Keep => {}
            }
        }
        self.counters
            .copies_reported
            .add(written.iter().map(|(_, r)| r.copies_done).sum());
        self.tracker.written(&written);
        for key in lost {
            self.counters.lost.add(1);
            if let Some(post) = self.tracker.forget(key) {
                tracing::warn!(shard = %key, %post, "another node took this shard over (lease ran out); stopping it here");
                let _ = self
                    .scheduler
                    .operate(Selector::Post(post), Action::GiveUp)
                    .await;
            }
        }
        true
    }

    /// Claims shards until this node holds `max_shards_per_node` or none is claimable: open
    /// ones, and with `reclaim` ones whose lease ran out.
    async fn claim(&self, cache: &mut PostCache, reclaim: bool) {
        while self.tracker.len() < self.max_held {
            let (d, node, lease) = (self.directory.clone(), self.node.clone(), self.lease_ms);
            let claimed = match blocking(move || {
                if reclaim {
                    d.claim_shard(&node, lease)
                } else {
                    d.claim_open_shard(&node, lease)
                }
            })
            .await
            {
                Ok(Ok(Some(c))) => c,
                Ok(Ok(None)) => return,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "cannot claim shards");
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "claim task failed");
                    return;
                }
            };
            let key = claimed.key;
            match self.start_shard(claimed, cache).await {
                Ok(()) => {}
                Err(ShardError::Bad { shard, reason }) => {
                    self.counters.bad.add(1);
                    tracing::error!(%shard, %reason, "shard set aside as bad; its post stays stored");
                    let d = self.directory.clone();
                    if let Ok(Err(e)) = blocking(move || d.set_shard_bad(key, &reason)).await {
                        tracing::error!(shard = %key, error = %e, "cannot set the shard aside");
                    }
                }
                Err(e) => {
                    // The store or the spool failed: give the shard back and try later.
                    tracing::warn!(shard = %key, error = %e, "cannot start a shard; handing it back");
                    let (d, node) = (self.directory.clone(), self.node.clone());
                    let _ = blocking(move || d.release_shard(&node, key)).await;
                    return;
                }
            }
        }
    }

    /// Checks a claimed shard, spools its post here restricted to its range and fans it out.
    async fn start_shard(&self, c: ClaimedShard, cache: &mut PostCache) -> Result<(), ShardError> {
        if self.tracker.local_post(c.key).is_some() {
            return Ok(()); // this node's own lease, renewed late: it is still fanning it out
        }
        let bad = |reason: String| ShardError::Bad {
            shard: c.key.to_string(),
            reason,
        };
        if c.lo.0 < 1 || c.lo > c.hi {
            return Err(bad(format!(
                "member range {}..={} is empty or invalid",
                c.lo.0, c.hi.0
            )));
        }
        let done = match &c.done {
            None => DoneSet::new(),
            Some(b) if b.len() > MAX_DONE_BYTES => {
                return Err(bad(format!(
                    "done bitmap of {} bytes is too large",
                    b.len()
                )))
            }
            Some(b) => DoneSet::from_bytes(b)
                .map_err(|e| bad(format!("done bitmap does not decode: {e}")))?,
        };
        if done.iter().any(|m| m < c.lo || m > c.hi) {
            return Err(bad("done bitmap names members outside the range".into()));
        }
        let (meta, body) = cache.get(self, c.key).await?;
        let mut meta = meta;
        meta.member_range = Some(Box::new((c.lo, c.hi)));
        let id = self.spool.accept(meta.clone(), body.clone()).await?;
        self.counters.claimed.add(1);
        if let Some(from) = &c.reclaimed_from {
            self.counters.reclaimed.add(1);
            tracing::info!(shard = %c.key, from = %from, done = done.len(), "reclaimed a shard whose lease ran out");
        }
        self.tracker.insert(
            id,
            Held {
                key: c.key,
                lo: c.lo,
                hi: c.hi,
                done: done.clone(),
                dirty: false,
                completed: false,
                handing_back: false,
                gave_up: 0,
            },
        );
        self.telemetry.emit(Event::PostAccepted {
            post: id,
            list: meta.list_address.clone(),
            size: body.len(),
            received_at_ms: meta.received_at_ms,
            recovered: false,
        });
        tracing::debug!(shard = %c.key, post = %id, lo = c.lo.0, hi = c.hi.0, "fanning out a shard");
        self.scheduler
            .submit_shard(SpooledPost { id, meta, body }, done);
        Ok(())
    }

    /// Gives up, here, the queued copies of shards being handed back (repeated each interval:
    /// expansion may still be queueing some). Each local post then completes and its shard
    /// goes back open with what really finished.
    async fn give_up_handed_back(&self) {
        for post in self.tracker.handing_back() {
            let _ = self
                .scheduler
                .operate(Selector::Post(post), Action::GiveUp)
                .await;
        }
    }

    /// `herald node drain`: stops claiming, hands back every shard not finished (its queued
    /// copies given up here, its position kept), and waits up to `wait` for this node to hold
    /// none.
    pub async fn drain(&self, wait: Duration) -> DrainReport {
        self.draining.store(true, Ordering::Relaxed);
        let held = self.tracker.len() as u64;
        let (done0, back0) = (self.counters.done.get(), self.counters.handed_back.get());
        self.tracker.hand_back_all();
        let started = Instant::now();
        loop {
            self.give_up_handed_back().await;
            self.report().await;
            if self.tracker.len() == 0 || started.elapsed() >= wait {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let report = DrainReport {
            held,
            handed_back: self.counters.handed_back.get() - back0,
            finished: self.counters.done.get() - done0,
            remaining: self.tracker.len() as u64,
        };
        tracing::info!(?report, "node drained");
        report
    }

    /// Whether a drain stopped this node's claims.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// At shutdown, after the scheduler stopped: the last report, then every shard still held
    /// goes back open from that position (other nodes take over at once, not after a lease).
    pub async fn finish(&self) {
        self.draining.store(true, Ordering::Relaxed);
        self.report().await;
        let (d, node) = (self.directory.clone(), self.node.clone());
        match blocking(move || d.release_node_shards(&node)).await {
            Ok(Ok(n)) if n > 0 => tracing::info!(shards = n, "handed back unfinished shards"),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cannot hand back shards; they are reclaimed when their lease ends")
            }
            Err(e) => tracing::warn!(error = %e, "release task failed"),
        }
    }

    /// Shards this node holds now.
    pub fn held(&self) -> usize {
        self.tracker.len()
    }
}

/// Whether this node may reclaim shards whose lease ran out ("PostgreSQL down for a
/// few seconds"). Not while its store calls fail, nor for a lease after the last failure: a
/// store outage is seen by every node, so the leases that lapsed during it are most likely
/// those of live nodes that could not renew them. Each renews its own on its first report
/// after the outage; reclaiming one before that would send its copies twice. A node that
/// really died is reclaimed a lease later than usual. Open shards are claimed all along.
#[derive(Debug)]
struct ReclaimGate {
    lease: Duration,
    closed_until: Option<Instant>,
}

impl ReclaimGate {
    fn new(lease: Duration) -> ReclaimGate {
        ReclaimGate {
            lease,
            closed_until: None,
        }
    }

    /// A store call failed at `now`: closed until a lease after it.
    fn store_failed(&mut self, now: Instant) {
        self.closed_until = Some(now + self.lease);
    }

    fn is_open(&self, now: Instant) -> bool {
        self.closed_until.is_none_or(|until| now >= until)
    }
}

/// Stored posts this node fetched, by cluster post id (bounded; oldest out).
#[derive(Default)]
struct PostCache {
    posts: HashMap<i64, (PostMeta, Bytes)>,
    order: Vec<i64>,
}

impl PostCache {
    async fn get(
        &mut self,
        shards: &Shards,
        key: ShardKey,
    ) -> Result<(PostMeta, Bytes), ShardError> {
        if let Some(hit) = self.posts.get(&key.post) {
            return Ok(hit.clone());
        }
        let d = shards.directory.clone();
        let row = blocking(move || d.cluster_post(key.post))
            .await?
            .map_err(store("fetch a shared post"))?;
        let bad = |reason: String| ShardError::Bad {
            shard: key.to_string(),
            reason,
        };
        let row = row.ok_or_else(|| bad("its post is not stored".into()))?;
        if Sha256::digest(&row.body).as_slice() != row.body_sha256.as_slice() {
            return Err(bad(format!(
                "post body ({} bytes) does not match its SHA-256: damaged or truncated",
                row.body.len()
            )));
        }
        let meta: PostMeta = serde_json::from_str(&row.meta_json)
            .map_err(|e| bad(format!("post metadata does not parse: {e}")))?;
        if meta.kind != PostKind::ListPost || meta.list_id != row.list_id {
            return Err(bad("post metadata is not a list post of its list".into()));
        }
        let entry = (meta, Bytes::from(row.body));
        if self.order.len() >= POST_CACHE {
            let old = self.order.remove(0);
            self.posts.remove(&old);
        }
        self.order.push(key.post);
        self.posts.insert(key.post, entry.clone());
        Ok(entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reclaims are allowed at start, held while the store fails and for a lease after the
    /// last failure, then allowed again.
    #[test]
    fn reclaims_wait_a_lease_after_the_last_store_failure() {
        let lease = Duration::from_secs(3);
        let t0 = Instant::now();
        let mut gate = ReclaimGate::new(lease);
        assert!(gate.is_open(t0));
        gate.store_failed(t0);
        gate.store_failed(t0 + Duration::from_secs(5)); // the outage goes on
        assert!(!gate.is_open(t0 + Duration::from_secs(6)));
        assert!(!gate.is_open(t0 + Duration::from_millis(7999)));
        assert!(gate.is_open(t0 + Duration::from_secs(8)));
    }
}
