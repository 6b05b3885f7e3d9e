//! Plugs the enqueue path into the SMTP/LMTP listeners (`InboundHandler`) and the HTTP API
//! (`Injector`).
//!
//! Recipient policy (never an open relay): a recipient is accepted when it is a list's address,
//! or that address's `-bounces`, `-bounces+<verp>` or `-request` form, or postmaster (RFC 5321
//! §4.5.1: `<Postmaster>`, or `postmaster@<d>` where `<d>` is the hostname or a list's domain);
//! everything else is refused with 550 5.1.1 before DATA. Postmaster comes first: a list
//! created as `postmaster@<d>` would never receive mail, Herald keeps that address itself.
//!
//! SECURITY: every recipient and body here comes from an untrusted SMTP peer (or the MTA in front
//! over LMTP) and reaches the directory only as a parsed `Address`; reply texts are built from
//! validated addresses only. The listener bounds (per-client and per-network limits, stress mode,
//! shedding: `herald_inbound`) are reported here as counters and a gauge, never as log lines per
//! peer, so a flood cannot flood the logs through this file.

use crate::config::Config;
use crate::enqueue::{EnqueueError, Enqueuer, Origin};
use crate::postmaster::Postmaster;
use bytes::Bytes;
use herald_directory::Directory;
use herald_inbound::{InboundError, InboundHandler, InboundMessage, InboundShared, Mode, Refusal};
use herald_telemetry::InboundRefusal;
use herald_types::{
    Address, EnhancedStatus, List, ListAddressKind, ListAddressParts, ListId, PostId, Reply,
};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub struct ListHandler {
    enqueuer: Arc<Enqueuer>,
    directory: Directory,
    postmaster: Arc<Postmaster>,
}

/// Who a recipient we accept is.
enum Target {
    /// A list, in one of its roles (boxed: a `List` with its settings is large).
    List(Box<List>, ListAddressKind),
    /// Postmaster, as `postmaster@<domain>` (local part normalized).
    Postmaster(Address),
}

impl ListHandler {
    pub fn new(
        enqueuer: Arc<Enqueuer>,
        directory: Directory,
        postmaster: Arc<Postmaster>,
    ) -> ListHandler {
        ListHandler {
            enqueuer,
            directory,
            postmaster,
        }
    }

    /// What a recipient is to us, or `None` when it is not ours.
    async fn resolve(&self, rcpt: &Address) -> Result<Option<Target>, Reply> {
        if rcpt.is_postmaster() && self.postmaster.is_hostname(rcpt.domain()) {
            return Ok(postmaster_target(rcpt));
        }
        let dir = self.directory.clone();
        let rcpt = rcpt.clone();
        let found = tokio::task::spawn_blocking(move || {
            if rcpt.is_postmaster() {
                let ours = dir.has_list_in_domain(rcpt.domain())?;
                return Ok(ours.then(|| postmaster_target(&rcpt)).flatten());
            }
            // A list's own address wins over suffix parsing (a list may be called "x-request").
            if let Some(list) = dir.list_by_address(&rcpt)? {
                return Ok(Some(Target::List(Box::new(list), ListAddressKind::Post)));
            }
            let parts = ListAddressParts::classify(&rcpt);
            if parts.kind == ListAddressKind::Post {
                return Ok(None);
            }
            Ok::<_, herald_directory::DirectoryError>(
                dir.list_by_address(&parts.list_address)?
                    .map(|l| Target::List(Box::new(l), parts.kind)),
            )
        })
        .await;
        match found {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                tracing::error!(error = %e, "directory lookup failed during RCPT");
                Err(local_error())
            }
            Err(e) => {
                tracing::error!(error = %e, "directory task failed during RCPT");
                Err(local_error())
            }
        }
    }
}

/// `postmaster@<domain>` spelled the one way the store and the log show it.
fn postmaster_target(rcpt: &Address) -> Option<Target> {
    Address::from_parts(herald_types::address::POSTMASTER, rcpt.domain())
        .ok()
        .map(Target::Postmaster)
}

