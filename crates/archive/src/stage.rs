//! The archive stage of the running server: the tap of the fan-out consumer
//! (`herald_stage::fan_out`), which gives each list post enqueue hands over to fan-out first
//! and then to the writer, so a post's fan-out never waits for the archive; and the writer, a thread of its own fed by a bounded
//! channel, which stores what has queued up in one transaction (group commit: one fsync for
//! many posts).
//!
//! Backpressure: the channel holds `capacity` posts. Only when the archive is that many posts
//! behind does the hand-over wait (nothing is dropped); a post takes milliseconds to archive
//! and seconds to fan out, so in practice it never does (BENCHMARKS.md).
//!
//! Crash safety: a post is durable in the spool before it reaches here; posts the spool
//! recovers at start are offered again, and the store's (list, Message-ID) key makes the
//! second offer a no-op.
//!
//! SECURITY: posts are untrusted mail; see [`crate::parse`] for the limits applied.

use crate::metrics::WriterStats;
use crate::store::{Archive, NewMessage, Privacy, Stored};
use herald_spool::{PostKind, SpooledPost};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::mpsc;

/// `[archive]`-derived settings of the writer.
#[derive(Debug, Clone)]
pub struct StageConfig {
    pub path: PathBuf,
    pub default_privacy: Privacy,
    /// Posts queued for the writer at most.
    pub capacity: usize,
    /// Posts per transaction at most.
    pub batch_max: usize,
    pub max_message_bytes: usize,
    /// Base of `Archived-At` URLs (`<base>/archive/<list>/msg/<id>`), when the web archive is
    /// served.
    pub public_base_url: Option<String>,
}

/// The sending side, cloned by whoever hands posts over.
#[derive(Clone)]
pub struct ArchiveSender {
    tx: mpsc::Sender<SpooledPost>,
    stats: Arc<WriterStats>,
    /// Counts the writer's batches that stored a new message (IMAP IDLE wakes on it).
    committed: tokio::sync::watch::Receiver<u64>,
}

impl ArchiveSender {
    /// A receiver that changes each time the writer has committed a batch with a new
    /// message: readers (IMAP sessions in IDLE) wake on it and look for new rows. The writer
    /// only replaces a counter, so any number of idle readers never slow it down.
    pub fn committed(&self) -> tokio::sync::watch::Receiver<u64> {
        self.committed.clone()
    }

    /// Queues a post (list posts only; the rest are ignored). Waits only when the writer is
    /// `capacity` posts behind.
    pub async fn archive(&self, post: &SpooledPost) {
        // A digest (a list post for digest members) is made of archived posts: storing
        // it would archive them twice and feed the next digest with the last one.
        if post.meta.kind != PostKind::ListPost || !post.meta.audience.is_regular() {
            return;
        }
        WriterStats::add(&self.stats.queued, 1);
        if self.tx.send(post.clone()).await.is_err() {
            self.stats.queued.fetch_sub(1, Ordering::Relaxed);
            tracing::error!(post = %post.id, "archive writer stopped; post not archived");
        }
    }

    /// The writer's counters (for `/metrics`).
    pub fn stats(&self) -> Arc<WriterStats> {
        self.stats.clone()
    }
}

/// The archive as the fan-out consumer's tap (`herald_stage::fan_out`): each post goes to
/// fan-out first, then here. It waits only when the writer is `capacity` posts behind; when
/// the consumer ends it drops this sender, which lets the writer finish what was queued.
impl herald_stage::Tap for ArchiveSender {
    fn take<'a>(
        &'a self,
        post: &'a SpooledPost,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>> {
        Box::pin(self.archive(post))
    }
}

/// Opens the store and starts the writer thread. The thread ends when every sender is
/// dropped, after storing what was queued; join it to know the archive is flushed.
pub fn spawn(
    cfg: StageConfig,
) -> Result<(ArchiveSender, std::thread::JoinHandle<()>), crate::ArchiveError> {
    let limits = crate::parse::Limits {
        max_message_bytes: cfg.max_message_bytes,
        ..Default::default()
    };
    let archive = Archive::open(&cfg.path)?
        .with_default_privacy(cfg.default_privacy)
        .with_limits(limits);
    let (tx, rx) = mpsc::channel(cfg.capacity.max(1));
    let stats = Arc::new(WriterStats::default());
    let writer_stats = stats.clone();
    let (committed_tx, committed) = tokio::sync::watch::channel(0u64);
    let handle = std::thread::Builder::new()
        .name("archive-writer".into())
        .spawn(move || run(archive, rx, cfg, &writer_stats, committed_tx))
        .map_err(|source| crate::ArchiveError::Io {
            path: PathBuf::from("archive-writer thread"),
            source,
        })?;
    Ok((
        ArchiveSender {
            tx,
            stats,
            committed,
        },
        handle,
    ))
}

