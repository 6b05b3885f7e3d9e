//! The one enqueue path (Postfix cleanup(8)): SMTP, LMTP, HTTP injection, approved held posts
//! and generated mail (confirmations, notices) all end here. It decides what kind of post a
//! message is for a list (a list post, a post held for moderation, a bounce, a request,
//! generated mail), suppresses retried duplicates (same Message-ID on the same list within the
//! dedup window: acknowledged with the first post's id, not spooled again), records the
//! member-id snapshot, makes the post durable, hands list posts and generated mail to the
//! scheduler, and bounces, requests and held posts to the lists stage. Mail to postmaster
//! (`enqueue_postmaster`) is stored the same way and handed to the lists stage too; its
//! forwards to the operators (`enqueue_server_mail`) are generated mail from `<>`.

use crate::arrival::{ArrivalCheck, Source};
use bytes::Bytes;
use herald_directory::{Directory, DirectoryError};
use herald_fanout::{DedupStore, Seen};
use herald_scheduler::Scheduler;
use herald_spool::{PostKind, PostMeta, Spool, SpoolError, SpooledPost};
use herald_telemetry::{Event, Telemetry};
use herald_types::{Address, List, ListAddressKind, ListId, PostId};
use tokio::sync::mpsc;

/// Why a message could not be enqueued.
#[derive(Debug, thiserror::Error)]
pub enum EnqueueError {
    #[error("the message is larger than the list allows ({limit} bytes)")]
    TooBig { limit: u64 },
    #[error("directory: {0}")]
    Directory(#[from] DirectoryError),
    #[error("spool: {0}")]
    Spool(#[from] SpoolError),
    #[error("internal task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

impl EnqueueError {
    /// Worth a retry by the sender (4xx) rather than a refusal (5xx).
    pub fn is_transient(&self) -> bool {
        !matches!(self, EnqueueError::TooBig { .. })
    }
}

pub struct Enqueuer {
    pub directory: Directory,
    pub spool: Spool,
    pub scheduler: Scheduler,
    pub telemetry: Telemetry,
    /// The server-wide size limit (the SMTP limit), applied to HTTP injection as well.
    pub max_message_bytes: u64,
    /// Retry and cross-post suppression (`None`: off).
    pub dedup: Option<DedupStore>,
    /// Bounces, requests and held posts go to the lists stage (bounded; the sender waits).
    pub side: Option<mpsc::Sender<SpooledPost>>,
    /// Authentication results of list posts, taken once on arrival.
    pub arrival: ArrivalCheck,
}

/// How the message reached the list.
pub enum Origin {
    /// Over SMTP/LMTP: the posting policy decides between fan-out and moderation.
    Smtp {
        envelope_from: Option<Address>,
        /// The client's address and HELO name, for SPF. `None` over LMTP: the client is the
        /// MTA in front of Herald (often 127.0.0.1), and SPF against it would be a false
        /// result; the arrival check reads the real client from that MTA's `Received:`.
        peer: Option<std::net::IpAddr>,
        helo: String,
    },
    /// Injected by an administrator (CLI / HTTP API): approved.
    Admin,
    /// A held post a moderator approved: a list post, exempt from the duplicate check (its
    /// Message-ID was recorded when it was held).
    Approved { envelope_from: Option<Address> },
}

impl Enqueuer {
    /// Makes `body` durable as a post of `kind` for `list`, then starts its fan-out if it is a
    /// list post. Returns only after the post is on disk.
    pub async fn enqueue(
        &self,
        list: &List,
        role: &ListAddressKind,
        origin: Origin,
        body: Bytes,
    ) -> Result<PostId, EnqueueError> {
        let limit = match list.settings.max_message_bytes {
            0 => self.max_message_bytes,
            l => l.min(self.max_message_bytes),
        };
        if body.len() as u64 > limit {
            return Err(EnqueueError::TooBig { limit });
        }
        let envelope_from = match &origin {
            Origin::Smtp { envelope_from, .. } | Origin::Approved { envelope_from } => {
                envelope_from.clone()
            }
            Origin::Admin => None,
        };
        // An approved post was stamped when it arrived and was held; keep that verdict.
        let body = match (role, &origin) {
            (ListAddressKind::Post, Origin::Smtp { peer, helo, .. }) => {
                let mail_from = envelope_from.as_ref().map(ToString::to_string);
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
        };
        let message_id = message_id(&body);
        let now = herald_types::unix_ms_now();
        if let (ListAddressKind::Post, false, Some(d), Some(mid)) = (
            role,
            matches!(origin, Origin::Approved { .. }),
            &self.dedup,
            &message_id,
        ) {
            if let Some(first) = d.seen_on_list(list.id, mid, now) {
                tracing::info!(list = %list.address, first = %first, message_id = %mid,
                    "duplicate Message-ID within the dedup window: acknowledged, not fanned out again");
                return Ok(first);
            }
        }
        let (kind, hold_reason) = match role {
            ListAddressKind::Bounces { .. } => (PostKind::Bounce, None),
            ListAddressKind::Request => (PostKind::Request, None),
            ListAddressKind::Post => match origin {
                Origin::Admin | Origin::Approved { .. } => (PostKind::ListPost, None),
                Origin::Smtp { .. } => {
                    self.posting_kind(list, envelope_from.clone(), &body)
                        .await?
                }
            },
        };
        let recipients = match role {
            ListAddressKind::Bounces { member: Some(m) } => vec![m.clone()],
            _ => Vec::new(),
        };
        let dir = self.directory.clone();
        let list_id = list.id;
        let max_member_id =
            tokio::task::spawn_blocking(move || dir.max_member_id(list_id)).await??;
        let meta = PostMeta {
            kind,
            list_id: list.id,
            list_address: list.address.clone(),
            envelope_from,
            received_at_ms: now,
            max_member_id,
            message_id,
            recipients,
            hold_reason,
            null_sender: false,
        };
        let id = self.spool.accept(meta.clone(), body.clone()).await?;
        if let (Some(d), Some(mid), PostKind::ListPost | PostKind::Held) =
            (&self.dedup, &meta.message_id, kind)
        {
            let seen = Seen {
                list: list.id,
                post: id,
                max_member: max_member_id,
                at_ms: now,
            };
            d.record(mid, seen);
        }
        self.dispatch(id, meta, body).await;
        Ok(id)
    }

    /// Hands a freshly spooled post to the stage that owns its kind.
    async fn dispatch(&self, id: PostId, meta: PostMeta, body: Bytes) {
        match meta.kind {
            PostKind::ListPost => {
                self.telemetry.emit(Event::PostAccepted {
                    post: id,
                    list: meta.list_address.clone(),
                    size: body.len(),
                    received_at_ms: meta.received_at_ms,
                    recovered: false,
                });
                self.scheduler.submit(SpooledPost { id, meta, body });
            }
            PostKind::Generated => self.scheduler.submit(SpooledPost { id, meta, body }),
            PostKind::Held | PostKind::Bounce | PostKind::Request | PostKind::Postmaster => {
                tracing::info!(post = %id, list = %meta.list_address, kind = ?meta.kind,
                    reason = ?meta.hold_reason, "kept for the lists stage");
                if let Some(side) = &self.side {
                    if side.send(SpooledPost { id, meta, body }).await.is_err() {
                        // It is durable in the spool; the stage picks it up at the next start.
                        tracing::warn!(post = %id, "lists stage is not running");
                    }
                }
            }
        }
    }

    /// Spools mail Herald writes itself (a confirmation, a notice) for one explicit recipient;
    /// the scheduler delivers it to that address only, never to the list's members.
    pub async fn enqueue_generated(
        &self,
        list: &List,
        to: Address,
        body: Bytes,
    ) -> Result<PostId, EnqueueError> {
        let meta = PostMeta {
            kind: PostKind::Generated,
            list_id: list.id,
            list_address: list.address.clone(),
            envelope_from: None,
            received_at_ms: herald_types::unix_ms_now(),
            max_member_id: herald_types::MemberId(0),
            message_id: message_id(&body),
            recipients: vec![to],
            hold_reason: None,
            null_sender: false,
        };
        let id = self.spool.accept(meta.clone(), body.clone()).await?;
        self.dispatch(id, meta, body).await;
        Ok(id)
    }

    /// Stores a message to postmaster (`rcpt`, already checked to be one of ours) for the
    /// operator. The server-wide size limit applies; it is never fanned out and gets no arrival
    /// check (nothing is decided from its authentication, and a flood must not cost DNS work).
    pub async fn enqueue_postmaster(
        &self,
        rcpt: &Address,
        envelope_from: Option<Address>,
        body: Bytes,
    ) -> Result<PostId, EnqueueError> {
        if body.len() as u64 > self.max_message_bytes {
            return Err(EnqueueError::TooBig {
                limit: self.max_message_bytes,
            });
        }
        let meta = PostMeta {
            kind: PostKind::Postmaster,
            list_id: ListId::NONE,
            list_address: rcpt.clone(),
            envelope_from,
            received_at_ms: herald_types::unix_ms_now(),
            max_member_id: herald_types::MemberId(0),
            message_id: message_id(&body),
            recipients: Vec::new(),
            hold_reason: None,
            null_sender: false,
        };
        let id = self.spool.accept(meta.clone(), body.clone()).await?;
        self.dispatch(id, meta, body).await;
        Ok(id)
    }

    /// Spools server mail from `from` (a postmaster address) to `to`, sent from the null
    /// reverse path so that no bounce or auto-reply can come back to Herald.
    pub async fn enqueue_server_mail(
        &self,
        from: &Address,
        to: Vec<Address>,
        body: Bytes,
    ) -> Result<PostId, EnqueueError> {
        let meta = PostMeta {
            kind: PostKind::Generated,
            list_id: ListId::NONE,
            list_address: from.clone(),
            envelope_from: None,
            received_at_ms: herald_types::unix_ms_now(),
            max_member_id: herald_types::MemberId(0),
            message_id: message_id(&body),
            recipients: to,
            hold_reason: None,
            null_sender: true,
        };
        let id = self.spool.accept(meta.clone(), body.clone()).await?;
        self.dispatch(id, meta, body).await;
        Ok(id)
    }

    /// A list post if the sender may post (by the From header or the envelope sender), otherwise
    /// held for moderation.
    async fn posting_kind(
        &self,
        list: &List,
        envelope_from: Option<Address>,
        body: &Bytes,
    ) -> Result<(PostKind, Option<String>), EnqueueError> {
        let mut senders: Vec<Address> = from_header(body).into_iter().collect();
        senders.extend(envelope_from);
        let dir = self.directory.clone();
        let settings = list.settings.clone();
        let list = list.clone();
        let allowed = tokio::task::spawn_blocking(move || {
            for s in &senders {
                if dir.may_post(&list, s)? {
                    return Ok::<bool, DirectoryError>(true);
                }
            }
            Ok(false)
        })
        .await??;
        if !allowed {
            return Ok((
                PostKind::Held,
                Some("the sender may not post to this list".into()),
            ));
        }
        let b = body.clone();
        let reason =
            tokio::task::spawn_blocking(move || crate::policy::hold_reason(&settings, &b)).await?;
        Ok(match reason {
            Some(r) => (PostKind::Held, Some(r)),
            None => (PostKind::ListPost, None),
        })
    }
}

/// The first address of the From header, if it parses as an address Herald accepts.
pub(crate) fn from_header(body: &[u8]) -> Option<Address> {
    let msg = mail_parser::MessageParser::new().parse_headers(body)?;
    let addr = msg.from()?.first()?.address()?;
    Address::parse(addr).ok()
}

/// The Message-ID header (without angle brackets), kept for duplicate suppression.
fn message_id(body: &[u8]) -> Option<String> {
    let msg = mail_parser::MessageParser::new().parse_headers(body)?;
    msg.message_id().map(|s| s.chars().take(998).collect())
}
