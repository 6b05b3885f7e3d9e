//! What the simulated Internet received: every accepted copy, every rejection or deferral the
//! receivers gave, connections per host — and duplicates.
//!
//! A copy is one accepted recipient of one transaction: envelope sender, recipient, size, a
//! digest (SHA-256 truncated to 128 bits), receive time (ms since the world started), the
//! Message-ID, the MIME verdict (see [`mime`]) and optionally the bytes.
//!
//! Duplicates: a copy is a duplicate when an earlier copy had the same recipient (compared
//! case-insensitively) and the same Message-ID header; for messages without a
//! Message-ID, the same recipient and the same digest. Herald keeps the poster's Message-ID on
//! every personalized copy, so this is exact for list traffic and needs no knowledge of which
//! bytes are personal.
//!
//! Concurrency: sessions batch their records and hand them over once per reply flush (before the
//! replies are written, so a client that saw `250` finds its copy recorded). One std mutex guards
//! the tables; it is held for a batch of pushes and hash lookups, never across an `.await`.
//!
//! Limits: memory grows with the copies recorded (~200 bytes each without `keep_messages`; a
//! million-member run needs ~200 MB) unless an exporter [`Recorder::drain`]s them to disk; the
//! duplicate-detection keys (32 bytes a copy) stay. [`Recorder::reset`] clears everything.
//!
//! SECURITY: recorded strings come from the network (envelope addresses are printable ASCII,
//! checked by the session; Message-IDs may hold anything): treat them as untrusted when
//! displaying them.

pub mod mime;

use bytes::Bytes;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

pub use mime::MimeVerdict;

/// Counts a connection open from its client address while it lives.
pub(crate) struct PeerGuard {
    recorder: Recorder,
    peer: std::net::IpAddr,
}

impl PeerGuard {
    pub(crate) fn new(recorder: &Recorder, peer: std::net::IpAddr) -> PeerGuard {
        recorder.peer_opened(peer);
        PeerGuard {
            recorder: recorder.clone(),
            peer,
        }
    }
}

impl Drop for PeerGuard {
    fn drop(&mut self) {
        self.recorder.peer_closed(self.peer);
    }
}

/// One accepted copy (one recipient of one accepted transaction).
#[derive(Debug, Clone)]
pub struct CopyRecord {
    /// The receiving host (MX host name).
    pub host: Arc<str>,
    /// Envelope sender (MAIL FROM), without angle brackets; empty for the null sender.
    pub sender: Box<str>,
    /// Envelope recipient (RCPT TO), without angle brackets.
    pub recipient: Box<str>,
    /// Size in octets after dot-unstuffing.
    pub size: usize,
    /// First 16 octets of the SHA-256 of the message.
    pub digest: [u8; 16],
    /// Milliseconds since the world started.
    pub at_ms: u64,
    /// The Message-ID header value (angle brackets included), if any.
    pub message_id: Option<Arc<str>>,
    /// The MIME verdict.
    pub mime: MimeVerdict,
    /// Received over TLS (after STARTTLS).
    pub tls: bool,
    /// An earlier copy had the same recipient and Message-ID (or digest).
    pub duplicate: bool,
    /// The message, when `keep_messages` is set.
    pub message: Option<Bytes>,
    /// MAIL carried `SMTPUTF8` (RFC 6531).
    pub smtputf8: bool,
    /// The DSN parameters (RFC 3461) as sent, MAIL's then RCPT's (`RET=HDRS ENVID=x
    /// NOTIFY=SUCCESS ORCPT=rfc822;y`); empty when none. Only a host that offers DSN takes them.
    pub dsn: Box<str>,
    /// The client's address (the sender's source IP: the egress tests check it).
    pub peer: Option<std::net::IpAddr>,
}

/// Connections from one client address across every receiver of the world (the egress
/// tests check per-source connection limits).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeerCounters {
    /// Connections accepted from it.
    pub connections: u64,
    /// Open now.
    pub open: u64,
    /// Most open at once.
    pub max_open: u64,
}