/// The writer's nice value: 10 above the server's own.
const WRITER_NICE: i32 = 10;

/// Archiving is background work: nobody waits on it (a post is acknowledged once spooled and
/// goes to fan-out before the archive), while the SMTP sessions, the spool and fan-out have a
/// sender or a member waiting. On a busy machine the writer (FTS5 indexing, deflate: a quarter
/// of the CPU of an intake burst) then takes what they leave and catches up after the burst;
/// its bounded channel still holds back the hand-off, and with it the intake, if it falls
/// behind for good. Linux gives each thread its own nice value (`setpriority` on its id).
fn lower_this_threads_priority() {
    #[cfg(target_os = "linux")]
    {
        let tid = rustix::thread::gettid();
        let nice = rustix::process::getpriority_process(Some(tid)).unwrap_or(0);
        if let Err(e) =
            rustix::process::setpriority_process(Some(tid), (nice + WRITER_NICE).min(19))
        {
            tracing::debug!(error = %e, "archive writer: priority not lowered");
        }
    }
}

fn run(
    mut archive: Archive,
    mut rx: mpsc::Receiver<SpooledPost>,
    cfg: StageConfig,
    stats: &WriterStats,
    committed: tokio::sync::watch::Sender<u64>,
) {
    lower_this_threads_priority();
    while let Some(first) = rx.blocking_recv() {
        let mut posts = vec![first];
        while posts.len() < cfg.batch_max.max(1) {
            match rx.try_recv() {
                Ok(p) => posts.push(p),
                Err(_) => break,
            }
        }
        stats
            .queued
            .fetch_sub(posts.len() as u64, Ordering::Relaxed);
        let oldest_ms = posts.iter().map(|p| p.meta.received_at_ms).min();
        let batch: Vec<NewMessage> = posts
            .iter()
            .filter_map(|p| prepare(&archive, p, &cfg))
            .collect();
        if batch.is_empty() {
            continue;
        }
        match archive.insert_batch(&batch) {
            Ok(results) => {
                let mut added = false;
                for r in results {
                    match r {
                        Stored::Added { .. } => {
                            added = true;
                            WriterStats::add(&stats.added, 1);
                        }
                        Stored::Duplicate { .. } => WriterStats::add(&stats.duplicates, 1),
                        Stored::Refused(why) => {
                            WriterStats::add(&stats.refused, 1);
                            tracing::warn!(reason = %why, "post not archived");
                        }
                    }
                }
                if let Some(oldest) = oldest_ms {
                    let lag = herald_types::unix_ms_now().saturating_sub(oldest);
                    stats.last_lag_ms.store(lag, Ordering::Relaxed);
                }
                if added {
                    committed.send_modify(|n| *n = n.wrapping_add(1));
                }
            }
            // The posts are in the spool's history only; say so loudly, keep serving.
            Err(e) => {
                WriterStats::add(&stats.failed_batches, 1);
                tracing::error!(error = %e, posts = batch.len(), "archive write failed");
            }
        }
    }
}

/// The bytes archived for a post: Herald's `List-Id` and (public archives) `Archived-At`
/// fields, then the post as received. `None` when the list keeps no archive.
fn prepare(archive: &Archive, post: &SpooledPost, cfg: &StageConfig) -> Option<NewMessage> {
    let list = post.meta.list_address.to_string().to_lowercase();
    let privacy = match archive.privacy(&list) {
        Ok(p) => p,
        Err(e) => {
            tracing::error!(error = %e, "archive privacy lookup failed");
            return None;
        }
    };
    if privacy == Privacy::None {
        return None;
    }
    // The label fan-out writes (and the loop guard recognises), lower-cased like the list key.
    let address = &post.meta.list_address;
    let label = herald_types::list_id_label(address.local()).to_lowercase();
    let domain = address.domain().to_lowercase();
    let mut raw = format!("List-Id: <{label}.{domain}>\r\n").into_bytes();
    if let (Privacy::Public, Some(base)) = (privacy, &cfg.public_base_url) {
        if let Some(mid) = post.meta.message_id.as_deref() {
            raw.extend_from_slice(archived_at(base, &list, mid).as_bytes());
        }
    }
    raw.extend_from_slice(&post.body);
    Some(NewMessage {
        list,
        raw,
        received_ms: i64::try_from(post.meta.received_at_ms).unwrap_or(i64::MAX),
    })
}

