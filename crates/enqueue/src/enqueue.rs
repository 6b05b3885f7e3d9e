//! The one enqueue path (Postfix cleanup(8)): SMTP, LMTP, HTTP injection, approved held posts,
//! generated mail (confirmations, notices) and postmaster mail all enter through
//! [`Enqueuer::enqueue`] with a [`Submission`] saying what arrived.
//!
//! Flow: a submission is checked (size), list posts get their arrival check (SPF/DKIM/ARC/DMARC,
//! `arrival.rs`) and the posting policy (may the sender post, content rules: `policy.rs`),
//! retried duplicates are suppressed (same Message-ID on the same list within the dedup window:
//! acknowledged with the first post's id, not spooled again), then [`Enqueuer::accept`] — the one
//! place that builds a `PostMeta` — makes the post durable and puts it in the hand-off backlog
//! (`backlog.rs`), whose task hands it over by its kind: list posts and generated mail to
//! fan-out, bounces to the bounce stage, requests, held posts and postmaster mail to the lists
//! stage ([`crate::Handoff`]).
//!
//! One-way arrows: this crate is upstream of the scheduler, the lists stage and the bounce
//! stage. It never imports them; it hands posts over bounded channels that the composition root
//! connects. The caller's answer (the `250`) waits for the spool only; a full backlog makes it
//! wait before the post is written (backpressure once a stage downstream has stayed slower
//! than the intake for `[intake] backlog_max_posts` posts).
//!
//! Invariants: durable before the id is returned; the spool write and the hand-off run in a
//! task of their own, so a caller that goes away cannot leave a durable post without its
//! hand-off; a post that cannot be handed over (the stage is stopping) stays in the spool and
//! is picked up at the next start.
//!
//! Where things are: this file holds the submissions, the drafts and the steps every post
//! takes (size, arrival check, header, duplicate check); `posting` the posting decision for a
//! list post (ban, guards, content filter, rights); `commit` the detached spool write and
//! hand-off; `heads` the header fields the path reads.

mod commit;
mod heads;
mod posting;

pub use heads::{crlf, from_header};
pub(crate) use posting::banned_reply;

use crate::arrival::{ArrivalCheck, Source};
use crate::backlog::Backlog;
use crate::complete::{self, complete_header};
use crate::error::EnqueueError;
use bytes::Bytes;
use commit::Commit;
use heads::{message_id, Heads};
use herald_directory::Directory;
use herald_spool::{DedupStore, PostKind, PostMeta, Spool};
use herald_telemetry::Telemetry;
use herald_types::{Address, DeliveryMode, List, ListAddressKind, ListId, MemberId, PostId};
use posting::Posting;
/// shared body).
pub const HANDOFF_CAPACITY: usize = 1024;

/// What arrived, and for whom.
pub enum Submission {
    /// Mail to a list address in one of its roles (post, `-bounces`, `-request`).
    List {
        list: Box<List>,
        role: ListAddressKind,
        origin: Origin,
        body: Bytes,
    },
    /// Mail Herald writes itself for a list (a confirmation, a notice) to one explicit
    /// recipient; delivered to that address only, never to the members.
    Generated {
        list: Box<List>,
        to: Address,
        body: Bytes,
    },
    /// Mail to postmaster (`rcpt`, already checked to be one of ours), stored for the operator.
    /// The server-wide size limit applies; no arrival check (nothing is decided from its
    /// authentication, and a flood must not cost DNS work).
    Postmaster {
        rcpt: Address,
        envelope_from: Option<Address>,
        /// The DSN parameters (RFC 3461) of the transaction and of this recipient, kept for
        /// the forward (`None`: there were none).
        dsn: Option<herald_types::Dsn>,
        body: Bytes,
    },
    /// A list digest (built by `herald-digest` from the archive): a list post for the
    /// enabled members whose delivery mode is `audience` only, personalized like any copy. No
    /// arrival check, guard or duplicate check: Herald wrote it, and the digest stage's own
    /// record is what keeps it from being sent twice.
    Digest {
        list: Box<List>,
        audience: DeliveryMode,
        body: Bytes,
    },
    /// Mail to the complaints address (`[complaints] local_part` at a list domain): spooled as
    /// a bounce with no list, for the bounce stage's complaint handling.
    Complaint { rcpt: Address, body: Bytes },
    /// Server mail from `from` (a postmaster address) to `to`, sent from the null reverse path
    /// so that no bounce or auto-reply can come back to Herald.
    Server {
        from: Address,
        to: Vec<Address>,
        /// DSN parameters to pass on to each recipient's server when it offers DSN (a
        /// postmaster forward relays those the message to postmaster came with).
        dsn: Option<herald_types::Dsn>,
        body: Bytes,
    },
}

