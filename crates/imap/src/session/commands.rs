//! The commands of the authenticated and selected states (RFC 9051 §6.3, §6.4) that read the
//! archive: LIST/LSUB, STATUS, SELECT/EXAMINE, the poll behind NOOP and IDLE, FETCH, SEARCH.
//! What a user may see is decided here at each command, from the archive's privacy and the
//! session's [`Who`].
//!
//! SECURITY: mailbox names, sets and search keys come from the client, already parsed by
//! imap-codec; a mailbox the user may not read is answered exactly like one that does not
//! exist, so private list names are not disclosed.

use super::{other_code, tagged, untagged, Io, Next, Session, Step};
use crate::fetch;
use crate::mailbox::Selected;
use crate::rev2::{self, SearchReturn};
use herald_archive::ArchiveError;
use imap_codec::imap_types::core::{Atom, QuotedChar, Tag};
use imap_codec::imap_types::fetch::{Macro, MessageDataItemName};
use imap_codec::imap_types::flag::{Flag, FlagNameAttribute, FlagPerm};
use imap_codec::imap_types::mailbox::{ListMailbox, Mailbox};
use imap_codec::imap_types::response::{Code, Data, Response, StatusKind};
use imap_codec::imap_types::search::SearchKey;
use imap_codec::imap_types::status::{StatusDataItem, StatusDataItemName};
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::sync::Arc;

/// Messages read from the store per blocking call while streaming a FETCH.
const FETCH_CHUNK: usize = 64;
/// Message bytes read per blocking call at most (past the first message): with
/// `max_message_bytes` messages a chunk of 64 could hold gigabytes.
const FETCH_CHUNK_BYTES: usize = 1 << 20;

/// What a FETCH reads: a sequence set, or the saved SEARCH result (`$`, RFC 5182).
pub(super) enum Target {
    Set(imap_codec::imap_types::sequence::SequenceSet),
    Saved,
}

/// One message's overview row and (when asked) bytes; `None`: removed meanwhile.
type Row = Option<(herald_archive::MessageSummary, Option<Vec<u8>>)>;

/// Reads `ids` in order, stopping early (but after at least one) once
/// [`FETCH_CHUNK_BYTES`] of message bytes are held.
fn read_chunk(
    db: &herald_archive::Archive,
    list: &str,
    ids: &[u32],
    raw: bool,
) -> Result<Vec<Row>, ArchiveError> {
    let mut out = Vec::with_capacity(ids.len());
    let mut bytes = 0usize;
    for id in ids {
        if bytes >= FETCH_CHUNK_BYTES {
            break;
        }
        out.push(match raw {
            true => db.message_by_id(list, *id)?.map(|m| {
                bytes += m.raw.len();
                (m.summary, Some(m.raw))
            }),
            false => db.summary_by_id(list, *id)?.map(|s| (s, None)),
        });
    }
    Ok(out)
}

impl Session {
    /// The lists this user may read, with their privacy (directory order).
    pub(super) async fn readable_lists(&mut self) -> Result<Vec<String>, ArchiveError> {
        let dir = self.shared.directory().clone();
        let who = self.who.clone();
        self.with_db(move |db| {
            let lists = dir.lists().map_err(|e| ArchiveError::Io {
                path: PathBuf::from("herald.db"),
                source: std::io::Error::other(e.to_string()),
            })?;
            let mut out = Vec::new();
            for l in lists {
                let name = l.address.to_string().to_lowercase();
                let p = db.privacy(&name)?;
                if who.as_ref().is_some_and(|w| w.may_read(&name, p)) {
                    out.push(name);
                }
            }
            Ok(out)
        })
        .await
    }

    /// The mailbox a client named, if this user may read it (lower case list address).
    pub(super) async fn resolve(
        &mut self,
        mailbox: &Mailbox<'_>,
    ) -> Result<Option<String>, ArchiveError> {
        let Mailbox::Other(other) = mailbox else {
            return Ok(None);
        };
        let name = String::from_utf8_lossy(other.inner().as_ref()).to_lowercase();
        Ok(self
            .readable_lists()
            .await?
            .into_iter()
            .find(|l| *l == name))
    }

