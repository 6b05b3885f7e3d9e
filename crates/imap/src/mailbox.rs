//! The selected mailbox of a session: the list's UIDs in order (message sequence number `n` is
//! `uids[n - 1]`), UIDVALIDITY, and the session's own `\Seen` marks.
//!
//! Memory: the UID vector is loaded once at SELECT (4 bytes a message: 4 MB for a million)
//! and then only grows by the new posts a poll finds; a removal (tombstone) reloads it once.
//! Sequence sets are turned into index ranges over it, never into a list of numbers, so
//! `FETCH 1:*` on a big mailbox is walked range by range.
//!
//! `\Seen` lives only in the session (the archive is read-only and shared by every reader;
//! RFC 9051 §6.3.3 lets a read-only mailbox keep no permanent flags).

use imap_codec::imap_types::sequence::{SeqOrUid, Sequence, SequenceSet};
use std::collections::HashSet;
use std::ops::Range;
use std::sync::Arc;

/// A selected list archive.
#[derive(Debug, Clone)]
pub struct Selected {
    /// The list address (lower case): the mailbox name.
    pub list: String,
    /// UIDs in ascending order; shared with blocking searches without a copy.
    pub uids: Arc<Vec<u32>>,
    pub uid_validity: u32,
    /// The list's tombstone count when `uids` was last loaded whole.
    pub tombstones: i64,
    /// UIDs this session has read (`BODY[]` without PEEK).
    pub seen: HashSet<u32>,
}

/// A sequence set that names messages the mailbox does not have (RFC 9051 §6.4.5: BAD).
#[derive(Debug, PartialEq, Eq)]
pub struct OutOfRange;

impl Selected {
    pub fn exists(&self) -> u32 {
        u32::try_from(self.uids.len()).unwrap_or(u32::MAX)
    }

    pub fn last_uid(&self) -> u32 {
        self.uids.last().copied().unwrap_or(0)
    }

    /// The UID the next archived message gets at the least (its row id is larger than every
    /// id so far; the list's own largest is the bound this session knows).
    pub fn uid_next(&self) -> u32 {
        self.last_uid().saturating_add(1).max(1)
    }

    /// The sequence number of `uid`, if present.
    pub fn seq_of(&self, uid: u32) -> Option<u32> {
        self.uids
            .binary_search(&uid)
            .ok()
            .and_then(|i| u32::try_from(i + 1).ok())
    }

    /// The index ranges (into `uids`) a set names, sorted and merged. By sequence number a
    /// number beyond the mailbox is an error; by UID, absent UIDs are simply not there.
    pub fn ranges(&self, set: &SequenceSet, uid: bool) -> Result<Vec<Range<usize>>, OutOfRange> {
        let mut out: Vec<Range<usize>> = Vec::new();
        for seq in set.0.as_ref() {
            let (a, b) = match seq {
                Sequence::Single(x) => (x, x),
                Sequence::Range(a, b) => (a, b),
            };
            let r = if uid {
                self.uid_range(a, b)
            } else {
                self.seq_range(a, b)?
            };
            if !r.is_empty() {
                out.push(r);
            }
        }
        Ok(merge(out))
    }

    /// As [`Selected::ranges`] for SEARCH, where a number beyond the mailbox names nothing
    /// rather than being an error. Membership is then a binary search, so a set of thousands
    /// of numbers (a written-out `$`) costs a logarithm per message, not its length.
    pub fn search_ranges(&self, set: &SequenceSet, uid: bool) -> Vec<Range<usize>> {
        let n = self.uids.len();
        let out = set
            .0
            .as_ref()
            .iter()
            .map(|seq| {
                let (a, b) = match seq {
                    Sequence::Single(x) => (x, x),
                    Sequence::Range(a, b) => (a, b),
                };
                if uid {
                    return self.uid_range(a, b);
                }
                let value = |x: &SeqOrUid| match x {
                    SeqOrUid::Value(v) => v.get() as usize,
                    SeqOrUid::Asterisk => n,
                };
                let (a, b) = (value(a), value(b));
                let (lo, hi) = (a.min(b).max(1), a.max(b).min(n));
                match lo <= hi {
                    true => lo - 1..hi,
                    false => 0..0,
                }
            })
            .filter(|r| !r.is_empty())
            .collect();
        merge(out)
    }
}

/// Index ranges sorted and merged where they touch or overlap.
fn merge(mut out: Vec<Range<usize>>) -> Vec<Range<usize>> {
    out.sort_by_key(|r| r.start);
    let mut merged: Vec<Range<usize>> = Vec::with_capacity(out.len());
    for r in out {
        match merged.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => merged.push(r),
        }
    }
    merged
}

impl Selected {
    fn seq_range(&self, a: &SeqOrUid, b: &SeqOrUid) -> Result<Range<usize>, OutOfRange> {
        let n = self.uids.len();
        let value = |x: &SeqOrUid| match x {
            SeqOrUid::Value(v) => Ok(v.get() as usize),
            // `*` in an empty mailbox names nothing.
            SeqOrUid::Asterisk => Ok(n),
        };
        let (a, b) = (value(a)?, value(b)?);
        let (lo, hi) = (a.min(b), a.max(b));
        if hi > n {
            return Err(OutOfRange);
        }
        if lo == 0 {
            return Ok(0..0);
        }
        Ok(lo - 1..hi)
    }

    fn uid_range(&self, a: &SeqOrUid, b: &SeqOrUid) -> Range<usize> {
        let star = self.last_uid();
        let value = |x: &SeqOrUid| match x {
            SeqOrUid::Value(v) => v.get(),
            SeqOrUid::Asterisk => star,
        };
        let (a, b) = (value(a), value(b));
        let (lo, hi) = (a.min(b), a.max(b));
        let start = self.uids.partition_point(|u| *u < lo);
        let end = self.uids.partition_point(|u| *u <= hi);
        start..end.max(start)
    }