/// Too much postmaster mail is stored: the sender keeps the message and retries (RFC 5321
/// §4.2.2 "452 insufficient system storage").
fn postmaster_full() -> Reply {
    Reply::new(
        452,
        Some(EnhancedStatus::new(4, 3, 1)),
        "too much mail for postmaster waiting here, try again later",
    )
}

fn local_error() -> Reply {
    Reply::new(
        451,
        Some(EnhancedStatus::new(4, 3, 0)),
        "temporary local problem, try again later",
    )
}

fn no_such_list(rcpt: &Address) -> Reply {
    Reply::new(
        550,
        Some(EnhancedStatus::new(5, 1, 1)),
        format!("<{rcpt}>: no such list here (relaying denied)"),
    )
}

fn enqueue_reply(result: &Result<PostId, EnqueueError>) -> Reply {
    match result {
        Ok(id) => Reply::new(
            250,
            Some(EnhancedStatus::new(2, 0, 0)),
            format!("queued as {id}"),
        ),
        Err(EnqueueError::TooBig { limit }) => Reply::new(
            552,
            Some(EnhancedStatus::new(5, 3, 4)),
            format!("message larger than the list allows ({limit} bytes)"),
        ),
        Err(EnqueueError::Spool(e)) if e.is_storage_shortage() => {
            tracing::warn!(error = %e, "message refused for now: the spool cannot store it");
            herald_smtp::replies::INSUFFICIENT_STORAGE.reply()
        }
        Err(e) => {
            tracing::error!(error = %e, "cannot enqueue a message");
            local_error()
        }
    }
}

impl InboundHandler for ListHandler {
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
        gauge.fetch_add(step, std::sync::atomic::Ordering::Relaxed);
    }

    fn check_recipient(&self, rcpt: &Address) -> impl Future<Output = Result<(), Reply>> + Send {
        let rcpt = rcpt.clone();
        async move {
            // The journal cannot take mail now (a full disk): say so before the body is sent;
            // the sender keeps the message and retries.
            if !self.enqueuer.spool.is_writable() {
                return Err(herald_smtp::replies::INSUFFICIENT_STORAGE.reply());
            }
            match self.resolve(&rcpt).await? {
                Some(Target::Postmaster(_)) if !self.postmaster.has_room(&self.enqueuer.spool) => {
                    tracing::warn!(rcpt = %rcpt, "postmaster mail refused for now: postmaster.max_stored reached");
                    Err(postmaster_full())
                }
                Some(_) => Ok(()),
                None => Err(no_such_list(&rcpt)),
            }
        }
    }

    async fn accept_message(&self, message: InboundMessage) -> Vec<Reply> {
        {
            let envelope = message.envelope;
            let body = envelope.body.clone();
            // One post per (list, role): a message to a list and its -request address is two
            // spooled items, but two recipients naming the same list address are one. All
            // postmaster recipients of a message are one stored message.
            let mut done: Vec<(ListId, u8, Reply)> = Vec::new();
            let mut replies = Vec::with_capacity(envelope.rcpts.len());
            for rcpt in &envelope.rcpts {
                let target = match self.resolve(rcpt).await {
                    Ok(Some(v)) => v,
                    Ok(None) => {
                        replies.push(no_such_list(rcpt));
                        continue;
                    }
                    Err(r) => {
                        replies.push(r);
                        continue;
                    }
                };
                let key = match &target {
                    Target::List(list, role) => (list.id, role_key(role)),
                    Target::Postmaster(_) => (ListId::NONE, POSTMASTER_KEY),
                };
                if let Some((_, _, r)) = done.iter().find(|(l, k, _)| (*l, *k) == key) {
                    replies.push(r.clone());
                    continue;
                }
                let result = match &target {
                    Target::List(list, role) => {
                        let origin = Origin::Smtp {
                            envelope_from: envelope.mail_from.clone(),
                            peer: (envelope.mode == herald_smtp::Mode::Smtp)
                                .then(|| message.peer.ip().to_canonical()),
                            helo: envelope.helo.domain.to_string(),
                        };
                        self.enqueuer
                            .enqueue(list, role, origin, body.clone())
                            .await
                    }
                    Target::Postmaster(pm) => {
                        let from = envelope.mail_from.clone();
                        self.enqueuer
                            .enqueue_postmaster(pm, from, body.clone())
                            .await
                    }
                };
                let reply = enqueue_reply(&result);
                done.push((key.0, key.1, reply.clone()));
                replies.push(reply);
            }
            replies
        }
    }
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

