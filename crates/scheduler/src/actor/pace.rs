//! Pacing: the rate (copies per second) a provider accepts, learned from its rate-limit replies
//! and held, so its copies are released at that rate instead of being sent, refused and pushed
//! into a backoff.
//!
//! A [`Pace`] belongs to a shaping budget (`actor/shaping.rs`), so it is shared by every MX host,
//! destination and connection of the provider. It starts unpaced. The first rate refusal
//! (`451 4.7.28`, "unusual rate", Yahoo's TSS04, Microsoft's "throttled" …: see `classify.rs`)
//! sets the rate to [`START_FRACTION`] of the copies the provider accepted in the last
//! [`WINDOW`] — what it just proved it takes. From there it is AIMD on the rate: each accepted
//! copy adds [`GROWTH_PER_SEC`]` / rate` copies/s (about +3 % per second while sending at the
//! pace), each further refusal multiplies it by [`CUT`] (at most once per cooldown, so one burst
//! of refusals from parallel connections counts once). Copies go out through a token bucket
//! holding at most [`BURST_SECS`] of the rate, so a pause never turns into a burst the provider
//! refuses.
//!
//! Pure logic: the time is always passed in (a `tokio::time::Instant`, so the actor's paused-clock
//! tests drive it too). Bounds: the window of recent deliveries keeps at most one entry per
//! distinct instant within [`WINDOW`], and at most [`MAX_SAMPLES`].

use std::collections::VecDeque;
use std::time::Duration;
use tokio::time::Instant;

/// How far back accepted copies count for the first estimate of the rate.
pub const WINDOW: Duration = Duration::from_secs(1);
/// The first rate: this share of what was accepted in the last [`WINDOW`].
pub const START_FRACTION: f64 = 0.9;
/// Multiplicative decrease on a further refusal.
pub const CUT: f64 = 0.7;
/// Additive increase: copies/s gained per copy accepted, times the rate (≈ 3 % a second).
pub const GROWTH_PER_SEC: f64 = 0.03;
/// The slowest pace (one copy every five seconds): a provider that refuses everything still
/// gets a copy now and then to say when it accepts again.
pub const MIN_RATE: f64 = 0.2;
/// The fastest pace learned (beyond it the provider is, in effect, not limiting).
pub const MAX_RATE: f64 = 100_000.0;
/// The token bucket holds this many seconds of the rate (at least one copy).
pub const BURST_SECS: f64 = 0.25;
/// Recent delivery samples kept at most.
const MAX_SAMPLES: usize = 1024;

/// A provider's learned rate and its token bucket.
#[derive(Debug)]
pub struct Pace {
    /// Copies per second allowed; `None` until the first rate refusal.
    rate: Option<f64>,
    tokens: f64,
    refilled: Instant,
    /// (when, copies accepted) within the last [`WINDOW`].
    recent: VecDeque<(Instant, u32)>,
    last_cut: Option<Instant>,
    /// The first refusal: for a [`WINDOW`] after it, the rate is re-estimated as reports of
    /// batches that were in flight arrive (a refused batch may be reported before the batches
    /// that used the budget it found spent).
    first_cut: Option<Instant>,
    /// Copies released by the pace since the first refusal (not part of that estimate).
    released: u64,
    cooldown: Duration,
    /// Rate refusals seen (for the queue view and logs).
    pub refusals: u64,
}

impl Pace {
    pub fn new(now: Instant, cooldown: Duration) -> Pace {
        Pace {
            rate: None,
            tokens: 0.0,
            refilled: now,
            recent: VecDeque::new(),
            last_cut: None,
            first_cut: None,
            released: 0,
            cooldown,
            refusals: 0,
        }
    }

    /// The learned rate in copies per second, once there is one.
    pub fn rate(&self) -> Option<f64> {
        self.rate
    }

    /// The cluster's share of the provider's rate (another node was refused
    /// and lowered it): taken when lower than this pace, or while unpaced. A refusal here from
    /// the same overshoot within the cooldown counts as this cut. True when the pace changed.
    pub fn adopt(&mut self, rate: f64, now: Instant) -> bool {
        if !rate.is_finite() {
            return false;
        }
        let rate = rate.clamp(MIN_RATE, MAX_RATE);
        if self.rate.is_some_and(|r| r <= rate) {
            return false;
        }
        if let Some(old) = self.rate {
            self.refill(old, now);
        } else {
            self.refilled = now;
        }
        self.rate = Some(rate);
        self.tokens = self.tokens.min(cap(rate));
        self.last_cut = Some(now);
        true
    }

    /// Sets the rate to this node's new share of the provider's rate (the nodes sending to it
    /// changed), higher or lower.
    pub fn rebalance(&mut self, rate: f64, now: Instant) {
        if !rate.is_finite() {
            return;
        }
        let rate = rate.clamp(MIN_RATE, MAX_RATE);
        match self.rate {
            Some(old) => self.refill(old, now),
            None => self.refilled = now,
        }
        self.rate = Some(rate);
        self.tokens = self.tokens.min(cap(rate));
    }

