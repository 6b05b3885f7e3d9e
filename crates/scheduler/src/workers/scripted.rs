//! Scripted sessions for the scheduler's unit tests: a [`Connector`] whose hosts answer as a
//! test says (accept, refuse, "421 too busy", a tarpit too slow for the first pass) and whose recipients get the replies a test queues
//! (250 when nothing is queued), recording every connection attempt and copy with tokio's time.
//! With it and a paused clock the actor runs its real loop, dispatch, workers and journaling in
//! milliseconds, with no socket. Test-only (`#[cfg(test)]`).
//!
//! Also the shared fixtures of the crate's tests: a worker context ([`test_ctx`]) and small
//! posts ([`test_post`], [`test_post_at`]).

use super::connector::{
    BoxFuture, Connect, ConnectFailure, Connector, CopyResult, OnReply, Opened, OutCopy, Sent,
    Session, SessionNotes,
};
use super::{WorkerCtx, WorkerPlan};
use crate::messages::{ConnectTimings, Ctrl, FailKind, HostFailure, PostCtx, Report};
use herald_spool::Spool;
use herald_telemetry::Telemetry;
use herald_types::{EnhancedStatus, RcptOutcome, Reply};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How a host answers a connection attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Greets with 220.
    Accept,
    /// Connection refused: a host failure.
    Refuse,
    /// `421 4.7.0 too many connections` at the greeting: a throttle.
    Busy,
    /// A tarpit: its replies trickle, too slowly for the first pass (`TooSlow`); a slow-lane
    /// connection reads them to the end (recorded as `Accept`).
    Tarpit,
    /// The attempt never completes (a host that takes the SYN and says nothing).
    Hang,
}

/// What the scripted Internet saw, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seen {
    /// A connection attempt to this host name and how it was answered.
    Connect(String, Answer),
    /// A copy to this recipient and the reply code it got.
    Copy(String, u16),
}

#[derive(Default)]
struct Script {
    /// Per host name, answers to the next attempts (then `Accept`).
    answers: HashMap<String, VecDeque<Answer>>,
    /// Per recipient, outcomes of the next copies (then 250).
    replies: HashMap<String, VecDeque<RcptOutcome>>,
    /// Each copy takes this long (tokio time) to be answered.
    reply_delay: Duration,
    seen: Vec<(Instant, Seen)>,
}

/// A connector answering from a script. Cheap to clone (shared script).
#[derive(Clone, Default)]
pub(crate) struct Scripted {
    // A std mutex: held only for map updates, never across an `.await`.
    script: Arc<Mutex<Script>>,
}

impl Scripted {
    fn lock(&self) -> MutexGuard<'_, Script> {
        self.script.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The next `n` attempts to `host` are answered with `answer`.
    pub fn answer(&self, host: &str, answer: Answer, n: usize) {
        let mut s = self.lock();
        let q = s.answers.entry(host.to_string()).or_default();
        q.extend(std::iter::repeat_n(answer, n));
    }

    /// The next copy to `rcpt` gets `outcome`.
    pub fn reply(&self, rcpt: &str, outcome: RcptOutcome) {
        let mut s = self.lock();
        s.replies
            .entry(rcpt.to_string())
            .or_default()
            .push_back(outcome);
    }

    /// Every copy takes `d` to be answered.
    pub fn reply_delay(&self, d: Duration) {
        self.lock().reply_delay = d;
    }

    /// When copies to `rcpt` were attempted.
    pub fn copies_to(&self, rcpt: &str) -> Vec<Instant> {
        let s = self.lock();
        s.seen
            .iter()
            .filter(|(_, e)| matches!(e, Seen::Copy(r, _) if r == rcpt))
            .map(|(t, _)| *t)
            .collect()
    }

