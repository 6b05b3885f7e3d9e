//! Routes: which destination a recipient domain's copies go to. A child module of the actor (it
//! works on the actor's own state, in its task).
//!
//! Resolving a domain is up to three lookups run together: its MX hosts (DNS), its MTA-STS
//! policy (`herald_routing::MtaSts`: TXT record, HTTPS fetch, cache) and, when DANE is on,
//! whether its MX answer is DNSSEC-signed (`herald_routing::Dane`), followed by the MX hosts'
//! TLSA lookups. DANE goes first (`dane::apply`): hosts whose TLSA lookup failed are dropped,
//! and when some host has usable records DANE decides for the domain and the MTA-STS policy is
//! not applied (RFC 8461 §2). Otherwise the policy is applied to the hosts (`mta_sts::apply`):
//! an `enforce` policy keeps only the MX hosts it names and marks the destination as needing
//! verified TLS; a `testing` policy marks it for reporting. Destinations are keyed by the MX
//! host set *and* those markings, so a domain with a policy never shares a connection with one
//! whose requirements differ, while it still shares the host set's shaping budget.
//!
//! A route is resolved again every `route_refresh_secs`, and no later than its policy or its
//! TLSA answers expire.
//! When the destination changes (new hosts, a new policy), the domain's queued copies move to
//! the new one ([`Actor::reroute`]), and copies coming back deferred follow the current route
//! (`outcome.rs` asks [`Actor::current_destination`]): a policy applies to every copy sent
//! after it is known. A refresh that fails keeps the route it had (RFC 8461 §5.1: a cached
//! policy outlives failed lookups); one that finds an enforced policy allowing no MX host, or
//! DANE lookups that leave no usable host, turns the route into a DNS-style retry with the
//! domain's copies deferred.
//!
//! A domain DNS says cannot receive mail (NXDOMAIN, null MX, MX hosts without addresses) fails
//! its copies with [`FailureCause::NoRoute`], saying which (see [`RouteError::no_route`]), and
//! the route is kept dead for `dns_negative_cache_secs`.
//!
//! Invariant: every job stays in exactly one place; moving jobs between destinations or into a
//! route's own list never changes `queued` or `slow_queued`.

