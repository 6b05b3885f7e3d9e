//! The deferred queue: copies that may not be tried now — waiting for a retry time, or for a
//! destination whose every host is down — kept on disk, not in the scheduler's in-memory queue.
//! Postfix keeps its `deferred/` queue apart from its `active/` queue for the same reason: a
//! backlog of dead destinations must never take the place of copies that can go now.
//!
//! What is where:
//! - on disk, `<data_dir>/deferred/<n>.jsonl`: one JSON line per parked copy (the member as
//!   fan-out expanded it, tries, the last deferral and its reply, greylisting state), appended
//!   with one `pwrite`; segments of at most [`SEGMENT_BYTES`];
//! - in memory, per parked copy, a [`ParkedCopy`] in its destination's `waiting` heap: the time
//!   it may be tried, where its line is, its post, lane, expiry and two 32-bit hashes (recipient
//!   and domain, for operator commands) — 96 bytes (a test holds it there), against several hundred for a queued [`Job`]
//!   with its member and reply;
//! - per post with parked copies, its [`PostCtx`], shared by all of them, dropped with its last
//!   parked copy. While no copy of the post is anywhere but here (none queued, none in
//!   flight), the rendered template's bytes — nearly all of a post's memory — are written to
//!   `<dir>/posts/<post>.tpl` and only a shell stays in memory ([`DeferredStore::spill_idle`],
//!   every [`SPILL_EVERY`]); the first copy resumed reads them back. Without this, every post
//!   with one member on a dead host kept its whole rendered body in memory for the retry
//!   period (5 days by default): a busy site's memory grew by the posts' size per hour.
//!
//! Not durable, on purpose: the spool's per-recipient journal stays the truth. A segment is
//! never fsync'd, and at start the directory is emptied: recovery re-expands every member the
//! journal does not show delivered or failed, parked ones included, so after `kill -9` each
//! undelivered copy is tried again once (its retry time is not kept; host health, which is
//! kept, parks the copies of hosts still down at once).
//!
//! SECURITY: the lines hold members' addresses and personal fields: the directory is `0700`
//! and its files `0600`. They are read back only from files this process wrote in its own run
//! (the directory is emptied at start), through serde (typed, no code paths chosen by content).
//!
//! Disk: a line is read back (and so dies) when its copy's time comes; a copy whose
//! destination is still down is written again with its new time, so no line lives longer than
//! the longest wait (`retry_max_secs`, `destination_backoff_max_secs`, greylisting) plus one
//! pass. A segment is deleted when its last line is read back; the segment being written is
//! truncated when it holds none. A failed write keeps the copy in memory instead (counted,
//! logged at most once a minute); a line that cannot be read back is logged: its copy stays
//! undelivered in the spool's journal and the next start delivers it.

use crate::messages::{Job, PostCtx};
use herald_fanout::TemplateShell;
use herald_types::{DeferralKind, LaneKind, ListId, Member, PostId, Reply};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// A segment is closed (a new one started) past this size.
pub const SEGMENT_BYTES: u64 = 16 << 20;

/// How long between two warnings about failed writes.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// How often posts whose every copy is parked give their template's bytes to the disk: often
/// enough that memory follows the work, seldom enough that a copy parked for a moment (a rate
/// pause) does not make its post write and read its bytes.
pub const SPILL_EVERY: Duration = Duration::from_secs(2);

/// The post of parked copies, in memory or with its template's bytes on disk.
enum HeldPost {
    Resident(Arc<PostCtx>),
    Spilled(Box<SpilledPost>),
}

/// A [`PostCtx`] whose template's bytes are in its `.tpl` file.
struct SpilledPost {
    shell: TemplateShell,
    rest: PostRest,
}

/// Everything of a [`PostCtx`] but its template.
struct PostRest {
    id: PostId,
    list_id: ListId,
    accepted_at_ms: u64,
    max_age_ms: u64,
    window: Arc<tokio::sync::Semaphore>,
    dsn: Option<herald_types::Dsn>,
    egress_pool: Option<Arc<str>>,
}