    /// Connection attempts to `host`, with when and how they were answered.
    pub fn connects_to(&self, host: &str) -> Vec<(Instant, Answer)> {
        let s = self.lock();
        s.seen
            .iter()
            .filter_map(|(t, e)| match e {
                Seen::Connect(h, a) if h == host => Some((*t, *a)),
                _ => None,
            })
            .collect()
    }

    /// True (and seen) when the next attempt to the plan's first host is to hang.
    fn hangs(&self, plan: &WorkerPlan) -> bool {
        let mut s = self.lock();
        let Some(name) = plan.targets.first().map(|t| t.key.name.to_string()) else {
            return false;
        };
        let q = s.answers.get_mut(&name);
        if q.is_none_or(|q| q.front() != Some(&Answer::Hang)) {
            return false;
        }
        if let Some(q) = s.answers.get_mut(&name) {
            q.pop_front();
        }
        s.seen
            .push((Instant::now(), Seen::Connect(name, Answer::Hang)));
        true
    }

    fn open(&self, plan: &WorkerPlan) -> Connect {
        let mut s = self.lock();
        let mut failed = Vec::new();
        for t in &plan.targets {
            let name = t.key.name.to_string();
            let answer = s
                .answers
                .get_mut(&name)
                .and_then(|q| q.pop_front())
                .unwrap_or(Answer::Accept);
            let answer = match (answer, plan.lane) {
                (Answer::Tarpit, herald_types::LaneKind::Slow) => Answer::Accept,
                (a, _) => a,
            };
            s.seen
                .push((Instant::now(), Seen::Connect(name.clone(), answer)));
            let kind = match answer {
                Answer::Accept => {
                    return Ok(Opened {
                        session: Box::new(ScriptedSession {
                            script: self.clone(),
                        }),
                        host: t.key.clone(),
                        failed,
                        timings: ConnectTimings {
                            connect: Duration::from_millis(1),
                            banner: Duration::from_millis(1),
                        },
                        notes: SessionNotes {
                            relay: format!("{name}[{}]:25", t.key.addr),
                            tls: "none".into(),
                            mta_sts: None,
                            dane: None,
                            tls_report: None,
                            source: None,
                        },
                    })
                }
                Answer::Refuse => FailKind::Host,
                Answer::Busy => FailKind::Throttle,
                Answer::Tarpit => FailKind::Tarpit,
                // `connect` took it before `open`: only a later host of the plan gets here.
                Answer::Hang => FailKind::Host,
            };
            failed.push(HostFailure {
                key: t.key.clone(),
                kind,
                reason: format!("{answer:?}"),
                tls: None,
            });
        }
        Err(ConnectFailure {
            local: None,
            failed,
            reply: Reply::new(
                421,
                Some(EnhancedStatus::new(4, 4, 1)),
                "no MX host is reachable now",
            ),
            dane_failed: false,
        })
    }
}

impl Connector for Scripted {
    fn connect<'a>(&'a self, plan: &'a WorkerPlan) -> BoxFuture<'a, Connect> {
        if self.hangs(plan) {
            return Box::pin(std::future::pending());
        }
        let result = self.open(plan);
        Box::pin(async move { result })
    }
}

struct ScriptedSession {
    script: Scripted,
}

impl Session for ScriptedSession {
    fn send<'a>(
        &'a mut self,
        copies: &'a [OutCopy<'a>],
        on_reply: &'a mut OnReply<'a>,
    ) -> BoxFuture<'a, Sent> {
        Box::pin(async move {
            let delay = self.script.lock().reply_delay;
            let mut results = Vec::with_capacity(copies.len());
            for (i, c) in copies.iter().enumerate() {
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                let outcome = {
                    let mut s = self.script.lock();
                    let outcome = s
                        .replies
                        .get_mut(c.rcpt)
                        .and_then(|q| q.pop_front())
                        .unwrap_or_else(|| RcptOutcome::Delivered(Reply::new(250, None, "ok")));
                    let code = match &outcome {
                        RcptOutcome::Delivered(r)
                        | RcptOutcome::Deferred(r)
                        | RcptOutcome::Failed(r) => r.code,
                    };
                    s.seen
                        .push((Instant::now(), Seen::Copy(c.rcpt.to_string(), code)));
                    outcome
                };
                if !matches!(outcome, RcptOutcome::Deferred(_)) {
                    on_reply(i, &outcome);
                }
                results.push(CopyResult {
                    outcome: Some(outcome),
                    xdelay: Some(delay),
                });
            }
            Sent {
                copies: results,
                broke: None,
            }
        })
    }

    fn is_reusable(&self) -> bool {
        true
    }

    fn quit(self: Box<Self>) -> BoxFuture<'static, ()> {
        Box::pin(async {})
    }
}

