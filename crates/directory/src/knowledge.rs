//! Shared knowledge between the nodes of a cluster: what one node learns about
//! the outside world that the others should know too, so three nodes do not push a throttling
//! provider three times as hard, nor each discover a dead host for themselves. The
//! `herald-knowledge` crate drives it (one exchange per node per interval); this file holds the
//! values and the API, `pg/knowledge.rs` the SQL.
//!
//! - `provider_budgets`: per provider (the scheduler's shaping budget name) the cluster-wide
//!   rate in copies per second as last lowered, when and by which node;
//! - `provider_senders`: which nodes sent to which provider lately, each with its pace (their
//!   heartbeat in the node registry says whether they are alive): a provider's rate is divided
//!   among them, and the sum of their paces is the cluster's rate now;
//! - `down_hosts`: hosts (MX name + address) a node marked down, until when;
//! - `cluster_dedup`: the Message-IDs list posts carried, per list, at any node. Enqueue
//!   claims a Message-ID before it spools a list post ([`Directory::dedup_claim`]: the unique
//!   key lets one node win when several take the same post at once) and records the spooled
//!   post's id in the claim before it answers `250` ([`Directory::dedup_record`]).
//!
//! PostgreSQL only: a SQLite directory is one node's, so there is nothing to share; every call
//! on it is refused with [`DirectoryError::InvalidInput`] naming `store`.
//!
//! Times are the store's clock (as the node registry's): a down host's time left is written
//! and read as a duration from the store's now, so nodes whose clocks differ agree.
//!
//! SECURITY: rows are written by other Herald nodes of the same cluster, or by hand. Values are
//! returned as stored (a rate may be zero, negative, NaN or absurd; an address may not parse):
//! the caller judges them. Text going in is bounded here; every value is a bound parameter;
//! reads are bounded ([`MAX_KNOWLEDGE_ROWS`]).

use crate::error::DirectoryError;
use crate::{Backend, Directory};
use herald_types::ListId;

/// Most rows of each kind written or read in one exchange.
pub const MAX_KNOWLEDGE_ROWS: usize = 1000;
/// Longest provider name, host name or reason stored.
pub const MAX_KNOWLEDGE_TEXT: usize = 255;

/// A provider this node sends to now.
#[derive(Debug, Clone, PartialEq)]
pub struct Sending {
    pub provider: String,
    /// Its pace for the provider, copies per second (`None` while unpaced).
    pub rate_per_sec: Option<f64>,
    /// Copies per second the provider accepted from it lately.
    pub accepted_per_sec: f64,
}

/// A provider whose cluster-wide rate this node lowered (a rate refusal cut its pace).
#[derive(Debug, Clone, PartialEq)]
pub struct LoweredRate {
    pub provider: String,
    /// The fraction of what the provider's alive senders accepted lately (their
    /// `accepted_per_sec`, summed by the store, this node's just-written row included) that
    /// the provider takes now: the cluster's new rate.
    pub fraction: f64,
    /// This node's new pace: the rate stored when the senders' sum says less (nothing
    /// accepted lately).
    pub node_rate_per_sec: f64,
}

/// A host this node marked down.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DownHost {
    pub mx_host: String,
    /// The address as text (what the store keeps; the reader parses it).
    pub address: String,
    /// How long it stays down from now.
    pub remaining_ms: u64,
    pub reason: String,
    /// The node that marked it (filled in on reads; ignored on writes: the writer is `node`).
    pub marked_by: String,
}

/// What one node tells the cluster in one exchange.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KnowledgeOut {
    pub node: String,
    /// The providers it sends to now.
    pub sending: Vec<Sending>,
    pub lowered: Vec<LoweredRate>,
    pub down: Vec<DownHost>,
    /// Delete rows that no longer mean anything (down hosts long up again, senders long gone).
    pub prune: bool,
}

/// A provider as the cluster knows it.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderRow {
    pub provider: String,
    /// The stored rate (as stored: the caller judges it), if any node lowered it.
    pub rate_per_sec: Option<f64>,
    /// When it was lowered, store clock, Unix ms.
    pub lowered_at_ms: u64,
    pub lowered_by: Option<String>,
    /// Alive nodes that sent to it within the window (this node included when it does).
    pub senders: u32,
    /// The sum of their paces (as stored: the caller judges it); `None` while none is paced.
    pub paced_total: Option<f64>,
}

