//! The straggler index: per recipient address, how many of its copies are in the slow lane and
//! the oldest one's acceptance time — what `herald queue --stragglers` shows (the seed's
//! `latedudes`), without walking the queues.
//!
//! Maintained by the actor as copies enter the slow lane and leave it (final outcome); bounded by
//! the number of queued copies, which the scheduler's window bounds. The top N are chosen with a
//! partial selection (O(n) for n recipients), never a full sort.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

#[derive(Default)]
pub struct Stragglers {
    by_rcpt: HashMap<Box<str>, Entry>,
}

#[derive(Clone, Copy)]
struct Entry {
    pending: u64,
    oldest_ms: u64,
}

impl Stragglers {
    pub fn len(&self) -> usize {
        self.by_rcpt.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_rcpt.is_empty()
    }

    /// A copy for `rcpt` (of a post accepted at `accepted_ms`) entered the slow lane.
    pub fn add(&mut self, rcpt: &str, accepted_ms: u64) {
        match self.by_rcpt.get_mut(rcpt) {
            Some(e) => {
                e.pending += 1;
                e.oldest_ms = e.oldest_ms.min(accepted_ms);
            }
            None => {
                self.by_rcpt.insert(
                    rcpt.into(),
                    Entry {
                        pending: 1,
                        oldest_ms: accepted_ms,
                    },
                );
            }
        }
    }

    /// A slow-lane copy for `rcpt` reached a final outcome.
    pub fn remove(&mut self, rcpt: &str) {
        if let Some(e) = self.by_rcpt.get_mut(rcpt) {
            e.pending = e.pending.saturating_sub(1);
            if e.pending == 0 {
                self.by_rcpt.remove(rcpt);
            }
        }
    }

    /// The `n` recipients with the most pending copies, oldest first among equals:
    /// (recipient, pending, oldest acceptance ms).
    pub fn top(&self, n: usize) -> Vec<(String, u64, u64)> {
        // A max-heap of the best n seen so far, worst on top: (more pending, older, name) is
        // better, i.e. smaller.
        let mut heap: BinaryHeap<(Reverse<u64>, u64, &str)> = BinaryHeap::with_capacity(n + 1);
        if n == 0 {
            return Vec::new();
        }
        for (r, e) in &self.by_rcpt {
            heap.push((Reverse(e.pending), e.oldest_ms, r.as_ref()));
            if heap.len() > n {
                heap.pop();
            }
        }
        heap.into_sorted_vec()
            .into_iter()
            .map(|(Reverse(p), o, r)| (r.to_string(), p, o))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_orders() {
        let mut s = Stragglers::default();
        for _ in 0..3 {
            s.add("a@x", 100);
        }
        s.add("b@x", 50);
        s.add("b@x", 70);
        s.add("c@x", 10);
        let top = s.top(2);
        assert_eq!(top[0], ("a@x".into(), 3, 100));
        assert_eq!(top[1], ("b@x".into(), 2, 50));
        s.remove("c@x");
        assert_eq!(s.len(), 2);
    }
}
