//! Route changes move a domain's queued copies, and only that domain's: tests on the actor's
//! own state (no network: the hosts have no addresses, so no worker ever connects).

use super::routes::{RouteError, Routing};
use super::{Actor, Route};
use crate::config::SchedulerConfig;
use crate::messages::{Job, PostCtx};
use herald_routing::mta_sts::Mode;
use herald_routing::{DaneRoute, HostDane, MxHost, StsRoute, TlsaSet};
use herald_types::{Address, EnhancedStatus, ListId, Member, MemberId, MemberStatus, Reply};
use herald_types::{DaneNote, DeferralKind, LaneKind};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

pub(super) fn actor() -> (Actor, tokio::sync::mpsc::Receiver<crate::messages::Report>) {
    let (ctrl, _ctrl_rx) = tokio::sync::mpsc::channel(8);
    let (reports, reports_rx) = tokio::sync::mpsc::channel(64);
    let ctx = crate::workers::scripted::test_ctx(ctrl, reports);
    let actor = Actor::new(
        Arc::new(SchedulerConfig::default()),
        ctx,
        super::routes::test_resolvers(),
        None,
        crate::clock::Clock::system(),
    );
    (actor, reports_rx)
}

/// Routes `domain` to `key` with a refresh under way, as the actor leaves it before
/// `on_resolved`.
fn refreshing_route(actor: &mut Actor, domain: &str, key: &Arc<str>) {
    let route = Route::Routed {
        key: key.clone(),
        refresh_at: Instant::now(),
        refreshing: true,
    };
    actor.routes.insert(domain.into(), route);
}

pub(super) fn post() -> Arc<PostCtx> {
    crate::workers::scripted::test_post()
}

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

pub(super) fn hosts() -> Vec<MxHost> {
    vec![MxHost {
        name: "mx.shared.test".into(),
        preference: 10,
        addrs: vec![],
    }]
}

fn routed(actor: &Actor, domain: &str) -> Option<Arc<str>> {
    actor.current_destination(domain).cloned()
}

fn domains_in(actor: &mut Actor, key: &Arc<str>) -> Vec<String> {
    let d = actor.dests.get_mut(key).expect("dest");
    let mut out: Vec<String> = d
        .fast
        .drain()
        .iter()
        .map(|j| j.domain().to_string())
        .collect();
    out.extend(d.waiting.iter().map(|w| w.copy.job().domain().to_string()));
    out.sort();
    out
}

#[tokio::test]
async fn a_new_policy_moves_only_that_domains_queued_copies() {
    let (mut actor, _reports) = actor();
    let post = post();
    // a.test and b.test share an MX host and a destination, with a ready and a waiting copy each.
    let plain = actor.destination_for(hosts(), None, None);
    for (domain, base) in [("a.test", 1), ("b.test", 10)] {
        refreshing_route(&mut actor, domain, &plain);
        let d = actor.dests.get_mut(&plain).expect("dest");
        d.fast
            .push_back(job(&post, base, &format!("r{base}@{domain}")));
        let mut waiting = job(&post, base + 1, &format!("w{base}@{domain}"));
        waiting.lane = LaneKind::Slow;
        let at = Instant::now() + Duration::from_secs(600);
        actor.park(&plain, at, DeferralKind::Other, waiting);
        actor.queued += 1;
    }
    let enforce = StsRoute {
        mode: Mode::Enforce,
        unmatched: Vec::new(),
        expires_at: herald_types::unix_ms_now() / 1000 + 86_400,
        policy_lines: Vec::new().into(),
    };
    let routing = Routing {
        hosts: hosts(),
        sts: Some(enforce),
        dane: None,
    };
    actor.on_resolved("a.test".into(), Ok(routing)).await;

    let strict = routed(&actor, "a.test").expect("routed");
    assert_eq!(&*strict, "mx.shared.test|mta-sts=enforce");
    assert_eq!(routed(&actor, "b.test"), Some(plain.clone()));
    assert_eq!(actor.queued, 2, "moving copies does not change the counts");
    let d = &actor.dests[&strict];
    assert_eq!(
        d.budget, actor.dests[&plain].budget,
        "one host set, one shaping budget"
    );
    // Parked copies stay indexed where they were and follow the route when their time comes.
    assert_eq!((d.fast.len(), d.waiting.len()), (1, 0));
    assert_eq!(actor.dests[&plain].waiting.len(), 2);
    actor
        .resume_due(Instant::now() + Duration::from_secs(601))
        .await;
    assert_eq!(
        actor.dests[&strict].slow.len(),
        1,
        "a.test's retry went to the new route"
    );
    assert_eq!(actor.dests[&plain].slow.len(), 1, "b.test's stayed");
    assert_eq!(
        (actor.queued, actor.slow_queued, actor.deferred.len()),
        (4, 2, 0)
    );
    let d = actor.dests.get_mut(&strict).expect("dest");
    let mut retried: Vec<String> = d
        .slow
        .drain()
        .iter()
        .map(|j| j.domain().to_string())
        .collect();
    retried.extend(domains_in(&mut actor, &strict));
    assert_eq!(retried, ["a.test", "a.test"]);
}