impl PostRest {
    fn split(post: PostCtx) -> (herald_fanout::Template, PostRest) {
        let PostCtx {
            id,
            list_id,
            template,
            accepted_at_ms,
            max_age_ms,
            window,
            dsn,
            egress_pool,
        } = post;
        let rest = PostRest {
            id,
            list_id,
            accepted_at_ms,
            max_age_ms,
            window,
            dsn,
            egress_pool,
        };
        (template, rest)
    }

    fn with(self, template: herald_fanout::Template) -> PostCtx {
        PostCtx {
            id: self.id,
            list_id: self.list_id,
            template,
            accepted_at_ms: self.accepted_at_ms,
            max_age_ms: self.max_age_ms,
            window: self.window,
            dsn: self.dsn,
            egress_pool: self.egress_pool,
        }
    }
}

struct PostEntry {
    held: HeldPost,
    /// Parked copies of the post.
    parked: u64,
    /// Bytes of its `.tpl` file once written (the bytes never change: written once a post).
    file_bytes: Option<u64>,
}

/// One parked copy as the scheduler's queues hold it (see the module doc).
pub struct ParkedCopy {
    pub post: PostId,
    pub lane: LaneKind,
    /// When its post was accepted (queue ages).
    pub accepted_ms: u64,
    /// Past this wall time the copy is expired, not tried.
    pub expires_ms: u64,
    /// Hashes of the lowercased recipient and domain: operator commands read back only the
    /// copies whose hash matches.
    pub rcpt_hash: u32,
    pub domain_hash: u32,
    slot: Slot,
}

impl ParkedCopy {
    /// The job of a copy kept in memory (tests run without a directory).
    #[cfg(test)]
    pub fn job(&self) -> &Job {
        match &self.slot {
            Slot::Memory(job) => job,
            Slot::Disk { .. } => panic!("the copy is on disk"),
        }
    }

    /// True when the copy's line is on disk.
    pub fn on_disk(&self) -> bool {
        matches!(self.slot, Slot::Disk { .. })
    }
}

enum Slot {
    /// A line of segment `segment` at `offset`, `len` bytes.
    Disk { segment: u32, offset: u64, len: u32 },
    /// Kept in memory: no directory (tests), or the write failed.
    Memory(Box<Job>),
}

/// A parked copy's line: everything a [`Job`] holds but its post's shared context.
#[derive(Serialize, Deserialize)]
struct Line {
    post: PostId,
    member: Member,
    tries: u32,
    slow: bool,
    /// The last deferral's kind ([`kind_code`]) and reply.
    kind: Option<u8>,
    reply: Option<Reply>,
    rate_refusals: u8,
    drops: u8,
    grey_delay_ms: Option<u64>,
    /// When it was first greylisted, in ms after the store's `epoch` (the destination learns
    /// its greylisting interval from the whole wait, time parked included).
    greylisted_at_ms: Option<u64>,
}

struct Segment {
    file: File,
    /// Lines not read back yet.
    live: u64,
    len: u64,
}

/// Parked copies' lines and the posts they belong to. Owned by the actor.
pub struct DeferredStore {
    dir: Option<PathBuf>,
    segments: BTreeMap<u32, Segment>,
    current: u32,
    posts: HashMap<PostId, PostEntry>,
    /// Posts in `posts` held in memory: the ones [`DeferredStore::spill_idle`] looks at.
    resident: HashSet<PostId>,
    last_spill: Instant,
    /// Monotonic times in lines are counted from here (they never outlive the process).
    epoch: Instant,
    parked: usize,
    bytes: u64,
    /// Copies kept in memory because their line could not be written, since start.
    pub write_failures: u64,
    /// Lines that could not be read back, since start.
    pub read_failures: u64,
    last_warn: Option<Instant>,
}

