//! Duplicate suppression: which Message-IDs each list accepted recently. It lives beside the
//! spool because two stages read it — enqueue (retries) and fan-out's expansion (cross-posts) —
//! and both already stand on the spool; neither reaches into the other for it.
//!
//! Two uses:
//! - **Retries.** A sending MTA that lost our 250 sends the post again. Enqueue asks
//!   [`DedupStore::seen_on_list`] and, within the window, acknowledges the retry with the first
//!   post's id instead of spooling and fanning it out again.
//! - **Cross-posts.** A post sent to lists A and B is two spooled posts with one Message-ID.
//!   Expansion of the later one asks [`DedupStore::earlier_posts`] for the other lists' posts
//!   and skips a member who is also an enabled member of such a list within that post's
//!   member-id snapshot — that person gets (or got) the earlier list's copy. Why this design
//!   rather than recording every (Message-ID, member) pair: the store stays one small entry per
//!   post, not one per recipient (a million-member list would add a million entries per post),
//!   and the check costs directory lookups only for the rare cross-posted message.
//!
//! Durability (seeds/001, Cyrus `duplicate.db = db3-nosync`): lookups and records are in memory
//! under a std `Mutex` held for a hash lookup or insert, never across I/O or `.await`. Records
//! are appended to `<path>` only by [`DedupStore::flush`], which the server calls every
//! `flush_interval_ms` and at shutdown (one write + one fdatasync per interval, never per
//! lookup). A crash therefore forgets at most the records of the last flush interval: the worst
//! case is one duplicate fan-out of a retried post, the same bound Cyrus accepts.
//!
//! Limits: at most `max_entries` records (oldest evicted first), entries older than
//! `window_ms` are ignored and pruned, a Message-ID is cut at [`MAX_ID_BYTES`] and at most
//! [`MAX_LISTS_PER_ID`] lists are remembered per Message-ID. The file is rewritten (compacted)
//! at open and whenever it holds twice as many lines as live entries.
//!
//! SECURITY: Message-IDs are sender-controlled. They are stored as one whitespace-free token per
//! line (control characters and spaces removed), so a hostile ID cannot forge extra records;
//! a sender can at worst suppress its own later posts with a reused ID, which is the point.

use herald_types::{ListId, MemberId, PostId};
use std::collections::hash_map::RandomState;
use std::collections::{HashMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Longest Message-ID kept (RFC 5322 lines are at most 998 octets).
pub const MAX_ID_BYTES: usize = 998;
/// Lists remembered per Message-ID (a cross-post to more lists is unusual and still works for
/// the first ones).
pub const MAX_LISTS_PER_ID: usize = 8;

/// Where and how long Message-IDs are remembered.
#[derive(Debug, Clone)]
pub struct DedupConfig {
    pub path: PathBuf,
    /// A Message-ID is a duplicate if the list accepted it less than this long ago.
    pub window_ms: u64,
    /// Most records (one per list per Message-ID) remembered; the oldest go first.
    pub max_entries: usize,
}

/// One list's acceptance of a Message-ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub list: ListId,
    pub post: PostId,
    /// The post's member-id snapshot (for cross-post checks).
    pub max_member: MemberId,
    pub at_ms: u64,
}

/// Why the dedup file could not be read or written.
#[derive(Debug, thiserror::Error)]
#[error("dedup store {path}: {op}: {source}")]
pub struct DedupError {
    pub path: PathBuf,
    pub op: &'static str,
    #[source]
    pub source: std::io::Error,
}

/// The shared store; clones share one state.
#[derive(Clone)]
pub struct DedupStore {
    inner: Arc<Mutex<State>>,
    cfg: Arc<DedupConfig>,
    keys: RandomState,
}

/// The map's keys are already keyed SipHash values: hashing them again would only cost time.
#[derive(Default)]
struct IdentityHasher(u64);

