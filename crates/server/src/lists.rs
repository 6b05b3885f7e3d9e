//! The lists stage (Mailman's runners for bounces, requests and moderation, in one task): it
//! takes the posts the enqueue path keeps (`Bounce`, `Request`, `Held`, `Postmaster`) and
//! - forwards bounces to the bounce stage (`herald_bounce::stage`);
//! - answers request mail (subscribe / unsubscribe / help / confirm), sending confirmations and
//!   results as generated mail through the one enqueue path, then completes the request;
//! - tells the sender of a held post that it waits for a moderator, and sends each of the
//!   list's moderators a moderation notice: its subject is `approve <token>` (replying approves)
//!   and its body gives the `reject <token>` line; the tokens are signed, expiring and bound to
//!   the held post and the action ([`confirm::moderation_token`]). A moderation command by
//!   mail acts only with a valid token for this list *and* a sender who is one of its
//!   moderators;
//! - forwards mail to postmaster to the operators, or keeps it only ([`Postmaster::handle`]),
//!   and deletes it when its retention ends;
//! - tells a member disabled by bounce handling, when the list's `bounce_notify` is on
//!   ([`Lists::notify_disabled`], fed by the bounce stage), why and how to come back: a confirmed
//!   `subscribe` re-enables a member that bounces disabled;
//!
//! and implements [`ListOps`] for the HTTP API: approve (re-enqueue as a list post, then
//! complete the held one — crash-safe order: a crash in between leaves both, and the duplicate
//! is visible in `herald held`, never a lost post), reject (the poster is told), subscription
//! requests and confirmations. A sweeper completes held posts older than their list's `held_expiry_days`,
//! and a flusher writes the dedup store every `dedup_flush_ms`.
//!
//! Named states: a request is `pending` (live in the spool) until answered, then completed; a
//! held post is `held` until approved, rejected or expired.

use crate::config::ListsConfig;
use crate::confirm::{self, Action, Moderation};
use crate::enqueue::{EnqueueError, Enqueuer, Origin};
use crate::postmaster::Postmaster;
use crate::requests::{self, Command};
use herald_api::{ApiError, ConfirmView, ListOps, OpsFuture};
use herald_bounce::stage::DisabledMember;
use herald_directory::{DirectoryError, NewMember};
use herald_spool::{PostKind, SpooledPost};
use herald_types::{Address, List, ListAddressKind, MemberStatus, PostId, SubscriptionPolicy};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Capacity of the channel from the enqueue path.
pub const SIDE_QUEUE_CAPACITY: usize = 1024;

/// Everything the stage and the API operations need.
pub struct Lists {
    pub enqueuer: Arc<Enqueuer>,
    /// Stored postmaster mail: forwarded (or kept) on arrival, expired by the sweep.
    pub postmaster: Arc<Postmaster>,
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
            if matches!(p.meta.kind, PostKind::Request | PostKind::Postmaster) {
                self.handle(p, &bounces).await;
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
                if let Err(e) = self.notify_moderators(&post).await {
                    tracing::warn!(post = %id, error = %e, "moderators not told about the held post");
                }
            }
            PostKind::Postmaster => self.postmaster.handle(&self.enqueuer, &post).await,
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
                Some(Command::Approve(t)) => Some(
                    self.moderate_by_mail(&list, &req.sender, &t, Moderation::Approve)
                        .await?,
                ),
                Some(Command::Reject(t)) => Some(
                    self.moderate_by_mail(&list, &req.sender, &t, Moderation::Reject)
                        .await?,
                ),
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
                    Ok(_) => Ok(()),
                    Err(DirectoryError::AlreadyMember(_)) => {
                        // A member that bounce handling disabled comes back by confirming: the
                        // round trip proves the mailbox works again. An administrator's own
                        // "disabled" is not overridden.
                        let by_bounces = d.member(id, &m.address)?.is_some_and(|x| {
                            matches!(&x.status, MemberStatus::Disabled(r) if r.starts_with(BOUNCE_REASON_PREFIX))
                        });
                        if by_bounces {
                            d.reset_bounces(id, &m.address)?;
                        }
                        Ok(())
                    }
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

    /// Sends each moderator of the list a notice for a held post, carrying the approve token in
    /// its subject (a reply approves) and the reject token in its body.
    async fn notify_moderators(&self, post: &SpooledPost) -> Result<(), ApiError> {
        let list = self.list(&post.meta.list_address).await?;
        if list.settings.moderators.is_empty() {
            return Ok(());
        }
        // Valid as long as the post can be held; at least a day so a zero setting still works.
        let ttl = u64::from(list.settings.held_expiry_days.max(1)) * 24 * 3600;
        let expires = herald_types::unix_ms_now() / 1000 + ttl;
        let sign = |a| confirm::moderation_token(&self.secret, a, &list.address, post.id, expires);
        let (approve, reject) = (sign(Moderation::Approve), sign(Moderation::Reject));
        let poster = post
            .meta
            .envelope_from
            .as_ref()
            .map_or_else(|| "<>".to_string(), |a| a.to_string());
        let reason = post.meta.hold_reason.as_deref().unwrap_or("moderation");
        let request = herald_types::verp::request_address(&list.address);
        let text = format!(
            "A post to {list} from {poster} is held for moderation ({reason}).\n\
             Its subject: {subject}\n\
             Held post: {id}\n\
             \n\
             To approve it, reply to this message (keep the subject).\n\
             To reject it, send a mail to {request} with this subject:\n\
             \n\
             \x20 reject {reject}\n\
             \n\
             Nobody acting, it expires after {days} days.\n",
            list = list.address,
            subject = original_subject(&post.body),
            id = post.id,
            days = list.settings.held_expiry_days,
        );
        for m in &list.settings.moderators {
            self.send(&list, m, &format!("approve {approve}"), &text)
                .await?;
        }
        Ok(())
    }