    /// LIST and LSUB; `ext` carries an extended LIST's options and further patterns (RFC
    /// 5258, RFC 5819).
    pub(super) async fn list(
        &mut self,
        tag: Tag<'static>,
        reference: Mailbox<'static>,
        pattern: ListMailbox<'static>,
        lsub: bool,
        ext: Option<ListExtras>,
    ) -> Step<Next> {
        let ext = ext.unwrap_or_default();
        let text = |p: &ListMailbox<'_>| match p {
            ListMailbox::Token(t) => String::from_utf8_lossy(t.as_ref()).into_owned(),
            ListMailbox::String(s) => String::from_utf8_lossy(s.as_ref()).into_owned(),
        };
        let mut patterns = vec![text(&pattern)];
        patterns.extend(ext.more_patterns.iter().map(text));
        let delimiter = QuotedChar::try_from('/').ok();
        if patterns.len() == 1 && patterns[0].is_empty() {
            // RFC 9051 §6.3.9: the hierarchy delimiter and root.
            if let Ok(root) = Mailbox::try_from("") {
                let items = vec![FlagNameAttribute::Noselect];
                self.push(&Response::Data(list_line(lsub, items, delimiter, root)));
            }
            self.push(&tagged(&tag, StatusKind::Ok, None, "LIST done"));
            return Ok(Next::Continue);
        }
        let prefix = match &reference {
            Mailbox::Other(o) => String::from_utf8_lossy(o.inner().as_ref()).into_owned(),
            Mailbox::Inbox => "INBOX".into(),
        };
        let full: Vec<String> = patterns
            .iter()
            .filter(|p| !p.is_empty())
            .map(|p| format!("{prefix}{p}").to_lowercase())
            .collect();
        let lists = match self.readable_lists().await {
            Ok(l) => l,
            Err(e) => return self.store_failed(&tag, e),
        };
        let mut items = vec![FlagNameAttribute::Noinferiors];
        // Every readable list counts as subscribed (nothing is stored per user), so
        // `(SUBSCRIBED)` selects them all; no list has children or a special use.
        if ext.opts.select_subscribed || ext.opts.return_subscribed {
            items.extend(attribute("Subscribed"));
        }
        if ext.opts.return_children {
            items.extend(attribute("HasNoChildren"));
        }
        let shown = lists.into_iter().filter(|n| {
            !ext.opts.select_special_use
                && full.iter().any(|p| wildcard(p.as_bytes(), n.as_bytes()))
        });
        for name in shown.collect::<Vec<_>>() {
            if let Ok(mailbox) = Mailbox::try_from(name.clone()) {
                let items = items.clone();
                self.push(&Response::Data(list_line(lsub, items, delimiter, mailbox)));
            }
            if let Some(names) = &ext.status {
                if let Err(e) = self.push_status(name, names).await {
                    return self.store_failed(&tag, e);
                }
            }
        }
        self.push(&tagged(&tag, StatusKind::Ok, None, "LIST done"));
        Ok(Next::Continue)
    }

    pub(super) async fn status(
        &mut self,
        tag: Tag<'static>,
        mailbox: Mailbox<'static>,
        names: Vec<StatusDataItemName>,
    ) -> Step<Next> {
        let list = match self.resolve(&mailbox).await {
            Ok(Some(l)) => l,
            Ok(None) => return self.no_mailbox(&tag),
            Err(e) => return self.store_failed(&tag, e),
        };
        if let Err(e) = self.push_status(list, &names).await {
            return self.store_failed(&tag, e);
        }
        self.push(&tagged(&tag, StatusKind::Ok, None, "STATUS done"));
        Ok(Next::Continue)
    }

    /// The `* STATUS` response for `list` (STATUS, and LIST's `RETURN (STATUS …)`).
    async fn push_status(
        &mut self,
        list: String,
        names: &[StatusDataItemName],
    ) -> Result<(), ArchiveError> {
        let l = list.clone();
        let size_asked = names.contains(&StatusDataItemName::Size);
        let (n, max, validity, size) = self
            .with_db(move |db| {
                let (n, max) = db.mailbox_totals(&l)?;
                let v = db.uid_validity(&l, max, db.tombstone_count(&l)?)?;
                // STATUS SIZE (RFC 8438, part of rev2): the stored sizes summed, read only when
                // asked (it walks the list's overview rows).
                let mut size = 0u64;
                if size_asked {
                    db.scan_summaries(&l, |s| size += u64::try_from(s.size).unwrap_or(0))?;
                }
                Ok((n, max, v, size))
            })
            .await?;
        let one = NonZeroU32::MIN;
        let items: Vec<StatusDataItem> = names
            .iter()
            .filter_map(|name| match name {
                StatusDataItemName::Messages => Some(StatusDataItem::Messages(n)),
                StatusDataItemName::Recent => Some(StatusDataItem::Recent(0)),
                StatusDataItemName::UidNext => Some(StatusDataItem::UidNext(
                    NonZeroU32::new(max.saturating_add(1)).unwrap_or(one),
                )),
                StatusDataItemName::UidValidity => Some(StatusDataItem::UidValidity(
                    NonZeroU32::new(validity).unwrap_or(one),
                )),
                // Nothing is \Seen outside a session.
                StatusDataItemName::Unseen => Some(StatusDataItem::Unseen(n)),
                StatusDataItemName::Deleted => Some(StatusDataItem::Deleted(0)),
                StatusDataItemName::Size => Some(StatusDataItem::Size(size)),
                _ => None,
            })
            .collect();
        if let Ok(mailbox) = Mailbox::try_from(list) {
            self.push(&Response::Data(Data::Status {
                mailbox,
                items: items.into(),
            }));
        }
        Ok(())
    }

    pub(super) fn no_mailbox(&mut self, tag: &Tag<'_>) -> Step<Next> {
        // The same answer for "does not exist" and "not yours": names of private lists are
        // not disclosed.
        self.push(&tagged(
            tag,
            StatusKind::No,
            Some(other_code("NONEXISTENT")),
            "no such mailbox",
        ));
        Ok(Next::Continue)
    }

    pub(super) async fn select(
        &mut self,
        tag: Tag<'static>,
        mailbox: Mailbox<'static>,
    ) -> Step<Next> {
        // RFC 9051 §6.3.2: a failed SELECT leaves no mailbox selected, and a rev2 client is
        // told the previous one closed ([CLOSED]) before anything about the new one.
        let was_selected = self.selected.take().is_some();
        self.saved.clear();
        if was_selected && self.rev2 {
            self.push(&untagged(
                StatusKind::Ok,
                Some(other_code("CLOSED")),
                "previous mailbox closed",
            ));
        }
        let list = match self.resolve(&mailbox).await {
            Ok(Some(l)) => l,
            Ok(None) => return self.no_mailbox(&tag),
            Err(e) => return self.store_failed(&tag, e),
        };
        let l = list.clone();
        let loaded = self
            .with_db(move |db| {
                let tombstones = db.tombstone_count(&l)?;
                let uids = db.uids(&l)?;
                let max = uids.last().copied().unwrap_or(0);
                let validity = db.uid_validity(&l, max, tombstones)?;
                Ok((uids, validity, tombstones))
            })
            .await;
        let (uids, uid_validity, tombstones) = match loaded {
            Ok(x) => x,
            Err(e) => return self.store_failed(&tag, e),
        };
        let sel = Selected {
            list,
            uids: Arc::new(uids),
            uid_validity,
            tombstones,
            seen: Default::default(),
        };
        self.announce(&sel);
        self.selected = Some(sel);
        self.push(&tagged(
            &tag,
            StatusKind::Ok,
            Some(Code::ReadOnly),
            "archive selected, read-only",
        ));
        Ok(Next::Continue)
    }

    /// What SELECT and EXAMINE tell about the mailbox just opened (RFC 9051 §6.3.2): flags,
    /// EXISTS, RECENT (rev1) or its LIST line (rev2), UIDVALIDITY, UIDNEXT, no permanent flags.
    fn announce(&mut self, sel: &Selected) {
        let one = NonZeroU32::MIN;
        self.push(&Response::Data(Data::Flags(vec![Flag::Seen])));
        self.push(&Response::Data(Data::Exists(sel.exists())));
        if self.rev2 {
            // RFC 9051 §6.3.2: rev2 has no RECENT, and names the mailbox in a LIST response.
            if let Ok(mailbox) = Mailbox::try_from(sel.list.clone()) {
                self.push(&Response::Data(Data::List {
                    items: vec![FlagNameAttribute::Noinferiors],
                    delimiter: QuotedChar::try_from('/').ok(),
                    mailbox,
                }));
            }
        } else {
            self.push(&Response::Data(Data::Recent(0)));
        }
        self.push(&untagged(
            StatusKind::Ok,
            Some(Code::UidValidity(
                NonZeroU32::new(sel.uid_validity).unwrap_or(one),
            )),
            "UIDs valid",
        ));
        self.push(&untagged(
            StatusKind::Ok,
            Some(Code::UidNext(
                NonZeroU32::new(sel.uid_next()).unwrap_or(one),
            )),
            "predicted next UID",
        ));
        self.push(&untagged(
            StatusKind::Ok,
            Some(Code::PermanentFlags(Vec::<FlagPerm>::new())),
            "no permanent flags",
        ));
    }

    /// Looks for new and removed messages of the selected list and announces them (EXPUNGE,
    /// EXISTS). Called at NOOP/CHECK and while idling.
    pub(super) async fn poll_updates(&mut self) -> Step {
        let Some(sel) = &self.selected else {
            return Ok(());
        };
        let (list, last, known_tombs) = (sel.list.clone(), sel.last_uid(), sel.tombstones);
        let r = self
            .with_db(move |db| {
                let tombs = db.tombstone_count(&list)?;
                if tombs != known_tombs {
                    return Ok((Vec::new(), Some((db.uids(&list)?, tombs))));
                }
                Ok((db.uids_after(&list, last)?, None))
            })
            .await;
        let (new, reloaded) = match r {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(error = %e, "IMAP: archive poll failed");
                return Ok(());
            }
        };
        let Some(sel) = self.selected.as_mut() else {
            return Ok(());
        };
        let (expunged, grew) = sel.apply(new, reloaded);
        let exists = sel.exists();
        for seq in expunged {
            if let Ok(d) = Data::expunge(seq) {
                self.push(&Response::Data(d));
            }
        }
        if grew {
            self.push(&Response::Data(Data::Exists(exists)));
        }
        Ok(())
    }

    pub(super) async fn fetch(
        &mut self,
        io: &mut (dyn Io + '_),
        tag: Tag<'static>,
        target: Target,
        names: Vec<MessageDataItemName<'static>>,
        uid: bool,
    ) -> Step<Next> {
        let Some(sel) = &self.selected else {
            return Ok(Next::Continue);
        };
        let ranges = match target {
            Target::Set(set) => sel.ranges(&set, uid),
            // `$` names what is left of the saved messages, by sequence number or UID alike.
            Target::Saved => Ok(crate::mailbox::index_ranges(&self.saved_indexes(sel))),
        };
        let ranges = match ranges {
            Ok(r) => r,
            Err(_) => {
                self.bad(&tag, "no such message sequence number").await?;
                return Ok(Next::Continue);
            }
        };
        let needs = fetch::needs(&names);
        let marks_seen = fetch::sets_seen(&names);
        let (list, uids) = (sel.list.clone(), sel.uids.clone());
        for range in ranges {
            let mut start = range.start;
            while start < range.end {
                let end = (start + FETCH_CHUNK).min(range.end);
                let mut chunk: Vec<u32> = uids[start..end].to_vec();
                let rows = match self.fetch_rows(&list, &chunk, needs).await {
                    Ok(r) => r,
                    Err(e) => return self.store_failed(&tag, e),
                };
                // The byte bound may have cut the chunk short.
                chunk.truncate(rows.len());
                let end = start + rows.len();
                for (i, (uid_value, row)) in chunk.iter().zip(rows.iter()).enumerate() {
                    let Some(sel) = self.selected.as_mut() else {
                        return Ok(Next::Continue);
                    };
                    // `\Seen` is kept for the session only (the archive is read-only).
                    let newly_seen = marks_seen && sel.seen.insert(*uid_value);
                    let m = fetch::Message {
                        uid: *uid_value,
                        seen: newly_seen || sel.seen.contains(uid_value),
                        summary: row.as_ref().map(|(s, _)| s),
                        raw: row.as_ref().and_then(|(_, r)| r.as_deref()),
                    };
                    // A message removed since the session's last look has no row: skipped
                    // (its EXPUNGE comes with the next NOOP).
                    let items = match fetch::items(&names, &m, uid, newly_seen) {
                        Ok(Some(items)) => items,
                        Ok(None) => continue,
                        Err(fetch::UnknownCte) => {
                            self.push(&tagged(
                                &tag,
                                StatusKind::No,
                                Some(Code::UnknownCte),
                                "a part's transfer encoding cannot be decoded",
                            ));
                            return Ok(Next::Continue);
                        }
                    };
                    let seq = u32::try_from(start + i + 1).unwrap_or(u32::MAX);
                    if let Some(seq) = NonZeroU32::new(seq) {
                        self.send(io, &Response::Data(Data::Fetch { seq, items }))
                            .await?;
                    }
                }
                start = end;
            }
        }
        self.push(&tagged(&tag, StatusKind::Ok, None, "FETCH done"));
        Ok(Next::Continue)
    }

    /// The rows of `chunk`'s messages with what a FETCH needs of them; no store read when it
    /// needs neither summaries nor bytes.
    async fn fetch_rows(
        &mut self,
        list: &str,
        chunk: &[u32],
        needs: fetch::Needs,
    ) -> Result<Vec<Row>, ArchiveError> {
        if !(needs.summary || needs.raw) {
            return Ok(vec![None; chunk.len()]);
        }
        let (l, c, raw) = (list.to_string(), chunk.to_vec(), needs.raw);
        self.with_db(move |db| read_chunk(db, &l, &c, raw)).await
    }

    pub(super) async fn search(
        &mut self,
        tag: Tag<'static>,
        key: SearchKey<'static>,
        uid: bool,
        ret: Option<SearchReturn>,
    ) -> Step<Next> {
        let Some(sel) = self.selected.clone() else {
            return Ok(Next::Continue);
        };
        // RFC 9051 §6.4.4: a rev2 SEARCH without RETURN is RETURN (ALL), answered by ESEARCH;
        // a rev1 one keeps `* SEARCH` (RETURN is ESEARCH's, which rev1 sessions may use too).
        let ret = ret.or(self.rev2.then(SearchReturn::all));
        let s = sel.clone();
        let found = self
            .with_db(move |db| crate::search::run(db, &s, &key))
            .await;
        let found = match found {
            Ok(f) => f,
            Err(e) => {
                if ret.is_some_and(|r| r.save) {
                    // RFC 5182 §2.1: a failed SEARCH SAVE leaves `$` empty.
                    self.saved.clear();
                }
                return self.store_failed(&tag, e);
            }
        };
        let numbers: Vec<u32> = found
            .iter()
            .filter_map(|&i| match uid {
                true => sel.uids.get(i).copied(),
                false => u32::try_from(i + 1).ok(),
            })
            .collect();
        match ret {
            None => {
                let numbers = numbers.into_iter().filter_map(NonZeroU32::new).collect();
                self.push(&Response::Data(Data::Search(numbers)));
            }
            Some(r) => {
                if r.save {
                    let uids: Vec<u32> = found
                        .iter()
                        .filter_map(|&i| sel.uids.get(i).copied())
                        .collect();
                    self.saved = r.saved(&uids);
                }
                if r.answers() {
                    let line = rev2::esearch_line(tag.as_ref(), uid, &r, &numbers);
                    self.out.extend_from_slice(&line);
                }
            }
        }
        self.push(&tagged(&tag, StatusKind::Ok, None, "SEARCH done"));
        Ok(Next::Continue)
    }
}