/// 32-bit FNV-1a of the ASCII-lowercased text (operator selectors match case-insensitively).
pub fn fold_hash(text: &str) -> u32 {
    text.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b.to_ascii_lowercase())).wrapping_mul(0x0100_0193)
    })
}

fn kind_code(kind: DeferralKind) -> u8 {
    match kind {
        DeferralKind::Throttle => 0,
        DeferralKind::Greylist => 1,
        DeferralKind::HostDown => 2,
        DeferralKind::Other => 3,
    }
}

fn code_kind(code: u8) -> DeferralKind {
    match code {
        0 => DeferralKind::Throttle,
        1 => DeferralKind::Greylist,
        2 => DeferralKind::HostDown,
        _ => DeferralKind::Other,
    }
}

impl DeferredStore {
    /// The store in `dir` (created; lines a previous process left are removed: the spool's
    /// recovery brings their copies back), or in memory only when `dir` is `None` or cannot
    /// be used (logged).
    pub fn open(dir: Option<PathBuf>) -> DeferredStore {
        let dir = dir.and_then(|d| match prepare(&d) {
            Ok(()) => Some(d),
            Err(e) => {
                tracing::error!(dir = %d.display(), error = %e, "deferred queue directory unusable; deferred copies stay in memory");
                None
            }
        });
        DeferredStore {
            dir,
            segments: BTreeMap::new(),
            current: 0,
            posts: HashMap::new(),
            resident: HashSet::new(),
            last_spill: Instant::now(),
            // Before any copy's time: the actor opens its store before it takes work.
            epoch: Instant::now(),
            parked: 0,
            bytes: 0,
            write_failures: 0,
            read_failures: 0,
            last_warn: None,
        }
    }

    /// Copies parked now (on disk or, after a failed write, in memory).
    pub fn len(&self) -> usize {
        self.parked
    }

    pub fn is_empty(&self) -> bool {
        self.parked == 0
    }

    /// Bytes of the segment files and parked posts' template files now.
    pub fn disk_bytes(&self) -> u64 {
        self.bytes
    }

    /// Posts of parked copies held in memory (the rest have their bytes on disk).
    pub fn posts_in_memory(&self) -> usize {
        self.resident.len()
    }

    /// Posts with parked copies.
    pub fn posts(&self) -> usize {
        self.posts.len()
    }

    /// Parks `job`: its line is written, its window permit given back, and what the queue
    /// keeps of it returned.
    pub fn park(&mut self, mut job: Job) -> ParkedCopy {
        job.release_permit();
        self.parked += 1;
        let mut copy = ParkedCopy {
            post: job.post.id,
            lane: job.lane,
            accepted_ms: job.post.accepted_at_ms,
            expires_ms: job.post.accepted_at_ms.saturating_add(job.post.max_age_ms),
            rcpt_hash: fold_hash(&job.member.address.to_string()),
            domain_hash: fold_hash(job.domain()),
            slot: Slot::Memory(Box::new(job)),
        };
        if self.dir.is_some() {
            let Slot::Memory(job) = &copy.slot else {
                return copy;
            };
            match self.write(job) {
                Ok(slot) => {
                    let post = job.post.clone();
                    let id = post.id;
                    let entry = self.posts.entry(id).or_insert_with(|| PostEntry {
                        held: HeldPost::Resident(post),
                        parked: 0,
                        file_bytes: None,
                    });
                    entry.parked += 1;
                    if matches!(entry.held, HeldPost::Resident(_)) {
                        self.resident.insert(id);
                    }
                    copy.slot = slot;
                }
                Err(e) => self.write_failed(e),
            }
        }
        copy
    }

