//! The digest stage: every `check_interval_secs` it looks at each list with
//! digest members, and when what the archive gathered since the last digest passes the list's
//! `digest_size_threshold_kb`, or its `digest_schedule` (daily, weekly) is due, builds the next
//! numbered digest from the archive and enqueues it as a list post for the members of each digest
//! mode (`Submission::Digest`): the normal fan-out personalizes it (footer, VERP, unsubscribe
//! headers) like any copy. `send_now` (CLI, API) does the same at once.
//!
//! Never twice: see `state` (two-phase ledger; unfinished digests settled by [`Digests::recover`]
//! against the posts the spool recovered).
//!
//! Limits: at most `max_posts` posts per digest (the rest go into the next one, at the next
//! check); the archive and the ledger are read on the blocking pool; one digest is built at a
//! time (a `send_now` racing the timer waits, then finds nothing new or the next issue).
//!
//! SECURITY: reads archived posts (hostile content, handled by `build`); everything it writes is
//! ours. `send_now` is an admin route (the API's token guard).

use crate::build::{self, DigestWords, Format, Masthead};
use crate::state::{Ledger, ListState, Taken};
use crate::DigestError;
use herald_archive::Archive;
use herald_directory::Directory;
use herald_enqueue::{Enqueuer, Submission};
use herald_types::{Address, DeliveryMode, DigestSchedule, DigestVolumeFrequency, List};
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// `[digest]` in herald.toml.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DigestConfig {
    /// Run the digest stage (it also needs `[archive] enabled`: digests are built from it).
    pub enabled: bool,
    /// How often lists are checked for a due digest.
    pub check_interval_secs: u64,
    /// Most posts in one digest.
    pub max_posts: usize,
}

impl Default for DigestConfig {
    fn default() -> Self {
        DigestConfig {
            enabled: true,
            check_interval_secs: 60,
            max_posts: 1000,
        }
    }
}

/// What a digest check did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentDigest {
    pub volume: u32,
    pub issue: u32,
    pub posts: u64,
    /// `mime`, `plain`: the formats sent (those with members).
    pub formats: Vec<&'static str>,
}

/// The stage. Shared (`Arc`) by its timer task and the API.
pub struct Digests {
    directory: Directory,
    enqueuer: Arc<Enqueuer>,
    // std Mutexes: held only inside blocking tasks, never across an `.await`.
    archive: Arc<Mutex<Archive>>,
    ledger: Arc<Mutex<Ledger>>,
    /// One digest built at a time (timer and `send_now`).
    sending: tokio::sync::Mutex<()>,
    cfg: DigestConfig,
    hostname: String,
    /// Digests sent per list since start (`herald_digests_sent_total{list}`).
    sent: Mutex<BTreeMap<String, u64>>,
}

const DAY_MS: i64 = 24 * 3600 * 1000;
/// Archive rows read per query when collecting a digest's posts.
const PAGE: usize = 200;

impl Digests {
    /// Opens the ledger (`ledger_path`) and a read connection to the archive.
    pub fn open(
        directory: Directory,
        enqueuer: Arc<Enqueuer>,
        archive_path: &std::path::Path,
        ledger_path: &std::path::Path,
        cfg: DigestConfig,
        hostname: String,
    ) -> Result<Arc<Digests>, DigestError> {
        Ok(Arc::new(Digests {
            directory,
            enqueuer,
            archive: Arc::new(Mutex::new(Archive::open(archive_path)?)),
            ledger: Arc::new(Mutex::new(Ledger::open(ledger_path)?)),
            sending: tokio::sync::Mutex::new(()),
            cfg,
            hostname,
            sent: Mutex::new(BTreeMap::new()),
        }))
    }

    /// Digests sent per list since start, for `/metrics`.
    pub fn sent_totals(&self) -> Vec<(String, u64)> {
        match self.sent.lock() {
            Ok(m) => m.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            Err(_) => Vec::new(),
        }
    }

