//! Shared fan-out in the shared store: list posts stored once with their
//! body, and their fan-out cut into *shards* — contiguous member-id ranges — that nodes claim
//! with `SELECT … FOR UPDATE SKIP LOCKED`, hold with a lease and report back in batches. The
//! `herald-shards` crate drives it (publisher, claimer, reporter); this file holds the values and
//! the API, `pg/shards.rs` the SQL.
//!
//! PostgreSQL only: a SQLite directory is one node's, so there is nothing to share; every call
//! on it is refused with [`DirectoryError::InvalidInput`] naming `store`.
//!
//! Times are the store's clock (as the node registry's), so leases compare on one clock.
//!
//! A shard's `done` column is its finished members as a roaring bitmap (the spool's `DoneSet`
//! encoding); this file treats it as bytes: the caller decodes and checks it.
//!
//! SECURITY: rows are written by other Herald nodes of the same cluster; a damaged row (a
//! range with lo > hi, a bitmap that does not decode, a body or meta that does not parse) is
//! the caller's to set aside ([`Directory::set_shard_bad`]), never a panic. Every value is a
//! bound parameter.

use crate::error::DirectoryError;
use crate::{Backend, Directory};
use herald_types::{ListId, MemberId};

/// Most shards one post is cut into: a post to a million members in shards of 1,000 is 1,000
/// rows; the bound keeps a tiny configured shard size from making a row per member.
pub const MAX_SHARDS_PER_POST: usize = 10_000;
/// Largest `done` bitmap accepted back from the store (a shard of 100,000 scattered members
/// stays far below it).
pub const MAX_DONE_BYTES: usize = 4 << 20;

/// A post to publish: who accepted it (its spool id there makes the publish idempotent), its
/// list, its metadata as JSON and its body as received.
#[derive(Debug, Clone)]
pub struct NewClusterPost {
    pub origin_node: String,
    pub origin_post: u64,
    pub list_id: ListId,
    /// Recipient snapshot: shards cover member ids 1..=max_member_id.
    pub max_member_id: MemberId,
    pub meta_json: String,
    pub body: Vec<u8>,
    /// SHA-256 of `body`: a claimer refuses a body that does not match (damaged, truncated).
    pub body_sha256: Vec<u8>,
}

/// Which shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShardKey {
    /// The cluster post (`cluster_posts.post_id`).
    pub post: i64,
    pub shard_no: i32,
}

impl std::fmt::Display for ShardKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.post, self.shard_no)
    }
}

/// A shard this node just leased.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedShard {
    pub key: ShardKey,
    /// Member-id range, both ends included (as stored: may be hostile, lo > hi).
    pub lo: MemberId,
    pub hi: MemberId,
    /// The finished members reported so far (roaring bitmap), if any.
    pub done: Option<Vec<u8>>,
    pub copies_done: u64,
    /// Another node held it and its lease ran out (or the row was left by a previous life).
    pub reclaimed_from: Option<String>,
}

/// A stored post as a claimer fetches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterPostRow {
    pub post: i64,
    pub list_id: ListId,
    pub meta_json: String,
    pub body: Vec<u8>,
    pub body_sha256: Vec<u8>,
}

/// Where a shard goes with a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardNext {
    /// Still this node's; the lease is renewed.
    Keep,
    /// Every copy in range is final.
    Done,
    /// Given back (a drain): open for any node, from the reported position.
    HandBack,
}

impl ShardNext {
    pub(crate) fn as_state(self) -> &'static str {
        match self {
            ShardNext::Keep => "leased",
            ShardNext::Done => "done",
            ShardNext::HandBack => "open",
        }
    }
}

/// One shard's progress as its owner reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardReport {
    pub key: ShardKey,
    /// The whole finished set of the shard (roaring bitmap): idempotent, so a report repeated
    /// after a failed commit changes nothing.
    pub done: Vec<u8>,
    pub copies_done: u64,
    pub next: ShardNext,
}

/// The shard table at a glance (`/metrics` cluster gauges).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShardCounts {
    pub open: u64,
    pub leased: u64,
    pub done: u64,
    pub bad: u64,
    /// Claims that took a shard over from a node whose lease had run out, over all shards.
    pub reclaimed: u64,
    /// Age of the oldest lease held now (ms since it was taken); 0 when none.
    pub oldest_lease_ms: u64,
}

fn pg_only() -> DirectoryError {
    DirectoryError::InvalidInput {
        field: "store",
        reason: "shared fan-out needs a PostgreSQL store ([store] url)".into(),
    }
}

macro_rules! pg_only {
    ($d:expr, $pg:ident => $e:expr) => {
        match $d.backend() {
            Backend::Postgres($pg) => $e,
            Backend::Sqlite(_) => Err(pg_only()),
        }
    };
}

