//! The values the spool takes in and hands back: post metadata, final recipient states, the
//! per-post set of finished members, what recovery returns and the statistics telemetry reads.
//!
//! Invariants: a [`DoneSet`] only grows while its post is live; `delivered + failed` equals
//! `done.len()` for every post the spool reports (a second final state for the same member is
//! ignored, so the counts cannot drift from the set).
//!
//! Limits: a `DoneSet` is a roaring treemap, so 1,000,000 finished members of one post take on the
//! order of 128 KiB when ids are dense, a few MiB when they are scattered.

use herald_types::{Address, DeliveryMode, ListId, MemberId, PostId, RcptOutcome};
use roaring::RoaringTreemap;
use serde::{Deserialize, Serialize};

/// Why a post is in the spool. Only `ListPost` is fanned out; the others wait, durably, for
/// moderation, bounce processing, request handling or the operator (postmaster), so nothing
/// accepted is ever dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PostKind {
    ListPost,
    Held,
    Bounce,
    Request,
    /// Mail Herald writes itself (confirmations, notices): delivered to
    /// [`PostMeta::recipients`], never to the list's members.
    Generated,
    /// Mail to `postmaster` (RFC 5321 §4.5.1), kept for the operator until it is deleted or
    /// its retention ends; never fanned out. `list_address` is the postmaster address it was
    /// sent to and `list_id` is `ListId::NONE`. Its one journaled outcome (member 1) records
    /// that it was handled at arrival: `Delivered` = forwarded to the operators, `Failed` =
    /// kept only (so a restart does not forward it again).
    Postmaster,
}

/// What the spool keeps about a post besides its body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PostMeta {
    pub kind: PostKind,
    pub list_id: ListId,
    pub list_address: Address,
    /// `MAIL FROM`; `None` for the null reverse path (`<>`, e.g. bounces).
    pub envelope_from: Option<Address>,
    pub received_at_ms: u64,
    /// Recipient snapshot: members with `id <= max_member_id` when the post was accepted.
    pub max_member_id: MemberId,
    pub message_id: Option<String>,
    /// `Generated`: the explicit recipients. `Bounce`: the member decoded from the VERP address
    /// the bounce was sent to, if any. Empty for list posts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recipients: Vec<Address>,
    /// `Held`: why the post waits for a moderator (shown by `herald held`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_reason: Option<String>,
    /// `Generated`: send with the null reverse path (`MAIL FROM:<>`) instead of the list's VERP
    /// address. For server mail (postmaster forwards) that must never draw a bounce or an
    /// auto-reply back to Herald, so it cannot loop.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub null_sender: bool,
    /// `ListPost`: which members get it, by delivery mode. `Regular` for every post
    /// from a poster; a digest is a list post for the members of its digest mode only. Left
    /// out of the record when regular, so journals written before it read back the same.
    #[serde(default, skip_serializing_if = "DeliveryMode::is_regular")]
    pub audience: DeliveryMode,
    /// `Postmaster`: the DSN parameters (RFC 3461) it arrived with; `Generated`: those to pass
    /// on to the receivers that offer DSN (a postmaster forward). Left out of the record when
    /// absent, so journals written before it read back the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Boxed: rare, and it would double the size of every record in memory.
    pub dsn: Option<Box<herald_types::Dsn>>,
    /// `ListPost`: a shard of a post shared between nodes (`herald-shards`):
    /// only members with `lo <= id <= hi` get it here; other nodes fan out the rest. Left out
    /// of the record when absent, so journals written before it read back the same. Boxed:
    /// rare, and every record in memory would grow by its size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member_range: Option<Box<(MemberId, MemberId)>>,
}

/// What inbound hands to fan-out once `accept` has returned.
#[derive(Debug, Clone)]
pub struct SpooledPost {
    pub id: PostId,
    pub meta: PostMeta,
    pub body: bytes::Bytes,
}

/// The two recipient states that end a recipient's life in the spool (deferrals are not written).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinalState {
    Delivered,
    Failed,
}

impl FinalState {
    /// The final state of a delivery outcome; `None` for a deferral, which is not journaled.
    pub fn from_outcome(outcome: &RcptOutcome) -> Option<FinalState> {
        match outcome {
            RcptOutcome::Delivered(_) => Some(FinalState::Delivered),
            RcptOutcome::Failed(_) => Some(FinalState::Failed),
            RcptOutcome::Deferred(_) => None,
        }
    }
}

/// Member ids of one post whose state is final. Fan-out skips them after a restart.
///
/// Member ids are directory rowids (positive); they are stored as `u64` bit patterns, so a
/// negative id would still round-trip but iterate after the positive ones.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DoneSet(RoaringTreemap);

impl DoneSet {
    pub fn new() -> DoneSet {
        DoneSet::default()
    }

    pub fn contains(&self, member: MemberId) -> bool {
        self.0.contains(member.0 as u64)
    }

    /// Number of members in the set.
    pub fn len(&self) -> u64 {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Members in ascending id order.
    pub fn iter(&self) -> impl Iterator<Item = MemberId> + '_ {
        self.0.iter().map(|m| MemberId(m as i64))
    }

    /// Adds a member; false if it was already there.
    pub fn insert(&mut self, member: MemberId) -> bool {
        self.0.insert(member.0 as u64)
    }

