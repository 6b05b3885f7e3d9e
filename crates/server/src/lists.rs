//! The lists stage (Mailman's runners for bounces, requests and moderation, in one task): it
//! takes the posts the enqueue path keeps (`Bounce`, `Request`, `Held`) and
//! - forwards bounces to the bounce stage (`herald_bounce::stage`);
//! - answers request mail (subscribe / unsubscribe / help / confirm), sending confirmations and
//!   results as generated mail through the one enqueue path, then completes the request;
//! - tells the sender of a held post that it waits for a moderator;
//!
//! and implements [`ListOps`] for the HTTP API: approve (re-enqueue as a list post, then
//! complete the held one — crash-safe order: a crash in between leaves both, and the duplicate
//! is visible in `herald held`, never a lost post), reject, subscription requests and
//! confirmations. A sweeper completes held posts older than their list's `held_expiry_days`,
//! and a flusher writes the dedup store every `dedup_flush_ms`.
//!
//! Named states: a request is `pending` (live in the spool) until answered, then completed; a
//! held post is `held` until approved, rejected or expired.

use crate::config::ListsConfig;
use crate::confirm::{self, Action};
use crate::enqueue::{EnqueueError, Enqueuer, Origin};
use crate::requests::{self, Command};
use herald_api::{ApiError, ConfirmView, ListOps, OpsFuture};
use herald_directory::{DirectoryError, NewMember};
use herald_spool::{PostKind, SpooledPost};
use herald_types::{Address, List, ListAddressKind, PostId, SubscriptionPolicy};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Capacity of the channel from the enqueue path.
pub const SIDE_QUEUE_CAPACITY: usize = 1024;

/// Everything the stage and the API operations need.
pub struct Lists {
    pub enqueuer: Arc<Enqueuer>,
    pub secret: Vec<u8>,
    pub hostname: String,
    pub public_base_url: String,
    pub cfg: ListsConfig,
}

impl From<EnqueueError> for ApiError {
    fn from(e: EnqueueError) -> ApiError {
        ApiError::Internal(e.to_string())
    }
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError::Internal(e.to_string())
}