    /// `n` copies were accepted at `now`.
    pub fn delivered(&mut self, n: usize, now: Instant) {
        if n == 0 {
            return;
        }
        let n32 = u32::try_from(n).unwrap_or(u32::MAX);
        match self.recent.back_mut() {
            Some((t, c)) if *t == now => *c = c.saturating_add(n32),
            _ => self.recent.push_back((now, n32)),
        }
        self.trim(now);
        let settling = self
            .first_cut
            .is_some_and(|t| now.saturating_duration_since(t) <= WINDOW);
        if settling {
            let before_pace = self.accepted_recently(now).saturating_sub(self.released);
            let seen = before_pace as f64 / WINDOW.as_secs_f64() * START_FRACTION;
            if let Some(r) = self.rate.as_mut() {
                *r = r.max(seen.min(MAX_RATE));
            }
        } else if let Some(r) = self.rate.as_mut() {
            *r = (*r + GROWTH_PER_SEC * n as f64).min(MAX_RATE);
        }
    }

    /// Copies accepted within the last [`WINDOW`].
    pub fn accepted_recently(&mut self, now: Instant) -> u64 {
        self.trim(now);
        self.recent.iter().map(|(_, c)| u64::from(*c)).sum()
    }

    fn trim(&mut self, now: Instant) {
        while self
            .recent
            .front()
            .is_some_and(|(t, _)| now.saturating_duration_since(*t) > WINDOW)
            || self.recent.len() > MAX_SAMPLES
        {
            self.recent.pop_front();
        }
    }

    /// A copy was refused for rate at `now`. Returns the new rate when it changed (the first
    /// refusal, or one after the cooldown).
    pub fn refused(&mut self, now: Instant) -> Option<f64> {
        self.refusals += 1;
        if self
            .last_cut
            .is_some_and(|t| now.saturating_duration_since(t) < self.cooldown)
        {
            return None;
        }
        self.last_cut = Some(now);
        self.first_cut.get_or_insert(now);
        let rate = match self.rate {
            None => {
                let accepted = self.accepted_recently(now) as f64;
                accepted / WINDOW.as_secs_f64() * START_FRACTION
            }
            Some(r) => r * CUT,
        };
        let rate = rate.clamp(MIN_RATE, MAX_RATE);
        self.rate = Some(rate);
        // What the provider just refused is spent: start from an empty bucket.
        self.tokens = 0.0;
        self.refilled = now;
        Some(rate)
    }

    /// How many of `want` copies may go at `now` (all of them while unpaced); takes them.
    pub fn take(&mut self, want: usize, now: Instant) -> usize {
        let Some(rate) = self.rate else { return want };
        self.refill(rate, now);
        let n = (self.tokens.floor() as usize).min(want);
        self.tokens -= n as f64;
        self.released += n as u64;
        n
    }

    /// Gives back copies taken but not sent (another limit refused them).
    pub fn give_back(&mut self, n: usize) {
        if let Some(rate) = self.rate {
            self.released = self.released.saturating_sub(n as u64);
            self.tokens = (self.tokens + n as f64).min(cap(rate));
        }
    }

    /// How long until one copy may go (zero while unpaced or when one may go now).
    pub fn wait(&mut self, now: Instant) -> Duration {
        let Some(rate) = self.rate else {
            return Duration::ZERO;
        };
        self.refill(rate, now);
        if self.tokens >= 1.0 {
            return Duration::ZERO;
        }
        Duration::from_secs_f64((1.0 - self.tokens) / rate)
    }

    fn refill(&mut self, rate: f64, now: Instant) {
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.refilled = now;
        self.tokens = (self.tokens + elapsed * rate).min(cap(rate));
    }
}