    /// A moderator's `approve` / `reject` reply: the token must verify (MAC in constant time,
    /// not expired), name this list and the command's action, and the sender must be one of the
    /// list's moderators. Returns the answer for the sender; refusals are answers, not errors.
    async fn moderate_by_mail(
        &self,
        list: &List,
        sender: &Address,
        token: &str,
        action: Moderation,
    ) -> Result<String, ApiError> {
        let now = herald_types::unix_ms_now() / 1000;
        let grant = confirm::verify_moderation(&self.secret, token, now)
            .filter(|g| g.action == action && g.list == list.address);
        let Some(grant) = grant else {
            tracing::warn!(list = %list.address, sender = %sender, "moderation reply with an invalid token refused");
            return Ok("That moderation request is not valid or has expired.".into());
        };
        let sender_text = sender.to_string();
        let is_moderator = list
            .settings
            .moderators
            .iter()
            .any(|m| m.to_string().eq_ignore_ascii_case(&sender_text));
        if !is_moderator {
            tracing::warn!(list = %list.address, sender = %sender, post = %grant.post, "moderation reply from a non-moderator refused");
            return Ok(format!("{sender} is not a moderator of {}.", list.address));
        }
        let done = match action {
            Moderation::Approve => self.approve(grant.post).await.map(|_| ()),
            Moderation::Reject => self.reject(grant.post).await,
        };
        match done {
            Ok(()) => {
                tracing::info!(list = %list.address, moderator = %sender, post = %grant.post, action = action.verb(), "moderated by mail");
                Ok(format!(
                    "Done: {} held post {} on {}.",
                    action.verb(),
                    grant.post,
                    list.address
                ))
            }
            Err(ApiError::NotFound(_)) => Ok(format!(
                "Held post {} is no longer waiting (already approved, rejected or expired).",
                grant.post
            )),
            Err(e) => Err(e),
        }
    }

    /// Tells a member that bounce handling disabled them, if their list asks for it
    /// (`bounce_notify`): why, and how to come back.
    pub async fn notify_disabled(&self, d: &DisabledMember) -> Result<(), ApiError> {
        let dir = self.enqueuer.directory.clone();
        let (id, who) = (d.list, d.address.clone());
        let found = tokio::task::spawn_blocking(move || {
            let Some(list) = dir.list_by_id(id)? else {
                return Ok::<_, DirectoryError>(None);
            };
            let member = dir.member(id, &who)?;
            Ok(Some((list, member)))
        })
        .await??;
        let Some((list, Some(member))) = found else {
            return Ok(()); // list or member gone since: nobody to tell
        };
        if !list.settings.bounce_notify {
            return Ok(());
        }
        let MemberStatus::Disabled(reason) = &member.status else {
            return Ok(()); // re-enabled in the meantime
        };
        let request = herald_types::verp::request_address(&list.address);
        let text = format!(
            "Mail from the list {list} to {who} has been bouncing, so your subscription is now\n\
             disabled: you will not receive posts.\n\
             \n\
             Why: {reason}\n\
             \n\
             To receive the list again, send a mail to {request} with the subject\n\
             'subscribe' and confirm the answer.\n",
            list = list.address,
            who = member.address,
        );
        self.send(
            &list,
            &member.address,
            &format!("Your subscription to {} is disabled", list.address),
            &text,
        )
        .await
    }

    /// Rejects a held post and tells its sender (never the null sender).
    async fn reject_held(&self, post: PostId) -> Result<(), ApiError> {
        let meta = self.held_meta(post)?;
        self.enqueuer.spool.complete(post).await.map_err(internal)?;
        tracing::info!(held = %post, list = %meta.list_address, "held post rejected");
        let Some(to) = meta.envelope_from.clone() else {
            return Ok(());
        };
        // The rejection is done; a lost notice must not turn it into an error for the caller.
        let notice = async {
            let list = self.list(&meta.list_address).await?;
            let text = format!(
                "Your message to {} was rejected by a moderator and will not be distributed.\n",
                list.address
            );
            self.send(&list, &to, "Your message was rejected", &text)
                .await
        };
        if let Err(e) = notice.await {
            tracing::warn!(held = %post, error = %e, "poster not told about the rejection");
        }
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

/// How the directory's bounce-disable reasons begin (`herald_directory` bounces.rs).
const BOUNCE_REASON_PREFIX: &str = "bounce score";

/// The held post's subject for the moderator's notice: body text only (never a header), one
/// line, control characters dropped, at most 200 characters.
fn original_subject(body: &[u8]) -> String {
    let parsed = mail_parser::MessageParser::new().parse_headers(body);
    let subject = parsed
        .as_ref()
        .and_then(|m| m.subject())
        .unwrap_or("(none)");
    subject
        .chars()
        .filter(|c| !c.is_control())
        .take(200)
        .collect()
}

/// Runs [`Lists::notify_disabled`] for each member the bounce stage disables, until `shutdown`.
pub async fn notify_disabled(
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
        Box::pin(self.reject_held(post))
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
