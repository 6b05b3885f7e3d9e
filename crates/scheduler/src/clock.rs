//! The scheduler's clock: where scheduling decisions take the time from.
//!
//! Two kinds of time are used, and both come through here or through tokio:
//! - *monotonic* time (retry times, parked workers, shaping refills and cooldowns, route
//!   refreshes) is `tokio::time::Instant`, so a `#[tokio::test(start_paused = true)]` test drives
//!   it with `tokio::time::advance` or by letting the paused runtime skip ahead;
//! - *wall* time, where it is really needed — a copy's age against its post's `received_at_ms`
//!   (expiry), host health persisted across restarts (`down_until_ms`), MTA-STS policy expiry in
//!   seconds since the epoch — is [`Clock::now_ms`], passed to the actor.
//!
//! [`Clock::following_tokio`] is the test clock: wall time that starts at a chosen instant and
//! then moves with tokio's clock, so one paused runtime drives both kinds of time together and a
//! test that advances 25 hours expires copies as the real server would after 25 hours.
//!
//! Invariant: no scheduling decision reads `SystemTime::now()` or `std::time::Instant::now()`
//! (measurements — how long a snapshot took to build — may).

use std::time::{SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

/// A source of wall-clock milliseconds. Cheap to clone (two words).
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    /// `None`: the system clock. `Some((ms, at))`: `ms` at tokio instant `at`, moving with
    /// tokio's clock from there.
    follows: Option<(u64, Instant)>,
}

impl Clock {
    /// The system's wall clock (what the server uses).
    pub fn system() -> Clock {
        Clock { follows: None }
    }

    /// A wall clock reading `start_ms` now and moving with tokio's clock (paused or not) from
    /// here: for deterministic tests.
    pub fn following_tokio(start_ms: u64) -> Clock {
        Clock {
            follows: Some((start_ms, Instant::now())),
        }
    }

    /// Milliseconds since the Unix epoch.
    pub fn now_ms(&self) -> u64 {
        match self.follows {
            None => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            Some((start_ms, at)) => {
                let gone = u64::try_from(at.elapsed().as_millis()).unwrap_or(u64::MAX);
                start_ms.saturating_add(gone)
            }
        }
    }

    /// Monotonic now (tokio's clock, so a paused runtime controls it).
    pub fn now(&self) -> Instant {
        Instant::now()
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::system()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn the_test_clock_moves_with_tokios_paused_clock() {
        let clock = Clock::following_tokio(1_000_000);
        assert_eq!(clock.now_ms(), 1_000_000);
        tokio::time::advance(Duration::from_secs(90)).await;
        assert_eq!(clock.now_ms(), 1_090_000);
    }

    #[test]
    fn the_system_clock_is_past_2020() {
        assert!(Clock::system().now_ms() > 1_577_836_800_000);
    }
}