/// A rejection or deferral a receiver gave.
#[derive(Debug, Clone)]
pub struct Rejection {
    /// The host that gave it.
    pub host: Arc<str>,
    /// Milliseconds since the world started.
    pub at_ms: u64,
    /// The reply code (451, 550, 421, ...).
    pub code: u16,
    /// The enhanced status code ("4.7.1").
    pub status: &'static str,
    /// The envelope sender of the transaction, if one was open.
    pub sender: Option<Box<str>>,
    /// The recipient concerned, when the reply was about one.
    pub recipient: Option<Box<str>>,
}

impl Rejection {
    /// "451 4.7.1": the key of [`Snapshot::rejected_by_code`].
    pub fn code_text(&self) -> String {
        format!("{} {}", self.code, self.status)
    }
}

/// Per-host counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostCounters {
    /// TCP connections accepted.
    pub connections: u64,
    /// Copies accepted.
    pub accepted: u64,
    /// Connections dropped on purpose during DATA (drop_mid_data).
    pub dropped_mid_data: u64,
    /// Connections turned away because the host had too many sessions.
    pub busy: u64,
    /// STARTTLS handshakes that were full (certificate, signature, key exchange).
    pub tls_full: u64,
    /// STARTTLS handshakes that resumed a session (a ticket or session id from before).
    pub tls_resumed: u64,
}

/// A copy of everything recorded so far, with totals.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Accepted copies, duplicates included.
    pub accepted: u64,
    /// Distinct recipients with at least one accepted copy.
    pub unique_recipients: u64,
    /// Copies that were duplicates.
    pub duplicates: u64,
    /// Copies checked at least at line level, and how many of those were malformed.
    pub mime_checked: u64,
    pub mime_malformed: u64,
    /// Rejections and deferrals by "code status" ("451 4.7.1" → count).
    pub rejected_by_code: BTreeMap<String, u64>,
    /// Counters per host name.
    pub hosts: BTreeMap<String, HostCounters>,
    /// Every accepted copy, in order of acceptance.
    pub copies: Vec<CopyRecord>,
    /// Every rejection and deferral, in order.
    pub rejections: Vec<Rejection>,
}

impl Snapshot {
    /// Copies accepted for `recipient` (exact match), in order.
    pub fn copies_for(&self, recipient: &str) -> Vec<&CopyRecord> {
        self.copies
            .iter()
            .filter(|c| &*c.recipient == recipient)
            .collect()
    }

    /// Rejections and deferrals given for `recipient`, in order.
    pub fn rejections_for(&self, recipient: &str) -> Vec<&Rejection> {
        self.rejections
            .iter()
            .filter(|r| r.recipient.as_deref() == Some(recipient))
            .collect()
    }

    /// Accepted copies grouped by recipient.
    pub fn by_recipient(&self) -> BTreeMap<&str, Vec<&CopyRecord>> {
        let mut out: BTreeMap<&str, Vec<&CopyRecord>> = BTreeMap::new();
        for c in &self.copies {
            out.entry(&c.recipient).or_default().push(c);
        }
        out
    }

    /// The duplicate copies.
    pub fn duplicate_copies(&self) -> Vec<&CopyRecord> {
        self.copies.iter().filter(|c| c.duplicate).collect()
    }
}

#[derive(Default)]
struct State {
    copies: Vec<CopyRecord>,
    rejections: Vec<Rejection>,
    /// Dedup keys (recipient + Message-ID or digest) seen so far.
    seen: HashSet<[u8; 16]>,
    /// Recipient keys seen so far.
    recipients: HashSet<[u8; 16]>,
    duplicates: u64,
    mime_checked: u64,
    mime_malformed: u64,
    rejected_by_code: BTreeMap<String, u64>,
    hosts: HashMap<Arc<str>, HostCounters>,
    peers: HashMap<std::net::IpAddr, PeerCounters>,
}

struct Shared {
    started: Instant,
    started_unix_ms: u64,
    state: Mutex<State>,
    accepted: AtomicU64,
    changed: Notify,
}

/// The shared record of a world. Cheap to clone (an `Arc`).
#[derive(Clone)]
pub struct Recorder {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("accepted", &self.accepted())
            .finish()
    }
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new()
    }
}

/// The recipient as compared: the whole address lower-cased. RFC 5321 lets a host treat local
/// parts case-sensitively, but practically every mailbox is case-insensitive, so two copies to
/// `A@x` and `a@x` land in one inbox: a duplicate from the member's point of view.
fn recipient_key(recipient: &str) -> Sha256 {
    let mut h = Sha256::new();
    h.update(recipient.to_ascii_lowercase().as_bytes());
    h
}