/// What the cluster tells one node in one exchange.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KnowledgeIn {
    /// The store's clock, Unix ms.
    pub now_ms: u64,
    /// The providers the node asked about, in its order.
    pub providers: Vec<ProviderRow>,
    /// Hosts other nodes marked down that are still down.
    pub down: Vec<DownHost>,
    /// Statements this exchange ran (for the write-rate measurement).
    pub statements: u32,
}

/// The windows of one exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnowledgeWindows {
    /// A node counts as a provider's sender while it said so within this long.
    pub sender_ms: u64,
    /// A node is alive while its heartbeat is at most this old (the registry's dead window).
    pub dead_after_ms: u64,
}

fn pg_only() -> DirectoryError {
    DirectoryError::InvalidInput {
        field: "store",
        reason: "shared knowledge needs a PostgreSQL store ([store] url)".into(),
    }
}

/// Cuts `s` to [`MAX_KNOWLEDGE_TEXT`] characters.
pub(crate) fn bounded(s: &str) -> String {
    s.chars().take(MAX_KNOWLEDGE_TEXT).collect()
}

/// A list post another node (or this one) accepted with a Message-ID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenPost {
    pub node: String,
    /// Its spool id at that node.
    pub post: u64,
}

/// `cluster_dedup.origin_post` of a claim whose post is not spooled yet.
pub(crate) const PENDING_POST: i64 = -1;

/// What claiming a Message-ID for a list found ([`Directory::dedup_claim`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DedupClaim {
    /// The claim is this node's: spool the post, then [`Directory::dedup_record`] its id (or
    /// [`Directory::dedup_release`] the claim if it cannot be spooled).
    Claimed,
    /// A post within the window carried it already: a retry, acknowledged with that post.
    Seen(SeenPost),
    /// `node` claimed it and is spooling it right now (its id is not recorded yet).
    Pending { node: String },
}

impl Directory {
    /// Claims `message_id` on `list` for `node`, atomically across the cluster: of several
    /// nodes claiming at once exactly one gets [`DedupClaim::Claimed`]. A record older than
    /// `window_ms`, or a claim left unrecorded for `abandoned_ms` (its node died before it
    /// spooled the post, so no `250` went out for it), is taken over.
    pub fn dedup_claim(
        &self,
        list: ListId,
        message_id: &str,
        node: &str,
        window_ms: u64,
        abandoned_ms: u64,
    ) -> Result<DedupClaim, DirectoryError> {
        match self.backend() {
            Backend::Postgres(pg) => {
                pg.dedup_claim(list, message_id, node, window_ms, abandoned_ms)
            }
            Backend::Sqlite(_) => Err(pg_only()),
        }
    }

    /// Drops `node`'s unrecorded claim of `message_id` on `list` (the post was not spooled).
    pub fn dedup_release(
        &self,
        list: ListId,
        message_id: &str,
        node: &str,
    ) -> Result<(), DirectoryError> {
        match self.backend() {
            Backend::Postgres(pg) => pg.dedup_release(list, message_id, node),
            Backend::Sqlite(_) => Err(pg_only()),
        }
    }

    /// The post that carried `message_id` to `list` at any node within the last `window_ms`
    /// (store clock), if any (cluster-wide duplicate suppression).
    pub fn dedup_seen(
        &self,
        list: ListId,
        message_id: &str,
        window_ms: u64,
    ) -> Result<Option<SeenPost>, DirectoryError> {
        match self.backend() {
            Backend::Postgres(pg) => pg.dedup_seen(list, message_id, window_ms),
            Backend::Sqlite(_) => Err(pg_only()),
        }
    }

    /// Records that `node` accepted `message_id` for `list` as its post `post`: fills in the
    /// node's own claim; an older record of the same Message-ID (beyond `window_ms`) is
    /// replaced, a newer one kept (the first post within the window stays the one retries are
    /// acknowledged with).
    pub fn dedup_record(
        &self,
        list: ListId,
        message_id: &str,
        seen: &SeenPost,
        window_ms: u64,
    ) -> Result<(), DirectoryError> {
        match self.backend() {
            Backend::Postgres(pg) => pg.dedup_record(list, message_id, seen, window_ms),
            Backend::Sqlite(_) => Err(pg_only()),
        }
    }