    /// Takes a parked copy back as a job (without a window permit). `None` when its line could
    /// not be read back (logged; the spool still holds the copy as undelivered).
    pub fn resume(&mut self, copy: ParkedCopy) -> Option<Job> {
        self.parked = self.parked.saturating_sub(1);
        let (segment, offset, len) = match copy.slot {
            Slot::Memory(job) => return Some(*job),
            Slot::Disk {
                segment,
                offset,
                len,
            } => (segment, offset, len),
        };
        let line = self.read(segment, offset, len);
        self.release_line(segment);
        let post = self.release_post(copy.post);
        match (line, post) {
            (Ok(line), Some(post)) => Some(restore(line, post, self.epoch)),
            (Err(e), _) => {
                self.read_failures += 1;
                tracing::error!(post = %copy.post, segment, offset, error = %e, "a deferred copy cannot be read back; it stays undelivered in the spool until the next start");
                None
            }
            (Ok(_), None) => {
                self.read_failures += 1;
                tracing::error!(post = %copy.post, "a deferred copy's post is unknown; it stays undelivered in the spool until the next start");
                None
            }
        }
    }

    fn write(&mut self, job: &Job) -> std::io::Result<Slot> {
        let mut bytes =
            serde_json::to_vec(&line_of(job, self.epoch)).map_err(std::io::Error::other)?;
        bytes.push(b'\n');
        let len = u32::try_from(bytes.len()).map_err(std::io::Error::other)?;
        if self
            .segments
            .get(&self.current)
            .is_some_and(|s| s.len >= SEGMENT_BYTES)
        {
            self.current = self.current.wrapping_add(1);
        }
        let segment = self.current;
        if !self.segments.contains_key(&segment) {
            let file = self.create(segment)?;
            self.segments.insert(
                segment,
                Segment {
                    file,
                    live: 0,
                    len: 0,
                },
            );
        }
        let Some(s) = self.segments.get_mut(&segment) else {
            return Err(std::io::Error::other("segment vanished"));
        };
        let offset = s.len;
        s.file.write_all_at(&bytes, offset)?;
        s.len += u64::from(len);
        s.live += 1;
        self.bytes += u64::from(len);
        Ok(Slot::Disk {
            segment,
            offset,
            len,
        })
    }

    fn create(&self, segment: u32) -> std::io::Result<File> {
        let Some(dir) = &self.dir else {
            return Err(std::io::Error::other("no directory"));
        };
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(dir.join(format!("{segment}.jsonl")))
    }

    fn read(&self, segment: u32, offset: u64, len: u32) -> std::io::Result<Line> {
        let Some(s) = self.segments.get(&segment) else {
            return Err(std::io::Error::other("segment missing"));
        };
        let mut buf = vec![0u8; len as usize];
        s.file.read_exact_at(&mut buf, offset)?;
        serde_json::from_slice(&buf).map_err(std::io::Error::other)
    }

    /// One line of `segment` was read back: a segment with none left goes (the current one is
    /// emptied and written again from its start).
    fn release_line(&mut self, segment: u32) {
        let Some(s) = self.segments.get_mut(&segment) else {
            return;
        };
        s.live = s.live.saturating_sub(1);
        if s.live > 0 {
            return;
        }
        self.bytes = self.bytes.saturating_sub(s.len);
        if segment == self.current {
            s.len = 0;
            if let Err(e) = s.file.set_len(0) {
                tracing::warn!(segment, error = %e, "cannot truncate a deferred queue segment");
            }
            return;
        }
        self.segments.remove(&segment);
        if let Some(dir) = &self.dir {
            if let Err(e) = std::fs::remove_file(dir.join(format!("{segment}.jsonl"))) {
                tracing::warn!(segment, error = %e, "cannot remove a deferred queue segment");
            }
        }
    }

    /// One parked copy of `post` is resumed: its context (read back from disk when spilled);
    /// the post leaves the store with its last parked copy.
    fn release_post(&mut self, post: PostId) -> Option<Arc<PostCtx>> {
        // In place: this runs for every resumed copy, and most posts are in memory.
        let entry = self.posts.get_mut(&post)?;
        entry.parked = entry.parked.saturating_sub(1);
        let last = entry.parked == 0;
        let ctx = match &entry.held {
            HeldPost::Resident(ctx) => Some(ctx.clone()),
            HeldPost::Spilled(_) => self.read_back(post),
        };
        if last {
            self.forget(post);
        }
        ctx
    }

