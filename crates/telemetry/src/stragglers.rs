//! Stragglers (seeds/000's `latedudes`): copies that have been deferred at least once and have no
//! final outcome yet, grouped by recipient and by destination domain, with their age and the last
//! error. Fed by attempt events: a deferral adds or updates an entry, a final outcome removes it.
//!
//! Limits: at most [`MAX_ENTRIES`] copies are tracked; beyond that new stragglers are only counted
//! (`untracked`), so a dead provider holding a million copies cannot grow memory without bound.
//!
//! SECURITY: addresses and reply texts are untrusted; they are stored as given (bounded to
//! [`MAX_TEXT`] bytes) and escaped by whoever renders them (JSON, the dashboard's text nodes).

use crate::event::Attempt;
use herald_types::{MemberId, PostId, RcptOutcome};
use serde::Serialize;
use std::collections::HashMap;

pub const MAX_ENTRIES: usize = 100_000;
const MAX_TEXT: usize = 200;

struct Entry {
    rcpt: String,
    /// When the latest deferral was seen: the group shows its newest error.
    last_ms: u64,
    accepted_at_ms: u64,
    tries: u32,
    last_error: String,
}

#[derive(Default)]
pub(crate) struct StragglerBook {
    entries: HashMap<(PostId, MemberId), Entry>,
    untracked: u64,
}

/// One recipient or destination holding pending copies.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StragglerGroup {
    /// A recipient address or a destination domain.
    pub key: String,
    pub pending: u64,
    /// Age of the oldest pending copy (since its post was accepted).
    pub oldest_secs: u64,
    pub max_tries: u32,
    pub last_error: String,
    /// Posts with a pending copy for this key (at most 10 shown).
    pub posts: Vec<String>,
    #[serde(skip)]
    last_ms: u64,
}

/// The straggler report.
#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub struct Stragglers {
    pub total: u64,
    pub untracked: u64,
    pub recipients: Vec<StragglerGroup>,
    pub destinations: Vec<StragglerGroup>,
}

fn clip(s: &str) -> String {
    let mut end = s.len().min(MAX_TEXT);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

impl StragglerBook {
    pub(crate) fn observe(&mut self, a: &Attempt, now_ms: u64) {
        let key = (a.post, a.member);
        match &a.outcome {
            RcptOutcome::Deferred(reply) => {
                if let Some(e) = self.entries.get_mut(&key) {
                    e.tries = a.tries;
                    e.last_ms = now_ms;
                    e.last_error = clip(&reply.to_string());
                } else if self.entries.len() < MAX_ENTRIES {
                    self.entries.insert(
                        key,
                        Entry {
                            rcpt: clip(&a.rcpt),
                            last_ms: now_ms,
                            accepted_at_ms: a.accepted_at_ms,
                            tries: a.tries,
                            last_error: clip(&reply.to_string()),
                        },
                    );
                } else {
                    self.untracked += 1;
                }
            }
            _ => {
                self.entries.remove(&key);
            }
        }
    }

    /// The `limit` recipients and destinations holding the most pending copies.
    pub(crate) fn report(&self, now_ms: u64, limit: usize) -> Stragglers {
        let mut by_rcpt: HashMap<&str, StragglerGroup> = HashMap::new();
        let mut by_dest: HashMap<&str, StragglerGroup> = HashMap::new();
        for ((post, _), e) in &self.entries {
            let domain = e.rcpt.rsplit_once('@').map_or("", |(_, d)| d);
            for (map, k) in [(&mut by_rcpt, e.rcpt.as_str()), (&mut by_dest, domain)] {
                let g = map.entry(k).or_insert_with(|| StragglerGroup {
                    key: k.to_string(),
                    pending: 0,
                    oldest_secs: 0,
                    max_tries: 0,
                    last_error: String::new(),
                    posts: Vec::new(),
                    last_ms: 0,
                });
                g.pending += 1;
                let age = now_ms.saturating_sub(e.accepted_at_ms) / 1000;
                if age >= g.oldest_secs {
                    g.oldest_secs = age;
                }
                g.max_tries = g.max_tries.max(e.tries);
                if e.last_ms >= g.last_ms {
                    g.last_ms = e.last_ms;
                    g.last_error.clone_from(&e.last_error);
                }
                let p = post.to_string();
                if g.posts.len() < 10 && !g.posts.contains(&p) {
                    g.posts.push(p);
                }
            }
        }
        let top = |m: HashMap<&str, StragglerGroup>| {
            let mut v: Vec<StragglerGroup> = m.into_values().collect();
            v.sort_by(|a, b| {
                b.pending
                    .cmp(&a.pending)
                    .then(b.oldest_secs.cmp(&a.oldest_secs))
            });
            v.truncate(limit);
            v
        };
        Stragglers {
            total: self.entries.len() as u64,
            untracked: self.untracked,
            recipients: top(by_rcpt),
            destinations: top(by_dest),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_types::Reply;

    fn attempt(post: u64, member: i64, rcpt: &str, outcome: RcptOutcome) -> Attempt {
        Attempt {
            post: PostId(post),
            member: MemberId(member),
            rcpt: rcpt.into(),
            relay: "none".into(),
            accepted_at_ms: 1_000,
            xdelay_ms: 0,
            tries: 2,
            tls: None,
            mta_sts: None,
            dane: None,
            source: None,
            outcome,
        }
    }

    #[test]
    fn groups_by_recipient_and_domain_and_forgets_final_copies() {
        let mut b = StragglerBook::default();
        let later = || RcptOutcome::Deferred(Reply::new(451, None, "try later"));
        b.observe(&attempt(1, 1, "a@slow.test", later()), 5_000);
        b.observe(&attempt(2, 1, "a@slow.test", later()), 5_000);
        b.observe(&attempt(2, 2, "b@slow.test", later()), 5_000);
        b.observe(&attempt(2, 3, "c@ok.test", later()), 5_000);
        let ok = RcptOutcome::Delivered(Reply::new(250, None, "ok"));
        b.observe(&attempt(2, 3, "c@ok.test", ok), 6_000);
        let r = b.report(11_000, 10);
        assert_eq!(r.total, 3);
        assert_eq!(r.recipients[0].key, "a@slow.test");
        assert_eq!(
            (r.recipients[0].pending, r.recipients[0].oldest_secs),
            (2, 10)
        );
        assert_eq!(r.destinations.len(), 1);
        assert_eq!(
            (r.destinations[0].key.as_str(), r.destinations[0].pending),
            ("slow.test", 3)
        );
        assert!(r.destinations[0].last_error.contains("451"));
    }
}
