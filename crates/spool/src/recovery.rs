//! Recovery at `open`: replay every segment in order, cut a torn tail, quarantine damage, and
//! rebuild the live-post table with each post's final-state set.
//!
//! Replay rules: a Post record makes a post live (a second Post record with the same id is a
//! copy made by compaction: it only moves the post's location); an Outcome adds a member to the
//! post's set (ignored for posts that are not live); a Checkpoint replaces the set; a PostDone
//! ends the post. Records are applied in log order, which is the order the single writer wrote
//! them, so the result is the state the writer had at the last durable record.
//!
//! Invariants: nothing is dropped silently. A torn tail (last segment only, see [`crate::scan`])
//! is cut away with a warning; any other damage renames the segment to `*.corrupt`, keeps every
//! record before the damage, and logs an error naming the file and offset.
//!
//! SECURITY / robustness: all input is on-disk data, parsed by [`crate::scan`] and
//! [`crate::record`], which bound every allocation and never panic. Memory during recovery holds
//! the bodies of posts still live at that point of the replay (a completed post's body is dropped
//! when its PostDone is read).

use crate::error::SpoolError;
use crate::live::LiveTable;
use crate::model::PostKind;
use crate::record::Record;
use crate::scan::{self, FrameLoc, ScanEnd};
use crate::segment::{self, SEGMENT_HEADER_LEN};
use bytes::Bytes;
use herald_types::PostId;
use std::collections::{BTreeMap, HashMap};
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};

/// Everything `open` needs to resume.
pub(crate) struct Recovered {
    pub live: LiveTable,
    pub bodies: HashMap<PostId, Bytes>,
    /// Healthy segments by seq.
    pub segments: BTreeMap<u64, PathBuf>,
    /// The last segment, if healthy, with its valid length: it may be appended to.
    pub tail: Option<(u64, PathBuf, u64)>,
    /// Seq for the next segment to create (above every segment and quarantined file seen).
    pub next_seq: u64,
    /// Lowest post id that may be issued: above every id seen and every segment's floor.
    pub id_floor: u64,
    pub quarantined: u64,
    pub torn_bytes: u64,
    /// Message-IDs of digests whose PostDone is in the journal (see [`Replay::completed_digests`]).
    pub completed_digests: Vec<String>,
}

#[derive(Default)]
struct Replay {
    live: LiveTable,
    bodies: HashMap<PostId, Bytes>,
    max_id: Option<u64>,
    /// Digests completed in the journal still on disk. The digest ledger marks a digest sent
    /// only after the spool took it; a digest fanned out and completed in the moment between
    /// the two, then a crash, is found here so it is not sent a second time. Only digests are
    /// kept: they are few (one per list per period), list posts are many.
    completed_digests: Vec<String>,
}

impl Replay {
    fn apply(&mut self, seq: u64, rec: Record, loc: FrameLoc) {
        match rec {
            Record::Post { id, meta, body } => {
                self.max_id = self.max_id.max(Some(id.0));
                self.live.insert_post(id, meta, seq, loc);
                self.bodies.insert(id, body);
            }
            Record::Outcome {
                post,
                member,
                state,
            } => {
                // Unknown post: it was completed and its Post record's segment compacted away
                // (its PostDone follows). Nothing to do.
                self.live.apply_outcome(post, member, state);
            }
            Record::PostDone { post } => {
                if let Some(done) = self.live.remove(post) {
                    let meta = done.meta;
                    if meta.kind == PostKind::ListPost && meta.audience.is_digest() {
                        self.completed_digests.extend(meta.message_id);
                    }
                }
                self.bodies.remove(&post);
            }
            Record::Checkpoint {
                post,
                delivered,
                failed,
                done,
            } => {
                self.live.apply_checkpoint(post, delivered, failed, done);
            }
        }
    }
}

/// Replays the journal directory. Errors are I/O failures only; damage is handled in place.
pub(crate) fn recover(journal: &Path) -> Result<Recovered, SpoolError> {
    let listing = segment::list(journal)?;
    let mut replay = Replay::default();
    let mut out = Recovered {
        live: LiveTable::default(),
        bodies: HashMap::new(),
        segments: BTreeMap::new(),
        tail: None,
        next_seq: 1,
        id_floor: 0,
        quarantined: 0,
        torn_bytes: 0,
        completed_digests: Vec::new(),
    };
    let max_seq = listing.segments.last().map(|(seq, _)| *seq);
    out.next_seq = max_seq.max(listing.max_quarantined).map_or(1, |s| s + 1);
    let count = listing.segments.len();
    for (i, (seq, path)) in listing.segments.into_iter().enumerate() {
        let is_last = i + 1 == count;
        let scan = scan::scan(&path, seq, is_last, &mut |rec, loc| {
            replay.apply(seq, rec, loc)
        })?;
        out.id_floor = out.id_floor.max(scan.id_floor.unwrap_or(0));
        match scan.end {
            ScanEnd::Clean => {
                if is_last {
                    out.tail = Some((seq, path.clone(), scan.file_len));
                }
                out.segments.insert(seq, path);
            }
            ScanEnd::Torn { valid_len, reason } => {
                out.torn_bytes += scan.file_len - valid_len;
                if let Some(kept) =
                    cut_torn_tail(journal, &path, valid_len, scan.file_len, &reason)?
                {
                    out.tail = Some((seq, path.clone(), kept));
                    out.segments.insert(seq, path);
                }
            }
            ScanEnd::Corrupt { offset, reason } => {
                let moved = segment::quarantine(journal, &path)?;
                tracing::error!(
                    segment = %path.display(), offset, %reason, quarantined_as = %moved.display(),
                    "spool segment is corrupt: records from this offset on are lost; kept what precedes it"
                );
                out.quarantined += 1;
            }
        }
    }
    out.id_floor = out
        .id_floor
        .max(replay.max_id.map_or(0, |m| m.saturating_add(1)));
    out.live = replay.live;
    out.bodies = replay.bodies;
    out.completed_digests = replay.completed_digests;
    Ok(out)
}

/// Cuts an interrupted write off the last segment (or removes a segment whose header was never
/// completed). Returns the kept length, or `None` if the file was removed.
fn cut_torn_tail(
    journal: &Path,
    path: &Path,
    valid_len: u64,
    file_len: u64,
    reason: &str,
) -> Result<Option<u64>, SpoolError> {
    tracing::warn!(
        segment = %path.display(), offset = valid_len, bytes = file_len - valid_len, %reason,
        "spool journal ends in a torn write (interrupted before its fsync); cutting it away"
    );
    if valid_len < SEGMENT_HEADER_LEN {
        segment::remove(journal, path)?;
        return Ok(None);
    }
    let file = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(SpoolError::io("open segment", path))?;
    file.set_len(valid_len)
        .map_err(SpoolError::io("truncate segment", path))?;
    file.sync_all().map_err(SpoolError::io("fsync", path))?;
    Ok(Some(valid_len))
}