    /// A spilled post in memory again (`None` when its file cannot be read; it stays spilled).
    fn read_back(&mut self, post: PostId) -> Option<Arc<PostCtx>> {
        let mut entry = self.posts.remove(&post)?;
        let (held, ctx) = match entry.held {
            HeldPost::Resident(ctx) => (HeldPost::Resident(ctx.clone()), Some(ctx)),
            HeldPost::Spilled(spilled) => match self.load(*spilled) {
                Ok(ctx) => {
                    self.resident.insert(post);
                    (HeldPost::Resident(ctx.clone()), Some(ctx))
                }
                Err(spilled) => (HeldPost::Spilled(spilled), None),
            },
        };
        entry.held = held;
        self.posts.insert(post, entry);
        ctx
    }

    /// The post's last parked copy left: it and its file go.
    fn forget(&mut self, post: PostId) {
        self.resident.remove(&post);
        let Some(entry) = self.posts.remove(&post) else {
            return;
        };
        if let Some(len) = entry.file_bytes {
            self.bytes = self.bytes.saturating_sub(len);
            if let Some(path) = self.post_path(post) {
                if let Err(e) = std::fs::remove_file(&path) {
                    tracing::warn!(post = %post, error = %e, "cannot remove a parked post's template file");
                }
            }
        }
    }

    /// Gives the template bytes of every post whose copies are all parked to the disk; at
    /// most once every [`SPILL_EVERY`] (the actor calls it each tick). A post some queued or
    /// in-flight copy still uses stays as it is: the bytes are needed now.
    pub fn spill_idle(&mut self, now: Instant) {
        if self.dir.is_none() || now.saturating_duration_since(self.last_spill) < SPILL_EVERY {
            return;
        }
        self.last_spill = now;
        let idle: Vec<PostId> = self
            .resident
            .iter()
            .filter(|id| {
                self.posts.get(id).is_some_and(
                    |e| matches!(&e.held, HeldPost::Resident(ctx) if Arc::strong_count(ctx) == 1),
                )
            })
            .copied()
            .collect();
        for id in idle {
            let Some(mut entry) = self.posts.remove(&id) else {
                continue;
            };
            entry.held = match entry.held {
                HeldPost::Resident(ctx) => match Arc::try_unwrap(ctx) {
                    Ok(post) => self.spill(post, &mut entry.file_bytes),
                    Err(ctx) => HeldPost::Resident(ctx),
                },
                spilled => spilled,
            };
            if matches!(entry.held, HeldPost::Spilled(_)) {
                self.resident.remove(&id);
            }
            self.posts.insert(id, entry);
        }
    }

    /// `post` with its template's bytes in its file (written now unless it was before), or
    /// still in memory when the file cannot be written (logged like a failed line).
    fn spill(&mut self, post: PostCtx, file_bytes: &mut Option<u64>) -> HeldPost {
        let (template, rest) = PostRest::split(post);
        let id = rest.id;
        let (shell, bytes) = template.into_shell();
        let written = match (*file_bytes, self.post_path(id)) {
            (Some(_), Some(_)) => Ok(()),
            (None, Some(path)) => write_post(&path, &bytes).map(|()| {
                let len = bytes.len() as u64;
                *file_bytes = Some(len);
                self.bytes += len;
            }),
            (_, None) => Err(std::io::Error::other("no directory")),
        };
        let spilled = SpilledPost { shell, rest };
        match written {
            Ok(()) => HeldPost::Spilled(Box::new(spilled)),
            Err(e) => {
                self.write_failed(e);
                match filled(spilled, bytes) {
                    Ok(ctx) => HeldPost::Resident(ctx),
                    // Unreachable: these are the bytes just taken out.
                    Err(spilled) => HeldPost::Spilled(spilled),
                }
            }
        }
    }

