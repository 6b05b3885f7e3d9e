//! The member lifecycle, one owner for it (Mailman 3's `app/membership.py`): subscribe,
//! confirm, unsubscribe, change (delivery mode and the member's own settings), disable,
//! re-enable, erase, and the bulk writes of moving in. Every door — the API and the web pages,
//! a confirmed request by mail or link, one-click unsubscribe, the subscriptions page, bounce
//! handling, complaints, suppression, imports — changes members through [`Membership`];
//! `tests/architecture.rs` holds every other crate to that (no directory member write outside
//! this file).
//!
//! Why one place: the decisions that must be the same whatever the door live here once —
//! - a departure is recorded by every way off a list (the directory's removal records it in
//!   the same transaction), and a confirmation link mailed before the last departure
//!   subscribes nobody ([`Membership::check_link`]); a link is spent on use and given back when
//!   its action fails;
//! - consent is recorded with a subscription, and a confirmed re-subscription replaces it;
//! - a confirmed subscribe re-enables a member bounces disabled (the round trip proves the
//!   mailbox works again), never one an administrator disabled;
//! - each change is logged once, here, naming its [`Door`].
//!
//! What it is not: a second store. Each write is one of the directory's transactions (bans,
//! suppression and the bounce score are checked and applied inside them), no new SQL; an
//! operation that takes several (a confirmation: spend the link, then act; a complaint:
//! suppress, then remove) takes them in the order the doors always did. Bounce scoring stays
//! the bounce stage's rule, passed in ([`Membership::record_bounce`]). Notices
//! are the door's to send: an operation says what happened ([`Confirmed`]) and the door
//! that mails (the lists stage) asks for the welcome or goodbye it is due
//! ([`Confirmed::notice`]). The API is synchronous like the directory's; async callers use
//! `spawn_blocking`.
//!
//! SECURITY: addresses arrive as validated [`Address`] values; names, fields and reasons are
//! checked by the directory before anything is written (no CR/LF reaches a header). A
//! confirmation reaches [`Membership::confirm`] only after its HMAC was verified by the caller.

mod error;

pub use error::{
    ChangeError, ConfirmError, DisableError, EnableError, EraseError, ImportError, SubscribeError,
    UnsubscribeError,
};

use herald_directory::{
    BounceApplied, Consent, Directory, DirectoryError, Erased, ImportMember, ImportOutcome,
    ImportReport, LinkKind, NewBounce, NewMember, ScoreRule, Suppressed, SuppressionSource,
};
use herald_types::token::{Action, Confirmation};
use herald_types::{
    Address, ComplaintAction, DeliveryMode, List, ListId, Member, MemberStatus, NoticeKind,
};
use std::io::Read;

/// How the directory's bounce-disable reasons begin (`herald_directory` bounces.rs).
const BOUNCE_REASON_PREFIX: &str = "bounce score";

/// Which door a change came through: named in the one log line each change writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Door {
    /// An administrator: the HTTP API or the web administration pages.
    Admin,
    /// A confirmed request, by mail or on the confirmation page.
    Confirmation,
    /// The one-click unsubscribe link (RFC 8058).
    OneClick,
    /// The member's own subscriptions page.
    ManagePage,
    /// Bounce handling.
    Bounce,
    /// A feedback-loop complaint.
    Complaint,
    /// An operator acting on stragglers.
    Operator,
    /// Moving in: `herald import`, a CSV import.
    Import,
    /// A person's erasure (GDPR article 17).
    Erasure,
}

impl Door {
    pub fn as_str(self) -> &'static str {
        match self {
            Door::Admin => "admin",
            Door::Confirmation => "confirmation",
            Door::OneClick => "one-click",
            Door::ManagePage => "subscriptions page",
            Door::Bounce => "bounce",
            Door::Complaint => "complaint",
            Door::Operator => "operator",
            Door::Import => "import",
            Door::Erasure => "erasure",
        }
    }
}

/// What a confirmed action did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confirmed {
    /// A new member.
    Joined,
    /// Already on the list: consent renewed (and re-enabled if bounces had disabled them).
    Renewed,
    /// Taken off the list.
    Left,
    /// An unsubscribe for someone no longer on the list: nothing changed.
    NotOn,
    /// The delivery mode changed.
    ModeChanged,
}

