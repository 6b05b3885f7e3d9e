//! The journal as the writer thread sees it: the active segment, the write buffer, the set of
//! segment files, and the two maintenance jobs — rolling to a new segment and deleting segments
//! nothing depends on any more.
//!
//! Invariants:
//! - Appends only go to the buffer; `commit` writes the buffer and calls fdatasync once for the
//!   whole batch (group commit). Nothing is acknowledged before its commit returns.
//! - A segment is only rolled away from right after a commit, so every segment but the active one
//!   is complete and durable (recovery treats damage in them as corruption, never as a torn tail).
//! - Compaction: when rolling from segment A, live posts whose newest Post record is older than A
//!   are copied (Post frame verbatim + a Checkpoint of their final-state set) into the new segment
//!   and committed; then every segment older than the oldest one a live post still depends on is
//!   deleted, oldest first. So at steady state the journal is the active segment plus the one
//!   before it, and a long-lived post is copied at most once per roll.
//!
//! - A failed write or fdatasync makes the journal *broken*: the active file's bytes past
//!   `durable_len` (the end of the last successful fdatasync) are unknown, so nothing more is
//!   appended until [`Journal::heal`] cuts the file back to `durable_len` and restates what the
//!   failed batch held — a PostDone for every post completed since, a Checkpoint of every live
//!   post's final-state set — in one new commit. Posts appended in the failed batch are
//!   forgotten (their `accept` is answered with the error, so the sender retries). Cutting the
//!   file back before rewriting is what makes a retry honest after a failed fsync: the pages the
//!   kernel may have dropped are discarded, not trusted (the "fsyncgate" lesson).
//!
//! Limits: the buffer is bounded by the writer's batch limit plus one post; compaction copies at
//! most the live posts' bytes per roll, and a segment holding copies rolls only after
//! `segment_max_bytes` of *new* records, so write amplification stays ≤ 2× even when the live set
//! is larger than a segment.
//!
//! SECURITY / robustness: a Post frame read back for copying is re-verified (CRC and post id);
//! if it no longer verifies, the post is not moved, its segment is kept, and an error is logged.

use crate::error::SpoolError;
use crate::live::Applied;
use crate::model::{FinalState, PostMeta, SnapshotSegment};
use crate::record::{self, FRAME_HEADER_LEN};
use crate::scan::FrameLoc;
use crate::segment::{self, SEGMENT_HEADER_LEN};
use crate::shared::Shared;
use bytes::Bytes;
use herald_types::{MemberId, PostId};
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

/// Buffered bytes beyond which compaction writes out (without fsync) before copying more.
const SPILL_BYTES: usize = 8 << 20;

struct Active {
    seq: u64,
    file: File,
    path: PathBuf,
    /// Bytes in the file (header included).
    len: u64,
    /// Bytes copied in by compaction: they do not count towards the roll threshold.
    relocated: u64,
}

pub(crate) struct Journal {
    dir: PathBuf,
    segment_max_bytes: u64,
    /// Every segment file, the active one included.
    segments: BTreeMap<u64, PathBuf>,
    active: Active,
    next_seq: u64,
    buf: Vec<u8>,
    /// Records appended since the last fdatasync.
    pending_records: u64,
    /// Bytes written to the file since the last fdatasync.
    unsynced: bool,
    /// A post ended since the last compaction: some segment may have become deletable.
    compact_due: bool,
    /// Length of the active segment at its last successful fdatasync (see the module docs).
    durable_len: u64,
    /// Posts appended since the last commit: forgotten if that commit fails.
    fresh_posts: Vec<PostId>,
    /// Posts completed since the last commit: [`Journal::heal`] writes their PostDone again.
    done_since: Vec<PostId>,
    /// Relocated posts (copy + Checkpoint appended, not yet durable) with their new segment and
    /// location: the live table points at a copy only once the copy is durable.
    moves: Vec<(PostId, u64, FrameLoc)>,
    /// A write or fdatasync failed and [`Journal::heal`] has not succeeded since.
    broken: bool,
    shared: Arc<Shared>,
}