#[tokio::test]
async fn a_policy_allowing_no_mx_takes_the_domain_out_of_its_destination() {
    let (mut actor, mut reports) = actor();
    let post = post();
    let plain = actor.destination_for(hosts(), None, None);
    refreshing_route(&mut actor, "a.test", &plain);
    let d = actor.dests.get_mut(&plain).expect("dest");
    d.fast.push_back(job(&post, 1, "r@a.test"));
    d.fast.push_back(job(&post, 2, "r@b.test"));
    actor.queued += 2;
    let reply = Reply::new(
        451,
        Some(EnhancedStatus::new(4, 7, 5)),
        "MTA-STS: no MX allowed",
    );
    actor
        .on_resolved("a.test".into(), Err(RouteError::MtaSts(reply)))
        .await;

    match actor.routes.get("a.test") {
        Some(Route::RetryDns { jobs, .. }) => assert_eq!(jobs.len(), 1),
        _ => panic!("a.test should wait for a retry"),
    }
    assert_eq!(domains_in(&mut actor, &plain), ["b.test"]);
    assert_eq!(actor.queued, 2);
    let Some(crate::messages::Report::Outcome(o)) = reports.recv().await else {
        panic!("a deferral report");
    };
    assert_eq!(o.rcpt, "r@a.test");
    assert_eq!(o.mta_sts, Some(herald_types::MtaStsNote::Enforce));
}

fn dane_route(mx_secure: bool, marks: Vec<HostDane>) -> DaneRoute {
    DaneRoute {
        mx_secure,
        hosts: marks
            .into_iter()
            .map(|m| ("mx.shared.test".to_string(), m))
            .collect(),
        expires_at: herald_types::unix_ms_now() / 1000 + 60,
    }
}

fn tlsa(byte: u8) -> HostDane {
    let rdata = [&[3u8, 1, 1][..], &[byte; 32]].concat();
    let record = herald_routing::dane::tlsa::parse(&rdata).expect("usable");
    HostDane::Required(Arc::new(TlsaSet::new(vec![record])))
}

#[tokio::test]
async fn dane_routes_have_their_own_destinations_and_take_the_newest_answers() {
    let (mut actor, _reports) = actor();
    let plain = actor.destination_for(hosts(), None, None);
    let dane = actor.destination_for(hosts(), None, Some(dane_route(true, vec![tlsa(1)])));
    assert_eq!(&*dane, "mx.shared.test|dane");
    assert_eq!(actor.dests[&dane].budget, actor.dests[&plain].budget);
    // New TLSA answers for the same hosts replace the old ones (a key rollover).
    let again = actor.destination_for(hosts(), None, Some(dane_route(true, vec![tlsa(2)])));
    assert_eq!(again, dane);
    let d = actor.dests[&dane].dane.as_ref().expect("DANE route");
    assert_eq!(d.host("mx.shared.test"), &tlsa(2));
    let none = actor.destination_for(
        hosts(),
        None,
        Some(dane_route(true, vec![HostDane::NoRecords])),
    );
    let insecure = actor.destination_for(
        hosts(),
        None,
        Some(dane_route(false, vec![HostDane::Insecure])),
    );
    assert_eq!(&*none, "mx.shared.test|dane=none");
    assert_eq!(&*insecure, "mx.shared.test|dane=insecure");
}