impl Confirmed {
    /// The notice this outcome is due on `list`: a welcome for a new member, a goodbye for one
    /// who left, as the list's settings ask. The door that mails sends it.
    pub fn notice(self, list: &List) -> Option<NoticeKind> {
        match self {
            Confirmed::Joined if list.settings.send_welcome => Some(NoticeKind::Welcome),
            Confirmed::Left if list.settings.send_goodbye => Some(NoticeKind::Goodbye),
            _ => None,
        }
    }
}

/// The parts of a member a [`Membership::change`] sets; `None` leaves a part as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Change {
    /// `Some(None)`: back to the list's language. A code that is not shipped is refused before
    /// anything changes (it is written first).
    pub language: Option<Option<String>>,
    /// `Some(None)`: no display name.
    pub name: Option<Option<String>>,
    pub delivery: Option<DeliveryMode>,
    pub moderated: Option<bool>,
    /// The "not me too" option: skip the list copy of a post that names the member.
    pub skip_if_addressed: Option<bool>,
}

/// The member-lifecycle service over the directory (a cheap clone of its handle).
#[derive(Clone)]
pub struct Membership {
    dir: Directory,
}

fn note(door: Door, list: ListId, who: &Address, what: &str) {
    tracing::info!(list = list.0, address = %who, door = door.as_str(), "member {what}");
}

impl Membership {
    pub fn new(directory: &Directory) -> Membership {
        Membership {
            dir: directory.clone(),
        }
    }

    /// Adds `m` to `list` with its consent (an administrator's add): `AlreadyMember` if the
    /// address is on the list, `Refused` if it is banned or suppressed.
    pub fn subscribe(
        &self,
        list: ListId,
        m: &NewMember,
        consent: &Consent,
        door: Door,
    ) -> Result<Member, SubscribeError> {
        let member = self.dir.add_member_consented(list, m, consent)?;
        note(door, list, &m.address, "subscribed");
        Ok(member)
    }

    /// Refuses `c` when its link was used, or when it would change a membership the address
    /// left after the link was mailed at `issued_unix_secs` (only an unsubscription stays
    /// harmless). Whole seconds: a link mailed in the same second as the departure (a person
    /// re-subscribing at once) still works.
    pub fn check_link(
        &self,
        list: ListId,
        c: &Confirmation,
        issued_unix_secs: u64,
    ) -> Result<(), ConfirmError> {
        let spent = self.dir.link_spent(&c.spend_key())?;
        let left = self.dir.last_departure(list, &c.address)?;
        if spent {
            return Err(ConfirmError::LinkUsed(Box::new(c.clone())));
        }
        if c.action != Action::Unsubscribe && left.is_some_and(|at| issued_unix_secs < at / 1000) {
            return Err(ConfirmError::LinkSuperseded(Box::new(c.clone())));
        }
        Ok(())
    }

    /// Carries out the verified confirmation `c` on `list`: checks the link is fresh
    /// ([`Membership::check_link`]), spends it, and does what it confirms, recording `consent`
    /// with a subscription (replacing an earlier record: the confirmation is the newest
    /// consent). If the action fails, the link is given back (the person may try again).
    pub fn confirm(
        &self,
        list: ListId,
        c: &Confirmation,
        issued_unix_secs: u64,
        consent: &Consent,
    ) -> Result<Confirmed, ConfirmError> {
        self.check_link(list, c, issued_unix_secs)?;
        let key = c.spend_key();
        let expires_ms = c.expires_unix_secs.saturating_mul(1000);
        if !self
            .dir
            .spend_link(LinkKind::Confirmation, &key, expires_ms)?
        {
            // Used at the same moment, here or at another node.
            return Err(ConfirmError::LinkUsed(Box::new(c.clone())));
        }
        let done = self.carry_out(list, c, consent);
        if done.is_err() {
            let _ = self.dir.unspend_link(&key);
        }
        let done = done?;
        let what = match done {
            Confirmed::Joined => "subscribed",
            Confirmed::Renewed => "renewed their subscription",
            Confirmed::Left => "unsubscribed",
            Confirmed::NotOn => "was not on the list to unsubscribe",
            Confirmed::ModeChanged => "changed delivery",
        };
        note(Door::Confirmation, list, &c.address, what);
        Ok(done)
    }