/// How a list's mail reached it.
pub enum Origin {
    /// Over SMTP/LMTP: the posting policy decides between fan-out and moderation.
    Smtp {
        envelope_from: Option<Address>,
        /// The client's address and HELO name, for SPF. `None` over LMTP: the client is the
        /// MTA in front of Herald (often 127.0.0.1), and SPF against it would be a false
        /// result; the arrival check reads the real client from that MTA's `Received:`.
        peer: Option<std::net::IpAddr>,
        helo: String,
        /// MAIL said `SMTPUTF8` (RFC 6531): the header block may carry raw UTF-8. Without it a
        /// post's 8-bit header fields are encoded or the post refused (`eight_bit.rs`).
        smtputf8: bool,
    },
    /// Injected by an administrator (CLI / HTTP API): approved.
    Admin,
    /// A held post a moderator approved: a list post, exempt from the duplicate check (its
    /// Message-ID was recorded when it was held).
    Approved { envelope_from: Option<Address> },
    /// A post held for moderation on another list server, brought over by an import (moving in
    /// loses nothing): held here too, with that server's reason; never fanned out until
    /// approved. The duplicate check applies, so importing the same held post again keeps one.
    Imported {
        envelope_from: Option<Address>,
        reason: String,
    },
}

pub struct Enqueuer {
    pub directory: Directory,
    pub spool: Spool,
    pub telemetry: Telemetry,
    /// The server-wide size limit (the SMTP limit), applied to HTTP injection as well.
    pub max_message_bytes: u64,
    /// Retry and cross-post suppression (`None`: off).
    pub dedup: Option<DedupStore>,
    /// Authentication results of list posts, taken once on arrival.
    pub arrival: ArrivalCheck,
    /// Where spooled posts wait for their hand-off to the next stage ([`crate::backlog::run`]
    /// hands them over): the `250` waits for the spool, not for the stages downstream.
    pub backlog: Backlog,
    /// Posts per sender per list in the current hour (`max_posts_per_hour`).
    pub post_rate: herald_guard::PostRate,
    /// `[content_filter]`: rspamd asked about each list post from SMTP/LMTP (`None`: off).
    pub content_filter: Option<herald_content_filter::ContentFilter>,
    /// Shared fan-out: list posts are committed to the shared store before
    /// they are acknowledged (`None`: off, they go to this node's fan-out).
    pub shared: Option<std::sync::Arc<dyn crate::SharedIntake>>,
    /// Duplicate suppression across the cluster's nodes (`None`: this node's
    /// log only).
    pub cluster_dedup: Option<crate::ClusterDedup>,
}

/// A post about to be accepted: everything [`Enqueuer::accept`] needs to build its `PostMeta`.
struct Draft {
    kind: PostKind,
    list_id: ListId,
    list_address: Address,
    envelope_from: Option<Address>,
    received_at_ms: u64,
    max_member_id: MemberId,
    recipients: Vec<Address>,
    hold_reason: Option<String>,
    null_sender: bool,
    /// `ListPost`: the delivery mode whose members get it (a digest's; regular otherwise).
    audience: DeliveryMode,
    dsn: Option<herald_types::Dsn>,
    /// The Message-ID header (without angle brackets), for duplicate suppression.
    message_id: Option<String>,
    /// Claim the Message-ID across the cluster before spooling (a list post from outside that
    /// passed this node's duplicate check).
    claim: bool,
    /// Hand the post to its stage once spooled. False for a held post an import brings: the
    /// lists stage's hand-off is what mails the poster and the moderators, and an import sends
    /// nothing (the post waits in the moderators' queue, read from the spool).
    hand_off: bool,
    body: Bytes,
}

