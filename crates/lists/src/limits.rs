//! Sending a notice on someone else's behalf under `[notice_limits]`:
//! confirmations, held-post notices, request replies, rejection and bounce-disabled notices go
//! through [`Lists::send_notice`], which asks [`herald_guard::NoticeRate`] first and drops what
//! is over a limit with a log line and `herald_notices_dropped_total`. The action that caused
//! the notice (a held post, a subscription request) is not affected: only its mail is dropped.
//!
//! Moderators' notices are not limited: they go to the list's own staff, and dropping one would
//! hide a held post; the post rate guard (`max_posts_per_hour`) bounds them.
//!
//! SECURITY: the client a notice is counted against is read only from the `Received:` field
//! Herald's own SMTP listener prepended (the topmost one; whatever a sender wrote lies below
//! it). Over LMTP that field names the MTA in front, so no client is counted.

use crate::error::ListsError;
use crate::notices::Notice;
use crate::stage::Lists;
use herald_guard::NoticeTo;
use herald_types::{Address, List, NoticeKind};
use std::net::IpAddr;

impl Lists {
    /// Sends `notice` of `kind` to `to` when it is under every limit and `to` is not on the
    /// suppression list; drops it otherwise (`Ok`: a dropped notice is the intended outcome,
    /// not an error).
    pub(crate) async fn send_notice(
        &self,
        list: &List,
        to: &Address,
        notice: &Notice,
        kind: NoticeKind,
        client: Option<IpAddr>,
    ) -> Result<(), ListsError> {
        // Never mail a suppressed address, whatever the notice.
        let (dir, id, who) = (self.enqueuer.directory.clone(), list.id, to.clone());
        let suppressed =
            tokio::task::spawn_blocking(move || dir.suppression_for(Some(id), &who)).await??;
        if let Some(s) = suppressed {
            tracing::info!(list = %list.address, to = %to, kind = kind.word(),
                source = s.source.as_str(), "notice not sent: the address is suppressed");
            return Ok(());
        }
        let recipient = to.to_string();
        let n = NoticeTo {
            kind,
            to: &recipient,
            client,
            list: list.id,
        };
        if let Err(limit) = self.notice_rate.admit(n, herald_types::unix_ms_now()) {
            self.enqueuer
                .telemetry
                .metrics()
                .count_notice_dropped(kind, limit);
            tracing::warn!(list = %list.address, to = %to, client = ?client, kind = kind.word(),
                limit = limit.word(), "notice over its [notice_limits] limit: dropped");
            return Ok(());
        }
        self.send(list, to, notice).await
    }
}

/// The SMTP client that sent `body` to Herald, from the `Received:` field Herald's SMTP
/// listener prepended; `None` over LMTP or when the field cannot be read.
pub(crate) fn smtp_client(body: &[u8]) -> Option<IpAddr> {
    // The listener prepends its field; the arrival check then prepends only
    // `Authentication-Results:` above it. Any other first field means it is not ours.
    let (name, raw) = herald_auth::dkim::header_fields(body)
        .into_iter()
        .find(|(name, _)| !name.eq_ignore_ascii_case("Authentication-Results"))?;
    if !name.eq_ignore_ascii_case("Received") {
        return None;
    }
    // Ours reads `by <host> (Herald) with ESMTP…` (ESMTPS, ESMTPA…); the HELO before it is a
    // domain or an address literal, which cannot contain this text.
    let ours = raw
        .windows(b"(Herald) with ESMTP".len())
        .any(|w| w == b"(Herald) with ESMTP");
    if !ours {
        return None;
    }
    herald_auth::received::parse_field(raw).map(|c| c.ip)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_comes_from_our_own_received_field_only() {
        let smtp = b"Authentication-Results: h; dmarc=none\r\nReceived: from client.example ([192.0.2.7])\r\n\tby mx.example (Herald) with ESMTPS\r\n\tfor <l@x>;\r\n\tThu, 1 Jan 1970 00:00:00 +0000\r\nReceived: from x ([198.51.100.1])\r\n\tby other with ESMTP\r\nSubject: s\r\n\r\nbody\r\n";
        assert_eq!(smtp_client(smtp), "192.0.2.7".parse().ok());
        let lmtp = b"Received: from mta.example ([127.0.0.1])\r\n\tby mx.example (Herald) with LMTP;\r\n\tdate\r\nSubject: s\r\n\r\n";
        assert_eq!(smtp_client(lmtp), None, "over LMTP the client is the MTA");
        // Hostile: a forged field claiming to be ours, not at the top, is never reached; a
        // field with no client has none; garbage does not panic.
        let forged =
            b"Subject: s\r\nReceived: from a ([203.0.113.1]) by x (Herald) with ESMTP\r\n\r\n";
        assert_eq!(smtp_client(forged), None);
        let no_from = b"Received: by x (Herald) with ESMTP; date\r\n\r\n";
        assert_eq!(smtp_client(no_from), None);
        for evil in [
            &b""[..],
            b"\r\n\r\n",
            b"Received",
            b"Received:\xff\xfe\r\n\r\n",
        ] {
            assert_eq!(smtp_client(evil), None);
        }
    }
}