#[tokio::test]
async fn dane_leaving_no_usable_host_defers_the_domain_with_dane_failed() {
    let (mut actor, mut reports) = actor();
    let post = post();
    let old = actor.destination_for(hosts(), None, Some(dane_route(true, vec![tlsa(1)])));
    refreshing_route(&mut actor, "a.test", &old);
    let d = actor.dests.get_mut(&old).expect("dest");
    d.fast.push_back(job(&post, 1, "r@a.test"));
    actor.queued += 1;
    let reply = Reply::new(451, Some(EnhancedStatus::new(4, 7, 5)), "DANE: no MX host");
    actor
        .on_resolved("a.test".into(), Err(RouteError::Dane(reply)))
        .await;
    match actor.routes.get("a.test") {
        Some(Route::RetryDns { jobs, .. }) => assert_eq!(jobs.len(), 1),
        _ => panic!("a.test should wait for a retry"),
    }
    let Some(crate::messages::Report::Outcome(o)) = reports.recv().await else {
        panic!("a deferral report");
    };
    assert_eq!((o.mta_sts, o.dane), (None, Some(DaneNote::Failed)));
}

#[tokio::test]
async fn a_failed_refresh_keeps_the_route() {
    let (mut actor, _reports) = actor();
    let plain = actor.destination_for(hosts(), None, None);
    refreshing_route(&mut actor, "a.test", &plain);
    let e = herald_routing::ResolveError::Timeout {
        domain: "a.test".into(),
    };
    actor
        .on_resolved("a.test".into(), Err(RouteError::Dns(e)))
        .await;
    match actor.routes.get("a.test") {
        Some(Route::Routed {
            key,
            refresh_at,
            refreshing,
        }) => {
            assert_eq!(key, &plain);
            assert!(!refreshing && *refresh_at > Instant::now());
        }
        _ => panic!("route kept"),
    }
}

#[tokio::test]
async fn a_copy_deferred_after_its_route_changed_waits_in_the_new_destination() {
    let (mut actor, _reports) = actor();
    let post = post();
    let old = actor.destination_for(hosts(), None, None);
    let testing = StsRoute {
        mode: Mode::Testing,
        unmatched: vec!["mx.shared.test".into()],
        expires_at: u64::MAX,
        policy_lines: Vec::new().into(),
    };
    let new = actor.destination_for(hosts(), Some(testing), None);
    assert_eq!(
        &*new,
        "mx.shared.test|mta-sts=testing;unmatched=mx.shared.test"
    );
    let route = Route::Routed {
        key: new.clone(),
        refresh_at: Instant::now() + Duration::from_secs(60),
        refreshing: false,
    };
    actor.routes.insert("a.test".into(), route);
    // The copy was out on a connection of the old destination when the route changed.
    actor.defer(&old, vec![job(&post, 1, "r@a.test")]).await;
    assert_eq!(actor.dests[&old].waiting.len(), 0);
    assert_eq!(actor.dests[&new].waiting.len(), 1);
    assert_eq!(
        (actor.queued, actor.deferred.len()),
        (0, 1),
        "parked, not queued"
    );
}

/// New shaping rules (SIGHUP) move a destination to the rule's budget with its open workers,
/// so that connection accounting stays exact, and back when the rule goes; a budget left with
/// neither destinations nor workers is dropped.
#[tokio::test]
async fn reshape_moves_destinations_and_their_workers_between_budgets() {
    let (mut actor, _reports) = actor();
    let key = actor.destination_for(hosts(), None, None);
    let provider = actor.dests[&key].budget.clone();
    actor.dests.get_mut(&key).expect("dest").fast_workers = 2;
    actor.budgets.get_mut(&provider).expect("budget").active = 2;

    let rule = crate::ShapingRule {
        name: "shared".into(),
        mx_suffixes: vec!["shared.test".into()],
        max_connections: Some(3),
        max_messages_per_connection: None,
        max_messages_per_minute: Some(600),
    };
    actor.reshape(vec![rule.clone()]);
    let moved = actor.dests[&key].budget.clone();
    assert_eq!(&*moved, "rule:shared");
    assert_eq!(actor.budgets[&moved].active, 2);
    assert_eq!(actor.budgets[&moved].max_connections, 3);
    assert!(
        !actor.budgets.contains_key(&provider),
        "the provider budget has no destination or worker left"
    );

    // A changed limit on the same rule retunes the budget in place.
    let tighter = crate::ShapingRule {
        max_connections: Some(1),
        ..rule
    };
    actor.reshape(vec![tighter]);
    assert_eq!(actor.budgets[&moved].max_connections, 1);
    assert_eq!(actor.budgets[&moved].connection_limit(), 1);

    // The rule removed: back to the provider's budget, workers and all.
    actor.reshape(Vec::new());
    assert_eq!(actor.dests[&key].budget, provider);
    assert_eq!(actor.budgets[&provider].active, 2);
    actor.release_worker(&key, LaneKind::Fast);
    actor.release_worker(&key, LaneKind::Fast);
    assert_eq!(actor.budgets[&provider].active, 0);
}
