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
//! Owned by the scheduler actor. Bounds: one budget per rule plus one per destination.

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
    /// Current (AIMD) copies per minute.
    rate: Option<f64>,
    tokens: f64,
    refilled: Instant,
    last_cut: Option<Instant>,
    cooldown: Duration,
    /// Workers started under this budget (connecting or connected).
    pub active: usize,
}

impl Budget {
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
            rate: max_rate,
            tokens: max_rate.map_or(0.0, |r| (r / 6.0).max(1.0)),
            refilled: Instant::now(),
            last_cut: None,
            cooldown,
            active: 0,
        }
    }

    /// Connections allowed now.
    pub fn connection_limit(&self) -> usize {
        (self.limit.floor() as usize).clamp(1, self.max_connections)
    }

    /// Copies per minute allowed now, when the budget has a rate.
    pub fn per_minute(&self) -> Option<u32> {
        self.rate.map(|r| r.round() as u32)
    }

    /// How many of `want` copies may go now (all of them without a rate limit); takes them.
    pub fn take(&mut self, want: usize, now: Instant) -> usize {
        let Some(rate) = self.rate else { return want };
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
        self.limit = (self.limit / 2.0).max(1.0);
        self.rate = self.rate.map(|r| (r / 2.0).max(1.0));
        true
    }

    /// A batch went through: restore a little. Returns true when the limit reached a new whole
    /// connection (worth logging).
    pub fn success(&mut self) -> bool {
        let before = self.connection_limit();
        self.limit = (self.limit + 1.0 / self.limit).min(self.max_connections as f64);
        if let (Some(r), Some(max)) = (self.rate.as_mut(), self.max_rate) {
            *r = (*r + max / 50.0).min(max);
        }
        self.connection_limit() != before
    }

    /// True while below the configured maximum (for logs and the queue view).
    pub fn is_reduced(&self) -> bool {
        self.connection_limit() < self.max_connections
            || self.rate.zip(self.max_rate).is_some_and(|(r, m)| r < m)
    }
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
    fn rate_limit_is_a_token_bucket() {
        let t0 = Instant::now();
        let mut b = Budget::new("r".into(), 4, 100, Some(60), Duration::from_secs(1));
        assert_eq!(b.take(100, t0), 10, "ten seconds' burst");
        assert_eq!(b.take(100, t0), 0);
        assert_eq!(b.take(100, t0 + Duration::from_secs(3)), 3, "one a second");
        let mut free = Budget::new("f".into(), 4, 100, None, Duration::from_secs(1));
        assert_eq!(free.take(100, t0), 100);
    }
}