    /// The set in roaring's portable serialization: how a shard's finished members travel
    /// through the shared store.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_into(&mut out);
        out
    }

    /// Parses [`DoneSet::to_bytes`] output from an untrusted source: a clear error for bytes
    /// that do not decode, and nothing left over.
    pub fn from_bytes(bytes: &[u8]) -> Result<DoneSet, String> {
        let set = DoneSet::decode(bytes)?;
        if set.0.serialized_size() != bytes.len() {
            return Err("bad done-set encoding: trailing bytes".into());
        }
        Ok(set)
    }

    /// Roaring's portable serialization (used by checkpoint records).
    pub(crate) fn encode_into(&self, out: &mut Vec<u8>) {
        out.reserve(self.0.serialized_size());
        // Writing into a Vec cannot fail; the Result only exists for generic writers.
        let _ = self.0.serialize_into(out);
    }

    /// Parses [`DoneSet::encode_into`] output. Roaring validates containers and fails on short
    /// input; allocations are bounded by the input it actually consumes.
    pub(crate) fn decode(bytes: &[u8]) -> Result<DoneSet, String> {
        RoaringTreemap::deserialize_from(bytes)
            .map(DoneSet)
            .map_err(|e| format!("bad done-set encoding: {e}"))
    }
}

/// A post that was live when the spool was opened, with everything needed to resume it.
#[derive(Debug, Clone)]
pub struct RecoveredPost {
    pub id: PostId,
    pub meta: PostMeta,
    pub body: bytes::Bytes,
    /// Members already delivered or failed: expansion skips them.
    pub done: DoneSet,
    pub delivered: u64,
    pub failed: u64,
}

/// Progress of one live post, for status pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PostProgress {
    pub delivered: u64,
    pub failed: u64,
}

/// One journal segment in a backup's cut ([`crate::Spool::snapshot`]): a hard link to the
/// segment file and how many of its bytes belong to the cut (the file may grow after it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotSegment {
    /// The segment's file name in `journal/`.
    pub name: String,
    /// The hard link made for the cut; the caller copies `bytes` of it, then removes it.
    pub path: std::path::PathBuf,
    pub bytes: u64,
}

/// Counters and gauges for telemetry. Counters are totals since `open`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SpoolStats {
    /// Group commits (one fdatasync each).
    pub commits: u64,
    /// Journal records written, including records copied forward by compaction.
    pub records_written: u64,
    pub bytes_written: u64,
    pub fsync_last_us: u64,
    pub fsync_avg_us: u64,
    pub fsync_max_us: u64,
    /// Records in the most recent commit / on average / at most: the group-commit batch size.
    pub group_last_records: u64,
    pub group_avg_records: f64,
    pub group_max_records: u64,
    /// Posts accepted and not yet completed (a gauge).
    pub live_posts: u64,
    /// Segment files in the journal (a gauge).
    pub segments: u64,
    pub segment_rolls: u64,
    /// Live posts copied into a newer segment so an old one could be deleted.
    pub relocated_posts: u64,
    pub segments_deleted: u64,
    /// Outcomes dropped because their post was not live (a caller bug or a late report).
    pub ignored_outcomes: u64,
    /// Damaged segments renamed to `*.corrupt` by recovery at `open`.
    pub quarantined_segments: u64,
    /// Bytes of torn tail (an interrupted write) cut from the last segment at `open`.
    pub torn_tail_bytes: u64,
    /// The journal can be written now (a gauge). False during an outage (a full disk, an I/O
    /// error): new posts are refused with `452 4.3.1` and fan-out pauses until a repair succeeds.
    pub writable: bool,
    /// Times the journal became unwritable since `open`.
    pub outages: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes a shard's finished members travel in through the shared store:
    /// a round trip keeps the set; hostile bytes (garbage, truncated, trailing) are errors.
    #[test]
    fn done_set_bytes_round_trip_and_refuse_hostile_input() {
        let mut d = DoneSet::new();
        for m in [3, 7, 1_000_000] {
            d.insert(MemberId(m));
        }
        let bytes = d.to_bytes();
        assert_eq!(DoneSet::from_bytes(&bytes).expect("decodes"), d);
        assert!(DoneSet::from_bytes(b"\xde\xad\xbe\xef").is_err());
        assert!(DoneSet::from_bytes(&bytes[..bytes.len() - 1]).is_err());
        let mut long = bytes.clone();
        long.push(0);
        assert!(DoneSet::from_bytes(&long).is_err());
        assert_eq!(
            DoneSet::from_bytes(&DoneSet::new().to_bytes())
                .expect("empty")
                .len(),
            0
        );
    }

    #[test]
    fn done_set_basics_and_round_trip() {
        let mut d = DoneSet::new();
        assert!(d.is_empty());
        for m in [5, 1, 1_000_000, 5] {
            d.insert(MemberId(m));
        }
        assert_eq!(d.len(), 3);
        assert!(d.contains(MemberId(1_000_000)) && !d.contains(MemberId(2)));
        let ids: Vec<i64> = d.iter().map(|m| m.0).collect();
        assert_eq!(ids, vec![1, 5, 1_000_000]);
        let mut buf = Vec::new();
        d.encode_into(&mut buf);
        assert_eq!(DoneSet::decode(&buf).unwrap(), d);
        assert!(DoneSet::decode(&buf[..buf.len() - 1]).is_err());
    }

    #[test]
    fn a_million_dense_members_stay_small() {
        let mut d = DoneSet::new();
        for m in 1..=1_000_000 {
            d.insert(MemberId(m));
        }
        let mut buf = Vec::new();
        d.encode_into(&mut buf);
        assert!(buf.len() < 200 << 10, "{} bytes", buf.len());
    }
}
