//! The one enqueue path (Postfix cleanup(8)): SMTP, LMTP and HTTP injection all end here. It
//! decides what kind of post a message is for a list (a list post, a post held for moderation,
//! a bounce, a request), records the member-id snapshot, makes the post durable and hands list
//! posts to the scheduler.

use bytes::Bytes;
use herald_directory::{Directory, DirectoryError};
use herald_scheduler::Scheduler;
use herald_spool::{PostKind, PostMeta, Spool, SpoolError, SpooledPost};
use herald_telemetry::{Event, Telemetry};
use herald_types::{Address, List, ListAddressKind, PostId};

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
}

/// How the message reached the list.
pub enum Origin {
    /// Over SMTP/LMTP: the posting policy decides between fan-out and moderation.
    Smtp { envelope_from: Option<Address> },
    /// Injected by an administrator (CLI / HTTP API): approved.
    Admin,
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
            Origin::Smtp { envelope_from } => envelope_from.clone(),
            Origin::Admin => None,
        };
        let kind = match role {
            ListAddressKind::Bounces { .. } => PostKind::Bounce,
            ListAddressKind::Request => PostKind::Request,
            ListAddressKind::Post => match origin {
                Origin::Admin => PostKind::ListPost,
                Origin::Smtp { .. } => {
                    self.posting_kind(list, envelope_from.clone(), &body)
                        .await?
                }
            },
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
            received_at_ms: herald_types::unix_ms_now(),
            max_member_id,
            message_id: message_id(&body),
        };
        let id = self.spool.accept(meta.clone(), body.clone()).await?;
        match kind {
            PostKind::ListPost => {
                self.telemetry.emit(Event::PostAccepted {
                    post: id,
                    list: list.address.clone(),
                    size: body.len(),
                    received_at_ms: meta.received_at_ms,
                    recovered: false,
                });
                self.scheduler.submit(SpooledPost { id, meta, body });
            }
            PostKind::Held => {
                tracing::info!(post = %id, list = %list.address, "post held for moderation (sender may not post)")
            }
            PostKind::Bounce => {
                tracing::info!(post = %id, list = %list.address, "bounce kept for processing")
            }
            PostKind::Request => {
                tracing::info!(post = %id, list = %list.address, "request kept for processing")
            }
        }
        Ok(id)
    }

    /// A list post if the sender may post (by the From header or the envelope sender), otherwise
    /// held for moderation.
    async fn posting_kind(
        &self,
        list: &List,
        envelope_from: Option<Address>,
        body: &Bytes,
    ) -> Result<PostKind, EnqueueError> {
        let mut senders: Vec<Address> = from_header(body).into_iter().collect();
        senders.extend(envelope_from);
        let dir = self.directory.clone();
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
        Ok(if allowed {
            PostKind::ListPost
        } else {
            PostKind::Held
        })
    }
}

/// The first address of the From header, if it parses as an address Herald accepts.
fn from_header(body: &[u8]) -> Option<Address> {
    let msg = mail_parser::MessageParser::new().parse_headers(body)?;
    let addr = msg.from()?.first()?.address()?;
    Address::parse(addr).ok()
}

/// The Message-ID header (without angle brackets), kept for duplicate suppression.
fn message_id(body: &[u8]) -> Option<String> {
    let msg = mail_parser::MessageParser::new().parse_headers(body)?;
    msg.message_id().map(|s| s.chars().take(998).collect())
}