/// The RFC 5064 field for a message of a public archive.
pub fn archived_at(base: &str, list: &str, message_id: &str) -> String {
    format!("Archived-At: <{}>\r\n", message_url(base, list, message_id))
}

/// The web archive's page of a message: `<base>/archive/<list>/msg/<id>` (what `Archived-At`
/// names, in the archived copy and in every copy fan-out sends).
pub fn message_url(base: &str, list: &str, message_id: &str) -> String {
    format!(
        "{}/archive/{}/msg/{}",
        base.trim_end_matches('/'),
        url_component(&list.to_lowercase()),
        url_component(&crate::parse::clean_id(message_id))
    )
}

/// The web archive's page of a list (`List-Archive` when no other is configured).
pub fn list_url(base: &str, list: &str) -> String {
    format!(
        "{}/archive/{}/",
        base.trim_end_matches('/'),
        url_component(&list.to_lowercase())
    )
}

/// Percent-encodes everything but RFC 3986 unreserved characters and `@`, so a Message-ID
/// with `/`, `..` or `%` is one path segment.
pub fn url_component(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~@".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_spool::PostMeta;
    use herald_types::{Address, ListId, MemberId, PostId};

    fn post(id: u64, list: &str, kind: PostKind, mid: &str) -> SpooledPost {
        SpooledPost {
            id: PostId(id),
            meta: PostMeta {
                kind,
                list_id: ListId(1),
                list_address: Address::parse(list).unwrap(),
                envelope_from: None,
                received_at_ms: 1_795_000_000_000,
                max_member_id: MemberId(0),
                message_id: Some(format!("<{mid}>")),
                recipients: Vec::new(),
                hold_reason: None,
                null_sender: false,
                audience: Default::default(),
                dsn: None,
                member_range: None,
            },
            body: bytes::Bytes::from(format!(
                "From: a@x\r\nSubject: s\r\nMessage-ID: <{mid}>\r\n\r\nbody\r\n"
            )),
        }
    }

    /// A post offered again (the spool's recovery after a crash, or a re-delivery) is stored
    /// once; held posts and lists with privacy `none` are not stored; everything queued is
    /// stored before the writer's thread ends.
    #[tokio::test]
    async fn recovered_posts_are_archived_once_and_privacy_none_keeps_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("archive.db");
        Archive::open(&path)
            .unwrap()
            .set_privacy("quiet@l.test", Privacy::None)
            .unwrap();
        Archive::open(&path)
            .unwrap()
            .set_privacy("pub@l.test", Privacy::Public)
            .unwrap();
        let (tx, writer) = spawn(StageConfig {
            path: path.clone(),
            default_privacy: Privacy::Private,
            capacity: 2,
            batch_max: 8,
            max_message_bytes: 1 << 20,
            public_base_url: Some("https://l.test/".into()),
        })
        .unwrap();
        let mut committed = tx.committed();
        let p = post(1, "dev@l.test", PostKind::ListPost, "a@x");
        for post in [
            p.clone(),
            p.clone(),
            post(2, "dev@l.test", PostKind::Held, "held@x"),
            post(3, "quiet@l.test", PostKind::ListPost, "q@x"),
            post(4, "pub@l.test", PostKind::ListPost, "p/1@x"),
            p,
        ] {
            tx.archive(&post).await;
        }
        drop(tx);
        // Readers waiting for new messages (IMAP IDLE) were told.
        tokio::time::timeout(std::time::Duration::from_secs(10), committed.changed())
            .await
            .expect("the writer announces what it stored")
            .unwrap();
        tokio::task::spawn_blocking(move || writer.join().unwrap())
            .await
            .unwrap();
        let a = Archive::open(&path).unwrap();
        let totals = a.lists().unwrap();
        let count = |l: &str| totals.iter().find(|t| t.list == l).map(|t| t.messages);
        assert_eq!(count("dev@l.test"), Some(1));
        assert_eq!(count("quiet@l.test"), Some(0));
        assert!(a.message("dev@l.test", "held@x").unwrap().is_none());
        let stored = a.message("dev@l.test", "a@x").unwrap().unwrap().raw;
        assert!(stored.starts_with(b"List-Id: <dev.l.test>\r\nFrom: a@x\r\n"));
        let public = a.message("pub@l.test", "p/1@x").unwrap().unwrap().raw;
        let text = String::from_utf8(public).unwrap();
        assert!(
            text.contains("Archived-At: <https://l.test/archive/pub@l.test/msg/p%2F1@x>\r\n"),
            "{text}"
        );
    }
}
