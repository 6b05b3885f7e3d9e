//! SEARCH over a selected list archive (blocking: runs on tokio's blocking threads).
//!
//! How each key is answered:
//! - sequence sets, `UID`, `ALL`, flags: from the session alone (`\Seen` is the session's;
//!   no message is `\Answered`, `\Deleted`, `\Draft`, `\Flagged`, `\Recent` or keyworded);
//! - `FROM`, `SUBJECT`: case-insensitive substring of the archive's overview columns;
//! - `SINCE`/`BEFORE`/`ON` and `SENTSINCE`/`SENTBEFORE`/`SENTON`: the archive's date of the
//!   message (its `Date:` when readable, else its arrival; UTC) — the archive keeps one date,
//!   so the "sent" and "internal" forms agree;
//! - `LARGER`/`SMALLER`: the stored size;
//! - `BODY`, `TEXT`: the archive's FTS5 index — every *word* of the string must occur
//!   (the index has words, not substrings; `TEXT` covers subject, sender and body);
//! - `TO`, `CC`, `BCC`, `HEADER`: substring of the unfolded header field, reading each
//!   candidate's stored header (the slow path, only when asked).
//!
//! Memory: one overview row at a time (the store streams them); the result is the list of
//! matching numbers. Sequence-set keys become sorted index ranges once per SEARCH, so a set
//! of thousands of numbers (a written-out `$`) costs a binary search per message.
//!
//! SECURITY: search strings come from clients; they reach SQLite only as parameters and FTS5
//! only as quoted words ([`herald_archive::store`]).

use crate::envelope;
use crate::mailbox::Selected;
use herald_archive::{Archive, ArchiveError, MessageSummary};
use imap_codec::imap_types::search::SearchKey;
use imap_codec::imap_types::sequence::SequenceSet;
use std::collections::HashMap;

/// What a key needs beyond the session.
#[derive(Default)]
struct Needs {
    summary: bool,
    header: bool,
    texts: Vec<String>,
}

fn needs(key: &SearchKey<'_>, n: &mut Needs) {
    match key {
        SearchKey::And(keys) => keys.as_ref().iter().for_each(|k| needs(k, n)),
        SearchKey::Or(a, b) => {
            needs(a, n);
            needs(b, n);
        }
        SearchKey::Not(k) => needs(k, n),
        SearchKey::From(_)
        | SearchKey::Subject(_)
        | SearchKey::Since(_)
        | SearchKey::Before(_)
        | SearchKey::On(_)
        | SearchKey::SentSince(_)
        | SearchKey::SentBefore(_)
        | SearchKey::SentOn(_)
        | SearchKey::Larger(_)
        | SearchKey::Smaller(_) => n.summary = true,
        SearchKey::To(_) | SearchKey::Cc(_) | SearchKey::Bcc(_) | SearchKey::Header(..) => {
            n.summary = true;
            n.header = true;
        }
        SearchKey::Body(s) | SearchKey::Text(s) => n
            .texts
            .push(String::from_utf8_lossy(s.as_ref()).into_owned()),
        _ => {}
    }
}

/// One message as a key is tested against it.
struct Candidate<'c> {
    index: usize,
    uid: u32,
    summary: Option<&'c MessageSummary>,
    header: Option<&'c [u8]>,
}

struct Context<'c> {
    sel: &'c Selected,
    /// UIDs matching each BODY/TEXT string (sorted).
    texts: HashMap<String, Vec<u32>>,
    /// The index ranges of each sequence-set key, by the key's address in the tree being run
    /// (it lives as long as the run; identity spares hashing sets of thousands of numbers).
    sets: HashMap<(usize, bool), Vec<std::ops::Range<usize>>>,
}

impl Context<'_> {
    /// Whether message `index` is in `set` (by UID or sequence number).
    fn in_set(&self, set: &SequenceSet, uid: bool, index: usize) -> bool {
        match self.sets.get(&(std::ptr::from_ref(set) as usize, uid)) {
            Some(ranges) => {
                let after = ranges.partition_point(|r| r.end <= index);
                ranges.get(after).is_some_and(|r| r.contains(&index))
            }
            None => self.sel.contains(set, uid, index),
        }
    }
}

/// Every sequence-set key of `key` with its index ranges, for [`Context::in_set`].
fn sets(
    key: &SearchKey<'_>,
    sel: &Selected,
    out: &mut HashMap<(usize, bool), Vec<std::ops::Range<usize>>>,
) {
    match key {
        SearchKey::And(keys) => keys.as_ref().iter().for_each(|k| sets(k, sel, out)),
        SearchKey::Or(a, b) => {
            sets(a, sel, out);
            sets(b, sel, out);
        }
        SearchKey::Not(k) => sets(k, sel, out),
        SearchKey::SequenceSet(set) => {
            out.insert(
                (std::ptr::from_ref(set) as usize, false),
                sel.search_ranges(set, false),
            );
        }
        SearchKey::Uid(set) => {
            out.insert(
                (std::ptr::from_ref(set) as usize, true),
                sel.search_ranges(set, true),
            );
        }
        _ => {}
    }
}