impl Directory {
    /// Stores `posts` and cuts each into shards of about `per_shard` members (by the list's
    /// member ids up to the post's snapshot), all in one transaction: one commit for every
    /// post waiting (group commit). A post already published (same origin) is not stored
    /// again. Returns each post's cluster id and shard count, in order.
    pub fn publish_posts(
        &self,
        posts: &[NewClusterPost],
        per_shard: u32,
    ) -> Result<Vec<(i64, usize)>, DirectoryError> {
        if per_shard == 0 {
            return Err(DirectoryError::invalid("per_shard", "must be at least 1"));
        }
        pg_only!(self, pg => pg.publish_posts(posts, per_shard))
    }

    /// Leases one claimable shard for `node` for `lease_ms`: an open one, or one whose lease
    /// ran out (reclaimed); `None` when there is none. Never waits for another node's claim
    /// (`SKIP LOCKED`).
    pub fn claim_shard(
        &self,
        node: &str,
        lease_ms: u64,
    ) -> Result<Option<ClaimedShard>, DirectoryError> {
        pg_only!(self, pg => pg.claim_shard(node, lease_ms, true))
    }

    /// As [`Directory::claim_shard`], but only an open shard, never one whose lease ran out: what
    /// a node claims just after the store was unreachable, when a lease that ran
    /// out during the outage most likely belongs to a live node that could not renew it.
    pub fn claim_open_shard(
        &self,
        node: &str,
        lease_ms: u64,
    ) -> Result<Option<ClaimedShard>, DirectoryError> {
        pg_only!(self, pg => pg.claim_shard(node, lease_ms, false))
    }

    /// The stored post a shard belongs to.
    pub fn cluster_post(&self, post: i64) -> Result<Option<ClusterPostRow>, DirectoryError> {
        pg_only!(self, pg => pg.cluster_post(post))
    }

    /// Writes `reports` for `node` in one statement and renews every other lease the node
    /// holds in the same transaction. Returns the keys the node no longer owned (reclaimed by
    /// another node after its lease ran out): their reports were not written.
    pub fn report_shards(
        &self,
        node: &str,
        lease_ms: u64,
        reports: &[ShardReport],
    ) -> Result<Vec<ShardKey>, DirectoryError> {
        pg_only!(self, pg => pg.report_shards(node, lease_ms, reports))
    }

    /// Hands back every shard `node` holds (a restart: what its previous life held is
    /// claimable at once, from the reported position). Returns how many.
    pub fn release_node_shards(&self, node: &str) -> Result<u64, DirectoryError> {
        pg_only!(self, pg => pg.release_node_shards(node))
    }

    /// Hands back one shard `node` holds, its progress untouched (it claimed it but could not
    /// start it).
    pub fn release_shard(&self, node: &str, key: ShardKey) -> Result<(), DirectoryError> {
        pg_only!(self, pg => pg.release_shard(node, key))
    }

    /// Sets a shard aside as unusable with `reason` (a damaged row): never claimed again,
    /// counted as `bad`, kept for the operator.
    pub fn set_shard_bad(&self, key: ShardKey, reason: &str) -> Result<(), DirectoryError> {
        pg_only!(self, pg => pg.set_shard_bad(key, reason))
    }

    /// Counts for `/metrics`.
    pub fn shard_counts(&self) -> Result<ShardCounts, DirectoryError> {
        pg_only!(self, pg => pg.shard_counts())
    }

    /// Deletes posts whose shards are all done and that were accepted more than `age_ms` ago
    /// (their shards go with them). Returns how many.
    pub fn prune_cluster_posts(&self, age_ms: u64) -> Result<u64, DirectoryError> {
        pg_only!(self, pg => pg.prune_cluster_posts(age_ms))
    }
}