/// A mailbox attribute imap-types has no variant for (`\Subscribed`, `\HasNoChildren`).
fn attribute(name: &str) -> Option<FlagNameAttribute<'static>> {
    Atom::try_from(name.to_string())
        .ok()
        .map(FlagNameAttribute::from)
}

/// What an extended LIST adds to a plain one, decoded by the codec piece by piece.
#[derive(Debug, Default, Clone)]
pub(super) struct ListExtras {
    pub opts: rev2::ListOptions,
    /// Patterns after the first.
    pub more_patterns: Vec<ListMailbox<'static>>,
    /// `RETURN (STATUS (…))`.
    pub status: Option<Vec<StatusDataItemName>>,
}

/// FAST, ALL and FULL as item lists (RFC 9051 §6.4.5).
pub(super) fn macro_items(m: Macro) -> Vec<MessageDataItemName<'static>> {
    use MessageDataItemName as N;
    match m {
        Macro::Fast => vec![N::Flags, N::InternalDate, N::Rfc822Size],
        Macro::All => vec![N::Flags, N::InternalDate, N::Rfc822Size, N::Envelope],
        _ => vec![
            N::Flags,
            N::InternalDate,
            N::Rfc822Size,
            N::Envelope,
            N::Body,
        ],
    }
}

/// LIST pattern matching (RFC 9051 §6.3.9): `*` matches anything, `%` anything but the
/// delimiter `/`; case-insensitive (list addresses are). Hand-written: a small dynamic
/// program over (pattern, name) — linear in each, so a pattern of many stars cannot make it
/// explode; patterns longer than [`MAX_PATTERN`] match nothing.
fn wildcard(pattern: &[u8], name: &[u8]) -> bool {
    if pattern.len() > MAX_PATTERN {
        return false;
    }
    // can[j]: the pattern so far matches name[..j].
    let mut can = vec![false; name.len() + 1];
    can[0] = true;
    for &c in pattern {
        let mut next = vec![false; name.len() + 1];
        match c {
            b'*' => {
                let mut any = false;
                for j in 0..=name.len() {
                    any |= can[j];
                    next[j] = any;
                }
            }
            b'%' => {
                let mut any = false;
                for j in 0..=name.len() {
                    if j > 0 && name[j - 1] == b'/' {
                        any = false;
                    }
                    any |= can[j];
                    next[j] = any;
                }
            }
            c => {
                for j in 1..=name.len() {
                    next[j] = can[j - 1] && name[j - 1].eq_ignore_ascii_case(&c);
                }
            }
        }
        can = next;
    }
    can[name.len()]
}

/// Longest LIST pattern considered.
const MAX_PATTERN: usize = 1024;

/// One line of a LIST or LSUB answer.
fn list_line(
    lsub: bool,
    items: Vec<FlagNameAttribute<'static>>,
    delimiter: Option<QuotedChar>,
    mailbox: Mailbox<'static>,
) -> Data<'static> {
    match lsub {
        true => Data::Lsub {
            items,
            delimiter,
            mailbox,
        },
        false => Data::List {
            items,
            delimiter,
            mailbox,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::wildcard;

    #[test]
    fn list_wildcards() {
        assert!(wildcard(b"*", b"dev@l.test"));
        assert!(wildcard(b"%", b"dev@l.test"));
        assert!(wildcard(b"dev*", b"DEV@l.test"));
        assert!(!wildcard(b"ops*", b"dev@l.test"));
        assert!(wildcard(b"*test", b"dev@l.test"));
        assert!(!wildcard(b"%", b"a/b"));
        assert!(wildcard(b"*", b"a/b"));
        // A pattern of many stars stays cheap enough on a short name.
        assert!(!wildcard(
            &[b'*'; 40].iter().chain(b"x").copied().collect::<Vec<_>>(),
            b"dev@l.test"
        ));
    }
}