    /// One exchange: writes what `out` says (the providers the node sends
    /// to, the rates it lowered, the hosts it marked down), then reads, for the providers it
    /// sends to, the cluster-wide rate and the number of alive senders, and the hosts other
    /// nodes marked down. One transaction, outside the directory's write lock.
    pub fn exchange_knowledge(
        &self,
        out: &KnowledgeOut,
        windows: KnowledgeWindows,
    ) -> Result<KnowledgeIn, DirectoryError> {
        match self.backend() {
            Backend::Postgres(pg) => pg.exchange_knowledge(out, windows),
            Backend::Sqlite(_) => Err(pg_only()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn windows() -> KnowledgeWindows {
        KnowledgeWindows {
            sender_ms: 10_000,
            dead_after_ms: 10_000,
        }
    }

    fn sending(p: &str, rate: Option<f64>, accepted: f64) -> Sending {
        Sending {
            provider: p.into(),
            rate_per_sec: rate,
            accepted_per_sec: accepted,
        }
    }

    fn node(d: &Directory, id: &str) {
        d.node_join(&crate::NewNode {
            node_id: id.into(),
            address: "127.0.0.2:1".into(),
            version: "0".into(),
            schema_version: crate::SCHEMA_VERSION,
        })
        .expect("join");
    }

    /// Two nodes on one store: both sending to a provider are its two senders; a rate one
    /// lowers is what the other reads; a host one marks down is read by the other (with its
    /// time left), not by itself; a node that left stops counting.
    #[test]
    fn nodes_share_rates_senders_and_down_hosts() {
        let url = herald_pg_harness::PgServer::shared()
            .fresh_database()
            .expect("database");
        let d = Directory::open_postgres(&url, 2).expect("open");
        node(&d, "a");
        node(&d, "b");
        let a = KnowledgeOut {
            node: "a".into(),
            sending: vec![sending("provider.test", Some(42.5), 50.0)],
            lowered: vec![LoweredRate {
                provider: "provider.test".into(),
                fraction: 0.9,
                node_rate_per_sec: 42.5,
            }],
            down: vec![DownHost {
                mx_host: "mx1.provider.test".into(),
                address: "127.1.20.1".into(),
                remaining_ms: 60_000,
                reason: "connection refused".into(),
                marked_by: String::new(),
            }],
            prune: true,
        };
        let got = d.exchange_knowledge(&a, windows()).expect("a");
        assert_eq!(got.providers.len(), 1);
        assert_eq!(got.providers[0].senders, 1);
        assert!(got.down.is_empty(), "a's own down host is not news to a");
        let b = KnowledgeOut {
            node: "b".into(),
            sending: vec![
                sending("provider.test", Some(20.0), 10.0),
                sending("other.test", None, 0.0),
            ],
            ..Default::default()
        };
        let got = d.exchange_knowledge(&b, windows()).expect("b");
        let p = &got.providers[0];
        assert_eq!(p.provider, "provider.test");
        assert_eq!(p.rate_per_sec, Some(45.0), "0.9 of the 50 accepted");
        assert_eq!(p.lowered_by.as_deref(), Some("a"));
        assert_eq!((p.senders, p.paced_total), (2, Some(62.5)));
        assert!(p.lowered_at_ms > 0 && p.lowered_at_ms <= got.now_ms);
        let o = &got.providers[1];
        assert_eq!((o.rate_per_sec, o.senders, o.paced_total), (None, 1, None));
        assert_eq!(got.down.len(), 1);
        let h = &got.down[0];
        assert_eq!(
            (h.mx_host.as_str(), h.address.as_str(), h.marked_by.as_str()),
            ("mx1.provider.test", "127.1.20.1", "a")
        );
        assert!((50_000..=60_000).contains(&h.remaining_ms), "{h:?}");
        // Lowered again by b, with a (50 accepted) and b (30) sending: 0.7 of 80.
        let lower = KnowledgeOut {
            node: "b".into(),
            sending: vec![sending("provider.test", Some(30.0), 30.0)],
            lowered: vec![LoweredRate {
                provider: "provider.test".into(),
                fraction: 0.7,
                node_rate_per_sec: 1.0,
            }],
            ..Default::default()
        };
        d.exchange_knowledge(&lower, windows()).expect("lower");
        d.node_leave("a").expect("leave");
        let got = d.exchange_knowledge(&b, windows()).expect("b again");
        let r = got.providers[0].rate_per_sec.expect("rate");
        assert!((r - 56.0).abs() < 1e-9, "{r}");
        assert_eq!(got.providers[0].senders, 1, "a left: b alone");
        assert!(got.statements >= 3, "{}", got.statements);
    }

    /// A Message-ID recorded by one node is seen by another within the window, not after;
    /// the first post within the window stays the recorded one.
    #[test]
    fn message_ids_are_seen_across_nodes_within_the_window() {
        let url = herald_pg_harness::PgServer::shared()
            .fresh_database()
            .expect("database");
        let d = Directory::open_postgres(&url, 2).expect("open");
        let list = ListId(7);
        let a = SeenPost {
            node: "a".into(),
            post: 41,
        };
        assert_eq!(d.dedup_seen(list, "<x@y>", 60_000).expect("seen"), None);
        d.dedup_record(list, "<x@y>", &a, 60_000).expect("record");
        let b = SeenPost {
            node: "b".into(),
            post: 9,
        };
        d.dedup_record(list, "<x@y>", &b, 60_000).expect("record b");
        assert_eq!(d.dedup_seen(list, "<x@y>", 60_000).expect("seen"), Some(a));
        assert_eq!(
            d.dedup_seen(ListId(8), "<x@y>", 60_000).expect("seen"),
            None
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(
            d.dedup_seen(list, "<x@y>", 10).expect("seen"),
            None,
            "window"
        );
        d.dedup_record(list, "<x@y>", &b, 10).expect("replace old");
        assert_eq!(d.dedup_seen(list, "<x@y>", 60_000).expect("seen"), Some(b));
        let long = "<".to_string() + &"x".repeat(5000) + ">";
        d.dedup_record(
            list,
            &long,
            &SeenPost {
                node: "a".into(),
                post: 1,
            },
            60_000,
        )
        .expect("a hostile Message-ID is bounded");
    }

    /// Nodes claiming one Message-ID at the same instant: exactly one wins each round, the
    /// others find its claim pending, then its post once recorded; a claim left unrecorded
    /// (its node died before spooling) is taken over after `abandoned_ms`, a released one at
    /// once.
    #[test]
    fn one_node_wins_a_message_id_claimed_at_once() {
        let url = herald_pg_harness::PgServer::shared()
            .fresh_database()
            .expect("database");
        let d = Directory::open_postgres(&url, 8).expect("open");
        let list = ListId(3);
        for round in 0..20 {
            let mid = format!("<r{round}@x>");
            let barrier = std::sync::Arc::new(std::sync::Barrier::new(3));
            let claims: Vec<DedupClaim> = std::thread::scope(|s| {
                let handles: Vec<_> = ["a", "b", "c"]
                    .into_iter()
                    .map(|node| {
                        let (d, mid, barrier) = (d.clone(), mid.clone(), barrier.clone());
                        s.spawn(move || {
                            barrier.wait();
                            d.dedup_claim(list, &mid, node, 60_000, 60_000)
                                .expect("claim")
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().expect("thread"))
                    .collect()
            });
            let won = claims.iter().filter(|c| **c == DedupClaim::Claimed).count();
            assert_eq!(won, 1, "round {round}: {claims:?}");
        }
        let seen = SeenPost {
            node: "a".into(),
            post: 5,
        };
        assert_eq!(
            d.dedup_claim(list, "<p@x>", "a", 60_000, 60_000)
                .expect("claim"),
            DedupClaim::Claimed
        );
        assert_eq!(
            d.dedup_claim(list, "<p@x>", "b", 60_000, 60_000)
                .expect("claim"),
            DedupClaim::Pending { node: "a".into() }
        );
        assert_eq!(d.dedup_seen(list, "<p@x>", 60_000).expect("seen"), None);
        d.dedup_record(list, "<p@x>", &seen, 60_000)
            .expect("record");
        assert_eq!(
            d.dedup_claim(list, "<p@x>", "b", 60_000, 60_000)
                .expect("claim"),
            DedupClaim::Seen(seen)
        );
        d.dedup_claim(list, "<q@x>", "a", 60_000, 60_000)
            .expect("claim");
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(
            d.dedup_claim(list, "<q@x>", "b", 60_000, 10)
                .expect("claim"),
            DedupClaim::Claimed,
            "an abandoned claim is taken over"
        );
        d.dedup_release(list, "<q@x>", "b").expect("release");
        assert_eq!(
            d.dedup_claim(list, "<q@x>", "c", 60_000, 60_000)
                .expect("claim"),
            DedupClaim::Claimed,
            "a released claim is free"
        );
    }

    #[test]
    fn sqlite_refuses_shared_knowledge() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let d = Directory::open(&tmp.path().join("d.db")).expect("open");
        match d.exchange_knowledge(&KnowledgeOut::default(), windows()) {
            Err(DirectoryError::InvalidInput { field, .. }) => assert_eq!(field, "store"),
            other => panic!("sqlite shared knowledge: {other:?}"),
        }
    }
}