/// Cuts `1..=max` into contiguous ranges at `bounds` (each group's last member id, ascending):
/// range `i` ends at `bounds[i]`, the last ends at `max`. Pure, shared by the PostgreSQL side
/// and its test. An empty list still gets one shard (it finishes at once).
pub(crate) fn ranges(bounds: &[i64], max: i64) -> Vec<(i64, i64)> {
    let max = max.max(1);
    let mut out = Vec::with_capacity(bounds.len() + 1);
    let mut lo = 1i64;
    for &hi in bounds {
        if hi >= lo && hi < max {
            out.push((lo, hi));
            lo = hi + 1;
        }
    }
    out.push((lo, max));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_contiguous_and_cover_the_snapshot() {
        assert_eq!(ranges(&[], 0), vec![(1, 1)]);
        assert_eq!(ranges(&[], 7), vec![(1, 7)]);
        assert_eq!(ranges(&[3, 6], 9), vec![(1, 3), (4, 6), (7, 9)]);
        // A bound at the end, unordered or out of range is not a shard of its own.
        assert_eq!(ranges(&[3, 9], 9), vec![(1, 3), (4, 9)]);
        assert_eq!(ranges(&[5, 2, 12], 9), vec![(1, 5), (6, 9)]);
    }

    fn pg() -> Directory {
        let url = herald_pg_harness::PgServer::shared()
            .fresh_database()
            .expect("database");
        Directory::open_postgres(&url, 2).expect("postgresql")
    }

    /// A list of 10 members; a post published twice (a restart republishing its spool) is
    /// stored once, cut into 4 contiguous shards of up to 3 members covering 1..=max; two
    /// nodes claim different shards (SKIP LOCKED), a report keeps a lease, a node whose lease
    /// ran out loses its shard to the other node (counted reclaimed, its report refused), a
    /// done shard is never claimed again, and a restarted node's shards are open at once.
    #[test]
    fn shards_are_published_claimed_reported_and_reclaimed() {
        let d = pg();
        let list = d
            .create_list(
                &herald_types::Address::parse("team@l.test").expect("a"),
                &Default::default(),
            )
            .expect("list");
        let members: Vec<crate::NewMember> = (0..10)
            .map(|i| {
                crate::NewMember::new(
                    herald_types::Address::parse(&format!("m{i}@x.test")).expect("a"),
                )
            })
            .collect();
        d.add_members(list.id, &members).expect("members");
        let max = d.max_member_id(list.id).expect("max");
        let post = NewClusterPost {
            origin_node: "a".into(),
            origin_post: 7,
            list_id: list.id,
            max_member_id: max,
            meta_json: "{}".into(),
            body: b"Subject: x\r\n\r\nhi\r\n".to_vec(),
            body_sha256: vec![0; 32],
        };
        let first = d
            .publish_posts(std::slice::from_ref(&post), 3)
            .expect("publish");
        assert_eq!(first[0].1, 4, "10 members in shards of 3");
        assert_eq!(
            d.publish_posts(&[post], 3).expect("again"),
            first,
            "idempotent"
        );
        let c = d.shard_counts().expect("counts");
        assert_eq!((c.open, c.leased, c.done), (4, 0, 0));
        let stored = d.cluster_post(first[0].0).expect("fetch").expect("row");
        assert_eq!(stored.body, b"Subject: x\r\n\r\nhi\r\n");

        let a1 = d.claim_shard("a", 60_000).expect("claim").expect("a shard");
        let b1 = d.claim_shard("b", 60_000).expect("claim").expect("a shard");
        assert_ne!(a1.key, b1.key);
        assert_eq!((a1.lo, a1.hi.0 >= a1.lo.0), (MemberId(1), true));
        assert_eq!(b1.lo.0, a1.hi.0 + 1, "contiguous");
        assert!(a1.reclaimed_from.is_none() && a1.done.is_none());
        let keep = ShardReport {
            key: a1.key,
            done: vec![1, 2, 3],
            copies_done: 2,
            next: ShardNext::Keep,
        };
        assert!(d
            .report_shards("a", 60_000, &[keep])
            .expect("report")
            .is_empty());
        // b's lease runs out (a tiny lease renewed by nothing); a takes b's shard over.
        let b2 = d.claim_shard("b", 1).expect("claim").expect("shard");
        std::thread::sleep(std::time::Duration::from_millis(20));
        // Open shards only (a node just back from a store outage): b's lapsed lease is left
        // to b, the open shard is taken and handed back.
        let open = d
            .claim_open_shard("a", 60_000)
            .expect("claim")
            .expect("shard");
        assert!(open.key != b2.key && open.reclaimed_from.is_none());
        d.release_shard("a", open.key).expect("release");
        let taken = d.claim_shard("a", 60_000).expect("claim").expect("shard");
        assert_eq!(taken.key, b2.key);
        assert_eq!(taken.reclaimed_from.as_deref(), Some("b"));
        let late = ShardReport {
            key: b2.key,
            done: vec![9],
            copies_done: 1,
            next: ShardNext::Done,
        };
        assert_eq!(
            d.report_shards("b", 60_000, &[late]).expect("r"),
            vec![b2.key]
        );
        let done = ShardReport {
            key: a1.key,
            done: vec![4],
            copies_done: 3,
            next: ShardNext::Done,
        };
        assert!(d.report_shards("a", 60_000, &[done]).expect("r").is_empty());
        let c = d.shard_counts().expect("counts");
        assert_eq!((c.open, c.leased, c.done, c.reclaimed), (1, 2, 1, 1));
        // A restart of b hands back what b holds (b1), resumable from its position.
        assert_eq!(d.release_node_shards("b").expect("release"), 1);
        let again = d.claim_shard("c", 60_000).expect("claim").expect("shard");
        assert_eq!((again.key, again.reclaimed_from.clone()), (b1.key, None));
        let last = d.claim_shard("c", 60_000).expect("claim").expect("shard");
        assert_eq!(last.key.shard_no, 3);
        assert!(
            d.claim_shard("c", 60_000).expect("claim").is_none(),
            "none left"
        );
        d.set_shard_bad(again.key, "range lo > hi").expect("bad");
        assert_eq!(d.shard_counts().expect("c").bad, 1);
        assert_eq!(d.prune_cluster_posts(0).expect("prune"), 0, "not all done");
    }

    #[test]
    fn a_sqlite_directory_refuses_shared_fanout_by_name() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let d = Directory::open(&tmp.path().join("d.db")).expect("open");
        match d.claim_shard("a", 1000) {
            Err(DirectoryError::InvalidInput { field, .. }) => assert_eq!(field, "store"),
            other => panic!("sqlite claimed a shard: {other:?}"),
        }
    }
}