    /// Settles digests recorded but not known to be enqueued when the server stopped:
    /// `live` holds the Message-IDs of the digests the spool took — recovered live, or found
    /// completed in its journal (a digest fanned out between the spool's commit and the
    /// ledger's, then a crash).
    pub async fn recover(&self, live: &HashSet<String>) -> Result<usize, DigestError> {
        let _one = self.sending.lock().await;
        let ledger = self.ledger.clone();
        let unfinished = blocking(move || lock(&ledger)?.unfinished().map_err(Into::into)).await?;
        let mut resent = 0;
        for t in unfinished {
            if live.contains(&t.message_id) {
                tracing::info!(list = %t.list, volume = t.volume, issue = t.issue,
                    "digest was in the spool at the crash (live or already delivered); not sent again");
            } else {
                let Some(list) = self.list_by_key(&t.list).await? else {
                    tracing::warn!(list = %t.list, "digest's list is gone; not sent");
                    self.mark_enqueued(t).await?;
                    continue;
                };
                let posts = self.read_posts(&t.list, t.from_id, t.upto_id).await?;
                let format = if t.format == "plain" {
                    Format::Plain
                } else {
                    Format::Mime
                };
                let words = self.words(&list, t.volume, t.issue).await?;
                let number = (t.volume, t.issue);
                let body = self.body(&list, format, number, &words, &t.message_id, &posts);
                self.enqueue(&list, format, body).await?;
                resent += 1;
                tracing::info!(list = %t.list, volume = t.volume, issue = t.issue,
                    "digest recorded but not spooled at the crash: enqueued now");
            }
            self.mark_enqueued(t).await?;
        }
        Ok(resent)
    }

    /// The next digest of `list` now, if anything was archived since the last one.
    pub async fn send_now(&self, list: &Address) -> Result<Option<SentDigest>, DigestError> {
        let (d, a) = (self.directory.clone(), list.clone());
        let found = blocking(move || Ok(d.list_by_address(&a)?)).await?;
        let list = found.ok_or_else(|| DigestError::NoSuchList(list.to_string()))?;
        self.check(&list, true).await
    }

    /// Checks every list once (the timer's work).
    pub async fn check_all(&self) -> Result<(), DigestError> {
        let d = self.directory.clone();
        let lists = blocking(move || Ok(d.lists()?)).await?;
        for list in lists {
            if let Err(e) = self.check(&list, false).await {
                tracing::error!(list = %list.address, error = %e, "digest check failed");
            }
        }
        Ok(())
    }