impl Hasher for IdentityHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// In memory a Message-ID is its 64-bit SipHash under a per-process random key (the file keeps
/// the text, so the key need not survive a restart). Lookups then touch one small map entry
/// instead of comparing strings; the random key means nobody can craft two IDs that collide,
/// and an accidental collision among a million IDs has odds of about 1 in 10^13.
struct State {
    map: HashMap<u64, Vec<Seen>, BuildHasherDefault<IdentityHasher>>,
    /// Insertion order with the text of each ID, for eviction and compaction.
    order: VecDeque<(u64, u64, Box<str>)>,
    /// Lines not yet written.
    pending: Vec<u8>,
    file: File,
    lines_in_file: usize,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    // Poisoning means a panic elsewhere; the map is still consistent (every mutation is a
    // single insert/remove), so carry on.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The stored form of a Message-ID without allocating when it is already clean (the common
/// case, and the lookup hot path).
fn clean_ref(id: &str) -> std::borrow::Cow<'_, str> {
    if id.len() <= MAX_ID_BYTES && !id.chars().any(|c| c.is_whitespace() || c.is_control()) {
        std::borrow::Cow::Borrowed(id)
    } else {
        std::borrow::Cow::Owned(clean_id(id).into_string())
    }
}

/// The stored form of a Message-ID: no whitespace or control characters, bounded.
pub fn clean_id(id: &str) -> Box<str> {
    let mut out: String = id
        .chars()
        .filter(|c| !c.is_whitespace() && !c.is_control())
        .collect();
    while out.len() > MAX_ID_BYTES {
        out.pop();
    }
    out.into_boxed_str()
}

impl DedupStore {
    /// Loads the file (entries older than the window are dropped) and compacts it.
    pub fn open(cfg: DedupConfig, now_ms: u64) -> Result<DedupStore, DedupError> {
        let err = |op| {
            let path = cfg.path.clone();
            move |source| DedupError { path, op, source }
        };
        if let Some(parent) = cfg.path.parent() {
            std::fs::create_dir_all(parent).map_err(err("create directory"))?;
        }
        let mut entries = Vec::new();
        match File::open(&cfg.path) {
            Ok(f) => read_lines(f, &mut entries).map_err(err("read"))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(err("open")(e)),
        }
        let file = rewrite(&cfg.path, &[]).map_err(err("create"))?;
        let keys = RandomState::new();
        let mut state = State {
            map: HashMap::default(),
            order: VecDeque::new(),
            pending: Vec::new(),
            file,
            lines_in_file: 0,
        };
        for (id, seen) in entries {
            if now_ms.saturating_sub(seen.at_ms) < cfg.window_ms {
                let h = keys.hash_one(&*id);
                state.insert(h, id, seen, cfg.max_entries, cfg.window_ms);
            }
        }
        let store = DedupStore {
            inner: Arc::new(Mutex::new(state)),
            cfg: Arc::new(cfg),
            keys,
        };
        store.compact()?;
        Ok(store)
    }

    /// The post of `list` that already carried this Message-ID within the window.
    pub fn seen_on_list(&self, list: ListId, message_id: &str, now_ms: u64) -> Option<PostId> {
        let h = self.keys.hash_one(&*clean_ref(message_id));
        let st = lock(&self.inner);
        st.map.get(&h)?.iter().find_map(|s| {
            (s.list == list && now_ms.saturating_sub(s.at_ms) < self.cfg.window_ms)
                .then_some(s.post)
        })
    }

    /// Posts of other lists with this Message-ID accepted before `post`, within the window.
    pub fn earlier_posts(&self, message_id: &str, post: PostId, now_ms: u64) -> Vec<Seen> {
        let h = self.keys.hash_one(&*clean_ref(message_id));
        let st = lock(&self.inner);
        st.map.get(&h).map_or_else(Vec::new, |v| {
            v.iter()
                .filter(|s| s.post < post && now_ms.saturating_sub(s.at_ms) < self.cfg.window_ms)
                .copied()
                .collect()
        })
    }

    /// Remembers that `seen.list` accepted `message_id` as `seen.post` (in memory at once, on
    /// disk at the next [`DedupStore::flush`]).
    pub fn record(&self, message_id: &str, seen: Seen) {
        let key = clean_id(message_id);
        if key.is_empty() {
            return;
        }
        let h = self.keys.hash_one(&*key);
        let mut st = lock(&self.inner);
        let line = format!(
            "{} {} {} {} {}\n",
            seen.at_ms, seen.list.0, seen.post.0, seen.max_member.0, key
        );
        st.pending.extend_from_slice(line.as_bytes());
        st.insert(h, key, seen, self.cfg.max_entries, self.cfg.window_ms);
    }