use super::{Actor, Route};
use crate::actor::queue::{destination_key, Destination};
use crate::actor::shaping::{provider_of, rule_for, Budget};
use crate::clock::Clock;
use crate::messages::Job;
use crate::messages::PolicyNotes;
use herald_routing::mta_sts::{self, Mode, PolicySource};
use herald_routing::{
    dane, Dane, DaneRoute, MtaSts, MxHost, MxResolver, MxSecurity, ResolveError, StsRoute,
};
use herald_types::{DaneNote, LaneKind, MtaStsNote};
use herald_types::{FailureCause, NoRoute, Reply};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Refreshes are never more frequent than this (a policy with `max_age: 0` would otherwise be
/// fetched on every tick), unless `route_refresh_secs` itself is shorter.
const MIN_REFRESH: Duration = Duration::from_secs(60);

/// A resolved domain: the hosts to use and what MTA-STS and DANE require of them.
#[derive(Debug)]
pub struct Routing {
    pub hosts: Vec<MxHost>,
    pub sts: Option<StsRoute>,
    /// None when DANE is off.
    pub dane: Option<DaneRoute>,
}

/// What resolving a domain takes: DNS, and MTA-STS and DANE when they are on. Owned by the
/// actor and cloned into its resolver tasks.
#[derive(Clone)]
pub struct Resolvers {
    pub resolver: Arc<MxResolver>,
    /// MTA-STS policy discovery (None: `delivery.mta_sts.enabled = false`).
    pub mta_sts: Option<Arc<MtaSts>>,
    /// DANE TLSA lookups (None: `delivery.dane.enabled = false`, the default).
    pub dane: Option<Dane>,
}

#[cfg(test)]
/// Resolvers pointed at a closed port: nothing is resolved (tests route domains themselves).
pub(crate) fn test_resolvers() -> Resolvers {
    let resolver = herald_routing::MxResolver::new(&herald_routing::ResolverConfig {
        nameservers: vec![std::net::SocketAddr::from(([127, 0, 0, 1], 9))],
        ..herald_routing::ResolverConfig::default()
    })
    .expect("resolver");
    Resolvers {
        resolver: Arc::new(resolver),
        mta_sts: None,
        dane: None,
    }
}

/// A resolver task's answer, on the actor's private channel.
pub(super) struct Resolved {
    pub domain: String,
    pub result: Result<Routing, RouteError>,
}

/// Why a domain cannot be routed now.
#[derive(Debug)]
pub enum RouteError {
    Dns(ResolveError),
    /// An enforced MTA-STS policy allows none of the domain's MX hosts (the reply, 4.7.5).
    MtaSts(Reply),
    /// DANE leaves no usable MX host (bogus or unanswered MX or TLSA lookups; 4.7.5).
    Dane(Reply),
}

impl RouteError {
    /// The final failure for a domain DNS says cannot receive mail; `None` when retrying may
    /// help. Matches every [`ResolveError`] so a new one needs a decision here; agrees with
    /// [`ResolveError::is_permanent`] (tested).
    pub(super) fn no_route(&self) -> Option<FailureCause> {
        let RouteError::Dns(e) = self else {
            return None;
        };
        let why = match e {
            ResolveError::NoSuchDomain { .. } | ResolveError::InvalidDomain { .. } => {
                NoRoute::NoSuchDomain
            }
            ResolveError::NullMx { .. } => NoRoute::NullMx,
            ResolveError::NoAddress { .. } => NoRoute::NoMailHost,
            ResolveError::Timeout { .. } | ResolveError::Temporary { .. } => return None,
        };
        let reply = e.synthetic_reply();
        Some(FailureCause::NoRoute { why, reply })
    }

    fn reply(&self) -> Reply {
        match self {
            RouteError::Dns(e) => e.synthetic_reply(),
            RouteError::MtaSts(reply) | RouteError::Dane(reply) => reply.clone(),
        }
    }

    fn notes(&self) -> PolicyNotes {
        PolicyNotes {
            mta_sts: matches!(self, RouteError::MtaSts(_)).then_some(MtaStsNote::Enforce),
            dane: matches!(self, RouteError::Dane(_)).then_some(DaneNote::Failed),
        }
    }

    /// A policy (not DNS) keeps the domain from being routed.
    fn is_policy(&self) -> bool {
        matches!(self, RouteError::MtaSts(_) | RouteError::Dane(_))
    }
}

/// Resolves `domain`'s MX hosts, (when enabled) its MTA-STS policy and its MX answer's DNSSEC
/// status concurrently; applies DANE, then (unless DANE decides) the policy.
pub async fn resolve_route(
    domain: &str,
    resolver: &MxResolver,
    sts: Option<&MtaSts>,
    dane: Option<&Dane>,
    clock: Clock,
) -> Result<Routing, RouteError> {
    let sts_lookup = async {
        match sts {
            Some(sts) => Some(sts.lookup(domain).await),
            None => None,
        }
    };
    let mx_security = async {
        match dane {
            Some(dane) => Some(dane.mx_security(domain).await),
            None => None,
        }
    };
    let (hosts, lookup, mx_security) =
        tokio::join!(resolver.resolve(domain), sts_lookup, mx_security);
    let hosts = hosts.map_err(RouteError::Dns)?;
    let (hosts, dane_route) = match (dane, mx_security) {
        (Some(dane), Some(mx)) => {
            let (hosts, route) = dane_route(domain, dane, mx, hosts, clock)
                .await
                .map_err(RouteError::Dane)?;
            (hosts, Some(route))
        }
        _ => (hosts, None),
    };
    if dane_route.as_ref().is_some_and(DaneRoute::applies) {
        if lookup.as_ref().is_some_and(|l| l.policy.is_some()) {
            tracing::info!(
                domain,
                "DANE applies to the MX hosts; the MTA-STS policy is not used (RFC 8461 §2)"
            );
        }
        return Ok(Routing {
            hosts,
            sts: None,
            dane: dane_route,
        });
    }
    let policy = lookup.as_ref().and_then(|l| {
        if let Some(problem) = &l.problem {
            tracing::info!(domain, source = ?l.source, %problem, "MTA-STS policy discovery incomplete");
        }
        if let (PolicySource::Fetched, Some(p)) = (l.source, &l.policy) {
            tracing::info!(domain, id = %p.id, mode = p.policy.mode.as_str(), max_age = p.policy.max_age_secs, "MTA-STS policy fetched");
        }
        l.policy.as_ref()
    });
    let (hosts, sts) = mta_sts::apply(domain, policy, hosts).map_err(RouteError::MtaSts)?;
    if let Some(r) = sts.as_ref().filter(|r| !r.unmatched.is_empty()) {
        tracing::warn!(domain, unmatched = ?r.unmatched, "MTA-STS testing: MX hosts outside the policy (enforcement would not use them)");
    }
    Ok(Routing {
        hosts,
        sts,
        dane: dane_route,
    })
}

/// The TLSA lookups of `hosts` (only when the MX answer is secure) and what they do to the
/// route; Err: the reply to defer the domain's copies with.
async fn dane_route(
    domain: &str,
    dane: &Dane,
    mx: MxSecurity,
    hosts: Vec<MxHost>,
    clock: Clock,
) -> Result<(Vec<MxHost>, DaneRoute), Reply> {
    let (per_host, valid_for) = match mx {
        MxSecurity::Secure => dane.hosts(&hosts).await,
        // Nothing of the hosts is looked at; the route refresh interval governs.
        _ => (Vec::new(), Duration::MAX),
    };
    let now = clock.now_ms() / 1000;
    let expires_at = now.saturating_add(valid_for.as_secs());
    let routed = dane::apply(domain, mx, hosts, per_host, expires_at);
    if let Ok((_, route)) = &routed {
        if route.applies() {
            tracing::debug!(domain, hosts = ?route.hosts, "DANE applies");
        }
    }
    routed
}

/// The destination key suffix for a route's MTA-STS requirements (empty without any).
fn sts_suffix(sts: Option<&StsRoute>) -> String {
    match sts {
        None => String::new(),
        Some(r) if r.mode == Mode::Enforce => "|mta-sts=enforce".into(),
        Some(r) if r.unmatched.is_empty() => "|mta-sts=testing".into(),
        Some(r) => format!("|mta-sts=testing;unmatched={}", r.unmatched.join(",")),
    }
}

impl Actor {
    pub(super) fn spawn_resolve(&self, domain: String) {
        let Resolvers {
            resolver,
            mta_sts: sts,
            dane,
        } = self.resolvers.clone();
        let clock = self.clock;
        let answers = self.resolved_tx.clone();
        let permits = self.resolve_permits.clone();
        tokio::spawn(async move {
            let _permit = permits.acquire_owned().await;
            let result =
                resolve_route(&domain, &resolver, sts.as_deref(), dane.as_ref(), clock).await;
            let _ = answers.send(Resolved { domain, result }).await;
        });
    }

    pub(super) async fn on_resolved(
        &mut self,
        domain: String,
        result: Result<Routing, RouteError>,
    ) {
        let (jobs, previous) = match self.routes.remove(&domain) {
            Some(Route::Resolving(jobs)) | Some(Route::RetryDns { jobs, .. }) => (jobs, None),
            Some(Route::Routed { key, .. }) => (Vec::new(), Some(key)),
            Some(other) => {
                self.routes.insert(domain, other);
                return;
            }
            None => (Vec::new(), None),
        };
        match (result, previous) {
            (Ok(routing), previous) => {
                let refresh_at = self.refresh_time(routing.sts.as_ref(), routing.dane.as_ref());
                let key = self.destination_for(routing.hosts, routing.sts, routing.dane);
                let mut touched = Vec::new();
                for job in jobs {
                    // The copy's egress pool's variant of the destination.
                    let at = self.pooled(&key, &job);
                    // Counted while they waited for the route; counted again where they go
                    // now: in memory within the destination's share, else on disk for room.
                    self.queued = self.queued.saturating_sub(1);
                    if job.lane == LaneKind::Slow {
                        self.slow_queued = self.slow_queued.saturating_sub(1);
                    }
                    let bound = self.room_bound(&at);
                    self.queue_or_overflow(&at, job, bound);
                    if at != key && !touched.contains(&at) {
                        touched.push(at);
                    }
                }
                for at in touched {
                    self.pump(&at);
                }
                let route = Route::Routed {
                    key: key.clone(),
                    refresh_at,
                    refreshing: false,
                };
                self.routes.insert(domain.clone(), route);
                if let Some(old) = previous.filter(|old| *old != key) {
                    self.reroute(&domain, &old, &key);
                }
                self.pump(&key);
            }
            (Err(e), Some(old)) if e.is_policy() => {
                // The policy (or DANE) now allows none of the hosts: the domain's queued copies
                // leave the old destination and wait with the route, deferred.
                // (Its parked copies join the route when their time comes: `parking.rs`.)
                let ready = self.take_domain_everywhere(&old, &domain);
                self.retry_route(domain, ready, e).await;
            }
            (Err(e), Some(key)) => {
                // A failed refresh keeps the route it had: hosts and policy as last known.
                tracing::info!(%domain, error = ?e, "route refresh failed; keeping the current route");
                let refresh_at = Instant::now() + self.refresh_interval();
                let route = Route::Routed {
                    key,
                    refresh_at,
                    refreshing: false,
                };
                self.routes.insert(domain, route);
            }
            (Err(e), None) => match e.no_route() {
                Some(cause) => self.dead_route(domain, jobs, cause).await,
                None => self.retry_route(domain, jobs, e).await,
            },
        }
    }

    /// Fails `jobs` for a domain with no route and keeps the route dead (negative cache), so
    /// copies arriving meanwhile fail with the same cause without a lookup.
    async fn dead_route(&mut self, domain: String, jobs: Vec<Job>, cause: FailureCause) {
        for job in jobs {
            self.leave_queue(&job);
            self.finish(job, cause.clone()).await;
        }
        let until = Instant::now() + Duration::from_secs(self.cfg.dns_negative_cache_secs);
        self.routes.insert(domain, Route::Dead { until, cause });
    }

    /// Defers `jobs` with the route error's reply and retries the route later.
    async fn retry_route(&mut self, domain: String, jobs: Vec<Job>, e: RouteError) {
        let reply = e.reply();
        let mut keep = Vec::with_capacity(jobs.len());
        for mut job in jobs {
            job.tries += 1;
            self.report_deferred(&job, &reply, e.notes()).await;
            if job.expired(self.clock.now_ms()) {
                self.leave_queue(&job);
                self.expire(job).await;
            } else {
                keep.push(job);
            }
        }
        let until = Instant::now() + Duration::from_secs(self.cfg.retry_initial_secs);
        self.routes
            .insert(domain, Route::RetryDns { until, jobs: keep });
    }

    fn refresh_interval(&self) -> Duration {
        Duration::from_secs(self.cfg.route_refresh_secs.max(1))
    }

    /// When a route made now must be resolved again: after `route_refresh_secs`, and before its
    /// MTA-STS policy or its DANE answers expire.
    fn refresh_time(&self, sts: Option<&StsRoute>, dane: Option<&DaneRoute>) -> Instant {
        let every = self.refresh_interval();
        let expiry = [sts.map(|r| r.expires_at), dane.map(|r| r.expires_at)]
            .into_iter()
            .flatten()
            .min();
        let due = match expiry {
            Some(expires_at) => {
                let now = self.clock.now_ms() / 1000;
                let left = Duration::from_secs(expires_at.saturating_sub(now));
                left.clamp(MIN_REFRESH.min(every), every)
            }
            None => every,
        };
        Instant::now() + due
    }

    /// The destination of a resolved route, created (with its shaping budget) if new. The key is
    /// the MX host set plus the MTA-STS and DANE markings; the budget is the host set's (or a
    /// rule's). An existing destination takes the newest DANE answers.
    pub(crate) fn destination_for(
        &mut self,
        hosts: Vec<MxHost>,
        sts: Option<StsRoute>,
        dane: Option<DaneRoute>,
    ) -> Arc<str> {
        let base = destination_key(&hosts);
        let dane_suffix = dane.as_ref().map_or("", DaneRoute::key_suffix);
        let key: Arc<str> = Arc::from(format!("{base}{}{dane_suffix}", sts_suffix(sts.as_ref())));
        if self.dests.contains_key(&key) {
            if let Some(dane) = dane.map(Arc::new) {
                // The egress variants of the destination share its hosts.
                for (k, d) in self.dests.iter_mut() {
                    if *k == key || super::egress::is_variant_of(k, &key) {
                        d.dane = Some(dane.clone());
                    }
                }
            }
            return key;
        }
        let first = hosts.first().map_or("", |h| h.name.as_str());
        let budget = self.budget_for(first);
        let mut d = Destination::new(key.clone(), Arc::new(hosts), budget);
        d.sts = sts.map(Arc::new);
        d.dane = dane.map(Arc::new);
        self.dests.insert(key.clone(), d);
        key
    }

    /// The shaping budget of destinations whose first MX host is `first`: a rule's, else the
    /// provider's; created if new.
    pub(crate) fn budget_for(&mut self, first: &str) -> Arc<str> {
        let cfg = &self.cfg;
        let cooldown = Duration::from_millis(cfg.throttle_cooldown_ms);
        match rule_for(&cfg.shaping, first) {
            Some(rule) => {
                let name: Arc<str> = Arc::from(format!("rule:{}", rule.name));
                self.budgets.entry(name.clone()).or_insert_with(|| {
                    Budget::new(
                        name.clone(),
                        rule.max_connections
                            .unwrap_or(cfg.max_connections_per_destination),
                        rule.max_messages_per_connection
                            .unwrap_or(cfg.max_messages_per_connection),
                        rule.max_messages_per_minute,
                        cooldown,
                    )
                });
                name
            }
            None => {
                // One budget per provider (see `shaping::provider_of`), not per MX host set.
                let name: Arc<str> = Arc::from(provider_of(first));
                self.budgets.entry(name.clone()).or_insert_with(|| {
                    Budget::new(
                        name.clone(),
                        cfg.max_connections_per_destination,
                        cfg.max_messages_per_connection,
                        None,
                        cooldown,
                    )
                });
                name
            }
        }
    }

    /// The destination `domain`'s copies go to now, if it is routed.
    pub(crate) fn current_destination(&self, domain: &str) -> Option<&Arc<str>> {
        match self.routes.get(domain) {
            Some(Route::Routed { key, .. }) => Some(key),
            _ => None,
        }
    }

    /// Moves `domain`'s queued copies from destination `from` to `to`, keeping each one's lane.
    /// Its parked copies stay indexed where they are and follow the new route when their time
    /// comes (`parking.rs`): reading them all back now would cost disk reads for nothing.
    fn reroute(&mut self, domain: &str, from: &Arc<str>, to: &Arc<str>) {
        if self.ctx.egress.is_some() {
            return self.reroute_pooled(domain, from, to);
        }
        let ready = self.take_domain(from, domain);
        if ready.is_empty() {
            return;
        }
        tracing::info!(domain, from = %from, to = %to, copies = ready.len(), "route changed: queued copies moved");
        if let Some(d) = self.dests.get_mut(to) {
            for job in ready {
                match job.lane {
                    LaneKind::Fast => d.fast.push_back(job),
                    LaneKind::Slow => d.slow.push_back(job),
                }
            }
        }
    }

    /// Takes `domain`'s copies out of destination `key`'s ready queues.
    pub(super) fn take_domain(&mut self, key: &Arc<str>, domain: &str) -> Vec<Job> {
        let Some(d) = self.dests.get_mut(key) else {
            return Vec::new();
        };
        let mine = |j: &Job| j.domain().eq_ignore_ascii_case(domain);
        let mut ready = Vec::new();
        for q in [&mut d.fast, &mut d.slow] {
            let (hit, keep): (Vec<Job>, Vec<Job>) = q.drain().into_iter().partition(|j| mine(j));
            for job in keep {
                q.push_back(job);
            }
            ready.extend(hit);
        }
        ready
    }

    /// Starts the DNS retries that are due, the route refreshes that are due, and forgets
    /// negative entries that have expired.
    pub(crate) fn retry_routes(&mut self, now: Instant) {
        let mut redo = Vec::new();
        let mut refresh = Vec::new();
        self.routes.retain(|domain, route| match route {
            Route::RetryDns { until, .. } if *until <= now => {
                redo.push(domain.clone());
                true
            }
            Route::Routed {
                refresh_at,
                refreshing,
                ..
            } if *refresh_at <= now && !*refreshing => {
                *refreshing = true;
                refresh.push(domain.clone());
                true
            }
            Route::Dead { until, .. } => *until > now,
            _ => true,
        });
        for domain in redo {
            if let Some(Route::RetryDns { jobs, .. }) = self.routes.remove(&domain) {
                self.routes.insert(domain.clone(), Route::Resolving(jobs));
                self.spawn_resolve(domain);
            }
        }
        for domain in refresh {
            self.spawn_resolve(domain);
        }
    }
}
