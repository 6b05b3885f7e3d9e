//! How many copies of one post may be queued at once: a window that grows
//! with the destinations the post reaches.
//!
//! The rule: `window = clamp(D × queued_copies_per_domain, max_queued_copies_per_post,
//! ¾ × max_queued_copies)`, where D is the number of distinct recipient domains among the
//! copies expanded so far. With the defaults: 64 copies per domain (four batches of 16), never
//! below 50,000 (up to 781 domains the window is the fixed one it always was), at most 150,000
//! (reached at 2,344 domains). `queued_copies_per_domain = 0` keeps it fixed at the floor.
//!
//! Why: the window is spread over every destination the post reaches (members come in id
//! order, not grouped by domain). A fixed 50,000 over 2,000 domains left ~25 copies per
//! destination: each connection got a batch or two and then waited for the next copies, so a
//! session's fixed cost (connect, EHLO, the wait for a trickle of new copies) was shared by
//! few copies. 1,000,000 members over 2,000 domains went out at 7,317 copies/s with 50,000 and
//! 13,760 with 150,000 (BENCHMARKS.md). Four batches per domain keep a full
//! batch ready behind the one each connection is sending. Domains stand for destinations (MX
//! host sets), which expansion does not know: domains sharing a provider's MX count several
//! times, which only lets that destination queue deeper, within the cap.
//!
//! Bounds: the cap keeps a quarter of the global queue (`max_queued_copies`) for other posts
//! (fairness), and is clamped to what a semaphore can count; at most [`MAX_TRACKED_DOMAINS`]
//! domains are remembered per post, and none once the window has reached its cap, so a list
//! over millions of domains costs a bounded set.

use crate::config::SchedulerConfig;
use std::collections::HashSet;

/// Domains one post's window remembers at most (each a short string: ~5 MB at this bound).
pub const MAX_TRACKED_DOMAINS: usize = 100_000;

/// The window's rule, from the configuration (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowRule {
    /// The window of a post to few domains (`max_queued_copies_per_post`, at least 1).
    pub floor: usize,
    /// Copies per distinct domain.
    pub per_domain: usize,
    /// The window never grows beyond this (at least `floor`).
    pub cap: usize,
}

impl WindowRule {
    /// The rule of a configuration. Never panics, whatever the values (validation refuses the
    /// unworkable ones before the scheduler starts; this stays sane without it).
    pub fn from_config(cfg: &SchedulerConfig) -> WindowRule {
        let limit = tokio::sync::Semaphore::MAX_PERMITS;
        let floor = cfg.max_queued_copies_per_post.clamp(1, limit);
        let per_domain = cfg.queued_copies_per_domain;
        let cap = (cfg.max_queued_copies / 4)
            .saturating_mul(3)
            .min(limit)
            .max(floor);
        WindowRule {
            floor,
            per_domain,
            cap,
        }
    }

    /// A fixed window of `n` copies (no growth): for tests and callers that want one.
    pub fn fixed(n: usize) -> WindowRule {
        let n = n.clamp(1, tokio::sync::Semaphore::MAX_PERMITS);
        WindowRule {
            floor: n,
            per_domain: 0,
            cap: n,
        }
    }

    /// The window for `domains` distinct domains.
    pub fn size(&self, domains: usize) -> usize {
        domains
            .saturating_mul(self.per_domain)
            .clamp(self.floor, self.cap)
    }
}

/// One post's window as it grows: the domains seen so far and the size granted.
#[derive(Debug)]
pub struct PostWindow {
    rule: WindowRule,
    domains: HashSet<Box<str>>,
    granted: usize,
}

impl PostWindow {
    pub fn new(rule: WindowRule) -> PostWindow {
        PostWindow {
            rule,
            domains: HashSet::new(),
            granted: rule.floor,
        }
    }

    /// The window's size now (the permits its semaphore was created with plus those added).
    pub fn size(&self) -> usize {
        self.granted
    }

    /// Domains remembered (bounded by [`MAX_TRACKED_DOMAINS`]).
    pub fn domains(&self) -> usize {
        self.domains.len()
    }

