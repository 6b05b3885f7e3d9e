//! Retry schedules: exponential with jitter, capped. Pure functions so the schedule is testable
//! without a clock.

use std::time::Duration;

/// The delay before attempt `tries + 1`, given `tries` failed attempts: `initial * 2^(tries-1)`
/// capped at `max`, then spread by ±`jitter` (0.0–1.0) using `unit` (a random number in [0, 1)).
pub fn retry_delay(
    tries: u32,
    initial: Duration,
    max: Duration,
    jitter: f64,
    unit: f64,
) -> Duration {
    let exp = tries.saturating_sub(1).min(30);
    let base = initial.saturating_mul(1u32 << exp).min(max);
    let spread = 1.0 + jitter.clamp(0.0, 1.0) * (2.0 * unit.clamp(0.0, 1.0) - 1.0);
    base.mul_f64(spread.max(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_and_caps() {
        let s = |t| {
            retry_delay(
                t,
                Duration::from_secs(60),
                Duration::from_secs(3600),
                0.0,
                0.5,
            )
        };
        assert_eq!(s(1), Duration::from_secs(60));
        assert_eq!(s(2), Duration::from_secs(120));
        assert_eq!(s(3), Duration::from_secs(240));
        assert_eq!(s(10), Duration::from_secs(3600));
        assert_eq!(s(u32::MAX), Duration::from_secs(3600));
    }

    #[test]
    fn jitter_stays_in_band() {
        let lo = retry_delay(
            1,
            Duration::from_secs(100),
            Duration::from_secs(1000),
            0.2,
            0.0,
        );
        let hi = retry_delay(
            1,
            Duration::from_secs(100),
            Duration::from_secs(1000),
            0.2,
            0.999_999,
        );
        assert_eq!(lo, Duration::from_secs(80));
        assert!(hi > Duration::from_secs(119) && hi <= Duration::from_secs(120));
    }
}
