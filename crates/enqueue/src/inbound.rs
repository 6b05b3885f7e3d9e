//! Plugs the enqueue path into the SMTP/LMTP listeners (`herald_inbound::InboundHandler`).
//!
//! One lookup per recipient: the directory is asked at RCPT ([`Target`]); the session keeps
//! the answer and hands it back with the message, so DATA spools without asking again.
//!
//! Recipient policy (never an open relay): a recipient is accepted when it is a list's address,
//! or that address's `-bounces`, `-bounces+<verp>` or `-request` form, or postmaster (RFC 5321
//! §4.5.1: `<Postmaster>`, or `postmaster@<d>` where `<d>` is the hostname or a list's domain);
//! or the complaints address (`[complaints] local_part` at a list's domain, when set);
//! everything else is refused with 550 5.1.1 before DATA. Postmaster comes first: a list
//! created as `postmaster@<d>` would never receive mail, Herald keeps that address itself.
//!
//! SECURITY: every recipient and body here comes from an untrusted SMTP peer (or the MTA in front
//! over LMTP) and reaches the directory only as a parsed `Address`; reply texts are built from
//! validated addresses only. The listener bounds (per-client and per-network limits, stress mode,
//! shedding: `herald_inbound`) are reported here as counters and a gauge, never as log lines per
//! peer, so a flood cannot flood the logs through this file.

use crate::enqueue::{Enqueuer, Origin, Submission};
use crate::error::EnqueueError;
use herald_directory::Ban;
use herald_inbound::{InboundHandler, InboundMessage, Mode, Refusal};
use herald_smtp::replies;
use herald_spool::{PostKind, Spool};
use herald_telemetry::InboundRefusal;
use herald_types::{
    Address, GuardTrip, List, ListAddressKind, ListAddressParts, ListId, PostId, Reply,
};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// What the RCPT check needs to know about postmaster mail (the lists stage handles it).
#[derive(Debug, Clone)]
pub struct PostmasterPolicy {
    /// This server's own name: `postmaster@<hostname>` is always ours.
    pub hostname: String,
    /// Most postmaster messages stored at once (`postmaster.max_stored`).
    pub max_stored: usize,
    /// `[complaints] local_part` (empty: no complaints address).
    pub complaints_local_part: String,
}

impl PostmasterPolicy {
    /// True when `domain` is this server's own name (list domains are the directory's to say).
    pub fn is_hostname(&self, domain: &str) -> bool {
        domain.eq_ignore_ascii_case(&self.hostname)
    }

    /// Room for one more stored message (checked at RCPT; concurrent sessions may overshoot
    /// by at most one message each).
    pub fn has_room(&self, spool: &Spool) -> bool {
        spool.live_count(PostKind::Postmaster) < self.max_stored
    }
}

pub struct ListHandler {
    enqueuer: Arc<Enqueuer>,
    postmaster: PostmasterPolicy,
    /// Directory lookups made for recipients (one per RCPT; tests count them).
    lookups: AtomicU64,
    /// Backpressure on list posts (`[intake] max_unfinished_copies`; off unless set).
    pressure: crate::IntakePressure,
}

/// Who an accepted recipient is: the answer found at RCPT, carried to DATA.
#[derive(Debug, Clone)]
pub enum Target {
    /// A list, in one of its roles (boxed: a `List` with its settings is large).
    List(Box<List>, ListAddressKind),
    /// Postmaster, as `postmaster@<domain>` (local part normalized).
    Postmaster(Address),
    /// The complaints address at a list domain (feedback-loop reports).
    Complaints(Address),
}

impl ListHandler {
    pub fn new(enqueuer: Arc<Enqueuer>, postmaster: PostmasterPolicy) -> ListHandler {
        ListHandler {
            enqueuer,
            postmaster,
            lookups: AtomicU64::new(0),
            pressure: crate::IntakePressure::new(0),
        }
    }

    /// Refuses list posts with `452 4.3.1` while more than `max_unfinished_copies` copies
    /// wait for delivery (see `pressure.rs`; 0: never).
    pub fn with_backpressure(mut self, max_unfinished_copies: u64) -> ListHandler {
        self.pressure = crate::IntakePressure::new(max_unfinished_copies);
        self
    }

    /// True when a list post must wait: the unfinished work is over its bound.
    fn overloaded(&self) -> bool {
        let gauges = self.enqueuer.telemetry.gauges();
        self.pressure.refuse(
            gauges.unfinished_copies.get(),
            &gauges.intake_backpressure,
            herald_types::unix_ms_now(),
        )
    }

    /// Directory lookups made so far for recipients.
    pub fn directory_lookups(&self) -> u64 {
        self.lookups.load(Ordering::Relaxed)
    }