    /// Runs the timer until `stop`.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let mut tick =
            tokio::time::interval(Duration::from_secs(self.cfg.check_interval_secs.max(1)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tick.tick() => {
                    if let Err(e) = self.check_all().await {
                        tracing::error!(error = %e, "digest checks failed");
                    }
                }
            }
        }
    }

    /// Sends `list`'s next digest if due (or `force`d and there is anything new).
    async fn check(&self, list: &List, force: bool) -> Result<Option<SentDigest>, DigestError> {
        let _one = self.sending.lock().await;
        let key = list_key(&list.address);
        let now = herald_types::unix_ms_now() as i64;
        let (counts, state, pending) = self.position(list, &key, now).await?;
        let (n, bytes, _) = pending;
        if n == 0 || !(force || due(list, &state, bytes, now)) {
            return Ok(None);
        }
        let formats: Vec<Format> = [
            (DeliveryMode::DigestMime, Format::Mime),
            (DeliveryMode::DigestPlain, Format::Plain),
        ]
        .into_iter()
        .filter(|(m, _)| counts.get(m).is_some_and(|&c| c > 0))
        .map(|(_, f)| f)
        .collect();
        let posts = self.read_posts(&key, state.cursor, i64::MAX).await?;
        let Some(upto) = posts.last().map(|(id, _)| *id) else {
            return Ok(None);
        };
        let new_volume = new_volume(
            list.settings.digest_volume_frequency,
            state.volume_started_ms,
            now,
        );
        let (volume, issue) = match new_volume {
            true => (state.volume + 1, 1),
            false => (state.volume, state.next_issue),
        };
        let taken: Vec<Taken> = formats
            .iter()
            .map(|f| Taken {
                list: key.clone(),
                volume,
                issue,
                format: f.as_str().to_string(),
                from_id: state.cursor,
                upto_id: upto,
                message_id: self.message_id(&list.address, volume, issue, *f),
            })
            .collect();
        if taken.is_empty() {
            // Nobody takes digests: move the cursor on so that a member switching to digests
            // later gets what comes after, not the list's whole history.
            let (ledger, k) = (self.ledger.clone(), key.clone());
            blocking(move || Ok(lock(&ledger)?.skip(&k, state.cursor, upto, now)?)).await?;
            return Ok(None);
        }
        let ledger = self.ledger.clone();
        let t = taken.clone();
        let took = blocking(move || Ok(lock(&ledger)?.take(&t, new_volume, now)?)).await?;
        if !took {
            return Ok(None);
        }
        let words = self.words(list, volume, issue).await?;
        for (t, f) in taken.into_iter().zip(&formats) {
            let body = self.body(list, *f, (volume, issue), &words, &t.message_id, &posts);
            self.enqueue(list, *f, body).await?;
            self.mark_enqueued(t).await?;
        }
        if let Ok(mut m) = self.sent.lock() {
            *m.entry(key).or_default() += 1;
        }
        tracing::info!(list = %list.address, volume, issue, posts = posts.len(), "digest sent");
        Ok(Some(SentDigest {
            volume,
            issue,
            posts: posts.len() as u64,
            formats: formats.iter().map(|f| f.as_str()).collect(),
        }))
    }

    /// Enabled members per delivery mode, the list's ledger state (created if new) and what
    /// the archive holds past its cursor.
    async fn position(
        &self,
        list: &List,
        key: &str,
        now: i64,
    ) -> Result<(BTreeMap<DeliveryMode, u64>, ListState, (u64, u64, i64)), DigestError> {
        let (d, id) = (self.directory.clone(), list.id);
        let counts = blocking(move || Ok(d.delivery_counts(id)?)).await?;
        let (archive, ledger, k, created) = (
            self.archive.clone(),
            self.ledger.clone(),
            key.to_string(),
            // A day's slack: a post's Date may lag a little behind the list's creation (clock
            // skew) and is still news; history imported from an older server is older.
            (list.created_at_ms as i64).saturating_sub(DAY_MS),
        );
        let (state, pending) = blocking(move || {
            let a = lock(&archive)?;
            let start = a.last_id_before(&k, created)?;
            let state = lock(&ledger)?.state(&k, start, now)?;
            let pending = a.pending_since(&k, state.cursor)?;
            Ok((state, pending))
        })
        .await?;
        Ok((counts, state, pending))
    }

    /// The digest's own words: the list's language with the list's texts.
    /// One digest goes to every digest member of a format, so it is in the list's language,
    /// not each member's.
    async fn words(
        &self,
        list: &List,
        volume: u32,
        issue: u32,
    ) -> Result<DigestWords, DigestError> {
        let (d, id) = (self.directory.clone(), list.id);
        let texts = blocking(move || Ok(d.overrides(id)?)).await?;
        let w = herald_i18n::Words {
            lang: &list.settings.language,
            overrides: &texts,
        };
        Ok(DigestWords::new(
            &w,
            &list.address.to_string(),
            &list.settings.display_name,
            volume,
            issue,
        ))
    }

    fn body(
        &self,
        list: &List,
        f: Format,
        (volume, issue): (u32, u32),
        words: &DigestWords,
        mid: &str,
        posts: &[(i64, Vec<u8>)],
    ) -> Vec<u8> {
        let date = herald_telemetry::time::rfc5322_date(herald_types::unix_ms_now() / 1000);
        let address = list.address.to_string();
        let head = Masthead {
            list: &address,
            name: &list.settings.display_name,
            volume,
            issue,
            date: &date,
            message_id: mid,
            words,
        };
        let raws: Vec<Vec<u8>> = posts.iter().map(|(_, r)| r.clone()).collect();
        build::build(f, &head, &raws)
    }

    /// `digest.<vol>.<issue>.<format>.<list>@<host>`: the same for a digest rebuilt after a
    /// crash, so a receiver (and the ledger) sees one message.
    fn message_id(&self, list: &Address, volume: u32, issue: u32, f: Format) -> String {
        let label = herald_types::list_id_label(list.local()).to_lowercase();
        format!(
            "digest.{volume}.{issue}.{}.{label}.{}@{}",
            f.as_str(),
            list.domain().to_lowercase(),
            self.hostname
        )
    }

    async fn enqueue(&self, list: &List, f: Format, body: Vec<u8>) -> Result<(), DigestError> {
        let audience = match f {
            Format::Mime => DeliveryMode::DigestMime,
            Format::Plain => DeliveryMode::DigestPlain,
        };
        self.enqueuer
            .enqueue(Submission::Digest {
                list: Box::new(list.clone()),
                audience,
                body: body.into(),
            })
            .await?;
        Ok(())
    }

    async fn mark_enqueued(&self, t: Taken) -> Result<(), DigestError> {
        let ledger = self.ledger.clone();
        blocking(move || Ok(lock(&ledger)?.enqueued(&t)?)).await
    }

    /// Archived posts of `key` with `after < id <= upto`, in order, at most `max_posts`.
    async fn read_posts(
        &self,
        key: &str,
        after: i64,
        upto: i64,
    ) -> Result<Vec<(i64, Vec<u8>)>, DigestError> {
        let (archive, k, max) = (
            self.archive.clone(),
            key.to_string(),
            self.cfg.max_posts.max(1),
        );
        blocking(move || {
            let a = lock(&archive)?;
            let mut out = Vec::new();
            let mut cursor = after;
            while out.len() < max {
                // Imported history is not news: `news_page` leaves it out.
                let page = a.news_page(&k, cursor, PAGE.min(max - out.len()))?;
                let Some(last) = page.last() else { break };
                cursor = last.summary.id;
                for m in page {
                    if m.summary.id > upto {
                        return Ok(out);
                    }
                    out.push((m.summary.id, m.raw));
                }
            }
            Ok(out)
        })
        .await
    }

    async fn list_by_key(&self, key: &str) -> Result<Option<List>, DigestError> {
        let Ok(address) = Address::parse(key) else {
            return Ok(None);
        };
        let d = self.directory.clone();
        blocking(move || Ok(d.list_by_address(&address)?)).await
    }
}

