//! Shared knowledge's SQL (values and API in `crate::knowledge`). One
//! transaction per exchange, outside the directory's write lock (nothing here is a
//! check-then-insert of the directory, and an exchange must not queue behind an import).
//!
//! Statements per exchange: one upsert of the providers the node sends to with its pace and
//! what each accepted lately (all of them in one `unnest`), one upsert of the rates it lowered and one of the hosts it marked down (each only
//! when there are any), one read of its providers with their alive senders, one read of the
//! down hosts, one read of the store's clock, and now and then three pruning deletes.
//! Cluster-wide dedup is per post, not per exchange: one claim before a list post is spooled
//! (an insert that only one node's statement can win, the unique key deciding) and one update
//! after it is spooled that fills in the post's id, each an autocommit statement. The measured rate is in BENCHMARKS.md.

use super::{col, ms, unms, PgStore};
use crate::error::DirectoryError;
use crate::knowledge::{
    bounded, DedupClaim, DownHost, KnowledgeIn, KnowledgeOut, KnowledgeWindows, ProviderRow,
    SeenPost, MAX_KNOWLEDGE_ROWS, PENDING_POST,
};

/// The server's clock in Unix milliseconds.
const NOW_MS: &str = "(extract(epoch FROM clock_timestamp()) * 1000)::BIGINT";

/// Longest Message-ID stored (RFC 5322 lines are at most 998 octets; enqueue cuts there too).
const MAX_MESSAGE_ID_CHARS: usize = 998;

/// Message-IDs are kept this long at most (a dedup window beyond it is cut to it).
const KEEP_DEDUP_MS: i64 = 7 * 24 * 3_600_000;

/// Down-host rows are kept this long after they came up again, sender rows this long after
/// their node last said so (then pruned).
const KEEP_MS: i64 = 3_600_000;