    /// What a recipient is to us (`None` when it is not ours), and the ban that stops `sender`
    /// from writing to it: checked for a list's post and `-request` addresses, in the same
    /// blocking task as the lookup.
    async fn resolve(
        &self,
        rcpt: &Address,
        sender: Option<&Address>,
    ) -> Result<(Option<Target>, Option<Ban>), Reply> {
        if rcpt.is_postmaster() && self.postmaster.is_hostname(rcpt.domain()) {
            return Ok((postmaster_target(rcpt), None));
        }
        self.lookups.fetch_add(1, Ordering::Relaxed);
        let dir = self.enqueuer.directory.clone();
        let (rcpt, sender) = (rcpt.clone(), sender.cloned());
        let complaints = self.postmaster.complaints_local_part.clone();
        let found = tokio::task::spawn_blocking(move || {
            let target = match lookup(&dir, &rcpt)? {
                None if !complaints.is_empty()
                    && rcpt.local().eq_ignore_ascii_case(&complaints)
                    && dir.has_list_in_domain(rcpt.domain())? =>
                {
                    Some(Target::Complaints(rcpt.clone()))
                }
                t => t,
            };
            let ban = match (&target, &sender) {
                (
                    Some(Target::List(list, ListAddressKind::Post | ListAddressKind::Request)),
                    Some(s),
                ) => dir.ban_for(Some(list.id), s)?,
                _ => None,
            };
            Ok::<_, herald_directory::DirectoryError>((target, ban))
        })
        .await;
        match found {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                tracing::error!(error = %e, "directory lookup failed during RCPT");
                Err(replies::LOCAL_ERROR.reply())
            }
            Err(e) => {
                tracing::error!(error = %e, "directory task failed during RCPT");
                Err(replies::LOCAL_ERROR.reply())
            }
        }
    }
}

/// The directory's answer for one recipient (blocking).
fn lookup(
    dir: &herald_directory::Directory,
    rcpt: &Address,
) -> Result<Option<Target>, herald_directory::DirectoryError> {
    if rcpt.is_postmaster() {
        let ours = dir.has_list_in_domain(rcpt.domain())?;
        return Ok(ours.then(|| postmaster_target(rcpt)).flatten());
    }
    // A list's own address wins over suffix parsing (a list may be called "x-request").
    if let Some(list) = dir.list_by_address(rcpt)? {
        return Ok(Some(Target::List(Box::new(list), ListAddressKind::Post)));
    }
    let parts = ListAddressParts::classify(rcpt);
    if parts.kind == ListAddressKind::Post {
        return Ok(None);
    }
    Ok(dir
        .list_by_address(&parts.list_address)?
        .map(|l| Target::List(Box::new(l), parts.kind)))
}

/// `postmaster@<domain>` spelled the one way the store and the log show it.
fn postmaster_target(rcpt: &Address) -> Option<Target> {
    Address::from_parts(herald_types::address::POSTMASTER, rcpt.domain())
        .ok()
        .map(Target::Postmaster)
}

fn enqueue_reply(result: &Result<PostId, EnqueueError>) -> Reply {
    match result {
        Ok(id) => replies::queued_as(id),
        Err(e) if e.is_storage_shortage() => {
            tracing::warn!(error = %e, "message refused for now: the spool cannot store it");
            e.smtp_reply()
        }
        Err(e @ EnqueueError::TooBig { .. }) => e.smtp_reply(),
        Err(e @ EnqueueError::EightBitHeader(_)) => {
            tracing::info!(error = %e, "message refused");
            e.smtp_reply()
        }
        Err(e) => {
            tracing::error!(error = %e, "cannot enqueue a message");
            e.smtp_reply()
        }
    }
}

impl InboundHandler for ListHandler {
    type Recipient = Target;

    fn refused(&self, refusal: Refusal, _peer: std::net::SocketAddr) {
        let why = match refusal {
            Refusal::TooManyFromClient => InboundRefusal::PerClientLimit,
            Refusal::CommandTimeout => InboundRefusal::CommandTimeout,
            Refusal::DataTimeout => InboundRefusal::DataTimeout,
            Refusal::BufferBudget => InboundRefusal::BufferBudget,
            Refusal::TooManyFromNetwork => InboundRefusal::PerNetworkLimit,
            Refusal::Shed => InboundRefusal::Shed,
            Refusal::StressTimeout => InboundRefusal::StressTimeout,
        };
        self.enqueuer.telemetry.metrics().count_inbound_refusal(why);
    }

    fn stress_changed(&self, _mode: Mode, stressed: bool) {
        // A count of listeners, not a flag: SMTP and submissions each have their own board.
        let gauge = &self.enqueuer.telemetry.metrics().gauges.inbound_stress;
        let step = if stressed { 1 } else { -1 };
        gauge.inc_by(step);
    }

