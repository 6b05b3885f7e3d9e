//! An actor driven by hand, for the unit tests of `dispatch.rs` and `outcome.rs`: no loop runs;
//! a test calls the actor's handlers itself and looks at its state in between. Workers it starts
//! are real (over the scripted connector of `workers/scripted.rs`); their control messages
//! arrive on [`Hand::ctrl`] and a test passes them to the actor when it wants them handled.

use super::routes::{test_resolvers, Routing};
use super::{Actor, Route};
use crate::clock::Clock;
use crate::config::SchedulerConfig;
use crate::messages::{Ctrl, Job, OutcomeReport, PostCtx, Report};
use crate::workers::scripted::{test_ctx_with, Scripted};
use herald_routing::MxHost;
use herald_types::{Address, ListId, Member, MemberId, MemberStatus};
use std::sync::Arc;
use tokio::sync::mpsc;

/// Wall time when a hand-driven actor starts (2023-11-14).
pub(super) const START_MS: u64 = 1_700_000_000_000;

pub(super) struct Hand {
    pub actor: Actor,
    pub net: Scripted,
    /// What the actor's workers tell it (connected, need work, batch done, exit).
    pub ctrl: mpsc::Receiver<Ctrl>,
    /// The sending end of the actor's inbox (operator commands, snapshots), for tests that run
    /// the actor's own loop (`paused_tests.rs`).
    pub ctrl_tx: mpsc::Sender<Ctrl>,
    /// Outcome reports, as the report loop would get them.
    pub reports: mpsc::Receiver<Report>,
}

/// An actor where each `(domain, mx)` is routed to one host on 127.0.0.1.
pub(super) async fn hand(cfg: SchedulerConfig, domains: &[(&str, &str)]) -> Hand {
    let net = Scripted::default();
    let (ctrl_tx, ctrl) = mpsc::channel(1024);
    let (reports_tx, reports) = mpsc::channel(1024);
    let ctx = test_ctx_with(Arc::new(net.clone()), ctrl_tx.clone(), reports_tx);
    let clock = Clock::following_tokio(START_MS);
    let mut actor = Actor::new(Arc::new(cfg), ctx, test_resolvers(), None, clock);
    for (domain, mx) in domains {
        let routing = Routing {
            hosts: vec![MxHost {
                name: (*mx).to_string(),
                preference: 10,
                addrs: vec![[127, 0, 0, 1].into()],
            }],
            sts: None,
            dane: None,
        };
        actor.on_resolved((*domain).to_string(), Ok(routing)).await;
    }
    Hand {
        actor,
        net,
        ctrl,
        ctrl_tx,
        reports,
    }
}

impl Hand {
    /// The destination a routed domain's copies go to.
    pub fn dest(&self, domain: &str) -> Arc<str> {
        match self.actor.routes.get(domain) {
            Some(Route::Routed { key, .. }) => key.clone(),
            _ => panic!("{domain} is not routed"),
        }
    }

    /// Outcome reports received so far.
    pub fn outcomes(&mut self) -> Vec<OutcomeReport> {
        let mut out = Vec::new();
        while let Ok(r) = self.reports.try_recv() {
            if let Report::Outcome(o) = r {
                out.push(*o);
            }
        }
        out
    }
}

/// A copy of `post` for member `id` at `rcpt`.
pub(super) fn job(post: &Arc<PostCtx>, id: i64, rcpt: &str) -> Job {
    let member = Arc::new(Member {
        id: MemberId(id),
        list_id: ListId(1),
        address: Address::parse(rcpt).expect("addr"),
        display_name: None,
        status: MemberStatus::Enabled,
        fields: Default::default(),
    });
    Job::new(post.clone(), member)
}
