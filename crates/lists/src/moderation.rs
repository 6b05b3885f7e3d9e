//! Moderation of held posts: the poster's notice, each moderator's notice (its subject is
//! `approve <token>`, so replying approves; its body gives the `reject <token>` line), a
//! moderator's reply by mail, and approve / reject for the HTTP API.
//!
//! Tokens are signed, expiring and bound to the held post and the action
//! (`herald_types::token::moderation_token`). A moderation command by mail acts only with a
//! valid token for this list *and* a sender who is one of its moderators.
//!
//! Approve re-enqueues the body as a list post, then completes the held one — crash-safe order:
//! a crash in between leaves both, and the duplicate is visible in `herald held`, never a lost
//! post. Reject completes the held post and tells its sender (never the null sender).
//!
//! SECURITY: the held post is untrusted: only its subject reaches the moderator's notice, as
//! body text (control characters dropped, at most 200 characters), never as a header.

use crate::error::ListsError;
use crate::notices;
use crate::stage::Lists;
use herald_enqueue::{Origin, Submission};
use herald_i18n::Words;
use herald_spool::SpooledPost;
use herald_types::token::{self, Moderation};
use herald_types::{Address, List, ListAddressKind, NoticeKind, PostId};

/// Longest held-post subject quoted in a moderator's notice, in characters.
const MAX_QUOTED_SUBJECT_CHARS: usize = 200;

impl Lists {
    /// Tells the sender of a held post that it waits for a moderator — unless the post is
    /// automatic, bulk or looping mail (whatever it was held for): RFC 3834 §2 says not to
    /// answer those, and the answer to a vacation reply goes to a stranger (backscatter).
    pub(crate) async fn notify_held(&self, post: &SpooledPost) -> Result<(), ListsError> {
        let Some(to) = post.meta.envelope_from.clone() else {
            return Ok(()); // never write to the null sender
        };
        let list = self.list(&post.meta.list_address).await?;
        if let Some(trip) = herald_guard::inspect(&post.body, &list.address) {
            self.enqueuer
                .telemetry
                .metrics()
                .count_held_notice_suppressed();
            tracing::info!(post = %post.id, list = %list.address, guard = trip.word(),
                "held post is machine mail: its sender gets no notice");
            return Ok(());
        }
        let reason = post.meta.hold_reason.as_deref().unwrap_or("moderation");
        let (lang, texts) = self.words_for(&list, &to).await?;
        let notice = notices::held(
            &Words {
                lang: &lang,
                overrides: &texts,
            },
            &list.address,
            reason,
            list.settings.held_expiry_days,
        );
        let client = crate::limits::smtp_client(&post.body);
        self.send_notice(&list, &to, &notice, NoticeKind::Held, client)
            .await
    }

    /// Sends each moderator of the list a notice for a held post, carrying the approve token in
    /// its subject (a reply approves) and the reject token in its body.
    pub(crate) async fn notify_moderators(&self, post: &SpooledPost) -> Result<(), ListsError> {
        let list = self.list(&post.meta.list_address).await?;
        if list.settings.moderators.is_empty() {
            return Ok(());
        }
        // Valid as long as the post can be held; at least a day so a zero setting still works.
        let ttl = u64::from(list.settings.held_expiry_days.max(1)) * 24 * 3600;
        let expires = herald_types::unix_ms_now() / 1000 + ttl;
        let sign = |a| token::moderation_token(&self.secret, a, &list.address, post.id, expires);
        let (approve, reject) = (sign(Moderation::Approve), sign(Moderation::Reject));
        let poster = post
            .meta
            .envelope_from
            .as_ref()
            .map_or_else(|| "<>".to_string(), |a| a.to_string());
        let reason = post.meta.hold_reason.as_deref().unwrap_or("moderation");
        let subject = original_subject(&post.body);
        let held = notices::HeldPost {
            list: &list.address,
            poster: &poster,
            reason,
            subject: &subject,
            id: post.id,
            expiry_days: list.settings.held_expiry_days,
        };
        for m in &list.settings.moderators {
            let (lang, texts) = self.words_for(&list, m).await?;
            let w = Words {
                lang: &lang,
                overrides: &texts,
            };
            let notice = notices::moderation(&w, &held, &approve, &reject);
            self.send(&list, m, &notice).await?;
        }
        Ok(())
    }

