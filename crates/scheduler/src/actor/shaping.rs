//! Traffic shaping: how hard Herald may push a destination. A [`ShapingRule`] matches MX host
//! names by suffix, so every domain hosted at one provider (Gmail, Outlook, Yahoo) shares one
//! [`Budget`] of connections and messages per minute, whatever its MX host set. Destinations no
//! rule matches get a budget of their own with the global per-destination defaults.
//!
//! AIMD: a throttling signal (421, 452, a rate-limit 4xx, a dropped connection) halves the
//! budget's connection limit and message rate (at most once per `cooldown`, so a burst of 421s
//! from parallel connections counts once); each successful batch adds back `1/limit` of a
//! connection and a fiftieth of the configured rate: slow recovery, fast retreat.
//!
//! Without a rule, destinations are grouped automatically by their most preferred MX host's
//! parent domain ([`provider_of`]): a provider that publishes different MX pairs for its domains
//! (`mx1`+`mx2` for one, `mx2`+`mx3` for the next) is still one budget, as its rate limit is one.
//!
//! Each budget also carries a [`Pace`]: the copies-per-second rate learned from rate-limit
//! replies (see `actor/pace.rs`); while paced, the budget's connections are capped to what the
//! rate needs ([`COPIES_PER_SEC_PER_CONNECTION`] each), so an overshoot meets one refused MAIL
//! per connection, not twenty. The messages a provider accepts per connection are learned from
//! its `421` at MAIL ([`Budget::learn_per_connection`]).
//!
//! Owned by the scheduler actor. Bounds: one budget per rule plus one per provider.

use crate::actor::pace::Pace;
pub use crate::config::ShapingRule;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The connection and rate allowance shared by the destinations of one rule.
#[derive(Debug)]
pub struct Budget {
    pub name: Arc<str>,
    pub max_connections: usize,
    pub messages_per_connection: usize,
    max_rate: Option<f64>,
    /// Current (AIMD) connection limit, 1..=max_connections.
    limit: f64,
    /// Slow start: until the first throttling signal the limit is also this ceiling, which
    /// doubles every second and grows by one connection per two successful batches (TCP's slow start, Postfix's
    /// `initial_destination_concurrency`): a provider that limits the rate meets a few
    /// connections' worth of refused MAILs at first contact, not twenty.
    ramp: Option<f64>,
    /// When the budget was made: slow start's ceiling also doubles every second from here, so
    /// a slow host (seconds per batch) reaches its connections in seconds, not minutes.
    started: Instant,
    /// Current (AIMD) copies per minute.
    rate: Option<f64>,
    tokens: f64,
    refilled: Instant,
    last_cut: Option<Instant>,
    cooldown: Duration,
    /// Workers started under this budget (connecting or connected).
    pub active: usize,
    /// The learned copies-per-second rate of the provider.
    pub pace: Pace,
    /// Alive nodes of the cluster sending to this provider (1 alone): the
    /// configured per-minute rate is divided among them, and the learned pace is this node's
    /// share.
    senders: u32,
    /// A cut of the pace on a rate refusal not yet told to the cluster: the fraction of what
    /// was accepted the provider takes now (`pace::START_FRACTION` at the first refusal,
    /// `pace::CUT` after).
    pub cut: Option<f64>,
}

/// Connections a budget starts with (slow start; see `Budget::ramp`).
pub const INITIAL_CONNECTIONS: usize = 2;

/// While paced, one connection per this many copies a second (at least one): enough to carry
/// the rate over connections with a real round-trip time, few enough that a rate overshoot is
/// refused on a few connections only.
pub const COPIES_PER_SEC_PER_CONNECTION: f64 = 25.0;

impl Budget {
    /// New limits from a changed rule (SIGHUP); the AIMD state and the learned rate stay, within
    /// the new bounds.
    pub fn retune(&mut self, conns: usize, per_conn: usize, per_min: Option<u32>) {
        self.max_connections = conns.max(1);
        self.messages_per_connection = per_conn.max(1);
        self.limit = self.limit.min(self.max_connections as f64).max(1.0);
        self.max_rate = per_min.map(|m| f64::from(m.max(1)));
        self.rate = match (self.rate, self.max_rate) {
            (Some(r), Some(m)) => Some(r.min(m)),
            (_, m) => m,
        };
    }