impl Lists {
    /// Runs the stage until `shutdown`: first the posts live at start, then new ones.
    pub async fn run(
        self: Arc<Self>,
        recovered: Vec<SpooledPost>,
        mut rx: mpsc::Receiver<SpooledPost>,
        bounces: mpsc::Sender<SpooledPost>,
        shutdown: CancellationToken,
    ) {
        for p in recovered {
            if p.meta.kind == PostKind::Request {
                self.handle(p, &bounces).await;
            }
        }
        let mut sweep = tokio::time::interval(Duration::from_secs(self.cfg.held_sweep_secs));
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = sweep.tick() => self.sweep_held().await,
                p = rx.recv() => match p {
                    Some(p) => self.handle(p, &bounces).await,
                    None => break,
                },
            }
        }
    }

    async fn handle(&self, post: SpooledPost, bounces: &mpsc::Sender<SpooledPost>) {
        let id = post.id;
        match post.meta.kind {
            PostKind::Bounce => {
                if bounces.send(post).await.is_err() {
                    tracing::warn!(post = %id, "bounce stage not running; the bounce stays spooled");
                }
            }
            PostKind::Request => {
                if let Err(e) = self.answer_request(&post).await {
                    tracing::error!(post = %id, error = %e, "request not answered; it stays spooled");
                }
            }
            PostKind::Held => {
                if let Err(e) = self.notify_held(&post).await {
                    tracing::warn!(post = %id, error = %e, "poster not told about the held post");
                }
            }
            PostKind::ListPost | PostKind::Generated => {}
        }
    }

    async fn list(&self, address: &Address) -> Result<List, ApiError> {
        let d = self.enqueuer.directory.clone();
        let a = address.clone();
        tokio::task::spawn_blocking(move || d.list_by_address(&a))
            .await?
            .map_err(ApiError::from)?
            .ok_or_else(|| ApiError::NotFound(format!("no such list: {address}")))
    }

    async fn send(
        &self,
        list: &List,
        to: &Address,
        subject: &str,
        text: &str,
    ) -> Result<(), ApiError> {
        let body = confirm::compose(&self.hostname, &list.address, to, subject, text);
        self.enqueuer
            .enqueue_generated(list, to.clone(), body)
            .await?;
        Ok(())
    }

    /// Answers one request mail, then completes it.
    async fn answer_request(&self, post: &SpooledPost) -> Result<(), ApiError> {
        let parsed = requests::parse(
            &post.body,
            post.meta.envelope_from.as_ref(),
            self.cfg.request_max_lines,
        );
        if let Some(req) = parsed {
            let list = self.list(&post.meta.list_address).await?;
            let reply = match req.command {
                Some(Command::Subscribe) => {
                    self.start(&list, &req.sender, Action::Subscribe).await?
                }
                Some(Command::Unsubscribe) => {
                    self.start(&list, &req.sender, Action::Unsubscribe).await?
                }
                Some(Command::Confirm(t)) => match self.apply_token(&t).await {
                    Ok(v) => Some(format!("Done: {} {} ({}).", v.action, v.address, v.list)),
                    Err(ApiError::Internal(e)) => return Err(ApiError::Internal(e)),
                    Err(_) => Some("That confirmation is not valid or has expired.".into()),
                },
                Some(Command::Help) | None => Some(requests::help_text(&list.address)),
            };
            if let Some(text) = reply {
                self.send(
                    &list,
                    &req.sender,
                    &format!("Re: your request to {}", list.address),
                    &text,
                )
                .await?;
            }
        }
        self.enqueuer
            .spool
            .complete(post.id)
            .await
            .map_err(internal)
    }

    /// Sends the double opt-in confirmation; returns a text for the requester when there is
    /// nothing to confirm (closed list), `None` when the confirmation mail itself is the answer.
    async fn start(
        &self,
        list: &List,
        who: &Address,
        action: Action,
    ) -> Result<Option<String>, ApiError> {
        if action == Action::Subscribe && list.settings.subscription == SubscriptionPolicy::Closed {
            return Ok(Some(format!(
                "{} is a closed list: only its administrators add members.",
                list.address
            )));
        }
        let expires = herald_types::unix_ms_now() / 1000 + self.cfg.confirm_ttl_secs;
        let token = confirm::token(&self.secret, action, &list.address, who, expires);
        let url = format!("{}/confirm/{token}", self.public_base_url);
        let text = format!(
            "Somebody (probably you) asked to {verb} {who} {prep} the list {list}.\n\n\
             To confirm, open this link:\n\n  {url}\n\n\
             or simply reply to this message (keep the subject).\n\n\
             If you did not ask for this, ignore this message: nothing changes.\n",
            verb = action.verb(),
            prep = if action == Action::Subscribe {
                "to"
            } else {
                "from"
            },
            list = list.address,
        );
        self.send(list, who, &format!("confirm {token}"), &text)
            .await?;
        Ok(None)
    }

    /// Verifies a token and carries its action out (idempotent).
    async fn apply_token(&self, token: &str) -> Result<ConfirmView, ApiError> {
        let c = confirm::verify(&self.secret, token, herald_types::unix_ms_now() / 1000)
            .ok_or_else(|| ApiError::BadRequest("invalid or expired confirmation".into()))?;
        let list = self.list(&c.list).await?;
        let d = self.enqueuer.directory.clone();
        let (id, who, action) = (list.id, c.address.clone(), c.action);
        if action == Action::Subscribe && list.settings.subscription == SubscriptionPolicy::Closed {
            return Err(ApiError::BadRequest("the list is closed".into()));
        }
        tokio::task::spawn_blocking(move || match action {
            Action::Subscribe => {
                let m = NewMember {
                    address: who,
                    display_name: None,
                    fields: Default::default(),
                };
                match d.add_member(id, &m) {
                    Ok(_) | Err(DirectoryError::AlreadyMember(_)) => Ok(()),
                    Err(e) => Err(e),
                }
            }
            Action::Unsubscribe => d.remove_member(id, &who).map(|_| ()),
        })
        .await??;
        tracing::info!(list = %c.list, address = %c.address, action = c.action.verb(), "confirmed");
        Ok(view(&c))
    }

    async fn notify_held(&self, post: &SpooledPost) -> Result<(), ApiError> {
        let Some(to) = post.meta.envelope_from.clone() else {
            return Ok(()); // never write to the null sender
        };
        let list = self.list(&post.meta.list_address).await?;
        let reason = post.meta.hold_reason.as_deref().unwrap_or("moderation");
        let text = format!(
            "Your message to {} is held for a moderator ({reason}).\n\
             You will not hear again unless it is approved; it expires after {} days.\n",
            list.address, list.settings.held_expiry_days
        );
        self.send(&list, &to, "Your message is held for moderation", &text)
            .await
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
                Err(ApiError::NotFound(_)) => 0,
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

    fn held_meta(&self, post: PostId) -> Result<herald_spool::PostMeta, ApiError> {
        self.enqueuer
            .spool
            .live_posts()
            .into_iter()
            .find(|(id, m)| *id == post && m.kind == PostKind::Held)
            .map(|(_, m)| m)
            .ok_or_else(|| ApiError::NotFound(format!("no held post {post}")))
    }
}