    /// A moderator's `approve` / `reject` reply: the token must verify (MAC in constant time,
    /// not expired), name this list and the command's action, and the sender must be one of the
    /// list's moderators. Returns the answer for the sender; refusals are answers, not errors.
    pub(crate) async fn moderate_by_mail(
        &self,
        list: &List,
        sender: &Address,
        token: &str,
        action: Moderation,
    ) -> Result<String, ListsError> {
        let now = herald_types::unix_ms_now() / 1000;
        let grant = token::verify_moderation(&self.secret, token, now)
            .filter(|g| g.action == action && g.list == list.address);
        let Some(grant) = grant else {
            tracing::warn!(list = %list.address, sender = %sender, "moderation reply with an invalid token refused");
            return Ok("That moderation request is not valid or has expired.".into());
        };
        if !list.is_moderator(sender) {
            tracing::warn!(list = %list.address, sender = %sender, post = %grant.post, "moderation reply from a non-moderator refused");
            return Ok(format!("{sender} is not a moderator of {}.", list.address));
        }
        // The decision is spent on use, shared by the post's approve and reject links and by
        // every node: of two replies racing, one decides and the other hears "already decided".
        let (d, link) = (self.enqueuer.directory.clone(), grant.spend_key());
        let expires_ms = grant.expires_unix_secs.saturating_mul(1000);
        let spent = tokio::task::spawn_blocking(move || {
            d.spend_link(herald_directory::LinkKind::Moderation, &link, expires_ms)
        })
        .await??;
        if !spent {
            tracing::info!(list = %list.address, moderator = %sender, post = %grant.post, "moderation reply for a post already decided");
            return Ok(already_decided(grant.post));
        }
        let done = match action {
            Moderation::Approve => self.approve(grant.post).await.map(|_| ()),
            Moderation::Reject => self.reject(grant.post).await,
        };
        if done.as_ref().is_err_and(ListsError::is_internal) {
            // Nothing was decided: the moderator may reply again.
            let (d, link) = (self.enqueuer.directory.clone(), grant.spend_key());
            let _ = tokio::task::spawn_blocking(move || d.unspend_link(&link)).await;
        }
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
            Err(e) if e.is_not_found() => Ok(already_decided(grant.post)),
            Err(e) => Err(e),
        }
    }

    /// Approves a held post: re-enqueues its body as a list post, then completes the held one.
    /// Returns the new post's id.
    pub async fn approve(&self, post: PostId) -> Result<PostId, ListsError> {
        let meta = self.held_meta(post)?;
        let body = self
            .enqueuer
            .spool
            .body(post)
            .await?
            .ok_or(ListsError::NoHeldPost(post))?;
        let list = self.list(&meta.list_address).await?;
        let origin = Origin::Approved {
            envelope_from: meta.envelope_from.clone(),
        };
        // Accept the new list post first, then complete the held one (crash-safe order).
        let submission = Submission::List {
            list: Box::new(list.clone()),
            role: ListAddressKind::Post,
            origin,
            body,
        };
        let new = self.enqueuer.enqueue(submission).await?;
        self.enqueuer.spool.complete(post).await?;
        tracing::info!(held = %post, post = %new, list = %list.address, "held post approved");
        Ok(new)
    }

    /// Rejects a held post and tells its sender (never the null sender).
    pub async fn reject(&self, post: PostId) -> Result<(), ListsError> {
        self.reject_with(post, None).await
    }

    /// Discards a held post without telling anyone (spam: a notice would go to a forged
    /// sender). The web page's "discard" button.
    pub async fn discard(&self, post: PostId) -> Result<(), ListsError> {
        let meta = self.held_meta(post)?;
        self.enqueuer.spool.complete(post).await?;
        tracing::info!(held = %post, list = %meta.list_address, "held post discarded");
        Ok(())
    }

    /// [`Lists::reject`] with the moderator's reason in the notice to the sender (the web page's
    /// reason field, so the sender learns what to change); `None` or blank: the plain notice.
    pub async fn reject_with(
        &self,
        post: PostId,
        reason: Option<String>,
    ) -> Result<(), ListsError> {
        let meta = self.held_meta(post)?;
        self.enqueuer.spool.complete(post).await?;
        tracing::info!(held = %post, list = %meta.list_address, "held post rejected");
        let Some(to) = meta.envelope_from.clone() else {
            return Ok(());
        };
        // The rejection is done; a lost notice must not turn it into an error for the caller.
        let notice = async {
            let list = self.list(&meta.list_address).await?;
            let (lang, texts) = self.words_for(&list, &to).await?;
            let w = Words {
                lang: &lang,
                overrides: &texts,
            };
            let notice = match reason.as_deref().map(str::trim).filter(|r| !r.is_empty()) {
                Some(why) => notices::rejected_because(&w, &list.address, why),
                None => notices::rejected(&w, &list.address),
            };
            self.send_notice(&list, &to, &notice, NoticeKind::Rejected, None)
                .await
        };
        if let Err(e) = notice.await {
            tracing::warn!(held = %post, error = %e, "poster not told about the rejection");
        }
        Ok(())
    }
}

/// The held post's subject for the moderator's notice: body text only (never a header), one
/// line, control characters dropped, at most [`MAX_QUOTED_SUBJECT_CHARS`] characters.
fn original_subject(body: &[u8]) -> String {
    let parsed = mail_parser::MessageParser::new().parse_headers(body);
    let subject = parsed
        .as_ref()
        .and_then(|m| m.subject())
        .unwrap_or("(none)");
    subject
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_QUOTED_SUBJECT_CHARS)
        .collect()
}

/// The answer to a moderation reply for a post that is not waiting any more.
fn already_decided(post: herald_types::PostId) -> String {
    format!(
        "Held post {post} was already decided (approved, rejected or expired); nothing was done."
    )
}