    fn carry_out(
        &self,
        list: ListId,
        c: &Confirmation,
        consent: &Consent,
    ) -> Result<Confirmed, ConfirmError> {
        let who = &c.address;
        match c.action {
            Action::Subscribe => {
                let m = NewMember::new(who.clone());
                match self.dir.add_member_consented(list, &m, consent) {
                    Ok(_) => Ok(Confirmed::Joined),
                    Err(DirectoryError::AlreadyMember(_)) => {
                        self.renew(list, who, consent)?;
                        Ok(Confirmed::Renewed)
                    }
                    Err(e) => Err(e.into()),
                }
            }
            Action::Unsubscribe => match self.dir.remove_member(list, who)? {
                true => Ok(Confirmed::Left),
                false => Ok(Confirmed::NotOn),
            },
            Action::Delivery(mode) => match self.dir.set_delivery(list, who, mode)? {
                true => Ok(Confirmed::ModeChanged),
                // Left the list between the request and the confirmation.
                false => Err(ConfirmError::NotMember(who.clone())),
            },
        }
    }

    /// A confirmed subscribe of a member already on the list: a member bounce handling
    /// disabled comes back (the round trip proves the mailbox works again; an administrator's
    /// own "disabled" is not overridden), and the consent is the new one.
    fn renew(&self, list: ListId, who: &Address, consent: &Consent) -> Result<(), ConfirmError> {
        let by_bounces = self.dir.member(list, who)?.is_some_and(|x| {
            matches!(&x.status, MemberStatus::Disabled(r) if r.starts_with(BOUNCE_REASON_PREFIX))
        });
        if by_bounces {
            self.dir.reset_bounces(list, who)?;
        }
        self.dir.record_consent(list, who, consent)?;
        Ok(())
    }

    /// Takes `who` off `list` (with their bounce history), recording the departure: older
    /// subscription links then subscribe nobody. False if the address was not on the list.
    pub fn unsubscribe(
        &self,
        list: ListId,
        who: &Address,
        door: Door,
    ) -> Result<bool, UnsubscribeError> {
        let removed = self.dir.remove_member(list, who)?;
        if removed {
            note(door, list, who, "unsubscribed");
        }
        Ok(removed)
    }

    /// Changes the parts of `who` that `change` names, the language first (the one part a
    /// request can get wrong: a refused code changes nothing), then name, delivery mode,
    /// moderation and options. True when every part found the member on the list.
    pub fn change(
        &self,
        list: ListId,
        who: &Address,
        change: &Change,
        door: Door,
    ) -> Result<bool, ChangeError> {
        let d = &self.dir;
        let mut found = true;
        if let Some(language) = &change.language {
            found &= d.set_member_language(list, who, language.as_deref())?;
        }
        if let Some(name) = &change.name {
            found &= d.set_display_name(list, who, name.as_deref())?;
        }
        if let Some(mode) = change.delivery {
            found &= d.set_delivery(list, who, mode)?;
        }
        if let Some(flag) = change.moderated {
            found &= d.set_moderated(list, who, flag)?;
        }
        if let Some(skip) = change.skip_if_addressed {
            found &= d.set_skip_if_addressed(list, who, skip)?;
        }
        if found {
            note(door, list, who, "changed");
        }
        Ok(found)
    }

    /// Disables `who` on `list` with `reason` (shown to administrators and, for bounces, in
    /// the notice). False if the address was not on the list.
    pub fn disable(
        &self,
        list: ListId,
        who: &Address,
        reason: &str,
        door: Door,
    ) -> Result<bool, DisableError> {
        let off = MemberStatus::Disabled(reason.to_string());
        let done = self.dir.set_member_status(list, who, &off)?;
        if done {
            note(door, list, who, "disabled");
        }
        Ok(done)
    }

    /// Re-enables `who` and clears their bounce score (without the reset, the next counted
    /// bounce would disable them again at once); `Refused` for a suppressed address. False if
    /// the address was not on the list.
    pub fn reenable(&self, list: ListId, who: &Address, door: Door) -> Result<bool, EnableError> {
        let done = self.dir.reset_bounces(list, who)?;
        if done {
            note(door, list, who, "re-enabled");
        }
        Ok(done)
    }

    /// Clears `who`'s bounce score, leaving status and history as they are. False if the
    /// address was not on the list.
    pub fn clear_bounce_score(
        &self,
        list: ListId,
        who: &Address,
        door: Door,
    ) -> Result<bool, EnableError> {
        let found = self.dir.reset_bounce_score(list, who)?;
        if found {
            note(door, list, who, "bounce score reset");
        }
        Ok(found)
    }