    fn check_recipient(
        &self,
        rcpt: &Address,
        sender: Option<&Address>,
    ) -> impl Future<Output = Result<Target, Reply>> + Send {
        let (rcpt, sender) = (rcpt.clone(), sender.cloned());
        async move {
            // The journal cannot take mail now (a full disk): say so before the body is sent;
            // the sender keeps the message and retries.
            if !self.enqueuer.spool.is_writable() {
                return Err(replies::INSUFFICIENT_STORAGE.reply());
            }
            let (target, ban) = self.resolve(&rcpt, sender.as_ref()).await?;
            if let (Some(ban), Some(Target::List(list, _)), Some(sender)) = (ban, &target, &sender)
            {
                self.enqueuer
                    .telemetry
                    .metrics()
                    .count_list_guard(GuardTrip::Banned);
                tracing::info!(list = %list.address, sender = %sender, ban = ban.id,
                    "banned sender refused at RCPT");
                return Err(crate::enqueue::banned_reply(sender, &list.address, &ban));
            }
            match target {
                Some(Target::List(_, ListAddressKind::Post)) if self.overloaded() => {
                    Err(replies::BACKLOG_FULL.reply())
                }
                Some(Target::Postmaster(_)) if !self.postmaster.has_room(&self.enqueuer.spool) => {
                    tracing::warn!(rcpt = %rcpt, "postmaster mail refused for now: postmaster.max_stored reached");
                    Err(replies::POSTMASTER_FULL.reply())
                }
                Some(target) => Ok(target),
                None => Err(replies::no_such_list(&rcpt)),
            }
        }
    }

    async fn accept_message(&self, message: InboundMessage<Target>) -> Vec<Reply> {
        let envelope = message.envelope;
        let body = envelope.body.clone();
        // One post per (list, role): a message to a list and its -request address is two
        // spooled items, but two recipients naming the same list address are one. All
        // postmaster recipients of a message are one stored message.
        let mut done: Vec<(ListId, u8, Reply)> = Vec::new();
        let mut replies = Vec::with_capacity(envelope.rcpts.len());
        for (i, answer) in message.recipients.into_iter().enumerate() {
            let target = match answer {
                Ok(target) => target,
                Err(refusal) => {
                    replies.push(refusal);
                    continue;
                }
            };
            let key = match &target {
                Target::List(list, role) => (list.id, role_key(role)),
                Target::Postmaster(_) => (ListId::NONE, POSTMASTER_KEY),
                Target::Complaints(_) => (ListId::NONE, COMPLAINTS_KEY),
            };
            if let Some((_, _, r)) = done.iter().find(|(l, k, _)| (*l, *k) == key) {
                replies.push(r.clone());
                continue;
            }
            let submission = match target {
                Target::List(list, role) => Submission::List {
                    list,
                    role,
                    origin: Origin::Smtp {
                        envelope_from: envelope.mail_from.clone(),
                        peer: (envelope.mode == herald_smtp::Mode::Smtp)
                            .then(|| message.peer.ip().to_canonical()),
                        helo: envelope.helo.domain.to_string(),
                        smtputf8: envelope.params.smtputf8,
                    },
                    body: body.clone(),
                },
                Target::Postmaster(rcpt) => Submission::Postmaster {
                    rcpt,
                    envelope_from: envelope.mail_from.clone(),
                    dsn: relayed_dsn(&envelope, i),
                    body: body.clone(),
                },
                Target::Complaints(rcpt) => Submission::Complaint {
                    rcpt,
                    body: body.clone(),
                },
            };
            let reply = enqueue_reply(&self.enqueuer.enqueue(submission).await);
            done.push((key.0, key.1, reply.clone()));
            replies.push(reply);
        }
        replies
    }
}

/// The DSN parameters (RFC 3461) to keep for mail Herald relays on: the transaction's RET and
/// ENVID and the `i`-th recipient's NOTIFY and ORCPT; `None` when there are none. Only
/// postmaster mail is relayed (forwarded to the operators). A list post is not: the list is the
/// new originator of every copy (as in Mailman), its return path is the list's bounce address
/// and its failures are the list's business, so the poster's DSN request ends here.
fn relayed_dsn(envelope: &herald_smtp::Envelope, i: usize) -> Option<herald_types::Dsn> {
    let rcpt = envelope.rcpt_params.get(i);
    let dsn = herald_types::Dsn {
        ret: envelope.params.ret,
        envid: envelope.params.envid.clone(),
        notify: rcpt.and_then(|p| p.notify),
        orcpt: rcpt.and_then(|p| p.orcpt.clone()),
    };
    (!dsn.is_empty()).then_some(dsn)
}

fn role_key(role: &ListAddressKind) -> u8 {
    match role {
        ListAddressKind::Post => 0,
        ListAddressKind::Bounces { .. } => 1,
        ListAddressKind::Request => 2,
    }
}

/// The dedup key role of postmaster mail (with `ListId::NONE`).
const POSTMASTER_KEY: u8 = 3;
/// The dedup key role of mail to the complaints address (with `ListId::NONE`).
const COMPLAINTS_KEY: u8 = 4;