fn truncate(h: Sha256) -> [u8; 16] {
    let full = h.finalize();
    let mut out = [0u8; 16];
    out.copy_from_slice(&full[..16]);
    out
}

impl Recorder {
    /// An empty recorder whose clock starts now.
    pub fn new() -> Recorder {
        Recorder {
            shared: Arc::new(Shared {
                started: Instant::now(),
                started_unix_ms: herald_types::unix_ms_now(),
                state: Mutex::new(State::default()),
                accepted: AtomicU64::new(0),
                changed: Notify::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere while holding the lock leaves plain data behind; keep recording.
        self.shared.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A connection from `peer` was accepted; [`Recorder::peer_closed`] when it ends.
    pub fn peer_opened(&self, peer: std::net::IpAddr) {
        let mut st = self.lock();
        let c = st.peers.entry(peer).or_default();
        c.connections += 1;
        c.open += 1;
        c.max_open = c.max_open.max(c.open);
    }

    pub fn peer_closed(&self, peer: std::net::IpAddr) {
        if let Some(c) = self.lock().peers.get_mut(&peer) {
            c.open = c.open.saturating_sub(1);
        }
    }

    /// Connections per client address so far.
    pub fn peers(&self) -> BTreeMap<std::net::IpAddr, PeerCounters> {
        self.lock().peers.iter().map(|(k, v)| (*k, *v)).collect()
    }

    /// Milliseconds since the recorder (the world) started.
    pub fn elapsed_ms(&self) -> u64 {
        self.shared.started.elapsed().as_millis() as u64
    }

    /// When the recorder started, in ms since the Unix epoch: add [`CopyRecord::at_ms`] to get
    /// a wall-clock time comparable with Herald's own timestamps.
    pub fn started_unix_ms(&self) -> u64 {
        self.shared.started_unix_ms
    }

    /// Accepted copies so far (duplicates included); cheap.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::Acquire)
    }

    /// Waits until at least `count` copies were accepted; false if `timeout` passed first.
    pub async fn wait_for(&self, count: u64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            let notified = self.shared.changed.notified();
            tokio::pin!(notified);
            // Register before checking, so a batch recorded in between is not missed.
            notified.as_mut().enable();
            if self.accepted() >= count {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.accepted() >= count;
            }
        }
    }

    /// Everything recorded so far.
    pub fn snapshot(&self) -> Snapshot {
        let st = self.lock();
        Snapshot {
            accepted: st.copies.len() as u64,
            unique_recipients: st.recipients.len() as u64,
            duplicates: st.duplicates,
            mime_checked: st.mime_checked,
            mime_malformed: st.mime_malformed,
            rejected_by_code: st.rejected_by_code.clone(),
            hosts: st
                .hosts
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
            copies: st.copies.clone(),
            rejections: st.rejections.clone(),
        }
    }

    /// Distinct recipients with at least one accepted copy so far; cheap (no copying).
    pub fn unique_recipients(&self) -> u64 {
        self.lock().recipients.len() as u64
    }

    /// Duplicate copies so far; cheap.
    pub fn duplicates(&self) -> u64 {
        self.lock().duplicates
    }

    /// Takes the copies and rejections recorded since the last drain out of the recorder,
    /// leaving the counters and duplicate detection intact. Used by an exporter that streams
    /// records to disk ([`crate::export`]) so a long run's memory stays bounded; after a drain,
    /// [`Recorder::snapshot`] holds only what was recorded since.
    pub fn drain(&self) -> (Vec<CopyRecord>, Vec<Rejection>) {
        let mut st = self.lock();
        (
            std::mem::take(&mut st.copies),
            std::mem::take(&mut st.rejections),
        )
    }

    /// Forgets everything recorded (the clock keeps running).
    pub fn reset(&self) {
        *self.lock() = State::default();
        self.shared.accepted.store(0, Ordering::Release);
    }

    /// Records a batch of accepted copies and rejections from one session. `duplicate` is
    /// decided here; whatever the caller put there is overwritten.
    pub(crate) fn record(&self, mut copies: Vec<CopyRecord>, rejections: Vec<Rejection>) {
        if copies.is_empty() && rejections.is_empty() {
            return;
        }
        // Hash outside the lock: the lock is shared by every session of every host.
        let keys: Vec<([u8; 16], [u8; 16])> = copies.iter().map(dedup_keys).collect();
        let n = copies.len() as u64;
        {
            let mut st = self.lock();
            for (c, (rcpt_key, dup_key)) in copies.iter_mut().zip(keys) {
                st.recipients.insert(rcpt_key);
                c.duplicate = !st.seen.insert(dup_key);
                st.duplicates += u64::from(c.duplicate);
                match c.mime {
                    MimeVerdict::NotChecked => {}
                    MimeVerdict::LinesOk | MimeVerdict::WellFormed => st.mime_checked += 1,
                    MimeVerdict::Malformed(_) => {
                        st.mime_checked += 1;
                        st.mime_malformed += 1;
                    }
                }
                st.hosts.entry(c.host.clone()).or_default().accepted += 1;
            }
            st.copies.append(&mut copies);
            for r in &rejections {
                *st.rejected_by_code.entry(r.code_text()).or_default() += 1;
            }
            st.rejections.extend(rejections);
        }
        if n > 0 {
            self.shared.accepted.fetch_add(n, Ordering::AcqRel);
        }
        self.shared.changed.notify_waiters();
    }

    /// STARTTLS handshakes over every host: (full, resumed).
    pub fn tls_handshakes(&self) -> (u64, u64) {
        let st = self.lock();
        (st.hosts.values()).fold((0, 0), |(f, r), c| (f + c.tls_full, r + c.tls_resumed))
    }

    /// Updates one host's connection counters.
    pub(crate) fn count(&self, host: &Arc<str>, f: impl FnOnce(&mut HostCounters)) {
        f(self.lock().hosts.entry(host.clone()).or_default());
    }
}

/// (recipient key, duplicate key) of a copy.
fn dedup_keys(c: &CopyRecord) -> ([u8; 16], [u8; 16]) {
    let rcpt = recipient_key(&c.recipient);
    let mut dup = rcpt.clone();
    match &c.message_id {
        Some(id) => {
            dup.update(b"\0id\0");
            dup.update(id.as_bytes());
        }
        None => {
            dup.update(b"\0digest\0");
            dup.update(c.digest);
        }
    }
    (truncate(rcpt), truncate(dup))
}

/// SHA-256 of a message, truncated to 128 bits.
pub(crate) fn digest(message: &[u8]) -> [u8; 16] {
    truncate(Sha256::new_with_prefix(message))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy(rcpt: &str, id: Option<&str>, digest: [u8; 16]) -> CopyRecord {
        CopyRecord {
            host: Arc::from("mx.example"),
            sender: "".into(),
            recipient: rcpt.into(),
            size: 10,
            digest,
            at_ms: 0,
            message_id: id.map(Arc::from),
            mime: MimeVerdict::NotChecked,
            tls: false,
            duplicate: false,
            message: None,
            smtputf8: false,
            dsn: "".into(),
            peer: None,
        }
    }

    #[tokio::test]
    async fn detects_duplicates_by_message_id_then_digest() {
        let r = Recorder::new();
        r.record(
            vec![
                copy("a@x.example", Some("<1@p>"), [1; 16]),
                copy("a@X.EXAMPLE", Some("<1@p>"), [2; 16]),
                copy("b@x.example", Some("<1@p>"), [1; 16]),
                copy("c@x.example", None, [3; 16]),
                copy("c@x.example", None, [3; 16]),
                copy("c@x.example", None, [4; 16]),
            ],
            vec![],
        );
        let s = r.snapshot();
        assert_eq!((s.accepted, s.unique_recipients, s.duplicates), (6, 3, 2));
        assert_eq!(
            s.by_recipient().len(),
            4,
            "grouping is by the address as given"
        );
        let dups: Vec<_> = s.duplicate_copies().iter().map(|c| c.digest[0]).collect();
        assert_eq!(dups, [2, 3]);
        assert!(r.wait_for(6, Duration::from_millis(1)).await);
        assert!(!r.wait_for(7, Duration::from_millis(20)).await);
        r.reset();
        assert_eq!(r.snapshot().accepted, 0);
    }
}