impl PgStore {
    pub(crate) fn exchange_knowledge(
        &self,
        out: &KnowledgeOut,
        w: KnowledgeWindows,
    ) -> Result<KnowledgeIn, DirectoryError> {
        let node = bounded(&out.node);
        let mut sending = Vec::new();
        let mut paces = Vec::new();
        let mut accepted = Vec::new();
        for s in out.sending.iter().take(MAX_KNOWLEDGE_ROWS) {
            sending.push(bounded(&s.provider));
            paces.push(s.rate_per_sec);
            accepted.push(s.accepted_per_sec);
        }
        self.unlocked_write(|db| {
            let mut statements = 0u32;
            if !sending.is_empty() {
                statements += 1;
                db.exec(
                    "record the providers a node sends to",
                    &format!(
                        "INSERT INTO provider_senders (provider, node_id, seen_at_ms, rate_per_sec,
                                                       accepted_per_sec)
                         SELECT p, $1, {NOW_MS}, r, a
                         FROM unnest($2::TEXT[], $3::FLOAT8[], $4::FLOAT8[]) AS u(p, r, a)
                         ON CONFLICT (provider, node_id) DO UPDATE SET
                            seen_at_ms = excluded.seen_at_ms, rate_per_sec = excluded.rate_per_sec,
                            accepted_per_sec = excluded.accepted_per_sec"
                    ),
                    &[&node, &sending, &paces, &accepted],
                )?;
            }
            if !out.lowered.is_empty() {
                statements += 1;
                let mut names = Vec::new();
                let mut fractions = Vec::new();
                let mut rates = Vec::new();
                for l in out.lowered.iter().take(MAX_KNOWLEDGE_ROWS) {
                    names.push(bounded(&l.provider));
                    fractions.push(l.fraction);
                    rates.push(l.node_rate_per_sec);
                }
                // The cluster's rate: the fraction of what the alive senders accepted lately.
                db.exec(
                    "record lowered provider rates",
                    &format!(
                        "INSERT INTO provider_budgets (provider, rate_per_sec, lowered_at_ms, lowered_by)
                         SELECT p, GREATEST(r, f * (SELECT COALESCE(SUM(s.accepted_per_sec), 0)
                                FROM provider_senders s JOIN nodes n ON n.node_id = s.node_id
                                WHERE s.provider = u.p AND s.seen_at_ms >= {NOW_MS} - $5::BIGINT
                                  AND n.state = 'running'
                                  AND n.heartbeat_at_ms >= {NOW_MS} - $6::BIGINT)),
                                {NOW_MS}, $1
                         FROM unnest($2::TEXT[], $3::FLOAT8[], $4::FLOAT8[]) AS u(p, f, r)
                         ON CONFLICT (provider) DO UPDATE SET rate_per_sec = excluded.rate_per_sec,
                            lowered_at_ms = excluded.lowered_at_ms, lowered_by = excluded.lowered_by"
                    ),
                    &[&node, &names, &fractions, &rates, &ms(w.sender_ms), &ms(w.dead_after_ms)],
                )?;
            }
            if !out.down.is_empty() {
                statements += 1;
                let down = out.down.iter().take(MAX_KNOWLEDGE_ROWS);
                let mut hosts = Vec::new();
                let mut addrs = Vec::new();
                let mut left = Vec::new();
                let mut reasons = Vec::new();
                for h in down {
                    hosts.push(bounded(&h.mx_host));
                    addrs.push(bounded(&h.address));
                    left.push(ms(h.remaining_ms));
                    reasons.push(bounded(&h.reason));
                }
                db.exec(
                    "record down hosts",
                    &format!(
                        "INSERT INTO down_hosts (mx_host, address, down_until_ms, reason, marked_by)
                         SELECT h, a, {NOW_MS} + l, r, $1
                         FROM unnest($2::TEXT[], $3::TEXT[], $4::BIGINT[], $5::TEXT[]) AS u(h, a, l, r)
                         ON CONFLICT (mx_host, address) DO UPDATE SET
                            down_until_ms = excluded.down_until_ms, reason = excluded.reason,
                            marked_by = excluded.marked_by"
                    ),
                    &[&node, &hosts, &addrs, &left, &reasons],
                )?;
            }
            if out.prune {
                statements += 3;
                db.exec(
                    "prune Message-IDs",
                    &format!("DELETE FROM cluster_dedup WHERE at_ms < {NOW_MS} - $1"),
                    &[&KEEP_DEDUP_MS],
                )?;
                db.exec(
                    "prune down hosts",
                    &format!("DELETE FROM down_hosts WHERE down_until_ms < {NOW_MS} - $1"),
                    &[&KEEP_MS],
                )?;
                db.exec(
                    "prune provider senders",
                    &format!("DELETE FROM provider_senders WHERE seen_at_ms < {NOW_MS} - $1"),
                    &[&KEEP_MS],
                )?;
            }
            statements += 1;
            let now = db.one("read the store clock", &format!("SELECT {NOW_MS}"), &[])?;
            let now_ms: i64 = col(&now, 0)?;
            statements += 1;
            let rows = db.all(
                "read provider budgets",
                "SELECT u.p, b.rate_per_sec, b.lowered_at_ms, b.lowered_by, a.n, a.total
                 FROM unnest($1::TEXT[]) WITH ORDINALITY AS u(p, i)
                 LEFT JOIN provider_budgets b ON b.provider = u.p
                 CROSS JOIN LATERAL (
                    SELECT COUNT(*) AS n, SUM(s.rate_per_sec) AS total
                    FROM provider_senders s JOIN nodes n ON n.node_id = s.node_id
                    WHERE s.provider = u.p AND s.seen_at_ms >= $2::BIGINT - $3::BIGINT
                      AND n.state = 'running' AND n.heartbeat_at_ms >= $2::BIGINT - $4::BIGINT
                 ) AS a
                 ORDER BY u.i",
                &[&sending, &now_ms, &ms(w.sender_ms), &ms(w.dead_after_ms)],
            )?;
            let mut providers = Vec::with_capacity(rows.len());
            for r in &rows {
                providers.push(ProviderRow {
                    provider: col(r, 0)?,
                    rate_per_sec: col(r, 1)?,
                    lowered_at_ms: col::<Option<i64>>(r, 2)?.map_or(0, unms),
                    lowered_by: col(r, 3)?,
                    senders: u32::try_from(col::<i64>(r, 4)?).unwrap_or(u32::MAX),
                    paced_total: col(r, 5)?,
                });
            }
            statements += 1;
            let limit = MAX_KNOWLEDGE_ROWS as i64;
            let rows = db.all(
                "read down hosts",
                "SELECT mx_host, address, down_until_ms - $2::BIGINT, reason, marked_by FROM down_hosts
                 WHERE down_until_ms > $2 AND marked_by <> $1
                 ORDER BY down_until_ms DESC LIMIT $3",
                &[&node, &now_ms, &limit],
            )?;
            let mut down = Vec::with_capacity(rows.len());
            for r in &rows {
                down.push(DownHost {
                    mx_host: col(r, 0)?,
                    address: col(r, 1)?,
                    remaining_ms: unms(col(r, 2)?),
                    reason: col(r, 3)?,
                    marked_by: col(r, 4)?,
                });
            }
            Ok(KnowledgeIn {
                now_ms: unms(now_ms),
                providers,
                down,
                statements,
            })
        })
    }

    pub(crate) fn dedup_seen(
        &self,
        list: herald_types::ListId,
        message_id: &str,
        window_ms: u64,
    ) -> Result<Option<SeenPost>, DirectoryError> {
        let id: String = message_id.chars().take(MAX_MESSAGE_ID_CHARS).collect();
        self.read(|db| {
            let row = db.opt(
                "look up a Message-ID",
                &format!(
                    "SELECT origin_node, origin_post FROM cluster_dedup
                     WHERE list_id = $1 AND message_id = $2 AND at_ms >= {NOW_MS} - $3::BIGINT
                       AND origin_post <> {PENDING_POST}"
                ),
                &[&list.0, &id, &ms(window_ms)],
            )?;
            row.map(|r| {
                Ok(SeenPost {
                    node: col(&r, 0)?,
                    post: unms(col(&r, 1)?),
                })
            })
            .transpose()
        })
    }

    pub(crate) fn dedup_record(
        &self,
        list: herald_types::ListId,
        message_id: &str,
        seen: &SeenPost,
        window_ms: u64,
    ) -> Result<(), DirectoryError> {
        let id: String = message_id.chars().take(MAX_MESSAGE_ID_CHARS).collect();
        let node = bounded(&seen.node);
        self.read(|db| {
            db.exec(
                "record a Message-ID",
                &format!(
                    "INSERT INTO cluster_dedup (list_id, message_id, origin_node, origin_post, at_ms)
                     VALUES ($1, $2, $3, $4, {NOW_MS})
                     ON CONFLICT (list_id, message_id) DO UPDATE SET
                        origin_node = excluded.origin_node, origin_post = excluded.origin_post,
                        at_ms = excluded.at_ms
                     WHERE cluster_dedup.at_ms < {NOW_MS} - $5::BIGINT
                        OR (cluster_dedup.origin_post = {PENDING_POST}
                            AND cluster_dedup.origin_node = excluded.origin_node)"
                ),
                &[&list.0, &id, &node, &ms(seen.post), &ms(window_ms)],
            )?;
            Ok(())
        })
    }

    pub(crate) fn dedup_claim(
        &self,
        list: herald_types::ListId,
        message_id: &str,
        node: &str,
        window_ms: u64,
        abandoned_ms: u64,
    ) -> Result<DedupClaim, DirectoryError> {
        let id: String = message_id.chars().take(MAX_MESSAGE_ID_CHARS).collect();
        let node = bounded(node);
        self.read(|db| {
            // One statement: of nodes inserting the same key at once, PostgreSQL lets one
            // insert; the others wait for its commit and then find the row (the unique key).
            let won = db.opt(
                "claim a Message-ID",
                &format!(
                    "INSERT INTO cluster_dedup (list_id, message_id, origin_node, origin_post, at_ms)
                     VALUES ($1, $2, $3, {PENDING_POST}, {NOW_MS})
                     ON CONFLICT (list_id, message_id) DO UPDATE SET
                        origin_node = excluded.origin_node, origin_post = {PENDING_POST},
                        at_ms = excluded.at_ms
                     WHERE cluster_dedup.at_ms < {NOW_MS} - $4::BIGINT
                        OR (cluster_dedup.origin_post = {PENDING_POST}
                            AND cluster_dedup.at_ms < {NOW_MS} - $5::BIGINT)
                     RETURNING origin_node"
                ),
                &[&list.0, &id, &node, &ms(window_ms), &ms(abandoned_ms)],
            )?;
            if won.is_some() {
                return Ok(DedupClaim::Claimed);
            }
            // A statement of its own: its snapshot sees the row the insert waited for.
            let row = db.opt(
                "read a claimed Message-ID",
                "SELECT origin_node, origin_post FROM cluster_dedup
                 WHERE list_id = $1 AND message_id = $2",
                &[&list.0, &id],
            )?;
            let Some(r) = row else {
                // Pruned between the two statements: the caller asks again.
                return Ok(DedupClaim::Pending { node: String::new() });
            };
            let (node, post): (String, i64) = (col(&r, 0)?, col(&r, 1)?);
            Ok(if post == PENDING_POST {
                DedupClaim::Pending { node }
            } else {
                DedupClaim::Seen(SeenPost {
                    node,
                    post: unms(post),
                })
            })
        })
    }

    pub(crate) fn dedup_release(
        &self,
        list: herald_types::ListId,
        message_id: &str,
        node: &str,
    ) -> Result<(), DirectoryError> {
        let id: String = message_id.chars().take(MAX_MESSAGE_ID_CHARS).collect();
        let node = bounded(node);
        self.read(|db| {
            db.exec(
                "release a Message-ID claim",
                &format!(
                    "DELETE FROM cluster_dedup WHERE list_id = $1 AND message_id = $2
                       AND origin_node = $3 AND origin_post = {PENDING_POST}"
                ),
                &[&list.0, &id, &node],
            )?;
            Ok(())
        })
    }
}
