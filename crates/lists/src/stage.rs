//! The lists stage's loop (Mailman's runners for requests and moderation, in one task): it
//! takes the posts the enqueue path keeps for it (`Request`, `Held`, `Postmaster`) and
//! - answers request mail (`subscription.rs`): subscribe / unsubscribe / help / confirm, and a
//!   moderator's approve / reject reply, then completes the request;
//! - tells the sender of a held post that it waits for a moderator and sends each moderator a
//!   notice with signed approve / reject tokens (`moderation.rs`);
//! - forwards mail to postmaster to the operators, or keeps it only (`postmaster.rs`), and
//!   deletes it when its retention ends;
//! - tells a member disabled by bounce handling why and how to come back
//!   ([`run_disabled_notices`], fed by the bounce stage).
//!
//! A sweep every `held_sweep_secs` completes held posts older than their list's
//! `held_expiry_days` and expires stored postmaster mail.
//!
//! Named states: a request is `pending` (live in the spool) until answered, then completed; a
//! held post is `held` until approved, rejected or expired.
//!
//! Place in the flow: downstream of enqueue (it receives over a bounded channel and sends its
//! own mail back through [`herald_enqueue::Enqueuer::enqueue`]) and of the bounce stage
//! (disabled members). The HTTP API calls the same operations (approve, reject, request,
//! confirm) and maps [`ListsError`] to its responses.

use crate::config::ListsConfig;
use crate::error::ListsError;
use crate::notices::Notice;
use crate::postmaster::Postmaster;
use bytes::Bytes;
use herald_enqueue::{Enqueuer, Submission};
use herald_spool::{PostKind, PostMeta, SpooledPost};
use herald_types::DisabledMember;
use herald_types::{Address, List, PostId};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Capacity of the disabled-member channel from the bounce stage.
pub const DISABLED_QUEUE_CAPACITY: usize = 1024;

/// Everything the stage and the API operations need.
pub struct Lists {
    pub enqueuer: Arc<Enqueuer>,
    /// Stored postmaster mail: forwarded (or kept) on arrival, expired by the sweep.
    pub postmaster: Postmaster,
    /// The HMAC key of confirmation and moderation tokens.
    pub secret: Vec<u8>,
    pub hostname: String,
    /// Confirmation links are `{public_base_url}/confirm/<token>`.
    pub public_base_url: String,
    pub cfg: ListsConfig,
    /// Limits on the notices sent on others' behalf (`[notice_limits]`, `limits.rs`).
    pub notice_rate: herald_guard::NoticeRate,
}