    /// Whether message `index` (0-based) is in `set` (SEARCH with a set among other keys).
    pub fn contains(&self, set: &SequenceSet, uid: bool, index: usize) -> bool {
        let n = self.uids.len();
        let Some(&this_uid) = self.uids.get(index) else {
            return false;
        };
        set.0.as_ref().iter().any(|seq| {
            let (a, b) = match seq {
                Sequence::Single(x) => (x, x),
                Sequence::Range(a, b) => (a, b),
            };
            let (star, this) = if uid {
                (self.last_uid(), this_uid)
            } else {
                (u32::try_from(n).unwrap_or(u32::MAX), (index + 1) as u32)
            };
            let v = |x: &SeqOrUid| match x {
                SeqOrUid::Value(v) => v.get(),
                SeqOrUid::Asterisk => star,
            };
            let (a, b) = (v(a), v(b));
            a.min(b) <= this && this <= a.max(b)
        })
    }

    /// Applies a poll's result: new UIDs appended; when `reloaded` (a removal happened) the
    /// whole list replaces ours. Returns the sequence numbers to announce as EXPUNGEd, in the
    /// order to send them (each one renumbers those after it), and whether EXISTS changed.
    pub fn apply(&mut self, new: Vec<u32>, reloaded: Option<(Vec<u32>, i64)>) -> (Vec<u32>, bool) {
        let before = self.uids.len();
        let mut expunged = Vec::new();
        if let Some((all, tombstones)) = reloaded {
            let keep: HashSet<u32> = all.iter().copied().collect();
            let mut gone = 0u32;
            for (i, uid) in self.uids.iter().enumerate() {
                if !keep.contains(uid) {
                    // Sequence numbers shift down by one after each EXPUNGE already sent.
                    expunged.push((i as u32 + 1) - gone);
                    gone += 1;
                    self.seen.remove(uid);
                }
            }
            self.uids = Arc::new(all);
            self.tombstones = tombstones;
        } else if !new.is_empty() {
            let last = self.last_uid();
            Arc::make_mut(&mut self.uids).extend(new.into_iter().filter(|u| *u > last));
        }
        let grew = self.uids.len() + expunged.len() != before;
        (expunged, grew)
    }
}

/// Sorted indexes as merged ranges (`[1, 2, 3, 7]` → `1..4, 7..8`).
pub fn index_ranges(indexes: &[usize]) -> Vec<Range<usize>> {
    let mut out: Vec<Range<usize>> = Vec::new();
    for &i in indexes {
        match out.last_mut() {
            Some(last) if last.end == i => last.end = i + 1,
            _ => out.push(i..i + 1),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(uids: &[u32]) -> Selected {
        Selected {
            list: "l@x".into(),
            uids: Arc::new(uids.to_vec()),
            uid_validity: 1,
            tombstones: 0,
            seen: HashSet::new(),
        }
    }

    fn set(s: &str) -> SequenceSet {
        SequenceSet::try_from(s).unwrap()
    }

    #[test]
    #[allow(clippy::single_range_in_vec_init)]
    fn sets_become_merged_index_ranges() {
        let s = sel(&[3, 5, 9, 10, 20]);
        assert_eq!(s.ranges(&set("1:*"), false), Ok(vec![0..5]));
        assert_eq!(s.ranges(&set("2,4:3,5"), false), Ok(vec![1..5]));
        assert_eq!(s.ranges(&set("6"), false), Err(OutOfRange));
        assert_eq!(s.ranges(&set("5:9"), true), Ok(vec![1..3]));
        assert_eq!(s.ranges(&set("21:*"), true), Ok(vec![4..5]));
        assert_eq!(s.ranges(&set("100:200"), true), Ok(vec![]));
        assert_eq!(sel(&[]).ranges(&set("1:*"), false), Err(OutOfRange));
        assert_eq!(sel(&[]).ranges(&set("*"), true), Ok(vec![]));
        assert!(s.contains(&set("9:10"), true, 2));
        assert!(!s.contains(&set("9:10"), true, 1));
        assert!(s.contains(&set("*"), false, 4));
        assert_eq!(s.seq_of(9), Some(3));
        assert_eq!(s.uid_next(), 21);
        assert_eq!(index_ranges(&[1, 2, 3, 7]), vec![1..4, 7..8]);
        // SEARCH: beyond the mailbox is nothing, not an error.
        assert_eq!(s.search_ranges(&set("4:9,1,2"), false), vec![0..2, 3..5]);
        assert!(s.search_ranges(&set("7:9"), false).is_empty());
        assert_eq!(s.search_ranges(&set("10,3,20:*"), true), vec![0..1, 3..5]);
        assert!(index_ranges(&[]).is_empty());
    }

    #[test]
    fn removals_become_expunges_in_sending_order() {
        let mut s = sel(&[3, 5, 9, 10]);
        s.seen.insert(5);
        let (exp, grew) = s.apply(vec![], Some((vec![3, 10, 11], 2)));
        // 5 (seq 2) goes, then 9 is seq 2 too.
        assert_eq!(exp, vec![2, 2]);
        assert!(grew);
        assert_eq!(s.uids.as_slice(), &[3, 10, 11]);
        assert!(s.seen.is_empty());
        let (exp, grew) = s.apply(vec![11, 12], None);
        assert!(exp.is_empty() && grew);
        assert_eq!(s.exists(), 4);
    }
}