/// A worker context over `connector`, with a spool in a kept temporary directory and telemetry
/// without a log.
pub(crate) fn test_ctx_with(
    connector: Arc<dyn Connector>,
    ctrl: mpsc::Sender<Ctrl>,
    reports: mpsc::Sender<Report>,
) -> Arc<WorkerCtx> {
    test_ctx_signing(connector, ctrl, reports, None)
}

/// [`test_ctx_with`] with a signing pool (`None`: copies are signed inline).
pub(crate) fn test_ctx_signing(
    connector: Arc<dyn Connector>,
    ctrl: mpsc::Sender<Ctrl>,
    reports: mpsc::Sender<Report>,
    signing: Option<super::signing::SigningPool>,
) -> Arc<WorkerCtx> {
    let telemetry = Telemetry::disabled_log();
    Arc::new(WorkerCtx {
        connector,
        port: 25,
        ctrl,
        reports,
        spool: test_spool(),
        window: 16,
        copy_budget: super::budget::CopyBudget::new(1 << 20, telemetry.clone()),
        telemetry,
        shutdown: CancellationToken::new(),
        tls_sessions: None,
        egress: None,
        signing,
    })
}

/// A worker context whose hosts all accept and whose copies are all delivered.
pub(crate) fn test_ctx(ctrl: mpsc::Sender<Ctrl>, reports: mpsc::Sender<Report>) -> Arc<WorkerCtx> {
    test_ctx_with(Arc::new(Scripted::default()), ctrl, reports)
}

/// A spool in a directory kept for the rest of the test process.
fn test_spool() -> Spool {
    let dir = tempfile::tempdir().expect("tempdir").keep();
    Spool::open(herald_spool::SpoolConfig::new(dir))
        .expect("spool")
        .0
}

/// A one-line post of list 1 (`l@lists.test`), unsigned, with no window, for unit tests.
pub(crate) fn test_post() -> Arc<PostCtx> {
    test_post_at(1, herald_types::unix_ms_now(), u64::MAX)
}

/// Post `id` of list 1, accepted at `accepted_at_ms`, given up after `max_age_ms`.
pub(crate) fn test_post_at(id: u64, accepted_at_ms: u64, max_age_ms: u64) -> Arc<PostCtx> {
    use herald_types::{Address, List, ListId, ListSettings, PostId};
    let list = List {
        id: ListId(1),
        address: Address::parse("l@lists.test").expect("addr"),
        settings: ListSettings::default(),
        created_at_ms: 0,
    };
    let lctx = herald_fanout::ListContext {
        unsubscribe_base_url: "http://x".into(),
        archive_url: None,
        archived_at: None,
        secret: b"0123456789abcdef".to_vec(),
        dkim: Default::default(),
        authserv_id: "herald.test".into(),
    };
    let template =
        herald_fanout::render(&list, &lctx, b"Subject: x\r\n\r\nbody\r\n").expect("render");
    Arc::new(PostCtx {
        id: PostId(id),
        list_id: ListId(1),
        template,
        accepted_at_ms,
        max_age_ms,
        window: Arc::new(tokio::sync::Semaphore::new(0)),
        dsn: None,
        egress_pool: None,
    })
}
