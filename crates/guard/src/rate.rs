//! The per-sender post rate of a list (`max_posts_per_hour`): a fixed one-hour window per
//! (list, sender), in memory.
//!
//! Why in memory and per process: the limit is a brake on a runaway sender (a loop, a script,
//! a flood), not an accounting record; a restart that forgets an hour of counts lets at most
//! one more hour's worth through.
//!
//! Limits: at most [`MAX_TRACKED_SENDERS`] (list, sender) pairs. When the table is full and no
//! window has expired, a sender not yet in it is refused (fail closed: a flood of fresh
//! senders is held, not waved through untracked).
//!
//! SECURITY: the sender is whatever the post claims; the key is only a counter's name.

use herald_types::ListId;
use std::collections::HashMap;
use std::sync::Mutex;

/// Most (list, sender) pairs tracked at once.
pub const MAX_TRACKED_SENDERS: usize = 65_536;
const HOUR_MS: u64 = 3_600_000;

/// Counts posts per (list, sender) per hour.
#[derive(Debug, Default)]
pub struct PostRate {
    /// A std Mutex: held for a map lookup only, never across an `.await`.
    windows: Mutex<HashMap<(ListId, String), Window>>,
}

#[derive(Debug, Clone, Copy)]
struct Window {
    start_ms: u64,
    posts: u32,
}

impl PostRate {
    /// Counts a post by `sender` (compared case-insensitively) to `list` at `now_ms`; false when
    /// it is over `max_per_hour` (0: no limit, nothing tracked).
    pub fn admit(&self, list: ListId, sender: &str, max_per_hour: u32, now_ms: u64) -> bool {
        if max_per_hour == 0 {
            return true;
        }
        let mut windows = match self.windows.lock() {
            Ok(w) => w,
            // A panic elsewhere while holding it left plain counters: still usable.
            Err(poisoned) => poisoned.into_inner(),
        };
        let key = (list, sender.to_ascii_lowercase());
        if !windows.contains_key(&key) && windows.len() >= MAX_TRACKED_SENDERS {
            windows.retain(|_, w| now_ms.saturating_sub(w.start_ms) < HOUR_MS);
            if windows.len() >= MAX_TRACKED_SENDERS {
                return false;
            }
        }
        let w = windows.entry(key).or_insert(Window {
            start_ms: now_ms,
            posts: 0,
        });
        if now_ms.saturating_sub(w.start_ms) >= HOUR_MS {
            *w = Window {
                start_ms: now_ms,
                posts: 0,
            };
        }
        if w.posts >= max_per_hour {
            return false;
        }
        w.posts += 1;
        true
    }

    /// Pairs tracked now.
    pub fn tracked(&self) -> usize {
        self.windows.lock().map_or(0, |w| w.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_per_sender_per_list_per_hour() {
        let r = PostRate::default();
        let (a, b) = (ListId(1), ListId(2));
        assert!(r.admit(a, "x@y.test", 2, 0));
        assert!(r.admit(a, "X@Y.test", 2, 1));
        assert!(!r.admit(a, "x@y.test", 2, 2), "third in the hour");
        assert!(r.admit(b, "x@y.test", 2, 2), "another list counts apart");
        assert!(r.admit(a, "z@y.test", 2, 2), "another sender counts apart");
        assert!(r.admit(a, "x@y.test", 2, HOUR_MS), "a new hour");
        assert!(r.admit(a, "x@y.test", 0, 0), "0 is no limit");
    }

    /// A flood of distinct senders fills the table; then new senders are refused until windows
    /// expire, and memory stays bounded.
    #[test]
    fn a_flood_of_senders_stays_bounded_and_fails_closed() {
        let r = PostRate::default();
        for i in 0..MAX_TRACKED_SENDERS {
            assert!(r.admit(ListId(1), &format!("s{i}@flood.test"), 5, 10));
        }
        assert!(!r.admit(ListId(1), "new@flood.test", 5, 20));
        assert!(
            r.admit(ListId(1), "s1@flood.test", 5, 20),
            "known senders still count"
        );
        assert_eq!(r.tracked(), MAX_TRACKED_SENDERS);
        assert!(r.admit(ListId(1), "new@flood.test", 5, 10 + HOUR_MS));
        assert!(r.tracked() < 10);
    }
}
