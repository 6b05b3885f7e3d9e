//! In-memory aggregation between flushes. Keys are small integers except the recipient domain,
//! which keys the outer map so a lookup with a borrowed `&str` allocates nothing once the domain
//! has been seen since the last flush.

use crate::event::Event;
use herald_types::{RcptOutcome, Reply};
use std::collections::HashMap;

/// Outcome codes as stored: 0 delivered, 1 deferred, 2 failed.
pub(crate) const DELIVERED: u8 = 0;
pub(crate) const DEFERRED: u8 = 1;
pub(crate) const FAILED: u8 = 2;

/// Per-second curve resolution for this long after acceptance; per minute afterwards.
pub(crate) const FINE_CURVE_SECS: u64 = 3600;

#[derive(Default, Clone, Copy)]
pub(crate) struct Sum {
    pub copies: u64,
    pub xdelay_ms: u64,
    pub xdelay_max_ms: u64,
    pub last_ms: u64,
}

impl Sum {
    fn merge(&mut self, o: &Sum) {
        self.copies += o.copies;
        self.xdelay_ms += o.xdelay_ms;
        self.xdelay_max_ms = self.xdelay_max_ms.max(o.xdelay_max_ms);
        self.last_ms = self.last_ms.max(o.last_ms);
    }

    fn add(&mut self, xdelay_ms: u64, now_ms: u64) {
        self.copies += 1;
        self.xdelay_ms += xdelay_ms;
        self.xdelay_max_ms = self.xdelay_max_ms.max(xdelay_ms);
        self.last_ms = self.last_ms.max(now_ms);
    }
}

/// One recipient domain's cells.
#[derive(Default)]
pub(crate) struct DomainCells {
    /// (unix hour, outcome) → copies.
    pub hours: HashMap<(u32, u8), u64>,
    /// (post, outcome, packed reason) → sums.
    pub posts: HashMap<(u64, u8, u64), Sum>,
}

/// A post's arrival facts (any may be unknown in a given flush; the store merges them).
#[derive(Default, Clone)]
pub(crate) struct PostFacts {
    pub list: Option<String>,
    pub accepted_at_ms: Option<u64>,
    pub size: Option<u64>,
    pub recipients: Option<u64>,
    pub completed_at_ms: Option<u64>,
}

#[derive(Default)]
pub(crate) struct Pending {
    /// (unix minute, outcome) → sums.
    pub minutes: HashMap<(u32, u8), Sum>,
    pub domains: HashMap<Box<str>, DomainCells>,
    /// (post, curve offset in seconds) → [delivered, failed].
    pub curve: HashMap<(u64, u32), [u64; 2]>,
    pub posts: HashMap<u64, PostFacts>,
    cells: usize,
}

/// Packs a reply's code and enhanced status into one integer key (0 for none).
pub(crate) fn pack_reason(r: &Reply) -> u64 {
    let mut k = u64::from(r.code) << 40;
    if let Some(e) = r.enhanced {
        k |= 1 << 39 | u64::from(e.class) << 32 | u64::from(e.subject) << 16 | u64::from(e.detail);
    }
    k
}

/// `550 5.1.1`, or `550` without an enhanced status.
pub(crate) fn reason_text(k: u64) -> String {
    if k == 0 {
        return String::new();
    }
    let code = k >> 40;
    if k & (1 << 39) == 0 {
        return code.to_string();
    }
    let (class, subject, detail) = ((k >> 32) & 0x7f, (k >> 16) & 0xffff, k & 0xffff);
    format!("{code} {class}.{subject}.{detail}")
}

fn curve_offset(off_ms: u64) -> u32 {
    let s = off_ms / 1000;
    let s = if s < FINE_CURVE_SECS { s } else { s - s % 60 };
    u32::try_from(s).unwrap_or(u32::MAX)
}

impl Pending {
    pub(crate) fn cells(&self) -> usize {
        self.cells + self.posts.len()
    }