/// The archive's key of a list (its address, lowercased: `herald-archive`'s stage).
fn list_key(address: &Address) -> String {
    address.to_string().to_lowercase()
}

/// Whether the size threshold or the schedule calls for a digest.
fn due(list: &List, state: &ListState, pending_bytes: u64, now_ms: i64) -> bool {
    let s = &list.settings;
    let by_size = s.digest_size_threshold_kb > 0
        && pending_bytes >= u64::from(s.digest_size_threshold_kb) * 1024;
    let period = match s.digest_schedule {
        DigestSchedule::Daily => Some(DAY_MS),
        DigestSchedule::Weekly => Some(7 * DAY_MS),
        DigestSchedule::None => None,
    };
    let by_time = period.is_some_and(|p| now_ms.saturating_sub(state.last_sent_ms) >= p);
    by_size || by_time
}

/// Whether a digest sent at `now_ms` starts a new volume (a new UTC year or month since the
/// volume began).
pub fn new_volume(freq: DigestVolumeFrequency, started_ms: i64, now_ms: i64) -> bool {
    let ym = |ms: i64| {
        let t = jiff::Timestamp::from_millisecond(ms).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
        let d = jiff::tz::Offset::UTC.to_datetime(t);
        (d.year(), d.month())
    };
    let (a, b) = (ym(started_ms), ym(now_ms));
    match freq {
        DigestVolumeFrequency::Yearly => b.0 > a.0,
        DigestVolumeFrequency::Monthly => b > a,
        DigestVolumeFrequency::Never => false,
    }
}

fn lock<T>(m: &Mutex<T>) -> Result<std::sync::MutexGuard<'_, T>, DigestError> {
    m.lock().map_err(|_| DigestError::Poisoned)
}

async fn blocking<T, F>(f: F) -> Result<T, DigestError>
where
    F: FnOnce() -> Result<T, DigestError> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(f).await?
}

#[cfg(test)]
mod tests {
    #[test]
    fn volumes_turn_over_by_year_or_month() {
        use super::new_volume;
        use herald_types::DigestVolumeFrequency as F;
        let dec_31 = 1_767_139_200_000; // 2025-12-31T00:00:00Z
        let jan_1 = dec_31 + 24 * 3600 * 1000;
        let jan_20 = jan_1 + 19 * 24 * 3600 * 1000;
        assert!(new_volume(F::Yearly, dec_31, jan_1));
        assert!(!new_volume(F::Yearly, jan_1, jan_20));
        assert!(new_volume(F::Monthly, dec_31, jan_1));
        assert!(!new_volume(F::Monthly, jan_1, jan_20));
        assert!(!new_volume(F::Never, dec_31, jan_20));
    }
}