impl Draft {
    /// A post with no member snapshot and no hold reason, received now.
    fn plain(kind: PostKind, list_id: ListId, list_address: Address, body: Bytes) -> Draft {
        Draft {
            kind,
            list_id,
            list_address,
            envelope_from: None,
            received_at_ms: herald_types::unix_ms_now(),
            max_member_id: MemberId(0),
            recipients: Vec::new(),
            hold_reason: None,
            null_sender: false,
            audience: DeliveryMode::Regular,
            dsn: None,
            message_id: message_id(&body),
            claim: false,
            hand_off: true,
            body,
        }
    }
}

impl Enqueuer {
    /// Makes a submission durable and hands it to the stage that owns its kind. Returns only
    /// after the post is on disk (or, for a retried duplicate, the first post's id).
    pub async fn enqueue(&self, submission: Submission) -> Result<PostId, EnqueueError> {
        let draft = match submission {
            Submission::List {
                list,
                role,
                origin,
                body,
            } => match self.list_draft(&list, &role, origin, body).await? {
                Ok(draft) => draft,
                Err(first) => return Ok(first),
            },
            Submission::Generated { list, to, body } => {
                let mut d = Draft::plain(PostKind::Generated, list.id, list.address, body);
                d.recipients = vec![to];
                d
            }
            Submission::Postmaster {
                rcpt,
                envelope_from,
                dsn,
                body,
            } => {
                if body.len() as u64 > self.max_message_bytes {
                    return Err(EnqueueError::TooBig {
                        limit: self.max_message_bytes,
                    });
                }
                let mut d = Draft::plain(PostKind::Postmaster, ListId::NONE, rcpt, body);
                d.envelope_from = envelope_from;
                d.dsn = dsn;
                d
            }
            Submission::Digest {
                list,
                audience,
                body,
            } => {
                let dir = self.directory.clone();
                let list_id = list.id;
                let max_member_id =
                    tokio::task::spawn_blocking(move || dir.max_member_id(list_id)).await??;
                let mut d = Draft::plain(PostKind::ListPost, list.id, list.address, body);
                d.max_member_id = max_member_id;
                d.audience = audience;
                d
            }
            Submission::Complaint { rcpt, body } => {
                if body.len() as u64 > self.max_message_bytes {
                    return Err(EnqueueError::TooBig {
                        limit: self.max_message_bytes,
                    });
                }
                Draft::plain(PostKind::Bounce, ListId::NONE, rcpt, body)
            }
            Submission::Server {
                from,
                to,
                dsn,
                body,
            } => {
                let mut d = Draft::plain(PostKind::Generated, ListId::NONE, from, body);
                d.recipients = to;
                d.null_sender = true;
                d.dsn = dsn;
                d
            }
        };
        self.accept(draft).await
    }

    /// An administrator's post to `list` (CLI / HTTP API), line endings made CRLF.
    pub async fn inject(&self, list: &Address, body: Bytes) -> Result<PostId, EnqueueError> {
        let dir = self.directory.clone();
        let addr = list.clone();
        let found = tokio::task::spawn_blocking(move || dir.list_by_address(&addr)).await??;
        let found = found.ok_or_else(|| EnqueueError::NoSuchList(list.clone()))?;
        self.enqueue(Submission::List {
            list: Box::new(found),
            role: ListAddressKind::Post,
            origin: Origin::Admin,
            body: crlf(body),
        })
        .await
    }

    /// A post held on another list server, held here with `reason` (an import).
    /// Answers the first post's id when the same Message-ID was already taken for the list.
    pub async fn hold_imported(
        &self,
        list: &Address,
        envelope_from: Option<Address>,
        reason: String,
        body: Bytes,
    ) -> Result<PostId, EnqueueError> {
        let dir = self.directory.clone();
        let addr = list.clone();
        let found = tokio::task::spawn_blocking(move || dir.list_by_address(&addr)).await??;
        let found = found.ok_or_else(|| EnqueueError::NoSuchList(list.clone()))?;
        self.enqueue(Submission::List {
            list: Box::new(found),
            role: ListAddressKind::Post,
            origin: Origin::Imported {
                envelope_from,
                reason,
            },
            body: crlf(body),
        })
        .await
    }