    /// Records a bounce for `who` on `list` (`None`: against the list's reputation) and scores
    /// it with `rule`, the bounce stage's, in the same transaction; a score over the list's
    /// threshold disables the member there.
    pub fn record_bounce(
        &self,
        list: ListId,
        who: Option<&Address>,
        event: &NewBounce,
        rule: ScoreRule,
    ) -> Result<BounceApplied, DisableError> {
        let applied = self.dir.apply_bounce(list, who, event, rule)?;
        if let (true, Some(who)) = (applied.disabled, who) {
            note(Door::Bounce, list, who, "disabled");
        }
        Ok(applied)
    }

    /// Puts `who` on the suppression list of `scope` (`None`: every list), disabling them
    /// wherever they are an enabled member there, in one transaction. Idempotent.
    pub fn suppress_address(
        &self,
        scope: Option<ListId>,
        who: &Address,
        reason: &str,
        source: SuppressionSource,
    ) -> Result<Suppressed, DisableError> {
        let s = self.dir.suppress(scope, who, reason, source)?;
        if s.disabled > 0 {
            tracing::info!(address = %who, disabled = s.disabled, source = source.as_str(),
                "suppressed members disabled");
        }
        Ok(s)
    }

    /// A suppression carried over from where it was (an import, a restore) with its date;
    /// disables like [`Membership::suppress_address`]. True if it was new.
    pub fn import_suppressed(
        &self,
        scope: Option<ListId>,
        who: &Address,
        reason: &str,
        source: SuppressionSource,
        at_ms: u64,
    ) -> Result<bool, ImportError> {
        Ok(self
            .dir
            .import_suppression(scope, who, reason, source, at_ms)?)
    }

    /// A verified complaint about `who`'s copy from `list`: suppressed on the list with
    /// `reason`, then removed or left disabled as `action` says. True when anything changed
    /// (a second report for the same member changes nothing).
    pub fn complaint(
        &self,
        list: ListId,
        who: &Address,
        reason: &str,
        action: ComplaintAction,
    ) -> Result<bool, DisableError> {
        let s = self
            .dir
            .suppress(Some(list), who, reason, SuppressionSource::Complaint)?;
        let removed = match action {
            ComplaintAction::Unsubscribe => self.dir.remove_member(list, who)?,
            ComplaintAction::Disable => false,
        };
        let changed = s.new || s.disabled > 0 || removed;
        if changed {
            let what = if removed { "unsubscribed" } else { "disabled" };
            note(Door::Complaint, list, who, what);
        }
        Ok(changed)
    }

    /// Writes one batch of an import to `list` in one transaction: new members added, known
    /// ones updated (their status kept), banned or suppressed ones refused, each with its
    /// outcome. A member's own consent is recorded, else `consent`, where none exists.
    pub fn import(
        &self,
        list: ListId,
        batch: &[ImportMember],
        consent: Option<&Consent>,
    ) -> Result<Vec<ImportOutcome>, ImportError> {
        let outcomes = self.dir.import_members(list, batch, consent)?;
        tracing::debug!(
            list = list.0,
            rows = batch.len(),
            door = Door::Import.as_str(),
            "members imported"
        );
        Ok(outcomes)
    }

    /// Imports a CSV document of members into `list` (the API's and the web pages' import);
    /// `progress` hears the rows done.
    pub fn import_from_csv<R: Read>(
        &self,
        list: ListId,
        input: R,
        progress: &mut dyn FnMut(u64),
    ) -> Result<ImportReport, ImportError> {
        let report = self.dir.import_csv(list, input, progress)?;
        tracing::info!(
            list = list.0,
            added = report.added,
            door = Door::Import.as_str(),
            "members imported from CSV"
        );
        Ok(report)
    }

    /// Erases `who` everywhere in the directory (GDPR article 17), in one transaction: their
    /// memberships with consent and settings, bounce history, suppression entries and exact
    /// bans; the erasure hash that stays keeps every add path refusing them.
    pub fn erase(&self, who: &Address) -> Result<Erased, EraseError> {
        let erased = self.dir.erase_person(who)?;
        tracing::info!(
            memberships = erased.memberships,
            door = Door::Erasure.as_str(),
            "person erased from the directory"
        );
        Ok(erased)
    }
}

#[cfg(test)]
mod tests;