    /// Puts back a batch that could not be written (a full disk), so the next flush writes it:
    /// statistics survive an outage instead of leaving a hole in the reports. `self` holds what
    /// was added since the batch was taken; the sums are order-independent.
    pub(crate) fn merge_back(&mut self, old: Pending) {
        for (k, v) in old.minutes {
            let before = self.minutes.len();
            self.minutes.entry(k).or_default().merge(&v);
            self.cells += self.minutes.len() - before;
        }
        for (domain, cells) in old.domains {
            let mine = self.domains.entry(domain).or_default();
            let before = mine.hours.len() + mine.posts.len();
            for (k, n) in cells.hours {
                *mine.hours.entry(k).or_default() += n;
            }
            for (k, v) in cells.posts {
                mine.posts.entry(k).or_default().merge(&v);
            }
            self.cells += mine.hours.len() + mine.posts.len() - before;
        }
        for (k, v) in old.curve {
            let before = self.curve.len();
            let c = self.curve.entry(k).or_default();
            c[0] += v[0];
            c[1] += v[1];
            self.cells += self.curve.len() - before;
        }
        for (post, f) in old.posts {
            let mine = self.posts.entry(post).or_default();
            // Newer facts (already in `self`) win; the old batch fills the gaps.
            mine.list = mine.list.take().or(f.list);
            mine.accepted_at_ms = mine.accepted_at_ms.or(f.accepted_at_ms);
            mine.size = mine.size.or(f.size);
            mine.recipients = mine.recipients.or(f.recipients);
            mine.completed_at_ms = mine.completed_at_ms.or(f.completed_at_ms);
        }
    }

    pub(crate) fn add(&mut self, event: &Event, now_ms: u64) {
        match event {
            Event::PostAccepted {
                post,
                list,
                size,
                received_at_ms,
                ..
            } => {
                let f = self.posts.entry(post.0).or_default();
                f.list = Some(list.to_string());
                f.accepted_at_ms = Some(*received_at_ms);
                f.size = Some(*size as u64);
            }
            Event::PostExpanded {
                post, recipients, ..
            } => self.posts.entry(post.0).or_default().recipients = Some(*recipients),
            Event::PostCompleted { post } => {
                self.posts.entry(post.0).or_default().completed_at_ms = Some(now_ms)
            }
            // Scheduling decisions (host state, lanes, shaping) change no delivery counts: every
            // copy they affect also ends in an Attempt, which is what the reports add up.
            Event::Scheduler(_) => {}
            // Postmaster mail is not a list post; its forward's delivery is an Attempt.
            Event::Postmaster(_) => {}
            Event::Attempt(a) => {
                let (outcome, reason) = match &a.outcome {
                    RcptOutcome::Delivered(_) => (DELIVERED, 0),
                    RcptOutcome::Deferred(r) => (DEFERRED, pack_reason(r)),
                    RcptOutcome::Failed(r) => (FAILED, pack_reason(r)),
                };
                let minute = u32::try_from(now_ms / 60_000).unwrap_or(u32::MAX);
                let before = self.minutes.len();
                self.minutes
                    .entry((minute, outcome))
                    .or_default()
                    .add(a.xdelay_ms, now_ms);
                self.cells += self.minutes.len() - before;
                let domain = a.rcpt.rsplit_once('@').map_or("", |(_, d)| d);
                let cells = match self.domains.get_mut(domain) {
                    Some(c) => c,
                    None => self.domains.entry(domain.into()).or_default(),
                };
                let before = cells.hours.len() + cells.posts.len();
                *cells.hours.entry((minute / 60, outcome)).or_default() += 1;
                cells
                    .posts
                    .entry((a.post.0, outcome, reason))
                    .or_default()
                    .add(a.xdelay_ms, now_ms);
                self.cells += cells.hours.len() + cells.posts.len() - before;
                if outcome != DEFERRED {
                    let off = curve_offset(now_ms.saturating_sub(a.accepted_at_ms));
                    let before = self.curve.len();
                    let c = self.curve.entry((a.post.0, off)).or_default();
                    c[usize::from(outcome == FAILED)] += 1;
                    self.cells += self.curve.len() - before;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_types::EnhancedStatus;

    #[test]
    fn reasons_round_trip() {
        let r = Reply::new(550, Some(EnhancedStatus::new(5, 1, 1)), "no");
        assert_eq!(reason_text(pack_reason(&r)), "550 5.1.1");
        assert_eq!(reason_text(pack_reason(&Reply::new(451, None, "x"))), "451");
        assert_eq!(reason_text(0), "");
        assert_eq!(curve_offset(1_999), 1);
        assert_eq!(curve_offset(3_725_000), 3720);
    }
}