/// The indexes (0-based, ascending) of the messages of `sel` matching `key`.
pub fn run(
    archive: &Archive,
    sel: &Selected,
    key: &SearchKey<'_>,
) -> Result<Vec<usize>, ArchiveError> {
    let mut n = Needs::default();
    needs(key, &mut n);
    let mut texts = HashMap::new();
    for t in n.texts {
        // RFC 9051 §6.4.4: the empty string matches every message.
        let ids = if t.trim().is_empty() {
            sel.uids.as_ref().clone()
        } else {
            archive.text_ids(&sel.list, &t)?
        };
        texts.insert(t, ids);
    }
    let mut set_ranges = HashMap::new();
    sets(key, sel, &mut set_ranges);
    let cx = Context {
        sel,
        texts,
        sets: set_ranges,
    };
    let mut out = Vec::new();
    if !n.summary {
        for index in 0..sel.uids.len() {
            let c = Candidate {
                index,
                uid: sel.uids[index],
                summary: None,
                header: None,
            };
            if matches(key, &cx, &c) {
                out.push(index);
            }
        }
        return Ok(out);
    }
    let mut failed = None;
    archive.scan_summaries(&sel.list, |s| {
        let Ok(uid) = u32::try_from(s.id) else { return };
        let Ok(index) = sel.uids.binary_search(&uid) else {
            // Archived after this session's last look: not in its mailbox yet.
            return;
        };
        let raw = match n.header {
            true => match archive.message_by_id(&sel.list, uid) {
                Ok(m) => m.map(|m| m.raw),
                Err(e) => {
                    failed = Some(e);
                    None
                }
            },
            false => None,
        };
        let c = Candidate {
            index,
            uid,
            summary: Some(s),
            header: raw.as_deref().map(envelope::header),
        };
        if matches(key, &cx, &c) {
            out.push(index);
        }
    })?;
    if let Some(e) = failed {
        return Err(e);
    }
    out.sort_unstable();
    Ok(out)
}

fn contains_ci(hay: &str, needle: &[u8]) -> bool {
    let needle = String::from_utf8_lossy(needle).to_lowercase();
    hay.to_lowercase().contains(&needle)
}

fn day(ms: i64) -> chrono::NaiveDate {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .date_naive()
}

fn matches(key: &SearchKey<'_>, cx: &Context<'_>, c: &Candidate<'_>) -> bool {
    let s = c.summary;
    let date = || s.map(|s| day(s.date_ms));
    let field = |name: &str, needle: &[u8]| {
        c.header.is_some_and(|h| {
            envelope::fields(h).into_iter().any(|f| {
                envelope::field_name(f).is_some_and(|n| n.eq_ignore_ascii_case(name.as_bytes()))
                    && contains_ci(&envelope::field_value(f), needle)
            })
        })
    };
    match key {
        SearchKey::And(keys) => keys.as_ref().iter().all(|k| matches(k, cx, c)),
        SearchKey::Or(a, b) => matches(a, cx, c) || matches(b, cx, c),
        SearchKey::Not(k) => !matches(k, cx, c),
        SearchKey::All | SearchKey::Old | SearchKey::Undeleted | SearchKey::Undraft => true,
        SearchKey::Unanswered | SearchKey::Unflagged | SearchKey::Unkeyword(_) => true,
        SearchKey::Answered
        | SearchKey::Deleted
        | SearchKey::Draft
        | SearchKey::Flagged
        | SearchKey::Keyword(_)
        | SearchKey::New
        | SearchKey::Recent => false,
        SearchKey::Seen => cx.sel.seen.contains(&c.uid),
        SearchKey::Unseen => !cx.sel.seen.contains(&c.uid),
        SearchKey::SequenceSet(set) => cx.in_set(set, false, c.index),
        SearchKey::Uid(set) => cx.in_set(set, true, c.index),
        SearchKey::From(v) => s.is_some_and(|s| contains_ci(&s.from, v.as_ref())),
        SearchKey::Subject(v) => s.is_some_and(|s| contains_ci(&s.subject, v.as_ref())),
        SearchKey::Since(d) | SearchKey::SentSince(d) => date().is_some_and(|x| x >= *d.as_ref()),
        SearchKey::Before(d) | SearchKey::SentBefore(d) => date().is_some_and(|x| x < *d.as_ref()),
        SearchKey::On(d) | SearchKey::SentOn(d) => date().is_some_and(|x| x == *d.as_ref()),
        SearchKey::Larger(n) => s.is_some_and(|s| s.size > i64::from(*n)),
        SearchKey::Smaller(n) => s.is_some_and(|s| s.size < i64::from(*n)),
        SearchKey::Body(v) | SearchKey::Text(v) => cx
            .texts
            .get(String::from_utf8_lossy(v.as_ref()).as_ref())
            .is_some_and(|ids| ids.binary_search(&c.uid).is_ok()),
        SearchKey::To(v) => field("To", v.as_ref()),
        SearchKey::Cc(v) => field("Cc", v.as_ref()),
        SearchKey::Bcc(v) => field("Bcc", v.as_ref()),
        SearchKey::Header(name, v) => {
            let name = String::from_utf8_lossy(name.as_ref()).into_owned();
            field(&name, v.as_ref())
        }
        #[allow(unreachable_patterns)]
        _ => false,
    }
}