fn view(c: &confirm::Confirmation) -> ConfirmView {
    ConfirmView {
        action: c.action.verb().to_string(),
        list: c.list.to_string(),
        address: c.address.to_string(),
    }
}

impl ListOps for Lists {
    fn approve(&self, post: PostId) -> OpsFuture<'_, PostId> {
        Box::pin(async move {
            let meta = self.held_meta(post)?;
            let body = self
                .enqueuer
                .spool
                .body(post)
                .await
                .map_err(internal)?
                .ok_or_else(|| ApiError::NotFound(format!("no held post {post}")))?;
            let list = self.list(&meta.list_address).await?;
            let origin = Origin::Approved {
                envelope_from: meta.envelope_from.clone(),
            };
            // Accept the new list post first, then complete the held one (crash-safe order).
            let new = self
                .enqueuer
                .enqueue(&list, &ListAddressKind::Post, origin, body)
                .await?;
            self.enqueuer.spool.complete(post).await.map_err(internal)?;
            tracing::info!(held = %post, post = %new, list = %list.address, "held post approved");
            Ok(new)
        })
    }

    fn reject(&self, post: PostId) -> OpsFuture<'_, ()> {
        Box::pin(async move {
            let meta = self.held_meta(post)?;
            self.enqueuer.spool.complete(post).await.map_err(internal)?;
            tracing::info!(held = %post, list = %meta.list_address, "held post rejected");
            Ok(())
        })
    }

    fn request(&self, list: Address, address: Address, action: String) -> OpsFuture<'_, String> {
        Box::pin(async move {
            let action = match action.as_str() {
                "subscribe" => Action::Subscribe,
                "unsubscribe" => Action::Unsubscribe,
                other => return Err(ApiError::BadRequest(format!("unknown action {other}"))),
            };
            let list = self.list(&list).await?;
            match self.start(&list, &address, action).await? {
                Some(refusal) => Err(ApiError::Conflict(refusal)),
                None => Ok("confirmation sent".to_string()),
            }
        })
    }

    fn confirm(&self, token: String, apply: bool) -> OpsFuture<'_, ConfirmView> {
        Box::pin(async move {
            if apply {
                return self.apply_token(&token).await;
            }
            confirm::verify(&self.secret, &token, herald_types::unix_ms_now() / 1000)
                .map(|c| view(&c))
                .ok_or_else(|| ApiError::BadRequest("invalid or expired confirmation".into()))
        })
    }
}

/// Writes the dedup store every `interval` until `shutdown`, then once more.
pub async fn flush_dedup(
    store: herald_fanout::DedupStore,
    interval: Duration,
    shutdown: CancellationToken,
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