    /// A spilled post in memory again, or back as it was when its file cannot be read or
    /// holds other bytes (logged; its copies stay undelivered in the spool until the next
    /// start, like a line that cannot be read).
    fn load(&mut self, spilled: SpilledPost) -> Result<Arc<PostCtx>, Box<SpilledPost>> {
        let id = spilled.rest.id;
        let bytes = match self.post_path(id).map(std::fs::read) {
            Some(Ok(bytes)) => bytes,
            Some(Err(e)) => {
                tracing::error!(post = %id, error = %e, "a parked post's template cannot be read back");
                return Err(Box::new(spilled));
            }
            None => return Err(Box::new(spilled)),
        };
        filled(spilled, bytes).inspect_err(|_| {
            tracing::error!(post = %id, "a parked post's template file holds other bytes than were written");
        })
    }

    fn post_path(&self, post: PostId) -> Option<PathBuf> {
        self.dir
            .as_ref()
            .map(|d| d.join(POSTS_DIR).join(format!("{post}.tpl")))
    }

    fn write_failed(&mut self, e: std::io::Error) {
        self.write_failures += 1;
        let now = Instant::now();
        if self
            .last_warn
            .is_none_or(|t| now.duration_since(t) >= WARN_EVERY)
        {
            self.last_warn = Some(now);
            tracing::warn!(error = %e, failures = self.write_failures, "cannot write to the deferred queue; deferred copies kept in memory");
        }
    }
}

/// Where parked posts' template bytes are kept, under the store's directory.
const POSTS_DIR: &str = "posts";

/// `spilled` with its bytes again; the shell back when they are not its bytes.
fn filled(spilled: SpilledPost, bytes: Vec<u8>) -> Result<Arc<PostCtx>, Box<SpilledPost>> {
    let SpilledPost { shell, rest } = spilled;
    match shell.fill(bytes) {
        Ok(template) => Ok(Arc::new(rest.with(template))),
        Err(shell) => Err(Box::new(SpilledPost { shell, rest })),
    }
}

/// Writes a post's template bytes to `path` (its directory created `0700`, the file `0600`:
/// a post may be a private list's).
fn write_post(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if let Some(parent) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)
}

/// Creates `dir` and removes the segments and post files a previous process left.
fn prepare(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    match std::fs::remove_dir_all(dir.join(POSTS_DIR)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "jsonl") {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}

fn line_of(job: &Job, epoch: Instant) -> Line {
    Line {
        post: job.post.id,
        member: (*job.member).clone(),
        tries: job.tries,
        slow: job.lane == LaneKind::Slow,
        kind: job.deferral.as_ref().map(|(k, _)| kind_code(*k)),
        reply: job.deferral.as_ref().map(|(_, r)| (**r).clone()),
        rate_refusals: job.rate_refusals,
        drops: job.drops,
        grey_delay_ms: job.grey_delay.map(|d| d.as_millis() as u64),
        greylisted_at_ms: job
            .greylisted_at
            .map(|t| t.saturating_duration_since(epoch).as_millis() as u64),
    }
}

fn restore(line: Line, post: Arc<PostCtx>, epoch: Instant) -> Job {
    let mut job = Job::new(post, Arc::new(line.member));
    job.holds_permit = false;
    job.tries = line.tries;
    job.lane = if line.slow {
        LaneKind::Slow
    } else {
        LaneKind::Fast
    };
    job.deferral = match (line.kind, line.reply) {
        (Some(k), Some(r)) => Some((code_kind(k), Box::new(r))),
        _ => None,
    };
    job.rate_refusals = line.rate_refusals;
    job.drops = line.drops;
    job.grey_delay = line.grey_delay_ms.map(Duration::from_millis);
    job.greylisted_at = line
        .greylisted_at_ms
        .map(|ms| epoch + Duration::from_millis(ms));
    job
}