    pub fn new(
        name: Arc<str>,
        conns: usize,
        per_conn: usize,
        per_min: Option<u32>,
        cooldown: Duration,
    ) -> Budget {
        let max_rate = per_min.map(|m| f64::from(m.max(1)));
        Budget {
            name,
            max_connections: conns.max(1),
            messages_per_connection: per_conn.max(1),
            max_rate,
            limit: conns.max(1) as f64,
            ramp: Some(INITIAL_CONNECTIONS.min(conns.max(1)) as f64),
            started: Instant::now(),
            rate: max_rate,
            tokens: max_rate.map_or(0.0, |r| (r / 6.0).max(1.0)),
            refilled: Instant::now(),
            last_cut: None,
            cooldown,
            active: 0,
            pace: Pace::new(Instant::now(), cooldown),
            senders: 1,
            cut: None,
        }
    }

    /// Connections allowed now (the AIMD limit, and what the learned rate needs).
    pub fn connection_limit(&self) -> usize {
        let limit = self
            .ramp
            .map_or(self.limit, |r| self.ramped(r).min(self.limit));
        let limit = (limit.floor() as usize).clamp(1, self.max_connections);
        match self.pace.rate() {
            Some(r) => limit.min((r / COPIES_PER_SEC_PER_CONNECTION).ceil().max(1.0) as usize),
            None => limit,
        }
    }

    /// Slow start's ceiling now: grown per batch (`ramp`), and doubling every second since the
    /// budget was made (tokio's clock, so paused-clock tests drive it).
    fn ramped(&self, ramp: f64) -> f64 {
        let secs = Instant::now()
            .saturating_duration_since(self.started)
            .as_secs_f64();
        ramp.max(INITIAL_CONNECTIONS as f64 * 2f64.powf(secs.min(16.0)))
    }

    /// The provider closed a connection (`421` at MAIL) after accepting `delivered` messages
    /// on it: later connections carry no more than that.
    pub fn learn_per_connection(&mut self, delivered: usize) -> bool {
        let before = self.messages_per_connection;
        self.messages_per_connection = self.messages_per_connection.min(delivered.max(1));
        self.messages_per_connection != before
    }

    /// Copies per minute allowed now (this node's share), when the budget has a rate.
    pub fn per_minute(&self) -> Option<u32> {
        self.rate
            .map(|r| (r / f64::from(self.senders)).round() as u32)
    }

    /// The alive nodes sending to this provider changed: the configured rate
    /// is shared among `n` now (the learned pace is rebalanced by the caller, from the
    /// cluster's rate). True when it changed.
    pub fn set_senders(&mut self, n: u32) -> bool {
        let n = n.max(1);
        if n == self.senders {
            return false;
        }
        self.senders = n;
        true
    }

    /// Alive nodes sending to this provider, this one included.
    pub fn senders(&self) -> u32 {
        self.senders
    }

    /// How many of `want` copies may go now (within the learned pace and the configured rate);
    /// takes them.
    pub fn take(&mut self, want: usize, now: Instant) -> usize {
        let paced = self.pace.take(want, now);
        let n = self.take_configured(paced, now);
        self.pace.give_back(paced - n);
        n
    }

    /// The configured rate's (per-minute) share of `take`.
    fn take_configured(&mut self, want: usize, now: Instant) -> usize {
        let Some(rate) = self.rate else { return want };
        // This node's share of the cluster's configured rate.
        let rate = rate / f64::from(self.senders);
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.refilled = now;
        // Burst: ten seconds' worth, at least one copy.
        let cap = (rate / 6.0).max(1.0);
        self.tokens = (self.tokens + elapsed * rate / 60.0).min(cap);
        let n = (self.tokens.floor() as usize).min(want);
        self.tokens -= n as f64;
        n
    }