    /// The draft of mail to a list, or `Err(first)` when it is a retry of the post `first`.
    async fn list_draft(
        &self,
        list: &List,
        role: &ListAddressKind,
        origin: Origin,
        body: Bytes,
    ) -> Result<Result<Draft, PostId>, EnqueueError> {
        let limit = match list.settings.max_message_bytes {
            0 => self.max_message_bytes,
            l => l.min(self.max_message_bytes),
        };
        if body.len() as u64 > limit {
            return Err(EnqueueError::TooBig { limit });
        }
        let envelope_from = match &origin {
            Origin::Smtp { envelope_from, .. }
            | Origin::Approved { envelope_from }
            | Origin::Imported { envelope_from, .. } => envelope_from.clone(),
            Origin::Admin => None,
        };
        let body = self
            .stamp(role, &origin, envelope_from.as_ref(), body)
            .await;
        let now = herald_types::unix_ms_now();
        let approved = matches!(origin, Origin::Approved { .. });
        let mut body = self.finish_header(role, &origin, approved, body, now)?;
        // The header fields decided on below, parsed once. Later changes to the body only
        // append fields the content filter asks for, at the end of the header.
        let heads = Heads::parse(&body);
        if let (ListAddressKind::Post, false) = (role, approved) {
            if let Some(first) = self.duplicate_of(list, heads.message_id.as_deref(), now) {
                return Ok(Err(first));
            }
        }
        let claim = matches!((role, approved), (ListAddressKind::Post, false));
        let hand_off = !matches!(origin, Origin::Imported { .. });
        let posting = self
            .list_posting(list, role, origin, envelope_from.clone(), &mut body, &heads)
            .await?;
        let recipients = match role {
            ListAddressKind::Bounces { member: Some(m) } => vec![m.clone()],
            _ => Vec::new(),
        };
        Ok(Ok(Draft {
            kind: posting.kind,
            list_id: list.id,
            list_address: list.address.clone(),
            envelope_from,
            received_at_ms: now,
            max_member_id: posting.max_member_id,
            recipients,
            hold_reason: posting.hold_reason,
            null_sender: false,
            audience: DeliveryMode::Regular,
            // A list post: the list is the new originator (see `inbound::relayed_dsn`).
            dsn: None,
            message_id: heads.message_id,
            claim,
            hand_off,
            body,
        }))
    }

    /// A list post's header made fit to leave, after the arrival check (it must verify what
    /// the poster signed, raw bytes and all): ASCII when it came without SMTPUTF8 (or refused),
    /// and completed (`Date:`, `Message-ID:`) unless it is an approved post, which was
    /// completed when it arrived and was held.
    fn finish_header(
        &self,
        role: &ListAddressKind,
        origin: &Origin,
        approved: bool,
        body: Bytes,
        now: u64,
    ) -> Result<Bytes, EnqueueError> {
        let body = match (role, origin) {
            (
                ListAddressKind::Post,
                Origin::Smtp {
                    smtputf8: false, ..
                },
            ) => match crate::eight_bit::seven_bit_headers(&body) {
                Ok(None) => body,
                Ok(Some(encoded)) => encoded,
                Err(why) => return Err(EnqueueError::EightBitHeader(why)),
            },
            _ => body,
        };
        Ok(match (role, approved) {
            (ListAddressKind::Post, false) => complete_header(
                body,
                complete::Stamp {
                    now_secs: now / 1000,
                    nonce: rand::random(),
                    host: self.arrival.authserv_id(),
                },
            ),
            _ => body,
        })
    }