/// Where the journal resumes (from recovery).
pub(crate) struct Resume {
    pub segments: BTreeMap<u64, PathBuf>,
    pub tail: Option<(u64, PathBuf, u64)>,
    pub next_seq: u64,
}

impl Journal {
    /// Continues the last segment if it is healthy and not full, otherwise starts a new one.
    pub(crate) fn open(
        dir: PathBuf,
        segment_max_bytes: u64,
        resume: Resume,
        shared: Arc<Shared>,
    ) -> Result<Journal, SpoolError> {
        let Resume {
            mut segments,
            tail,
            mut next_seq,
        } = resume;
        let active = match tail {
            Some((seq, path, len)) if len < segment_max_bytes => Active {
                seq,
                file: segment::open_append(&path)?,
                path,
                len,
                relocated: 0,
            },
            _ => {
                let seq = next_seq;
                next_seq += 1;
                let floor = shared.next_id.load(Relaxed);
                let (file, path) = segment::create(&dir, seq, floor)?;
                segments.insert(seq, path.clone());
                let len = SEGMENT_HEADER_LEN;
                Active {
                    seq,
                    file,
                    path,
                    len,
                    relocated: 0,
                }
            }
        };
        shared.stats.segments.store(segments.len() as u64, Relaxed);
        let durable_len = active.len;
        Ok(Journal {
            dir,
            segment_max_bytes,
            segments,
            active,
            next_seq,
            buf: Vec::with_capacity(1 << 20),
            pending_records: 0,
            unsynced: false,
            compact_due: true,
            durable_len,
            fresh_posts: Vec::new(),
            done_since: Vec::new(),
            moves: Vec::new(),
            broken: false,
            shared,
        })
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Hard-links every segment into `into` (created if missing; same file system as the
    /// journal) and says how many of each one's bytes are durable: sealed segments whole, the
    /// active one up to its last fdatasync. Called right after a commit, so the cut holds every
    /// accepted post and every committed outcome, and a later compaction that deletes a segment
    /// does not take it from the cut (the link keeps the file).
    pub(crate) fn link_segments(&self, into: &Path) -> Result<Vec<SnapshotSegment>, SpoolError> {
        std::fs::create_dir_all(into).map_err(SpoolError::io("create", into))?;
        let mut cut = Vec::with_capacity(self.segments.len());
        for (&seq, path) in &self.segments {
            let Some(name) = path.file_name() else {
                continue;
            };
            let link = into.join(name);
            std::fs::hard_link(path, &link).map_err(SpoolError::io("link segment", path))?;
            let bytes = if seq == self.active.seq {
                self.durable_len
            } else {
                std::fs::metadata(&link)
                    .map_err(SpoolError::io("stat segment", &link))?
                    .len()
            };
            cut.push(SnapshotSegment {
                name: name.to_string_lossy().into_owned(),
                path: link,
                bytes,
            });
        }
        Ok(cut)
    }

    fn pos(&self) -> u64 {
        self.active.len + self.buf.len() as u64
    }

    pub(crate) fn pending_records(&self) -> u64 {
        self.pending_records
    }

    pub(crate) fn pending_bytes(&self) -> usize {
        self.buf.len()
    }

    /// True after a failed write or fdatasync, until [`Journal::heal`] succeeds.
    pub(crate) fn is_broken(&self) -> bool {
        self.broken
    }

    /// Appends a Post frame (`head` from [`record::encode_post_head`], then the body).
    pub(crate) fn append_post(&mut self, id: PostId, meta: PostMeta, head: &[u8], body: &[u8]) {
        let loc = FrameLoc {
            offset: self.pos(),
            frame_len: (head.len() + body.len()) as u64,
        };
        self.buf.extend_from_slice(head);
        self.buf.extend_from_slice(body);
        self.pending_records += 1;
        self.fresh_posts.push(id);
        self.shared
            .live()
            .insert_post(id, meta, self.active.seq, loc);
    }

    /// Appends an Outcome unless the member is already final or the post is not live.
    pub(crate) fn append_outcome(
        &mut self,
        post: PostId,
        member: MemberId,
        state: FinalState,
    ) -> Applied {
        let applied = self.shared.live().apply_outcome(post, member, state);
        if applied == Applied::New {
            record::encode_outcome(&mut self.buf, post, member, state);
            self.pending_records += 1;
        }
        applied
    }

    /// Appends a PostDone and forgets the post; false if it was not live.
    pub(crate) fn append_done(&mut self, post: PostId) -> bool {
        if !self.forget(post) {
            return false;
        }
        record::encode_post_done(&mut self.buf, post);
        self.pending_records += 1;
        true
    }

    /// While broken: applies an outcome to the live table only. The Checkpoint that
    /// [`Journal::heal`] writes carries it to disk.
    pub(crate) fn note_outcome(
        &mut self,
        post: PostId,
        member: MemberId,
        state: FinalState,
    ) -> Applied {
        self.shared.live().apply_outcome(post, member, state)
    }

    /// Forgets a completed post; its PostDone is written by the next commit (or by
    /// [`Journal::heal`] when broken). False if it was not live.
    pub(crate) fn forget(&mut self, post: PostId) -> bool {
        if self.shared.live().remove(post).is_none() {
            return false;
        }
        self.done_since.push(post);
        self.compact_due = true;
        true
    }

    /// After a failed write or commit: drops the unwritten batch and the posts appended in it
    /// (their senders get the error and retry), keeps the old locations of relocated posts, and
    /// refuses appends until [`Journal::heal`] succeeds. Returns the forgotten posts.
    pub(crate) fn abandon_batch(&mut self) -> Vec<PostId> {
        self.broken = true;
        self.buf.clear();
        self.pending_records = 0;
        self.moves.clear();
        let fresh = std::mem::take(&mut self.fresh_posts);
        let mut live = self.shared.live();
        for id in &fresh {
            live.remove(*id);
        }
        fresh
    }

    /// Makes the journal whole again after a failure: cuts the active segment back to its last
    /// durable length, then writes a PostDone for every post completed since and a Checkpoint
    /// of every live post, and commits them. On error the journal stays broken (try again
    /// later); nothing in memory is lost either way.
    pub(crate) fn heal(&mut self) -> Result<(), SpoolError> {
        self.buf.clear();
        self.pending_records = 0;
        self.moves.clear();
        let path = self.active.path.clone();
        self.active
            .file
            .set_len(self.durable_len)
            .map_err(SpoolError::io("truncate segment", &path))?;
        self.active.len = self.durable_len;
        self.unsynced = true;
        for post in self.done_since.clone() {
            record::encode_post_done(&mut self.buf, post);
            self.pending_records += 1;
        }
        {
            let live = self.shared.live();
            for id in live.based_before(u64::MAX) {
                if let Some(p) = live.get(id) {
                    record::encode_checkpoint(&mut self.buf, id, p.delivered, p.failed, &p.done);
                    self.pending_records += 1;
                }
            }
        }
        self.broken = false;
        let result = self.commit();
        if result.is_err() {
            self.abandon_batch();
        }
        result
    }

    fn write_buf(&mut self) -> Result<(), SpoolError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        if self.broken {
            return Err(SpoolError::Unwritable {
                reason: "an earlier journal write failed and has not been repaired yet".into(),
            });
        }
        self.unsynced = true;
        let written = self.active.file.write_all(&self.buf);
        if let Err(e) = written {
            self.broken = true;
            return Err(SpoolError::io("write", &self.active.path)(e));
        }
        self.active.len += self.buf.len() as u64;
        self.shared
            .stats
            .bytes
            .fetch_add(self.buf.len() as u64, Relaxed);
        self.buf.clear();
        Ok(())
    }

    /// Writes the buffer and makes it durable with one fdatasync. No-op when nothing is pending.
    pub(crate) fn commit(&mut self) -> Result<(), SpoolError> {
        if self.buf.is_empty() && !self.unsynced {
            return Ok(());
        }
        self.write_buf()?;
        let start = Instant::now();
        if let Err(e) = self.active.file.sync_data() {
            self.broken = true;
            return Err(SpoolError::io("fdatasync", &self.active.path)(e));
        }
        self.shared
            .stats
            .on_commit(self.pending_records, start.elapsed());
        self.pending_records = 0;
        self.unsynced = false;
        self.durable_len = self.active.len;
        self.fresh_posts.clear();
        self.done_since.clear();
        if !self.moves.is_empty() {
            let mut live = self.shared.live();
            for (id, seq, loc) in self.moves.drain(..) {
                if let Some(p) = live.get_mut(id) {
                    p.base = seq;
                    p.loc = loc;
                }
            }
        }
        Ok(())
    }

    /// Maintenance after a successful commit: roll a full segment, delete segments nothing needs.
    pub(crate) fn after_commit(&mut self) -> Result<(), SpoolError> {
        if self.active.len >= self.segment_max_bytes.saturating_add(self.active.relocated) {
            self.roll()?;
        }
        if self.compact_due {
            self.compact();
        }
        Ok(())
    }

    /// Starts a new segment and copies forward the live posts older than the one just closed.
    fn roll(&mut self) -> Result<(), SpoolError> {
        let closed = self.active.seq;
        let seq = self.next_seq;
        let floor = self.shared.next_id.load(Relaxed);
        let (file, path) = segment::create(&self.dir, seq, floor)?;
        self.next_seq += 1;
        self.segments.insert(seq, path.clone());
        let len = SEGMENT_HEADER_LEN;
        self.active = Active {
            seq,
            file,
            path,
            len,
            relocated: 0,
        };
        // `segment::create` made the header durable.
        self.durable_len = len;
        let stats = &self.shared.stats;
        stats.rolls.fetch_add(1, Relaxed);
        stats.segments.store(self.segments.len() as u64, Relaxed);
        tracing::debug!(closed, seq, "spool segment rolled");
        let movers = self.shared.live().based_before(closed);
        for id in movers {
            if let Err(e) = self.relocate(id) {
                tracing::error!(post = %id, error = %e, "cannot copy live post forward; keeping its segment");
            }
            if self.buf.len() >= SPILL_BYTES {
                self.write_buf()?;
            }
        }
        self.commit()?;
        self.active.relocated = self.active.len - SEGMENT_HEADER_LEN;
        self.compact_due = true;
        Ok(())
    }

    /// Copies one live post (verified Post frame + Checkpoint) into the active segment.
    fn relocate(&mut self, id: PostId) -> Result<(), SpoolError> {
        let (base, loc) = match self.shared.live().get(id) {
            Some(p) => (p.base, p.loc),
            None => return Ok(()),
        };
        let path = self
            .segments
            .get(&base)
            .ok_or_else(|| SpoolError::Corrupt {
                path: segment::segment_path(&self.dir, base),
                offset: loc.offset,
                reason: format!("segment holding post {id} is missing"),
            })?;
        let frame = segment::read_frame_at(path, loc.offset, loc.frame_len)?;
        let stored = frame
            .get(FRAME_HEADER_LEN..FRAME_HEADER_LEN + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes);
        if stored != Some(id.0) {
            return Err(SpoolError::Corrupt {
                path: path.clone(),
                offset: loc.offset,
                reason: format!("expected the Post record of {id}"),
            });
        }
        let new_loc = FrameLoc {
            offset: self.pos(),
            frame_len: loc.frame_len,
        };
        self.buf.extend_from_slice(&frame);
        self.checkpoint(id, new_loc);
        Ok(())
    }

    /// Reads a live post's body back from its newest Post frame (moderation approves a held
    /// post long after it was accepted; bodies are not kept in memory). `None` if not live.
    pub(crate) fn read_body(&mut self, id: PostId) -> Result<Option<Bytes>, SpoolError> {
        let (base, loc) = match self.shared.live().get(id) {
            Some(p) => (p.base, p.loc),
            None => return Ok(None),
        };
        // A post appended in this batch still sits in the buffer (relocated copies do not:
        // the live table moves to them only once they are durable).
        if base == self.active.seq && loc.offset + loc.frame_len > self.active.len {
            self.write_buf()?;
        }
        let path = self
            .segments
            .get(&base)
            .ok_or_else(|| SpoolError::Corrupt {
                path: segment::segment_path(&self.dir, base),
                offset: loc.offset,
                reason: format!("segment holding post {id} is missing"),
            })?;
        let frame = segment::read_frame_at(path, loc.offset, loc.frame_len)?;
        let corrupt = |reason: String| SpoolError::Corrupt {
            path: path.clone(),
            offset: loc.offset,
            reason,
        };
        let mut h = [0u8; FRAME_HEADER_LEN];
        h.copy_from_slice(&frame[..FRAME_HEADER_LEN]);
        let header = record::FrameHeader::parse(&h).map_err(corrupt)?;
        match record::decode(&header, frame[FRAME_HEADER_LEN..].to_vec()).map_err(corrupt)? {
            record::Record::Post { id: got, body, .. } if got == id => Ok(Some(body)),
            _ => Err(corrupt(format!("expected the Post record of {id}"))),
        }
    }

    /// Appends a Checkpoint for a post whose Post frame was just appended at `loc`; the live
    /// table moves to the copy when the commit succeeds.
    fn checkpoint(&mut self, id: PostId, loc: FrameLoc) {
        let seq = self.active.seq;
        let live = self.shared.live();
        if let Some(p) = live.get(id) {
            record::encode_checkpoint(&mut self.buf, id, p.delivered, p.failed, &p.done);
            self.moves.push((id, seq, loc));
        }
        drop(live);
        self.pending_records += 2;
        self.shared.stats.relocated.fetch_add(1, Relaxed);
    }

    /// At `open` after a segment was quarantined: rewrites every live post (from the bodies recovery
    /// read) into the active segment, so the remaining segments alone replay to the same state.
    pub(crate) fn checkpoint_all(
        &mut self,
        bodies: &HashMap<PostId, Bytes>,
    ) -> Result<(), SpoolError> {
        let ids = self.shared.live().based_before(u64::MAX);
        for id in ids {
            let Some(body) = bodies.get(&id) else {
                continue;
            };
            let Some(meta) = self.shared.live().get(id).map(|p| p.meta.clone()) else {
                continue;
            };
            let head = record::encode_post_head(id, &meta, body)?;
            let loc = FrameLoc {
                offset: self.pos(),
                frame_len: (head.len() + body.len()) as u64,
            };
            self.buf.extend_from_slice(&head);
            self.buf.extend_from_slice(body);
            self.checkpoint(id, loc);
            if self.buf.len() >= SPILL_BYTES {
                self.write_buf()?;
            }
        }
        self.commit()?;
        self.compact_due = true;
        Ok(())
    }

    /// Deletes, oldest first, the segments older than every live post's base. Stops at the first
    /// failure so deletions stay a prefix (see [`crate::segment`]).
    pub(crate) fn compact(&mut self) {
        self.compact_due = false;
        let keep_from = self
            .shared
            .live()
            .min_base()
            .unwrap_or(u64::MAX)
            .min(self.active.seq);
        let doomed: Vec<(u64, PathBuf)> = self
            .segments
            .range(..keep_from)
            .map(|(s, p)| (*s, p.clone()))
            .collect();
        for (seq, path) in doomed {
            if let Err(e) = segment::remove(&self.dir, &path) {
                tracing::error!(error = %e, "cannot delete spent spool segment");
                break;
            }
            self.segments.remove(&seq);
            self.shared.stats.deleted.fetch_add(1, Relaxed);
            tracing::debug!(seq, "spool segment deleted");
        }
        let stats = &self.shared.stats;
        stats.segments.store(self.segments.len() as u64, Relaxed);
    }
}