    /// Takes the recipient domains of a page; returns how many copies the window grows by
    /// (permits to add to the post's semaphore), 0 most of the time.
    pub fn observe<'a>(&mut self, page: impl IntoIterator<Item = &'a str>) -> usize {
        let before = self.granted;
        for domain in page {
            if self.granted >= self.rule.cap || self.domains.len() >= MAX_TRACKED_DOMAINS {
                break;
            }
            if !self.domains.contains(domain) {
                self.domains.insert(domain.into());
                self.granted = self.granted.max(self.rule.size(self.domains.len()));
            }
        }
        self.granted - before
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(per_post: usize, all: usize, per_domain: usize) -> SchedulerConfig {
        SchedulerConfig {
            max_queued_copies_per_post: per_post,
            max_queued_copies: all,
            queued_copies_per_domain: per_domain,
            ..SchedulerConfig::default()
        }
    }

    #[test]
    fn the_default_window_grows_from_50000_at_64_copies_a_domain_to_150000() {
        let r = WindowRule::from_config(&SchedulerConfig::default());
        assert_eq!((r.floor, r.per_domain, r.cap), (50_000, 64, 150_000));
        assert_eq!(r.size(0), 50_000);
        assert_eq!(r.size(781), 50_000, "few domains: the old fixed window");
        assert_eq!(r.size(782), 50_048);
        assert_eq!(r.size(2_000), 128_000);
        assert_eq!(r.size(2_344), 150_000);
        assert_eq!(r.size(1_000_000), 150_000);
        assert_eq!(r.size(usize::MAX), 150_000, "no overflow");
    }

    #[test]
    fn hostile_configs_give_a_usable_bounded_window() {
        // Zeroes (validation refuses them; the rule must still not panic or stall).
        let r = WindowRule::from_config(&cfg(0, 0, 0));
        assert_eq!((r.floor, r.per_domain, r.cap), (1, 0, 1));
        assert_eq!(r.size(10), 1);
        // No growth per domain: the old fixed window, whatever the global queue.
        let r = WindowRule::from_config(&cfg(50_000, 200_000, 0));
        assert_eq!((r.size(0), r.size(100_000)), (50_000, 50_000));
        // Huge values: clamped to what a semaphore can hold, no overflow.
        let max = tokio::sync::Semaphore::MAX_PERMITS;
        let r = WindowRule::from_config(&cfg(usize::MAX, usize::MAX, usize::MAX));
        assert_eq!((r.floor, r.per_domain, r.cap), (max, usize::MAX, max));
        assert_eq!(r.size(3), max);
        let r = WindowRule::from_config(&cfg(10, usize::MAX, usize::MAX));
        assert_eq!(r.size(0), 10);
        assert_eq!(r.size(1), max, "one domain jumps to the cap");
        tokio::sync::Semaphore::new(0).add_permits(r.size(1));
        // A floor above ¾ of the global queue keeps the floor (no shrinking below it).
        let r = WindowRule::from_config(&cfg(200_000, 200_000, 64));
        assert_eq!((r.floor, r.cap), (200_000, 200_000));
        assert_eq!(WindowRule::fixed(0).size(1_000), 1);
    }

    #[test]
    fn a_post_window_grows_once_per_new_domain_and_stops_at_the_cap() {
        let rule = WindowRule {
            floor: 100,
            per_domain: 10,
            cap: 250,
        };
        let mut w = PostWindow::new(rule);
        assert_eq!(w.size(), 100);
        let page: Vec<String> = (0..12).map(|i| format!("d{i}.example")).collect();
        // 10 domains: 100 (no growth yet); 11: 110; 12: 120.
        assert_eq!(w.observe(page.iter().map(String::as_str)), 20);
        assert_eq!(w.size(), 120);
        // The same domains again: nothing.
        assert_eq!(w.observe(page.iter().map(String::as_str)), 0);
        let more: Vec<String> = (0..100).map(|i| format!("e{i}.example")).collect();
        assert_eq!(w.observe(more.iter().map(String::as_str)), 130);
        assert_eq!(w.size(), 250);
        // At the cap no domain is remembered any more.
        assert_eq!(w.domains(), 25);
        let later: Vec<String> = (0..100).map(|i| format!("f{i}.example")).collect();
        assert_eq!(w.observe(later.iter().map(String::as_str)), 0);
        assert_eq!(w.domains(), 25);
    }

    #[test]
    fn a_fixed_window_never_grows_and_remembers_no_domain() {
        let mut w = PostWindow::new(WindowRule::fixed(50));
        let page: Vec<String> = (0..1000).map(|i| format!("d{i}.example")).collect();
        assert_eq!(w.observe(page.iter().map(String::as_str)), 0);
        assert_eq!((w.size(), w.domains()), (50, 0));
    }

    #[test]
    fn the_domains_remembered_are_bounded() {
        let mut w = PostWindow::new(WindowRule {
            floor: 1,
            per_domain: 1,
            cap: usize::MAX >> 3,
        });
        let page: Vec<String> = (0..MAX_TRACKED_DOMAINS + 500)
            .map(|i| format!("d{i}.example"))
            .collect();
        let grown = w.observe(page.iter().map(String::as_str));
        assert_eq!(w.domains(), MAX_TRACKED_DOMAINS);
        assert_eq!(grown, MAX_TRACKED_DOMAINS - 1);
    }
}