    /// How mail to a list is spooled: a post from SMTP/LMTP by the posting policy
    /// ([`Enqueuer::posting_kind`]); the rest by its role (a bounce, a request, a held post an
    /// import brought, an administrator's or an approved post) with the member-id snapshot.
    async fn list_posting(
        &self,
        list: &List,
        role: &ListAddressKind,
        origin: Origin,
        envelope_from: Option<Address>,
        body: &mut Bytes,
        heads: &Heads,
    ) -> Result<Posting, EnqueueError> {
        if let (ListAddressKind::Post, Origin::Smtp { .. }) = (role, &origin) {
            let from = heads.from.clone();
            return self
                .posting_kind(list, envelope_from, &origin, body, from)
                .await;
        }
        let (kind, hold_reason) = match (role, origin) {
            (ListAddressKind::Bounces { .. }, _) => (PostKind::Bounce, None),
            (ListAddressKind::Request, _) => (PostKind::Request, None),
            (ListAddressKind::Post, Origin::Imported { reason, .. }) => {
                (PostKind::Held, Some(reason))
            }
            (ListAddressKind::Post, _) => (PostKind::ListPost, None),
        };
        let dir = self.directory.clone();
        let list_id = list.id;
        let max_member_id =
            tokio::task::spawn_blocking(move || dir.max_member_id(list_id)).await??;
        Ok(Posting {
            kind,
            hold_reason,
            max_member_id,
        })
    }

    /// The arrival check for list posts from SMTP, LMTP and injection. An approved post was
    /// stamped when it arrived and was held; it keeps that verdict.
    async fn stamp(
        &self,
        role: &ListAddressKind,
        origin: &Origin,
        envelope_from: Option<&Address>,
        body: Bytes,
    ) -> Bytes {
        match (role, origin) {
            (ListAddressKind::Post, Origin::Smtp { peer, helo, .. }) => {
                let mail_from = envelope_from.map(ToString::to_string);
                let mail_from = mail_from.as_deref().unwrap_or("");
                let source = match *peer {
                    Some(ip) => Source::Smtp {
                        ip,
                        helo,
                        mail_from,
                    },
                    None => Source::Lmtp { mail_from },
                };
                self.arrival.stamp(body, source).await
            }
            (ListAddressKind::Post, Origin::Admin) => {
                self.arrival.stamp(body, Source::Injected).await
            }
            _ => body,
        }
    }

    /// The first post of a retried list post (same Message-ID within the dedup window).
    fn duplicate_of(&self, list: &List, message_id: Option<&str>, now: u64) -> Option<PostId> {
        let (d, mid) = (self.dedup.as_ref()?, message_id?);
        let first = d.seen_on_list(list.id, mid, now)?;
        tracing::info!(list = %list.address, first = %first, message_id = %mid,
            "duplicate Message-ID within the dedup window: acknowledged, not fanned out again");
        Some(first)
    }

    /// The one place a `PostMeta` is built: makes the draft durable, records list posts'
    /// Message-IDs for duplicate suppression, and hands the post over.
    async fn accept(&self, draft: Draft) -> Result<PostId, EnqueueError> {
        let meta = PostMeta {
            kind: draft.kind,
            list_id: draft.list_id,
            list_address: draft.list_address,
            envelope_from: draft.envelope_from,
            received_at_ms: draft.received_at_ms,
            max_member_id: draft.max_member_id,
            message_id: draft.message_id,
            recipients: draft.recipients,
            hold_reason: draft.hold_reason,
            null_sender: draft.null_sender,
            audience: draft.audience,
            dsn: draft.dsn.map(Box::new),
            member_range: None,
        };
        let body = draft.body;
        // Room in the backlog first: when it is full (a stage downstream slower than the intake
        // for a long while) the sender waits here, before anything is written.
        let reservation = self.backlog.reserve(body.len()).await;
        let commit = Commit {
            claim: draft.claim,
            hand_off: draft.hand_off,
            spool: self.spool.clone(),
            telemetry: self.telemetry.clone(),
            dedup: self.dedup.clone(),
            cluster_dedup: self.cluster_dedup.clone(),
            shared: self.shared.clone(),
            reservation,
        };
        // A task of its own: once the spool has the post, its hand-off must happen even if our
        // caller goes away meanwhile (an HTTP client that hung up, a stage stopping), or the
        // durable post would wait for the next start.
        tokio::spawn(commit.run(meta, body)).await?
    }
}