    /// A throttling signal. Returns true when the budget was cut (not within the cooldown).
    pub fn throttle(&mut self, now: Instant) -> bool {
        if self
            .last_cut
            .is_some_and(|t| now.saturating_duration_since(t) < self.cooldown)
        {
            return false;
        }
        self.last_cut = Some(now);
        let in_use = match self.ramp.take() {
            Some(r) => self.ramped(r).min(self.limit),
            None => self.limit,
        };
        self.limit = (in_use / 2.0).max(1.0);
        self.rate = self.rate.map(|r| (r / 2.0).max(1.0));
        true
    }

    /// A batch went through: restore a little. Returns true when the limit reached a new whole
    /// connection (worth logging).
    pub fn success(&mut self) -> bool {
        let before = self.connection_limit();
        if let Some(r) = self.ramp {
            // Slow start: one more connection per two successful batches, up to the maximum.
            let r = r + 0.5;
            self.ramp = (r < self.max_connections as f64).then_some(r);
            return self.connection_limit() != before;
        }
        self.limit = (self.limit + 1.0 / self.limit).min(self.max_connections as f64);
        if let (Some(r), Some(max)) = (self.rate.as_mut(), self.max_rate) {
            *r = (*r + max / 50.0).min(max);
        }
        self.connection_limit() != before
    }

    /// Ends slow start at the connections in use (a rate refusal: more would be refused too).
    pub fn end_slow_start(&mut self) {
        if let Some(r) = self.ramp.take() {
            self.limit = self.limit.min(self.ramped(r));
        }
    }

    /// True while below the configured maximum (for logs and the queue view).
    pub fn is_reduced(&self) -> bool {
        self.connection_limit() < self.max_connections
            || self.rate.zip(self.max_rate).is_some_and(|(r, m)| r < m)
    }
}

/// The provider a destination belongs to when no rule names it: its most preferred MX host's
/// parent domain (`mx1.provider.example` → `provider.example`, `aspmx.l.google.com` →
/// `l.google.com`, `x.mail.protection.outlook.com` → `mail.protection.outlook.com`), or the host
/// itself when the parent would be a public suffix. A heuristic rather than the Public Suffix
/// List (a large compiled-in table): a wrong guess only merges or splits shaping budgets, it
/// never changes where mail goes.
pub fn provider_of(first_mx: &str) -> String {
    let host = first_mx.trim_end_matches('.').to_ascii_lowercase();
    let Some((_, parent)) = host.split_once('.') else {
        return host;
    };
    let labels: Vec<&str> = parent.split('.').collect();
    let public_second_level = labels.len() == 2
        && labels[1].len() == 2
        && matches!(
            labels[0],
            "co" | "com" | "net" | "org" | "ac" | "gov" | "edu" | "ne" | "or" | "go"
        );
    if labels.len() < 2 || public_second_level {
        return host;
    }
    parent.to_string()
}

