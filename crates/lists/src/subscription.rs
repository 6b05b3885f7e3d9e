//! Subscriptions: request mail (`subscribe`, `unsubscribe`, `help`, `confirm <token>`, and a
//! moderator's `approve` / `reject` reply, handed to `moderation.rs`), double opt-in
//! confirmations (mail with a signed, expiring token: `herald_types::token`), carrying a
//! confirmed action out, and the notice to a member bounce handling disabled.
//!
//! A confirmed action is carried out by the member lifecycle (`membership.rs`: fresh link,
//! spent on use, departures, consent, re-enabling a member bounces disabled); this module
//! verifies the token and mails what the outcome is due.
//!
//! SECURITY: request mail is hostile (see `requests.rs`); nothing changes until someone holding
//! the mailbox confirms with a valid token.

use crate::error::ListsError;
use crate::membership::Membership;
use crate::notices;
use crate::requests::{self, Command};
use crate::stage::Lists;
use herald_directory::{Consent, ConsentSource, DirectoryError};
use herald_i18n::Words;
use herald_spool::SpooledPost;
use herald_types::token::{self, Action, Confirmation, Moderation};
use herald_types::DisabledMember;
use herald_types::{Address, List, MemberId, MemberStatus, NoticeKind, SubscriptionPolicy};

/// How long a mailed subscriptions-page link stays valid.
pub const MANAGE_LINK_HOURS: u64 = 24;

/// Most welcomes one [`Lists::welcome_members`] call sends: one page, quick enough for an HTTP
/// request, and the most a crash between two pages can send twice.
pub const MAX_WELCOME_PAGE: usize = 500;

/// What one [`Lists::welcome_members`] call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WelcomeBatch {
    pub sent: u64,
    /// On a suppression list: not mailed.
    pub skipped: u64,
    /// The last member id looked at (the next page starts after it).
    pub last: MemberId,
    /// No member left in the range.
    pub done: bool,
}