/// The bucket's size: [`BURST_SECS`] of the rate, at least one copy.
fn cap(rate: f64) -> f64 {
    (rate * BURST_SECS).max(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const COOL: Duration = Duration::from_secs(1);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn unpaced_until_the_first_refusal() {
        let t0 = Instant::now();
        let mut p = Pace::new(t0, COOL);
        assert_eq!(p.take(500, t0), 500);
        assert_eq!(p.rate(), None);
        assert_eq!(p.wait(t0), Duration::ZERO);
    }

    #[test]
    fn the_first_refusal_sets_the_rate_from_what_was_accepted() {
        let t0 = Instant::now();
        let mut p = Pace::new(t0, COOL);
        p.delivered(30, t0);
        p.delivered(20, t0 + ms(100));
        // An old delivery outside the window does not count.
        let rate = p.refused(t0 + ms(300)).expect("a rate");
        assert!((rate - 45.0).abs() < 1e-9, "{rate}");
        // The bucket starts empty: nothing now, a quarter second's worth later at most.
        assert_eq!(p.take(100, t0 + ms(300)), 0);
        assert_eq!(p.take(100, t0 + ms(400)), 4);
        assert_eq!(
            p.take(100, t0 + ms(5300)),
            11,
            "bounded burst after a pause"
        );
        let mut q = Pace::new(t0, COOL);
        q.delivered(1000, t0);
        assert!((q.refused(t0 + ms(2500)).unwrap() - MIN_RATE).abs() < 1e-9);
    }

    #[test]
    fn batches_reported_after_the_first_refusal_still_count_for_its_estimate() {
        let t0 = Instant::now();
        let mut p = Pace::new(t0, COOL);
        p.delivered(1, t0);
        assert!((p.refused(t0).unwrap() - 0.9).abs() < 1e-9);
        // Batches that were in flight report their deliveries just after.
        p.delivered(49, t0 + ms(20));
        assert!((p.rate().unwrap() - 45.0).abs() < 1e-9);
    }

    #[test]
    fn further_refusals_cut_once_per_cooldown_and_deliveries_raise_it_slowly() {
        let t0 = Instant::now();
        let mut p = Pace::new(t0, COOL);
        p.delivered(100, t0);
        assert_eq!(p.refused(t0), Some(90.0));
        assert_eq!(p.refused(t0 + ms(10)), None, "a burst counts once");
        assert_eq!(p.refusals, 2);
        let cut = p.refused(t0 + ms(1100)).unwrap();
        assert!((cut - 63.0).abs() < 1e-9, "{cut}");
        // A second of sending at the pace gains about 3 %.
        p.delivered(63, t0 + ms(2100));
        let r = p.rate().unwrap();
        assert!((r - 63.0 * 1.03).abs() < 0.01, "{r}");
    }

    #[test]
    fn releases_copies_at_the_rate() {
        let t0 = Instant::now();
        let mut p = Pace::new(t0, COOL);
        p.delivered(50, t0);
        p.refused(t0); // 45 a second
        let mut sent = 0;
        let mut t = t0;
        for _ in 0..50 {
            t += ms(200); // the actor's tick
            sent += p.take(1000, t);
        }
        // Ten seconds at 45/s.
        assert!((440..=450).contains(&sent), "{sent}");
        p.give_back(3);
        assert_eq!(p.take(10, t), 3);
        assert!(p.wait(t) > Duration::ZERO);
    }

    #[test]
    fn a_cluster_share_is_adopted_only_when_lower_and_rebalanced_as_is() {
        let t0 = Instant::now();
        let mut p = Pace::new(t0, COOL);
        assert!(p.adopt(30.0, t0), "unpaced: the share paces it");
        assert_eq!(p.rate(), Some(30.0));
        assert_eq!(p.take(100, t0), 0, "no burst at adoption");
        assert!(!p.adopt(40.0, t0 + ms(100)), "a higher share is not taken");
        assert!(p.adopt(20.0, t0 + ms(200)));
        assert_eq!(
            p.refused(t0 + ms(300)),
            None,
            "the same overshoot counts once"
        );
        for hostile in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert!(!p.adopt(hostile, t0), "{hostile}");
        }
        assert!(p.adopt(-5.0, t0 + ms(400)), "clamped, not taken as is");
        assert_eq!(p.rate(), Some(MIN_RATE));
        let mut q = Pace::new(t0, COOL);
        q.rebalance(45.0, t0);
        assert_eq!(q.rate(), Some(45.0), "a node left: a larger share");
        q.rebalance(f64::NAN, t0);
        assert_eq!(q.rate(), Some(45.0));
        q.rebalance(1e12, t0);
        assert_eq!(q.rate(), Some(MAX_RATE));
    }

    #[test]
    fn holds_a_steady_provider_without_refusals() {
        // A provider taking 50/s with a second of burst, against the pace's own decisions: after
        // the first refusal the pace stays under the provider's rate for the whole run.
        let t0 = Instant::now();
        let mut p = Pace::new(t0, COOL);
        let (rate, mut bucket, mut last) = (50.0f64, 50.0f64, t0);
        let (mut refused, mut accepted) = (0u32, 0u32);
        let mut t = t0;
        for _ in 0..(30 * 20) {
            t += ms(50);
            bucket = (bucket + t.saturating_duration_since(last).as_secs_f64() * rate).min(rate);
            last = t;
            let n = p.take(64, t);
            let (mut ok, mut refusal) = (0, false);
            for _ in 0..n {
                if bucket >= 1.0 {
                    bucket -= 1.0;
                    ok += 1;
                } else {
                    refusal = true;
                    break; // the connection stops at a refused MAIL
                }
            }
            accepted += ok;
            // A batch's report: its deliveries first, then its refusal (as the actor does).
            p.delivered(ok as usize, t);
            if refusal {
                refused += 1;
                p.refused(t);
            }
        }
        assert!(refused <= 8, "{refused} refusals in 30 s");
        assert!(accepted >= 1250, "{accepted} in 30 s at 50/s");
    }
}