/// The rule matching a destination, by its most preferred MX host.
pub fn rule_for<'a>(rules: &'a [ShapingRule], first_mx: &str) -> Option<&'a ShapingRule> {
    rules.iter().find(|r| r.matches(first_mx))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gmail() -> ShapingRule {
        ShapingRule {
            name: "gmail".into(),
            mx_suffixes: vec!["google.com".into(), "googlemail.com".into()],
            max_connections: Some(10),
            max_messages_per_connection: Some(100),
            max_messages_per_minute: Some(600),
        }
    }

    #[test]
    fn suffix_matches_at_label_boundaries() {
        let r = gmail();
        assert!(r.matches("aspmx.l.google.com"));
        assert!(r.matches("ALT1.ASPMX.L.GOOGLE.COM."));
        assert!(r.matches("google.com"));
        assert!(!r.matches("notgoogle.com"));
        assert!(!r.matches("google.com.evil.example"));
    }

    #[test]
    fn aimd_halves_once_per_cooldown_and_recovers_slowly() {
        let t0 = Instant::now();
        let mut b = Budget::new("g".into(), 16, 100, Some(600), Duration::from_secs(1));
        assert_eq!(b.connection_limit(), INITIAL_CONNECTIONS, "slow start");
        for _ in 0..28 {
            b.success();
        }
        assert_eq!(
            b.connection_limit(),
            16,
            "one more per two successful batches"
        );
        assert!(b.throttle(t0));
        assert!(!b.throttle(t0), "a burst of 421s counts once");
        assert_eq!(b.connection_limit(), 8);
        assert!(b.throttle(t0 + Duration::from_secs(2)));
        assert_eq!(b.connection_limit(), 4);
        assert_eq!(b.per_minute(), Some(150));
        let mut batches = 0;
        while b.connection_limit() < 16 {
            b.success();
            batches += 1;
        }
        assert!(batches > 30, "recovery is gradual: {batches} batches");
        assert_eq!(b.per_minute(), Some(600));
    }

    #[test]
    fn providers_are_grouped_by_the_first_mx_parent_domain() {
        assert_eq!(provider_of("mx1.provider.example"), "provider.example");
        assert_eq!(provider_of("MX3.Provider.Example."), "provider.example");
        assert_eq!(provider_of("aspmx.l.google.com"), "l.google.com");
        assert_eq!(provider_of("example.com"), "example.com");
        assert_eq!(provider_of("mail.example.co.uk"), "example.co.uk");
        assert_eq!(provider_of("example.co.uk"), "example.co.uk");
        assert_eq!(provider_of("localhost"), "localhost");
    }

    #[tokio::test(start_paused = true)]
    async fn slow_start_also_doubles_every_second() {
        let b = Budget::new("s".into(), 20, 100, None, Duration::from_secs(1));
        assert_eq!(b.connection_limit(), 2);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(
            b.connection_limit(),
            8,
            "a slow host is not held to two for long"
        );
        tokio::time::advance(Duration::from_secs(3)).await;
        assert_eq!(b.connection_limit(), 20);
    }

    #[test]
    fn a_learned_pace_caps_connections_and_batches() {
        let t0 = Instant::now();
        let mut b = Budget::new("p".into(), 20, 1000, None, Duration::from_secs(1));
        assert_eq!(b.connection_limit(), 2);
        for _ in 0..40 {
            b.success();
        }
        assert_eq!(b.connection_limit(), 20);
        assert_eq!(b.take(16, t0), 16);
        b.pace.delivered(50, t0);
        b.pace.refused(t0);
        assert_eq!(b.connection_limit(), 2, "45/s needs two connections");
        assert_eq!(b.take(16, t0), 0);
        assert_eq!(b.take(16, t0 + Duration::from_millis(200)), 9);
        assert!(b.learn_per_connection(100));
        assert!(!b.learn_per_connection(150));
        assert_eq!(b.messages_per_connection, 100);
    }

    #[test]
    fn rate_limit_is_a_token_bucket() {
        let t0 = Instant::now();
        let mut b = Budget::new("r".into(), 4, 100, Some(60), Duration::from_secs(1));
        assert_eq!(b.take(100, t0), 10, "ten seconds' burst");
        assert_eq!(b.take(100, t0), 0);
        assert_eq!(b.take(100, t0 + Duration::from_secs(3)), 3, "one a second");
        let mut free = Budget::new("f".into(), 4, 100, None, Duration::from_secs(1));
        assert_eq!(free.take(100, t0), 100);
    }

    #[test]
    fn a_configured_rate_and_a_learned_pace_are_shared_among_the_senders() {
        let t0 = Instant::now();
        let mut b = Budget::new("r".into(), 4, 100, Some(120), Duration::from_secs(1));
        assert!(b.set_senders(3));
        assert!(!b.set_senders(3));
        assert_eq!(b.per_minute(), Some(40));
        assert_eq!(b.take(100, t0), 6, "ten seconds of this node's share");
        assert_eq!(
            b.take(100, t0 + Duration::from_millis(4600)),
            3,
            "40 a minute here"
        );
        assert!(b.set_senders(2), "a node left");
        assert_eq!(b.per_minute(), Some(60));
        assert!(b.set_senders(0), "never fewer than this node");
        assert_eq!(b.senders(), 1);
        assert_eq!(b.per_minute(), Some(120));
    }
}