impl herald_api::Injector for Enqueuer {
    fn inject(
        &self,
        list: Address,
        body: Bytes,
    ) -> Pin<Box<dyn Future<Output = Result<PostId, String>> + Send + '_>> {
        Box::pin(async move {
            let dir = self.directory.clone();
            let addr = list.clone();
            let found = tokio::task::spawn_blocking(move || dir.list_by_address(&addr))
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?;
            let list = found.ok_or_else(|| format!("no such list: {list}"))?;
            let body = crlf(body);
            self.enqueue(&list, &ListAddressKind::Post, Origin::Admin, body)
                .await
                .map_err(|e| e.to_string())
        })
    }
}

/// Files on disk often have bare LF line endings; the spool keeps CRLF, as SMTP delivers it.
fn crlf(body: Bytes) -> Bytes {
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

/// Starts the SMTP and LMTP listeners.
/// `tls` (from [`Config::inbound_tls`]) makes SMTP offer STARTTLS; `submissions` is the
/// implicit-TLS listener (only started with `tls`). The listeners share one buffer budget
/// (`smtp_in.max_buffered_octets` bounds them together) and one per-client and per-network
/// table (a client's SMTP and submissions sessions count together; LMTP is not counted). They
/// do not share session slots: each has its own `max_sessions`, so SMTP clients can never take
/// the LMTP listener's slots, and LMTP is never stressed nor shed (issue 12).
pub fn spawn_listeners(
    config: &Config,
    smtp: TcpListener,
    lmtp: TcpListener,
    tls: Option<(Arc<rustls::ServerConfig>, Option<TcpListener>)>,
    handler: Arc<ListHandler>,
    shutdown: &CancellationToken,
) -> Vec<(&'static str, JoinHandle<Result<(), InboundError>>)> {
    let inbound = config.smtp_in.inbound_config(&config.hostname);
    let shared = InboundShared::new(&inbound);
    let mut tasks = Vec::with_capacity(3);
    let starttls = tls.as_ref().map(|(cfg, _)| herald_inbound::InboundTls {
        config: cfg.clone(),
        implicit: false,
    });
    if let Some((cfg, Some(listener))) = tls {
        let implicit = herald_inbound::InboundTls {
            config: cfg,
            implicit: true,
        };
        tasks.push((
            "SMTPS",
            tokio::spawn(herald_inbound::serve_shared(
                listener,
                Mode::Smtp,
                inbound.clone(),
                Some(implicit),
                shared.clone(),
                handler.clone(),
                shutdown.clone(),
            )),
        ));
    }
    tasks.extend([
        (
            "SMTP",
            tokio::spawn(herald_inbound::serve_shared(
                smtp,
                Mode::Smtp,
                inbound.clone(),
                starttls,
                shared.clone(),
                handler.clone(),
                shutdown.clone(),
            )),
        ),
        (
            "LMTP",
            tokio::spawn(herald_inbound::serve_shared(
                lmtp,
                Mode::Lmtp,
                inbound,
                None,
                shared,
                handler,
                shutdown.clone(),
            )),
        ),
    ]);
    tasks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crlf_normalizes_only_bare_newlines() {
        assert_eq!(
            crlf(Bytes::from_static(b"a\r\nb\r\n")),
            Bytes::from_static(b"a\r\nb\r\n")
        );
        assert_eq!(
            crlf(Bytes::from_static(b"a\nb\r\nc\n")),
            Bytes::from_static(b"a\r\nb\r\nc\r\n")
        );
        assert_eq!(crlf(Bytes::from_static(b"\n")), Bytes::from_static(b"\r\n"));
    }
}
