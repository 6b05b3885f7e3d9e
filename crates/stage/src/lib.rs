//! The contract between the composition root and the stages. A stage crate exports one
//! `start(cx, cfg) -> Result<Started<Offer>, _>`: [`Started`] names the stage, carries its
//! tasks and its stop token, says where it stands in the stop order ([`StopAt`]) and holds
//! what it offers the others and the API. The root (`crates/server/src/steps.rs`) lists the
//! stages in start order, each row adding its `Started` to a [`Running`] table, and the drain
//! walks that table in stop order — as Postfix's `master.cf` lists its daemons.
//!
//! Why a crate of its own: every stage crate must see these types without depending on
//! another stage (a sideways edge), and `herald-types`, the ground, has no I/O and no tokio.
//! This crate stands on the stores every stage stands on anyway (the directory, the spool,
//! telemetry), just above them in the flow, and knows no stage.

pub mod fan_out;
pub mod offers;
mod running;

pub use fan_out::{FanOut, Tap};
pub use running::{blocking_until, join_until, until, Running, DELIVERY, HANDOFF, TAIL};

use herald_directory::Directory;
use herald_spool::{PostKind, RecoveredPost, Spool, SpooledPost};
use herald_telemetry::Telemetry;
use std::future::Future;
use std::pin::Pin;
use tokio_util::sync::CancellationToken;

/// Where a stage stands in the stop order, earliest first. The drain stops every stage of
/// one place (cancels their tokens, then waits for their tasks) before it goes to the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum StopAt {
    /// First after the listeners: the hand-off of accepted posts. What it still holds stays
    /// in the spool for the next start, so a backlog never holds up the stop.
    Handoff,
    /// Delivery: the scheduler's workers finish their batch and journal every outcome.
    Delivery,
    /// What reports delivery's outcomes elsewhere (the shared fan-out), once they are all in.
    Report,
    /// The other stages (bounce, lists, archive intake, digests, …): after delivery, whose
    /// report loop has handed them every failure.
    Stages,
    /// Writers that end once every sender is gone, after storing what was queued.
    Writers,
    /// The stores' last commits (journal, delivery log, statistics).
    Stores,
    /// Leaving the cluster: the node is `running` while it drains, then `left`.
    Leave,
}

/// One running piece of a stage: an async task, or a thread of its own (a writer).
pub enum Task {
    Async(tokio::task::JoinHandle<()>),
    Thread(std::thread::JoinHandle<()>),
}

/// Work a stage does when it is stopped, before its tasks are waited for (the shared
/// fan-out reports and hands back). Given the deadline of its place in the stop order.
pub type Finish =
    Box<dyn FnOnce(tokio::time::Instant) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

/// A started stage: what the drain needs to stop it, and `offers`, what the others and the
/// API use of it (a handle, a sender; `()` for a stage that only runs).
pub struct Started<O = ()> {
    pub name: &'static str,
    pub stop_at: StopAt,
    /// Cancelled when the drain reaches `stop_at` (a child of another stage's token stops
    /// with that stage instead).
    pub stop: CancellationToken,
    pub tasks: Vec<Task>,
    pub finish: Option<Finish>,
    pub offers: O,
}

impl Started<()> {
    /// A stage that is one loop: `run` is given the stop token and spawned.
    pub fn spawn<F>(
        name: &'static str,
        stop_at: StopAt,
        run: impl FnOnce(CancellationToken) -> F,
    ) -> Started<()>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        Started::spawn_on(name, stop_at, CancellationToken::new(), run)
    }

    /// As [`Started::spawn`], with a given stop token (another stage's child).
    pub fn spawn_on<F>(
        name: &'static str,
        stop_at: StopAt,
        stop: CancellationToken,
        run: impl FnOnce(CancellationToken) -> F,
    ) -> Started<()>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let task = tokio::spawn(run(stop.clone()));
        Started::new(name, stop_at, stop, ()).with_task(task)
    }
}

impl<O> Started<O> {
    pub fn new(name: &'static str, stop_at: StopAt, stop: CancellationToken, offers: O) -> Self {
        Started {
            name,
            stop_at,
            stop,
            tasks: Vec::new(),
            finish: None,
            offers,
        }
    }

    pub fn with_task(mut self, task: tokio::task::JoinHandle<()>) -> Self {
        self.tasks.push(Task::Async(task));
        self
    }

    pub fn with_tasks(
        mut self,
        tasks: impl IntoIterator<Item = tokio::task::JoinHandle<()>>,
    ) -> Self {
        self.tasks.extend(tasks.into_iter().map(Task::Async));
        self
    }

    pub fn with_thread(mut self, thread: std::thread::JoinHandle<()>) -> Self {
        self.tasks.push(Task::Thread(thread));
        self
    }

    pub fn with_finish(mut self, finish: Finish) -> Self {
        self.finish = Some(finish);
        self
    }

    /// The same row, offering `f(offers)` instead.
    pub fn map_offers<P>(self, f: impl FnOnce(O) -> P) -> Started<P> {
        Started {
            name: self.name,
            stop_at: self.stop_at,
            stop: self.stop,
            tasks: self.tasks,
            finish: self.finish,
            offers: f(self.offers),
        }
    }
}

/// What every stage is started with: the stores opened in step 1, the server's secret and
/// the posts the spool recovered (each stage takes its own kind).
pub struct StartCx {
    pub directory: Directory,
    pub spool: Spool,
    pub telemetry: Telemetry,
    pub secret: Vec<u8>,
    recovered: Vec<RecoveredPost>,
}

impl StartCx {
    pub fn new(
        directory: Directory,
        spool: Spool,
        telemetry: Telemetry,
        secret: Vec<u8>,
        recovered: Vec<RecoveredPost>,
    ) -> StartCx {
        StartCx {
            directory,
            spool,
            telemetry,
            secret,
            recovered,
        }
    }

    /// Every post the spool recovered at open, with its progress.
    pub fn recovered_posts(&self) -> &[RecoveredPost] {
        &self.recovered
    }

    /// The recovered posts of `kind`, as the stages receive live ones.
    pub fn recovered(&self, kind: PostKind) -> Vec<SpooledPost> {
        self.recovered
            .iter()
            .filter(|p| p.meta.kind == kind)
            .map(|p| SpooledPost {
                id: p.id,
                meta: p.meta.clone(),
                body: p.body.clone(),
            })
            .collect()
    }
}
