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

use crate::arrival::{ArrivalCheck, Source};
use crate::backlog::{Backlog, Reservation};
use crate::cluster_dedup::Claim;
use crate::complete::{self, complete_header};
use crate::error::EnqueueError;
use crate::rights::{posting_right, PostingRight};
use bytes::Bytes;
use herald_directory::{Directory, DirectoryError};
use herald_spool::{DedupStore, PostKind, PostMeta, Seen, Spool, SpooledPost};
use herald_telemetry::{Event, Telemetry};
use herald_types::{
    Address, DeliveryMode, FilterVerdict, GuardAction, GuardTrip, List, ListAddressKind, ListId,
    MemberId, PostId,
};

/// Capacity of each hand-over channel (posts, not copies: a post is one small struct with a
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
        // After the arrival check (it must verify what the poster signed, raw bytes and all):
        // a post that came without SMTPUTF8 leaves with an ASCII header block, or not at all.
        let body = match (role, &origin) {
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
        // After the arrival check (it must verify what the poster signed); an approved post
        // was completed when it arrived and was held.
        let mut body = match (role, approved) {
            (ListAddressKind::Post, false) => complete_header(
                body,
                complete::Stamp {
                    now_secs: now / 1000,
                    nonce: rand::random(),
                    host: self.arrival.authserv_id(),
                },
            ),
            _ => body,
        };
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
        let posting = match (role, origin) {
            (ListAddressKind::Post, origin @ Origin::Smtp { .. }) => {
                let from = heads.from.clone();
                self.posting_kind(list, envelope_from.clone(), &origin, &mut body, from)
                    .await?
            }
            (role, origin) => {
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
                Posting {
                    kind,
                    hold_reason,
                    max_member_id,
                }
            }
        };
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

/// What makes a post durable and puts it in the backlog, moved into a task of its own.
struct Commit {
    /// See [`Draft::claim`] and [`Draft::hand_off`].
    claim: bool,
    hand_off: bool,
    spool: Spool,
    telemetry: Telemetry,
    dedup: Option<DedupStore>,
    cluster_dedup: Option<crate::ClusterDedup>,
    shared: Option<std::sync::Arc<dyn crate::SharedIntake>>,
    /// `None`: the hand-off task has stopped (shutdown); the post is resumed from the spool.
    reservation: Option<Reservation>,
}

impl Commit {
    /// Spools the post (durable on return), records list posts' Message-IDs for duplicate
    /// suppression, and puts the post in the backlog.
    async fn run(self, meta: PostMeta, body: Bytes) -> Result<PostId, EnqueueError> {
        // The cluster-wide claim before the spool write: of nodes taking the same post at once
        // one spools it, the others answer as for a retry (see `cluster_dedup`).
        let cluster = match (&self.cluster_dedup, &meta.message_id, self.claim) {
            (Some(c), Some(mid), true) => match c.claim(meta.list_id, mid).await {
                Claim::Spool { claimed: true } => Some((c, mid)),
                Claim::Spool { claimed: false } => None,
                Claim::Duplicate(first) => return Ok(first),
                Claim::Busy => return Err(EnqueueError::ClaimedElsewhere),
            },
            _ => None,
        };
        let id = match self.spool.accept(meta.clone(), body.clone()).await {
            Ok(id) => id,
            Err(e) => {
                if let Some((c, mid)) = cluster {
                    c.release(meta.list_id, mid).await;
                }
                return Err(e.into());
            }
        };
        if let (Some(d), Some(mid), PostKind::ListPost | PostKind::Held) =
            (&self.dedup, &meta.message_id, meta.kind)
        {
            let seen = Seen {
                list: meta.list_id,
                post: id,
                max_member: meta.max_member_id,
                at_ms: meta.received_at_ms,
            };
            d.record(mid, seen);
        }
        if let Some((c, mid)) = cluster {
            c.record(meta.list_id, mid, id).await;
        }
        let post = SpooledPost { id, meta, body };
        if let (Some(shared), PostKind::ListPost) = (&self.shared, post.meta.kind) {
            // Committed to the shared store before the 250 (group commit with concurrent posts).
            shared.share(&post).await;
        }
        if post.meta.kind == PostKind::ListPost {
            self.telemetry.emit(Event::PostAccepted {
                post: post.id,
                list: post.meta.list_address.clone(),
                size: post.body.len(),
                received_at_ms: post.meta.received_at_ms,
                recovered: false,
            });
        }
        match self.reservation {
            Some(_) if !self.hand_off => {
                tracing::info!(post = %id, list = %post.meta.list_address,
                    "held post brought by an import: waits for a moderator, nobody is mailed");
            }
            Some(r) => r.hand(post),
            None => tracing::info!(post = %id, kind = ?post.meta.kind,
                "accepted while stopping: handed over from the spool at the next start"),
        }
        Ok(id)
    }
}

impl Enqueuer {
    /// A list post if the sender may post (by the From header or the envelope sender), otherwise
    /// held for moderation. The content filter may add header fields to `body`. What the
    /// directory knows (ban, posting right, member-id snapshot) and the content rules are asked
    /// in one blocking task ([`Enqueuer::post_facts`]); the decisions are taken in the same
    /// order as ever: ban, guards, content filter, posting right, aligned `From:`, content rules.
    async fn posting_kind(
        &self,
        list: &List,
        envelope_from: Option<Address>,
        origin: &Origin,
        body: &mut Bytes,
        from: Option<Address>,
    ) -> Result<Posting, EnqueueError> {
        // With require_aligned_from only the From: counts, and only if authentic (below): the
        // envelope sender and an unauthenticated From: are whatever the client typed.
        let aligned_only = list.settings.requires_aligned_from();
        let mut senders: Vec<Address> = from.iter().cloned().collect();
        if !aligned_only {
            senders.extend(envelope_from.iter().cloned());
        }
        let facts = self
            .post_facts(list, from.clone(), senders, body.clone())
            .await?;
        if let (Some(f), Some(ban)) = (&from, &facts.ban) {
            self.telemetry.metrics().count_list_guard(GuardTrip::Banned);
            tracing::info!(list = %list.address, from = %f, ban = ban.id,
                "post refused: the From: address is banned");
            return Err(EnqueueError::Banned {
                sender: f.clone(),
                list: list.address.clone(),
                ban: describe_ban(ban),
            });
        }
        let held = |reason: String| Posting {
            kind: PostKind::Held,
            hold_reason: Some(reason),
            max_member_id: facts.max_member_id,
        };
        if let Some(trip) = self.guard_trip(list, from.as_ref().or(envelope_from.as_ref()), body) {
            self.telemetry.metrics().count_list_guard(trip);
            tracing::info!(list = %list.address, guard = trip.word(),
                action = ?list.settings.guard_action, "list post stopped by a guard");
            return match list.settings.guard_action {
                GuardAction::Hold => Ok(held(trip.reason().to_string())),
                GuardAction::Reject => Err(EnqueueError::Guarded(trip)),
            };
        }
        // Before the posting authorization: spam from a non-member is refused outright rather
        // than filling the moderators' queue.
        if let Some(reason) = self.content_check(list, origin, body).await? {
            return Ok(held(reason));
        }
        let authentic = aligned_only
            && from
                .as_ref()
                .is_some_and(|f| from_is_authentic(body, f, self.arrival.authserv_id()));
        match facts.right {
            PostingRight::Allowed => {}
            PostingRight::Moderated => return Ok(held("the member's posts are moderated".into())),
            PostingRight::NotAllowed => {
                return Ok(held("the sender may not post to this list".into()))
            }
        }
        if aligned_only && !authentic {
            let trip = GuardTrip::Unauthenticated;
            self.telemetry.metrics().count_list_guard(trip);
            tracing::info!(list = %list.address, "member From: without a DMARC pass: unauthenticated sender");
            return match list.settings.guard_action {
                GuardAction::Hold => Ok(held(trip.reason().to_string())),
                GuardAction::Reject => Err(EnqueueError::Guarded(trip)),
            };
        }
        Ok(match facts.hold_reason.clone() {
            Some(r) => held(r),
            None => Posting {
                kind: PostKind::ListPost,
                hold_reason: None,
                max_member_id: facts.max_member_id,
            },
        })
    }

    /// Everything the directory and the content rules say about a list post from SMTP, in one
    /// blocking task (each `spawn_blocking` is a round trip through the blocking pool: a
    /// thread wake-up each way): the ban on its `From:` (the envelope sender's was checked at
    /// RCPT), the most permissive posting right over `senders`, the member-id snapshot, and
    /// the content rules' hold reason (a MIME parse of the whole post). A banned post skips
    /// the rest.
    async fn post_facts(
        &self,
        list: &List,
        from: Option<Address>,
        senders: Vec<Address>,
        body: Bytes,
    ) -> Result<PostFacts, EnqueueError> {
        let (dir, list) = (self.directory.clone(), list.clone());
        let facts = tokio::task::spawn_blocking(move || {
            let ban = match &from {
                Some(f) => dir.ban_for(Some(list.id), f)?,
                None => None,
            };
            if ban.is_some() {
                return Ok::<_, DirectoryError>(PostFacts {
                    ban,
                    right: PostingRight::NotAllowed,
                    max_member_id: MemberId(0),
                    hold_reason: None,
                });
            }
            // The most permissive answer over the candidate senders wins: a post whose From:
            // is an allowed member goes through even if the envelope sender is moderated, and
            // vice versa.
            let mut right = PostingRight::NotAllowed;
            for s in &senders {
                match posting_right(&list, s, || dir.posting_state(list.id, s))? {
                    PostingRight::Allowed => {
                        right = PostingRight::Allowed;
                        break;
                    }
                    PostingRight::Moderated => right = PostingRight::Moderated,
                    PostingRight::NotAllowed => {}
                }
            }
            Ok(PostFacts {
                ban: None,
                right,
                max_member_id: dir.max_member_id(list.id)?,
                hold_reason: crate::policy::hold_reason(&list.settings, &body),
            })
        })
        .await??;
        Ok(facts)
    }
}

/// What [`Enqueuer::post_facts`] found.
struct PostFacts {
    ban: Option<herald_directory::Ban>,
    right: PostingRight,
    max_member_id: MemberId,
    hold_reason: Option<String>,
}

/// How a list's mail is spooled: its kind, why it is held, and its member-id snapshot.
struct Posting {
    kind: PostKind,
    hold_reason: Option<String>,
    max_member_id: MemberId,
}

/// The header fields the enqueue path decides on, parsed once per post.
struct Heads {
    /// The first address of `From:`, if it parses as an address Herald accepts.
    from: Option<Address>,
    /// `Message-ID:` without angle brackets (at most 998 characters).
    message_id: Option<String>,
}

impl Heads {
    fn parse(body: &[u8]) -> Heads {
        let Some(msg) = mail_parser::MessageParser::new().parse_headers(body) else {
            return Heads {
                from: None,
                message_id: None,
            };
        };
        Heads {
            from: msg
                .from()
                .and_then(|f| f.first())
                .and_then(|a| a.address())
                .and_then(|a| Address::parse(a).ok()),
            message_id: msg.message_id().map(|s| s.chars().take(998).collect()),
        }
    }
}

impl Enqueuer {
    /// The content filter's verdict on a list post from SMTP/LMTP: `None`
    /// to go on (with rspamd's `X-Spam` fields added when configured), rspamd's reason to
    /// hold it, or [`EnqueueError::ContentRejected`] (`550 5.7.1` at the end of DATA). A filter
    /// that cannot answer holds the post: never lost, never waved through.
    async fn content_check(
        &self,
        list: &List,
        origin: &Origin,
        body: &mut Bytes,
    ) -> Result<Option<String>, EnqueueError> {
        let (
            Some(filter),
            Origin::Smtp {
                envelope_from,
                peer,
                helo,
                ..
            },
        ) = (&self.content_filter, origin)
        else {
            return Ok(None);
        };
        let req = herald_content_filter::CheckRequest {
            ip: *peer,
            helo: (!helo.is_empty()).then(|| helo.clone()),
            mail_from: envelope_from.as_ref().map(ToString::to_string),
            rcpts: vec![list.address.to_string()],
            queue_id: format!("{:016x}", rand::random::<u64>()),
        };
        let d = filter.check(&req, body.clone()).await;
        let elapsed_ms = u64::try_from(d.elapsed.as_millis()).unwrap_or(u64::MAX);
        self.telemetry
            .metrics()
            .count_content_filter(d.verdict, elapsed_ms);
        match d.verdict {
            FilterVerdict::Failed => tracing::warn!(list = %list.address, queue_id = %req.queue_id,
                elapsed_ms, reason = %d.reason, "content filter failed: post held"),
            v => tracing::info!(list = %list.address, queue_id = %req.queue_id, verdict = v.word(),
                elapsed_ms, reason = %d.reason, "content filter"),
        }
        match d.verdict {
            FilterVerdict::Accept => {
                if !d.headers.is_empty() {
                    *body = append_header_fields(body, d.headers.as_bytes());
                }
                Ok(None)
            }
            FilterVerdict::Hold | FilterVerdict::Failed => Ok(Some(d.reason)),
            FilterVerdict::Reject => Err(EnqueueError::ContentRejected { reason: d.reason }),
        }
    }

    /// The loop / auto-reply guard a post from SMTP trips, else its sender's post rate. A
    /// post that trips a header guard is not counted against the rate.
    fn guard_trip(&self, list: &List, sender: Option<&Address>, body: &[u8]) -> Option<GuardTrip> {
        if let Some(trip) = herald_guard::inspect(body, &list.address) {
            return Some(trip);
        }
        let sender = sender.map_or_else(|| "<>".to_string(), ToString::to_string);
        let now = herald_types::unix_ms_now();
        let max = list.settings.max_posts_per_hour;
        (!self.post_rate.admit(list.id, &sender, max, now)).then_some(GuardTrip::PostRate)
    }
}

/// Whether our arrival results in `body` (the `Authentication-Results` field with our
/// authserv-id; the arrival check removed any forged one first) say DMARC passed for `from`'s
/// domain: aligned SPF or DKIM (RFC 7489 §4.2). No field (checking off) means no.
fn from_is_authentic(body: &[u8], from: &Address, authserv_id: &str) -> bool {
    let Some(msg) = mail_parser::MessageParser::new().parse_headers(body) else {
        return false;
    };
    let ours = msg.headers().iter().find_map(|h| {
        if !h
            .name
            .as_str()
            .eq_ignore_ascii_case("Authentication-Results")
        {
            return None;
        }
        let value = msg
            .raw_message()
            .get(h.offset_start as usize..h.offset_end as usize)?;
        let id = herald_auth::results::authserv_id_of(value)?;
        id.eq_ignore_ascii_case(authserv_id.as_bytes())
            .then(|| herald_auth::results::parse_ours(value, authserv_id))?
    });
    ours.is_some_and(|r| {
        r.dmarc.as_deref() == Some("pass")
            && r.dmarc_domain
                .as_deref()
                .is_some_and(|d| d.eq_ignore_ascii_case(from.domain()))
    })
}

/// `body` with `fields` (CRLF-ended header lines) at the end of its header section: below
/// the trace fields (`Received:`, our `Authentication-Results:`), which stay on top as RFC 5321
/// §4.4 wants and as the lists stage reads them (the client of a held post's notice).
fn append_header_fields(body: &[u8], fields: &[u8]) -> Bytes {
    let at = match body.windows(4).position(|w| w == b"\r\n\r\n") {
        Some(end) => end + 2,
        // A header section with no body: the fields go after its last line.
        None if body.ends_with(b"\r\n") => body.len(),
        None => return Bytes::copy_from_slice(body),
    };
    let mut out = Vec::with_capacity(body.len() + fields.len());
    out.extend_from_slice(&body[..at]);
    out.extend_from_slice(fields);
    out.extend_from_slice(&body[at..]);
    Bytes::from(out)
}

/// A ban as the SMTP reply names it: its scope and pattern, cut so the reply line stays short.
fn describe_ban(ban: &herald_directory::Ban) -> String {
    let scope = if ban.list.is_some() {
        "list ban"
    } else {
        "global ban"
    };
    let pattern: String = ban.pattern.chars().take(100).collect();
    format!("{scope} {pattern}")
}

/// The reply to a banned envelope sender at RCPT.
pub(crate) fn banned_reply(
    sender: &Address,
    list: &Address,
    ban: &herald_directory::Ban,
) -> herald_types::Reply {
    herald_smtp::replies::sender_banned(sender, list, &describe_ban(ban))
}

/// The first address of the From header, if it parses as an address Herald accepts.
pub fn from_header(body: &[u8]) -> Option<Address> {
    let msg = mail_parser::MessageParser::new().parse_headers(body)?;
    let addr = msg.from()?.first()?.address()?;
    Address::parse(addr).ok()
}

/// The Message-ID header (without angle brackets), kept for duplicate suppression.
fn message_id(body: &[u8]) -> Option<String> {
    let msg = mail_parser::MessageParser::new().parse_headers(body)?;
    msg.message_id().map(|s| s.chars().take(998).collect())
}

/// Files on disk often have bare LF line endings; the spool keeps CRLF, as SMTP delivers it.
pub fn crlf(body: Bytes) -> Bytes {
    let has_bare_lf = body
        .iter()
        .enumerate()
        .any(|(i, &b)| b == b'\n' && (i == 0 || body[i - 1] != b'\r'));
    if !has_bare_lf {
        return body;
    }
    let mut out = Vec::with_capacity(body.len() + body.len() / 40);
    let mut prev = 0u8;
    for &b in body.iter() {
        if b == b'\n' && prev != b'\r' {
            out.push(b'\r');
        }
        out.push(b);
        prev = b;
    }
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::append_header_fields;

    #[test]
    fn spam_fields_go_below_the_trace_fields() {
        let f = b"X-Spam: Yes\r\n";
        let post = b"Received: from a\r\nSubject: s\r\n\r\nbody\r\n\r\nmore\r\n";
        assert_eq!(
            &append_header_fields(post, f)[..],
            &b"Received: from a\r\nSubject: s\r\nX-Spam: Yes\r\n\r\nbody\r\n\r\nmore\r\n"[..]
        );
        assert_eq!(
            &append_header_fields(b"Subject: s\r\n", f)[..],
            &b"Subject: s\r\nX-Spam: Yes\r\n"[..]
        );
        // Not a header section Herald could extend: left as it is.
        assert_eq!(&append_header_fields(b"junk", f)[..], &b"junk"[..]);
    }
}