    /// Writes pending records and makes them durable (one fdatasync). Blocking: async callers
    /// use `spawn_blocking`. The lock is held only to take the buffer.
    pub fn flush(&self) -> Result<(), DedupError> {
        let err = |op| {
            let path = self.cfg.path.clone();
            move |source| DedupError { path, op, source }
        };
        let (pending, file, lines) = {
            let mut st = lock(&self.inner);
            if st.pending.is_empty() {
                return Ok(());
            }
            let pending = std::mem::take(&mut st.pending);
            let lines = pending.iter().filter(|&&b| b == b'\n').count();
            st.lines_in_file += lines;
            let file = st.file.try_clone().map_err(err("clone handle"))?;
            (
                pending,
                file,
                st.lines_in_file.max(1) > 2 * st.map.len().max(10_000),
            )
        };
        let mut file = file;
        file.write_all(&pending).map_err(err("write"))?;
        file.sync_data().map_err(err("fdatasync"))?;
        if lines {
            self.compact()?;
        }
        Ok(())
    }

    /// Message-IDs currently remembered.
    pub fn len(&self) -> usize {
        lock(&self.inner).map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Rewrites the file with the live entries only (tmp file, fsync, rename).
    fn compact(&self) -> Result<(), DedupError> {
        let mut st = lock(&self.inner);
        let mut lines: Vec<(Box<str>, Seen)> = Vec::with_capacity(st.map.len());
        for (at, h, id) in &st.order {
            if let Some(v) = st.map.get(h) {
                lines.extend(
                    v.iter()
                        .filter(|s| s.at_ms == *at)
                        .map(|s| (id.clone(), *s)),
                );
            }
        }
        // Entries recorded but not flushed are written too: compaction never loses them.
        st.pending.clear();
        let file = rewrite(&self.cfg.path, &lines).map_err(|source| DedupError {
            path: self.cfg.path.clone(),
            op: "compact",
            source,
        })?;
        st.file = file;
        st.lines_in_file = lines.len();
        Ok(())
    }
}

impl State {
    fn insert(&mut self, h: u64, key: Box<str>, seen: Seen, max_entries: usize, window_ms: u64) {
        let v = self.map.entry(h).or_default();
        if v.len() >= MAX_LISTS_PER_ID || v.iter().any(|s| s.post == seen.post) {
            return;
        }
        v.push(seen);
        self.order.push_back((seen.at_ms, h, key));
        let newest = seen.at_ms;
        while let Some((at, _, _)) = self.order.front() {
            let too_old = newest.saturating_sub(*at) >= window_ms;
            if !too_old && self.order.len() <= max_entries {
                break;
            }
            if let Some((at, h, _)) = self.order.pop_front() {
                if let Some(v) = self.map.get_mut(&h) {
                    if let Some(i) = v.iter().position(|s| s.at_ms == at) {
                        v.remove(i);
                    }
                    if v.is_empty() {
                        self.map.remove(&h);
                    }
                }
            }
        }
    }
}

/// Parses the file; lines that do not parse (a torn last line after a crash) are skipped.
fn read_lines(f: File, out: &mut Vec<(Box<str>, Seen)>) -> std::io::Result<()> {
    for line in BufReader::new(f).split(b'\n') {
        let line = line?;
        let Ok(text) = std::str::from_utf8(&line) else {
            continue;
        };
        let mut it = text.split(' ');
        let parsed = (|| {
            let at_ms = it.next()?.parse().ok()?;
            let list = ListId(it.next()?.parse().ok()?);
            let post = PostId(it.next()?.parse().ok()?);
            let max_member = MemberId(it.next()?.parse().ok()?);
            let id = it.next().filter(|s| !s.is_empty())?;
            Some((
                clean_id(id),
                Seen {
                    list,
                    post,
                    max_member,
                    at_ms,
                },
            ))
        })();
        out.extend(parsed);
    }
    Ok(())
}

/// Writes `lines` to a temporary file, syncs it and renames it over `path`; returns the new
/// file opened for appending.
fn rewrite(path: &Path, lines: &[(Box<str>, Seen)]) -> std::io::Result<File> {
    let tmp = path.with_extension("tmp");
    {
        let mut f = File::create(&tmp)?;
        let mut buf = Vec::with_capacity(lines.len() * 64);
        for (id, s) in lines {
            buf.extend_from_slice(
                format!(
                    "{} {} {} {} {}\n",
                    s.at_ms, s.list.0, s.post.0, s.max_member.0, id
                )
                .as_bytes(),
            );
        }
        f.write_all(&buf)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        File::open(dir)?.sync_all()?;
    }
    OpenOptions::new().append(true).open(path)
}

/// Writes the store every `interval` until `shutdown`, then once more (the bound on what a
/// crash forgets is this interval).
pub async fn run_flusher(
    store: DedupStore,
    interval: std::time::Duration,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let mut tick = tokio::time::interval(interval);
    loop {
        let stop = tokio::select! {
            _ = shutdown.cancelled() => true,
            _ = tick.tick() => false,
        };
        let s = store.clone();
        match tokio::task::spawn_blocking(move || s.flush()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "dedup store flush failed"),
            Err(e) => tracing::error!(error = %e, "dedup flush task failed"),
        }
        if stop {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(dir: &Path) -> DedupConfig {
        DedupConfig {
            path: dir.join("dedup.log"),
            window_ms: 1_000_000,
            max_entries: 1000,
        }
    }

    fn seen(list: i64, post: u64, at_ms: u64) -> Seen {
        Seen {
            list: ListId(list),
            post: PostId(post),
            max_member: MemberId(10),
            at_ms,
        }
    }

    #[test]
    fn a_crash_forgets_at_most_what_was_not_flushed() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = DedupStore::open(cfg(dir.path()), 0).expect("open");
        store.record("a@x", seen(1, 1, 10));
        store.flush().expect("flush");
        store.record("b@x", seen(1, 2, 20));
        // "Crash": the process dies without flushing (the store is dropped; nothing is written
        // on drop, exactly like a kill -9 between flushes).
        drop(store);
        let store = DedupStore::open(cfg(dir.path()), 30).expect("reopen");
        assert_eq!(store.seen_on_list(ListId(1), "a@x", 30), Some(PostId(1)));
        assert_eq!(store.seen_on_list(ListId(1), "b@x", 30), None);
    }

    #[test]
    fn window_lists_and_cross_posts() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = DedupStore::open(cfg(dir.path()), 0).expect("open");
        store.record("m@x", seen(1, 5, 100));
        store.record("m@x", seen(2, 6, 100));
        assert_eq!(store.seen_on_list(ListId(2), "m@x", 200), Some(PostId(6)));
        assert_eq!(store.seen_on_list(ListId(3), "m@x", 200), None);
        assert_eq!(
            store.seen_on_list(ListId(1), "m@x", 2_000_000),
            None,
            "outside window"
        );
        let earlier = store.earlier_posts("m@x", PostId(6), 200);
        assert_eq!(earlier, vec![seen(1, 5, 100)]);
        assert!(store.earlier_posts("m@x", PostId(5), 200).is_empty());
    }

    #[test]
    fn entries_are_bounded_and_hostile_ids_stay_one_line() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut c = cfg(dir.path());
        c.max_entries = 10;
        let store = DedupStore::open(c.clone(), 0).expect("open");
        for i in 0..100u64 {
            store.record(&format!("id{i}"), seen(1, i + 1, i));
        }
        assert!(store.len() <= 11, "{}", store.len());
        store.record("evil\n1 1 999 1 forged", seen(1, 500, 100));
        store.flush().expect("flush");
        drop(store);
        let store = DedupStore::open(c, 100).expect("reopen");
        assert_eq!(store.seen_on_list(ListId(1), "forged", 100), None);
        assert_eq!(
            store.seen_on_list(ListId(1), "evil\n1 1 999 1 forged", 100),
            Some(PostId(500))
        );
    }
}
