//! The shared fan-out's SQL (values and API in `crate::shards`). Outside the
//! directory's write lock: publishing, claiming and reporting touch only `cluster_posts` and
//! `shards`, and must not queue behind a member import. Leases are on the store's clock.
//!
//! Statements per shard's life: one claim, one fetch of the post per node (the caller caches
//! it), one row in a batched report per flush interval, and the lease renewal shared by every
//! shard of the node (one statement). Nothing per recipient.

use super::{col, ms, unms, PgStore};
use crate::error::DirectoryError;
use crate::shards::{
    ranges, ClaimedShard, ClusterPostRow, NewClusterPost, ShardCounts, ShardKey, ShardReport,
    MAX_SHARDS_PER_POST,
};
use herald_types::{ListId, MemberId};

/// The server's clock in Unix milliseconds.
const NOW_MS: &str = "(extract(epoch FROM clock_timestamp()) * 1000)::BIGINT";

/// Longest reason kept on a bad shard.
const MAX_ERROR_CHARS: usize = 500;

impl PgStore {
    pub(crate) fn publish_posts(
        &self,
        posts: &[NewClusterPost],
        per_shard: u32,
    ) -> Result<Vec<(i64, usize)>, DirectoryError> {
        self.unlocked_write(|db| {
            let mut out = Vec::with_capacity(posts.len());
            for p in posts {
                let origin = ms(p.origin_post);
                let inserted = db.opt(
                    "store a cluster post",
                    &format!(
                        "INSERT INTO cluster_posts (origin_node, origin_post, list_id, meta, body,
                                                    body_sha256, accepted_at_ms)
                         VALUES ($1, $2, $3, $4, $5, $6, {NOW_MS})
                         ON CONFLICT (origin_node, origin_post) DO NOTHING
                         RETURNING post_id"
                    ),
                    &[
                        &p.origin_node,
                        &origin,
                        &p.list_id.0,
                        &p.meta_json,
                        &p.body,
                        &p.body_sha256,
                    ],
                )?;
                let Some(row) = inserted else {
                    // Published before a crash: the stored post and its shards stand.
                    let r = db.one(
                        "find a published post",
                        "SELECT post_id, (SELECT COUNT(*) FROM shards s WHERE s.post_id = p.post_id)
                         FROM cluster_posts p WHERE origin_node = $1 AND origin_post = $2",
                        &[&p.origin_node, &origin],
                    )?;
                    out.push((col(&r, 0)?, col::<i64>(&r, 1)? as usize));
                    continue;
                };
                let post: i64 = col(&row, 0)?;
                // Each group of `per_shard` members (by id, within the snapshot) ends a shard.
                let bounds = db.all(
                    "cut a post into shards",
                    "SELECT max(id) FROM (
                        SELECT id, (row_number() OVER (ORDER BY id) - 1) / $3 AS g
                        FROM members WHERE list_id = $1 AND id <= $2) t
                     GROUP BY g ORDER BY g LIMIT $4",
                    &[
                        &p.list_id.0,
                        &p.max_member_id.0,
                        &i64::from(per_shard),
                        &(MAX_SHARDS_PER_POST as i64),
                    ],
                )?;
                let bounds: Vec<i64> =
                    bounds.iter().map(|r| col(r, 0)).collect::<Result<_, _>>()?;
                let cut = ranges(&bounds, p.max_member_id.0);
                let (los, his): (Vec<i64>, Vec<i64>) = cut.iter().copied().unzip();
                db.exec(
                    "store shards",
                    "INSERT INTO shards (post_id, shard_no, lo_member_id, hi_member_id)
                     SELECT $1, (n - 1)::INTEGER, lo, hi
                     FROM unnest($2::BIGINT[], $3::BIGINT[]) WITH ORDINALITY AS u(lo, hi, n)",
                    &[&post, &los, &his],
                )?;
                out.push((post, cut.len()));
            }
            Ok(out)
        })
    }

    /// Claims an open shard, or (with `reclaim`) one whose lease ran out.
    pub(crate) fn claim_shard(
        &self,
        node: &str,
        lease_ms: u64,
        reclaim: bool,
    ) -> Result<Option<ClaimedShard>, DirectoryError> {
        self.read(|db| {
            let row = db.opt(
                "claim a shard",
                &format!(
                    "WITH pick AS (
                        SELECT post_id, shard_no, state AS was, owner_node AS prev FROM shards
                        WHERE state = 'open'
                           OR ($3 AND state = 'leased' AND lease_until_ms < {NOW_MS})
                        ORDER BY post_id, shard_no LIMIT 1
                        FOR UPDATE SKIP LOCKED)
                     UPDATE shards s SET state = 'leased', owner_node = $1,
                        lease_until_ms = {NOW_MS} + $2, leased_at_ms = {NOW_MS},
                        claims = s.claims + 1,
                        reclaimed_count = s.reclaimed_count
                            + CASE WHEN pick.was = 'leased' THEN 1 ELSE 0 END
                     FROM pick WHERE s.post_id = pick.post_id AND s.shard_no = pick.shard_no
                     RETURNING s.post_id, s.shard_no, s.lo_member_id, s.hi_member_id, s.done,
                               s.copies_done, pick.was, pick.prev"
                ),
                &[&node, &ms(lease_ms), &reclaim],
            )?;
            let Some(r) = row else { return Ok(None) };
            let was: String = col(&r, 6)?;
            let prev: Option<String> = col(&r, 7)?;
            Ok(Some(ClaimedShard {
                key: ShardKey {
                    post: col(&r, 0)?,
                    shard_no: col(&r, 1)?,
                },
                lo: MemberId(col(&r, 2)?),
                hi: MemberId(col(&r, 3)?),
                done: col(&r, 4)?,
                copies_done: unms(col(&r, 5)?),
                reclaimed_from: (was == "leased").then(|| prev.unwrap_or_default()),
            }))
        })
    }

    pub(crate) fn cluster_post(&self, post: i64) -> Result<Option<ClusterPostRow>, DirectoryError> {
        self.read(|db| {
            let Some(r) = db.opt(
                "fetch a cluster post",
                "SELECT post_id, list_id, meta, body, body_sha256 FROM cluster_posts
                 WHERE post_id = $1",
                &[&post],
            )?
            else {
                return Ok(None);
            };
            Ok(Some(ClusterPostRow {
                post: col(&r, 0)?,
                list_id: ListId(col(&r, 1)?),
                meta_json: col(&r, 2)?,
                body: col(&r, 3)?,
                body_sha256: col(&r, 4)?,
            }))
        })
    }

    pub(crate) fn report_shards(
        &self,
        node: &str,
        lease_ms: u64,
        reports: &[ShardReport],
    ) -> Result<Vec<ShardKey>, DirectoryError> {
        self.unlocked_write(|db| {
            let mut lost = Vec::new();
            if !reports.is_empty() {
                let posts: Vec<i64> = reports.iter().map(|r| r.key.post).collect();
                let nos: Vec<i32> = reports.iter().map(|r| r.key.shard_no).collect();
                let done: Vec<&[u8]> = reports.iter().map(|r| r.done.as_slice()).collect();
                let copies: Vec<i64> = reports.iter().map(|r| ms(r.copies_done)).collect();
                let next: Vec<&str> = reports.iter().map(|r| r.next.as_state()).collect();
                let written = db.all(
                    "report shards",
                    &format!(
                        "UPDATE shards s SET done = u.done, copies_done = u.copies,
                            state = u.next,
                            owner_node = CASE WHEN u.next = 'open' THEN NULL ELSE s.owner_node END,
                            lease_until_ms = CASE WHEN u.next = 'leased'
                                THEN {NOW_MS} + $2 ELSE NULL END
                         FROM unnest($3::BIGINT[], $4::INTEGER[], $5::BYTEA[], $6::BIGINT[],
                                     $7::TEXT[]) AS u(post_id, shard_no, done, copies, next)
                         WHERE s.post_id = u.post_id AND s.shard_no = u.shard_no
                           AND s.owner_node = $1 AND s.state = 'leased'
                         RETURNING s.post_id, s.shard_no"
                    ),
                    &[&node, &ms(lease_ms), &posts, &nos, &done, &copies, &next],
                )?;
                let written: std::collections::HashSet<ShardKey> = written
                    .iter()
                    .map(|r| {
                        Ok(ShardKey {
                            post: col(r, 0)?,
                            shard_no: col(r, 1)?,
                        })
                    })
                    .collect::<Result<_, DirectoryError>>()?;
                lost = reports
                    .iter()
                    .map(|r| r.key)
                    .filter(|k| !written.contains(k))
                    .collect();
            }
            // The node's heartbeat for its shards: one statement renews every lease it holds.
            db.exec(
                "renew shard leases",
                &format!(
                    "UPDATE shards SET lease_until_ms = {NOW_MS} + $2
                     WHERE owner_node = $1 AND state = 'leased'"
                ),
                &[&node, &ms(lease_ms)],
            )?;
            Ok(lost)
        })
    }

    pub(crate) fn release_node_shards(&self, node: &str) -> Result<u64, DirectoryError> {
        self.read(|db| {
            db.exec(
                "hand back a node's shards",
                "UPDATE shards SET state = 'open', owner_node = NULL, lease_until_ms = NULL
                 WHERE owner_node = $1 AND state = 'leased'",
                &[&node],
            )
        })
    }

    pub(crate) fn release_shard(&self, node: &str, key: ShardKey) -> Result<(), DirectoryError> {
        self.read(|db| {
            db.exec(
                "hand back a shard",
                "UPDATE shards SET state = 'open', owner_node = NULL, lease_until_ms = NULL
                 WHERE post_id = $1 AND shard_no = $2 AND owner_node = $3 AND state = 'leased'",
                &[&key.post, &key.shard_no, &node],
            )?;
            Ok(())
        })
    }

    pub(crate) fn set_shard_bad(&self, key: ShardKey, reason: &str) -> Result<(), DirectoryError> {
        let reason: String = reason.chars().take(MAX_ERROR_CHARS).collect();
        self.read(|db| {
            db.exec(
                "set a shard aside",
                "UPDATE shards SET state = 'bad', error = $3, lease_until_ms = NULL
                 WHERE post_id = $1 AND shard_no = $2",
                &[&key.post, &key.shard_no, &reason],
            )?;
            Ok(())
        })
    }

    pub(crate) fn shard_counts(&self) -> Result<ShardCounts, DirectoryError> {
        self.read(|db| {
            let rows = db.all(
                "count shards",
                &format!(
                    "SELECT state, COUNT(*), COALESCE(SUM(reclaimed_count), 0)::BIGINT,
                            COALESCE(MAX({NOW_MS} - leased_at_ms), 0)::BIGINT
                     FROM shards GROUP BY state"
                ),
                &[],
            )?;
            let mut c = ShardCounts::default();
            for r in &rows {
                let state: String = col(r, 0)?;
                let n = unms(col(r, 1)?);
                c.reclaimed += unms(col(r, 2)?);
                match state.as_str() {
                    "open" => c.open = n,
                    "leased" => {
                        c.leased = n;
                        c.oldest_lease_ms = unms(col(r, 3)?);
                    }
                    "done" => c.done = n,
                    _ => c.bad += n,
                }
            }
            Ok(c)
        })
    }

    pub(crate) fn prune_cluster_posts(&self, age_ms: u64) -> Result<u64, DirectoryError> {
        self.read(|db| {
            db.exec(
                "prune finished cluster posts",
                &format!(
                    "DELETE FROM cluster_posts p WHERE accepted_at_ms < {NOW_MS} - $1
                     AND NOT EXISTS (SELECT 1 FROM shards s
                                     WHERE s.post_id = p.post_id AND s.state <> 'done')"
                ),
                &[&ms(age_ms)],
            )
        })
    }
}