impl Lists {
    /// Runs the stage until `shutdown`: first the posts live at start (`recovered`: requests
    /// and postmaster mail not yet handled), then new ones.
    pub async fn run(
        self: Arc<Self>,
        recovered: Vec<SpooledPost>,
        mut rx: mpsc::Receiver<SpooledPost>,
        shutdown: CancellationToken,
    ) {
        for p in recovered {
            if matches!(p.meta.kind, PostKind::Request | PostKind::Postmaster) {
                self.handle(p).await;
            }
        }
        let mut sweep = tokio::time::interval(Duration::from_secs(self.cfg.held_sweep_secs));
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = sweep.tick() => {
                    self.sweep_held().await;
                    self.postmaster.sweep(&self.enqueuer.spool).await;
                }
                p = rx.recv() => match p {
                    Some(p) => self.handle(p).await,
                    None => break,
                },
            }
        }
    }

    async fn handle(&self, post: SpooledPost) {
        let id = post.id;
        match post.meta.kind {
            PostKind::Request => {
                if let Err(e) = self.answer_request(&post).await {
                    tracing::error!(post = %id, error = %e, "request not answered; it stays spooled");
                }
            }
            PostKind::Held => {
                if let Err(e) = self.notify_held(&post).await {
                    tracing::warn!(post = %id, error = %e, "poster not told about the held post");
                }
                if let Err(e) = self.notify_moderators(&post).await {
                    tracing::warn!(post = %id, error = %e, "moderators not told about the held post");
                }
            }
            PostKind::Postmaster => self.postmaster.handle(&self.enqueuer, &post).await,
            // Not ours: enqueue hands these to fan-out and the bounce stage.
            PostKind::ListPost | PostKind::Generated | PostKind::Bounce => {
                tracing::warn!(post = %id, kind = ?post.meta.kind, "not a lists-stage post; left alone");
            }
        }
    }

    /// The list at `address`.
    pub(crate) async fn list(&self, address: &Address) -> Result<List, ListsError> {
        let d = self.enqueuer.directory.clone();
        let a = address.clone();
        tokio::task::spawn_blocking(move || d.list_by_address(&a))
            .await??
            .ok_or_else(|| ListsError::NoSuchList(address.clone()))
    }

    /// The language and wording to write to `to` about `list`: the member's
    /// own language, else the list's, and the list's own texts.
    pub(crate) async fn words_for(
        &self,
        list: &List,
        to: &Address,
    ) -> Result<(String, herald_i18n::Overrides), ListsError> {
        let d = self.enqueuer.directory.clone();
        let (l, a) = (list.clone(), to.clone());
        Ok(tokio::task::spawn_blocking(move || {
            Ok::<_, herald_directory::DirectoryError>((d.language_for(&l, &a)?, d.overrides(l.id)?))
        })
        .await??)
    }

    /// Sends `notice` to `to` as generated mail from the list's request address.
    pub(crate) async fn send(
        &self,
        list: &List,
        to: &Address,
        notice: &Notice,
    ) -> Result<(), ListsError> {
        let stamp = crate::mail::Stamp::now();
        let body: Bytes = crate::mail::compose(
            &self.hostname,
            &list.address,
            to,
            &notice.subject,
            &notice.text,
            stamp,
        );
        self.enqueuer
            .enqueue(Submission::Generated {
                list: Box::new(list.clone()),
                to: to.clone(),
                body,
            })
            .await?;
        Ok(())
    }

    /// Completes held posts older than their list's expiry.
    async fn sweep_held(&self) {
        let now = herald_types::unix_ms_now();
        for (id, meta) in self.enqueuer.spool.live_posts() {
            if meta.kind != PostKind::Held {
                continue;
            }
            let days = match self.list(&meta.list_address).await {
                Ok(l) => u64::from(l.settings.held_expiry_days),
                Err(e) if e.is_not_found() => 0,
                Err(_) => continue,
            };
            if now.saturating_sub(meta.received_at_ms) >= days * herald_directory::DAY_MS {
                tracing::info!(post = %id, list = %meta.list_address, "held post expired");
                if let Err(e) = self.enqueuer.spool.complete(id).await {
                    tracing::error!(post = %id, error = %e, "cannot expire a held post");
                }
            }
        }
    }

    /// The spooled metadata of a held post.
    pub(crate) fn held_meta(&self, post: PostId) -> Result<PostMeta, ListsError> {
        self.enqueuer
            .spool
            .live_posts()
            .into_iter()
            .find(|(id, m)| *id == post && m.kind == PostKind::Held)
            .map(|(_, m)| m)
            .ok_or(ListsError::NoHeldPost(post))
    }
}

/// Runs [`Lists::notify_disabled`] for each member the bounce stage disables, until `shutdown`.
pub async fn run_disabled_notices(
    lists: Arc<Lists>,
    mut rx: mpsc::Receiver<DisabledMember>,
    shutdown: CancellationToken,
) {
    loop {
        let d = tokio::select! {
            _ = shutdown.cancelled() => break,
            d = rx.recv() => match d {
                Some(d) => d,
                None => break,
            },
        };
        if let Err(e) = lists.notify_disabled(&d).await {
            tracing::warn!(list = %d.list, address = %d.address, error = %e, "disabled member not notified");
        }
    }
}

/// Starts the lists stage as a row of the running table: the requests and postmaster mail the
/// spool recovered (postmaster mail stored but not yet forwarded or kept when the server
/// stopped) first, then what enqueue hands over on `posts`; and the notices to members the
/// bounce stage disables, from `disabled`.
pub fn start(
    cx: &herald_stage::StartCx,
    lists: Arc<Lists>,
    posts: mpsc::Receiver<SpooledPost>,
    disabled: mpsc::Receiver<DisabledMember>,
) -> herald_stage::Started<Arc<Lists>> {
    let mut recovered = cx.recovered(PostKind::Request);
    recovered.extend(crate::postmaster::unhandled(cx.recovered_posts()));
    let stop = CancellationToken::new();
    let run = tokio::spawn(lists.clone().run(recovered, posts, stop.clone()));
    let notices = tokio::spawn(run_disabled_notices(lists.clone(), disabled, stop.clone()));
    herald_stage::Started::new("lists", herald_stage::StopAt::Stages, stop, lists)
        .with_tasks([run, notices])
}