impl Lists {
    /// Answers one request mail, then completes it.
    pub(crate) async fn answer_request(&self, post: &SpooledPost) -> Result<(), ListsError> {
        let parsed = requests::parse(
            &post.body,
            post.meta.envelope_from.as_ref(),
            self.cfg.request_max_lines,
        );
        if let Some(req) = parsed {
            let list = self.list(&post.meta.list_address).await?;
            let client = crate::limits::smtp_client(&post.body);
            let reply = match req.command {
                Some(Command::Subscribe) => {
                    self.start(&list, &req.sender, Action::Subscribe, client)
                        .await?
                }
                Some(Command::Unsubscribe) => {
                    self.start(&list, &req.sender, Action::Unsubscribe, client)
                        .await?
                }
                Some(Command::Confirm(t)) => match self
                    .apply_token(
                        &t,
                        Consent::now(ConsentSource::Mail, Some(&req.sender.to_string())),
                    )
                    .await
                {
                    Ok(c) => Some(format!(
                        "Done: {} {} ({}).",
                        c.action.verb(),
                        c.address,
                        c.list
                    )),
                    Err(e) if e.is_internal() => return Err(e),
                    Err(ListsError::LinkUsed(_)) => {
                        Some("That confirmation was already used; it works only once.".into())
                    }
                    Err(ListsError::LinkSuperseded(c)) => Some(format!(
                        "Not done: {} left {} after that confirmation was sent. To \
                         subscribe again, send \"subscribe\" to this address.",
                        c.address, c.list
                    )),
                    Err(ListsError::Directory(e @ DirectoryError::Refused { .. })) => {
                        Some(format!("Not done: {e}."))
                    }
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
                Some(Command::SetDelivery(mode)) => {
                    self.start_delivery(&list, &req.sender, mode, client)
                        .await?
                }
                Some(Command::Help) | None => {
                    let (lang, texts) = self.words_for(&list, &req.sender).await?;
                    let w = Words {
                        lang: &lang,
                        overrides: &texts,
                    };
                    Some(requests::help_text(&w, &list.address))
                }
            };
            if let Some(text) = reply {
                let (lang, texts) = self.words_for(&list, &req.sender).await?;
                let w = Words {
                    lang: &lang,
                    overrides: &texts,
                };
                let notice = notices::request_reply(&w, &list.address, text);
                self.send_notice(
                    &list,
                    &req.sender,
                    &notice,
                    NoticeKind::RequestReply,
                    client,
                )
                .await?;
            }
        }
        Ok(self.enqueuer.spool.complete(post.id).await?)
    }

    /// Sends a double opt-in confirmation for `action` by `who` on the list at `list` (the
    /// HTTP API's subscription request). `Some(text)`: nothing to confirm (a closed list), the
    /// text says why.
    pub async fn request(
        &self,
        list: &Address,
        who: &Address,
        action: Action,
    ) -> Result<Option<String>, ListsError> {
        self.request_from(list, who, action, None).await
    }

    /// [`Lists::request`] made by `client` (the public subscribe page's browser): the
    /// confirmation counts against that client's `[notice_limits]` too, so one client cannot
    /// mail-bomb many addresses through the form.
    pub async fn request_from(
        &self,
        list: &Address,
        who: &Address,
        action: Action,
        client: Option<std::net::IpAddr>,
    ) -> Result<Option<String>, ListsError> {
        let list = self.list(list).await?;
        self.start(&list, who, action, client).await
    }

    /// Mails `who` the link to their own subscriptions page (asked for by `client` on the public
    /// page), from the first list they are a member of; nothing when they are on none (the page
    /// does not say which). The link is valid for `MANAGE_LINK_HOURS`.
    pub async fn send_manage_link(
        &self,
        who: &Address,
        client: Option<std::net::IpAddr>,
    ) -> Result<(), ListsError> {
        let (dir, w) = (self.enqueuer.directory.clone(), who.clone());
        let person = tokio::task::spawn_blocking(move || dir.person(&w)).await??;
        let Some(first) = person.memberships.first() else {
            tracing::info!(%who, "subscriptions link not sent: not a member of any list");
            return Ok(());
        };
        let list_address = Address::parse(&first.list).map_err(|_| ListsError::InvalidToken)?;
        let list = self.list(&list_address).await?;
        let expires = herald_types::unix_ms_now() / 1000 + MANAGE_LINK_HOURS * 3600;
        let token = token::manage_token(&self.secret, who, expires);
        let url = format!("{}/manage/{token}", self.public_base_url);
        let (lang, texts) = self.words_for(&list, who).await?;
        let w = Words {
            lang: &lang,
            overrides: &texts,
        };
        let notice = notices::manage_link(&w, who, &url, MANAGE_LINK_HOURS);
        self.send_notice(&list, who, &notice, NoticeKind::Confirmation, client)
            .await
    }

    /// Sends the double opt-in confirmation; returns a text for the requester when there is
    /// nothing to confirm (closed list), `None` when the confirmation mail itself is the answer.
    async fn start(
        &self,
        list: &List,
        who: &Address,
        action: Action,
        client: Option<std::net::IpAddr>,
    ) -> Result<Option<String>, ListsError> {
        if action == Action::Subscribe && list.settings.subscription == SubscriptionPolicy::Closed {
            return Ok(Some(format!(
                "{} is a closed list: only its administrators add members.",
                list.address
            )));
        }
        if action == Action::Subscribe {
            // A banned or suppressed address gets no confirmation (the answer to a request by
            // mail is itself dropped for a suppressed one: `send_notice`).
            let (dir, id, w) = (self.enqueuer.directory.clone(), list.id, who.clone());
            if let Some(why) = tokio::task::spawn_blocking(move || dir.refusal(id, &w)).await?? {
                tracing::info!(list = %list.address, who = %who, %why, "subscription refused");
                return Ok(Some(format!(
                    "{who} cannot subscribe to {}: {why}.",
                    list.address
                )));
            }
        }
        let expires = herald_types::unix_ms_now() / 1000 + self.cfg.confirm_ttl_secs;
        let token = token::confirmation_token(&self.secret, action, &list.address, who, expires);
        let url = format!("{}/confirm/{token}", self.public_base_url);
        let (lang, texts) = self.words_for(list, who).await?;
        let w = Words {
            lang: &lang,
            overrides: &texts,
        };
        let notice = notices::confirmation(&w, action, who, &list.address, &token, &url);
        self.send_notice(list, who, &notice, NoticeKind::Confirmation, client)
            .await?;
        Ok(None)
    }

    /// A member's `set digest …` / `set nomail …` by mail: a confirmation to the member's own
    /// address (a forged From must not silence someone's list mail), or why not.
    async fn start_delivery(
        &self,
        list: &List,
        who: &Address,
        mode: herald_types::DeliveryMode,
        client: Option<std::net::IpAddr>,
    ) -> Result<Option<String>, ListsError> {
        let (d, id, addr) = (self.enqueuer.directory.clone(), list.id, who.clone());
        if tokio::task::spawn_blocking(move || d.delivery(id, &addr))
            .await??
            .is_none()
        {
            return Ok(Some(format!(
                "{who} is not a member of {}: there is no delivery to change.",
                list.address
            )));
        }
        self.start(list, who, Action::Delivery(mode), client).await
    }

    /// The member-lifecycle service over this stage's directory.
    pub fn membership(&self) -> Membership {
        Membership::new(&self.enqueuer.directory)
    }

    /// Checks a confirmation token; with `apply: Some(consent)` (how and by whom it is
    /// confirmed), carries its action out. A link is spent on use: a used one, or a
    /// subscription link older than the address's last departure from the list, is refused
    /// ([`ListsError::LinkUsed`], [`ListsError::LinkSuperseded`]) — also when only looked at,
    /// so the page says so instead of offering a button that can do nothing.
    pub async fn confirm(
        &self,
        token: &str,
        apply: Option<Consent>,
    ) -> Result<Confirmation, ListsError> {
        if let Some(consent) = apply {
            return self.apply_token(token, consent).await;
        }
        let c = token::verify_confirmation(&self.secret, token, herald_types::unix_ms_now() / 1000)
            .ok_or(ListsError::InvalidToken)?;
        let list = self.list(&c.list).await?;
        let (m, c2, issued) = (self.membership(), c.clone(), self.issued_unix_secs(&c));
        tokio::task::spawn_blocking(move || m.check_link(list.id, &c2, issued)).await??;
        Ok(c)
    }

    /// When the link of `c` was mailed (Unix seconds): its expiry less the confirmation
    /// lifetime. (After a change of `confirm_ttl_secs` this is off by the change, on the safe
    /// side when the lifetime grew.)
    fn issued_unix_secs(&self, c: &Confirmation) -> u64 {
        c.expires_unix_secs
            .saturating_sub(self.cfg.confirm_ttl_secs)
    }

    /// Verifies a token and has the member lifecycle carry it out ([`Membership::confirm`]:
    /// fresh, spent, done, or given back), then sends the welcome or goodbye it is due.
    async fn apply_token(&self, token: &str, consent: Consent) -> Result<Confirmation, ListsError> {
        let c = token::verify_confirmation(&self.secret, token, herald_types::unix_ms_now() / 1000)
            .ok_or(ListsError::InvalidToken)?;
        let list = self.list(&c.list).await?;
        let action = c.action;
        if action == Action::Subscribe && list.settings.subscription == SubscriptionPolicy::Closed {
            return Err(ListsError::ClosedList);
        }
        // A leaving member's goodbye is written in their language, read while they are still
        // on the list.
        let goodbye_words = if action == Action::Unsubscribe && list.settings.send_goodbye {
            Some(self.words_for(&list, &c.address).await?)
        } else {
            None
        };
        let (m, c2, issued) = (self.membership(), c.clone(), self.issued_unix_secs(&c));
        let id = list.id;
        let done =
            tokio::task::spawn_blocking(move || m.confirm(id, &c2, issued, &consent)).await??;
        match (done.notice(&list), goodbye_words) {
            (Some(NoticeKind::Welcome), _) => {
                let (lang, texts) = self.words_for(&list, &c.address).await?;
                let w = Words {
                    lang: &lang,
                    overrides: &texts,
                };
                let notice = notices::welcome(&w, &list, &c.address, &self.public_base_url);
                self.send_notice(&list, &c.address, &notice, NoticeKind::Welcome, None)
                    .await?;
            }
            (Some(NoticeKind::Goodbye), Some((lang, texts))) => {
                let w = Words {
                    lang: &lang,
                    overrides: &texts,
                };
                let notice = notices::goodbye(&w, &list.address, &c.address);
                self.send_notice(&list, &c.address, &notice, NoticeKind::Goodbye, None)
                    .await?;
            }
            _ => {}
        }
        Ok(c)
    }

    /// Welcomes the enabled members of `list` with `after < id <= up_to`, at most `limit` of them
    /// (in id order): the welcome an import's `--send-welcome` asks for, for the members it
    /// added. An operator asked for these, so the hourly notice limits (which exist against
    /// forged requests) do not apply; a suppressed address is never mailed. The caller pages
    /// with `last` until `done`, and records `last` so a crash resends at most one page.
    pub async fn welcome_members(
        &self,
        list: &Address,
        after: MemberId,
        up_to: MemberId,
        limit: usize,
    ) -> Result<WelcomeBatch, ListsError> {
        let list = self.list(list).await?;
        let d = self.enqueuer.directory.clone();
        let id = list.id;
        let limit = limit.clamp(1, MAX_WELCOME_PAGE);
        let page = tokio::task::spawn_blocking(move || {
            let members = d.members_page(id, after, up_to, limit, true)?;
            let mut out = Vec::with_capacity(members.len());
            for m in members {
                let suppressed = d.suppression_for(Some(id), &m.address)?.is_some();
                out.push((m.id, m.address, suppressed));
            }
            Ok::<_, DirectoryError>(out)
        })
        .await??;
        let mut batch = WelcomeBatch {
            sent: 0,
            skipped: 0,
            last: after,
            done: page.len() < limit,
        };
        for (member_id, address, suppressed) in page {
            if suppressed {
                batch.skipped += 1;
            } else {
                let (lang, texts) = self.words_for(&list, &address).await?;
                let w = Words {
                    lang: &lang,
                    overrides: &texts,
                };
                let notice = notices::welcome(&w, &list, &address, &self.public_base_url);
                self.send(&list, &address, &notice).await?;
                batch.sent += 1;
            }
            batch.last = member_id;
        }
        tracing::info!(list = %list.address, sent = batch.sent, skipped = batch.skipped,
            last = batch.last.0, "welcome sent to imported members");
        Ok(batch)
    }

    /// Tells a member that bounce handling disabled them, if their list asks for it
    /// (`bounce_notify`): why, and how to come back.
    pub async fn notify_disabled(&self, d: &DisabledMember) -> Result<(), ListsError> {
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
        let (lang, texts) = self.words_for(&list, &member.address).await?;
        let w = Words {
            lang: &lang,
            overrides: &texts,
        };
        let notice = notices::disabled(&w, &list.address, &member.address, reason);
        self.send_notice(&list, &member.address, &notice, NoticeKind::Disabled, None)
            .await
    }
}
