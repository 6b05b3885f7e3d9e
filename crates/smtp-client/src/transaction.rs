//! Mail transactions on an open [`Connection`]: [`Connection::send`].
//!
//! With PIPELINING (RFC 2920) a copy costs one round trip plus its body:
//!
//! ```text
//! write: MAIL₁ RCPT₁ DATA₁                     read: 250 250 354
//! write: body₁ . [RSET] MAIL₂ RCPT₂ DATA₂      read: 250(final₁) [250] 250 250 354
//! write: body₂ .                               read: 250(final₂)
//! ```
//!
//! RFC 2920 §3.1 lets the message content (ended by its dot) be followed by the next command
//! group, and DATA ends each group because its 354 decides whether the body is sent. Without
//! PIPELINING the same steps run in lock-step, one command per round trip.
//!
//! Outcomes: the first refusal of MAIL, RCPT or DATA decides (4xx → `Deferred`, 5xx → `Failed`)
//! and no body is sent; RSET precedes the next MAIL. The reply after the body decides otherwise.
//! A 421 anywhere means the server is closing: the copy that got it is `Deferred` with that reply,
//! `send` returns `Rejected`, and later copies keep `outcome: None` (not delivered; the scheduler
//! retries them). Any other error (timeout, reset, garbage) also returns with `None` for every
//! copy whose fate is not certain — notably a copy whose body was sent but whose final reply never
//! came, which the server may or may not have accepted.
//!
//! A 4xx to MAIL refuses the sender or the connection for now (a rate limit such as Gmail's
//! `451 4.7.28`), not one recipient: the batch stops there and `send` returns `Ok` with the later
//! copies at `outcome: None` — never tried, so a provider that limits the rate is not sent a MAIL
//! per copy it will refuse (the scheduler paces them and sends them again).
//!
//! Checks before anything is written: the return path and recipient must be printable (ASCII,
//! or UTF-8 without control, whitespace or line-separator characters) without `<`, `>` or
//! spaces (they are spliced into command lines — SECURITY: no CR/LF command injection), at most
//! 256 octets (RFC 5321 §4.5.3.1.3); a copy larger than the server's SIZE limit fails locally
//! with `552 5.3.4`.
//!
//! International envelopes (RFC 6531): a copy whose return path or recipient has UTF-8 goes
//! with `MAIL FROM:<…> SMTPUTF8` to a server that offers SMTPUTF8. A server that does not gets
//! nothing for it: the copy fails locally with `553 5.6.7` naming the server — a permanent
//! failure, like a copy over the SIZE limit, since retrying the same server cannot help.
//! (RFC 6531 would also mark a copy whose only UTF-8 is in its headers; like Postfix by default,
//! we decide by the envelope, so a UTF-8 `From:` does not stop a post to ASCII members.)
//!
//! DSN (RFC 3461): a copy's [`OutgoingCopy::dsn`] parameters follow MAIL and RCPT only when the
//! server offers DSN.
//!
//! Bodies up to [`INLINE_BODY_MAX`] are copied into the connection's reused write buffer so that
//! body, dot and the next command group leave in one write (one memcpy of ~10 KB is far cheaper
//! than an extra segment and round of wakeups); larger bodies are written in place, in
//! [`BODY_CHUNK`] pieces, each of which must be accepted within the data timeout. The write
//! buffer lives as long as the connection, so the inline limit is also what each open
//! connection keeps beyond the copies it is sending (16 KiB; it was 256 KiB, which kept a
//! second copy of every mid-sized post per connection — 220 KB × hundreds of connections).

use crate::command::write_all;
use crate::connection::{Connection, OutgoingCopy};
use crate::error::{ProtocolError, SessionError, SessionErrorKind, Stage};
use herald_types::{EnhancedStatus, RcptOutcome, Reply};
use std::io::Write;
use tokio::time::Instant;

/// Bodies up to this size are copied into the command buffer (one write per group); the
/// buffer is kept for the connection's life (see the module docs).
pub const INLINE_BODY_MAX: usize = 16 * 1024;
/// Larger bodies are written in chunks of this size, each within the data timeout.
pub const BODY_CHUNK: usize = 64 * 1024;
/// RFC 5321 §4.5.3.1.3: longest reverse-path or forward-path, brackets included.
const MAX_PATH_LEN: usize = 256;

fn report_body_reply(
    on_body_reply: &mut (dyn FnMut(usize, &RcptOutcome) + Send),
    i: usize,
    copy: &OutgoingCopy<'_>,
) {
    if let Some(outcome) = &copy.outcome {
        on_body_reply(i, outcome);
    }
}

/// How a server answered one step of a transaction.
enum Verdict {
    /// The positive reply the step expects (2xx; 3xx for DATA).
    Accepted(Reply),
    /// 4xx or 5xx other than 421.
    Refused(Reply),
    /// 421: the server is closing the connection.
    Closing(Reply),
}

/// What the replies to one copy's MAIL, RCPT and DATA decided.
enum Envelope {
    /// 354: the body is due.
    Open,
    /// Refused (the copy has its outcome); the batch goes on.
    Refused,
    /// MAIL got a 4xx: the copy has its outcome and the batch stops (see the module docs).
    MailDeferred,
}

/// A reply that did not end the session.
enum Answer {
    Positive(Reply),
    Refused(Reply),
}

impl Connection {
    /// Delivers `copies` over this connection, in order, setting each copy's `outcome` and
    /// `xdelay`. Returns `Err` when the connection failed; copies still at `outcome: None` were
    /// not (certainly) delivered. After an `Err` — or if this future is dropped before it
    /// completes — the connection is not reusable.
    pub async fn send(&mut self, copies: &mut [OutgoingCopy<'_>]) -> Result<(), SessionError> {
        self.send_reporting(copies, &mut |_, _| {}).await
    }

    /// [`Connection::send`], calling `on_body_reply(i, outcome)` as soon as the reply to copy
    /// `i`'s body arrives — the moment that copy is delivered (or refused after its body). The
    /// caller can journal it then, while later copies of the batch are still on the wire: what
    /// a crash could make it send twice is then only what was delivered in the last moments,
    /// not the whole batch. Copies refused before their body are only in `outcome`.
    pub async fn send_reporting(
        &mut self,
        copies: &mut [OutgoingCopy<'_>],
        on_body_reply: &mut (dyn FnMut(usize, &RcptOutcome) + Send),
    ) -> Result<(), SessionError> {
        if !self.reusable {
            return Err(self.fail(Stage::Mail, SessionErrorKind::Unusable));
        }
        if self.reader.buffered() > 0 {
            self.reusable = false;
            return Err(self.fail(Stage::Mail, ProtocolError::Unsolicited.into()));
        }
        for copy in copies.iter_mut() {
            copy.xdelay = None;
            copy.outcome = self.precheck(copy);
        }
        // Restored only on success: a cancelled or failed send leaves an unknown state.
        self.reusable = false;
        if self.ext.pipelining {
            self.send_pipelined(copies, on_body_reply).await?;
        } else {
            self.send_lockstep(copies, on_body_reply).await?;
        }
        self.reusable = true;
        Ok(())
    }

    async fn send_pipelined(
        &mut self,
        copies: &mut [OutgoingCopy<'_>],
        on_body_reply: &mut (dyn FnMut(usize, &RcptOutcome) + Send),
    ) -> Result<(), SessionError> {
        // The copy whose DATA got 354: its body leads the next write. With its MAIL write time.
        let mut open: Option<(usize, Instant)> = None;
        for i in 0..copies.len() {
            if copies[i].outcome.is_some() {
                continue;
            }
            let body = open.map(|(p, _)| copies[p].data);
            let started = Instant::now();
            let rset = self.write_group(body, Some(&copies[i])).await?;
            if let Some((p, p_started)) = open.take() {
                self.finish(&mut copies[p], p_started).await?;
                report_body_reply(on_body_reply, p, &copies[p]);
            }
            if rset {
                self.expect_rset().await?;
            }
            match self.read_envelope(&mut copies[i], started).await? {
                Envelope::Open => open = Some((i, started)),
                Envelope::Refused => {}
                Envelope::MailDeferred => return Ok(()),
            }
        }
        if let Some((p, p_started)) = open {
            self.write_group(Some(copies[p].data), None).await?;
            self.finish(&mut copies[p], p_started).await?;
            report_body_reply(on_body_reply, p, &copies[p]);
        }
        Ok(())
    }

    async fn send_lockstep(
        &mut self,
        copies: &mut [OutgoingCopy<'_>],
        on_body_reply: &mut (dyn FnMut(usize, &RcptOutcome) + Send),
    ) -> Result<(), SessionError> {
        for (i, copy) in copies
            .iter_mut()
            .enumerate()
            .filter(|(_, c)| c.outcome.is_none())
        {
            if self.need_rset {
                self.wbuf.clear();
                self.wbuf.extend_from_slice(b"RSET\r\n");
                self.flush_wbuf(None, Stage::Rset).await?;
                self.expect_rset().await?;
            }
            let started = Instant::now();
            let steps = [(Stage::Mail, 2), (Stage::Rcpt, 2), (Stage::Data, 3)];
            let mut accepted = true;
            for (stage, class) in steps {
                self.wbuf.clear();
                match stage {
                    Stage::Mail => push_mail(&mut self.wbuf, copy, &self.ext),
                    Stage::Rcpt => push_rcpt(&mut self.wbuf, copy, &self.ext),
                    _ => self.wbuf.extend_from_slice(b"DATA\r\n"),
                }
                self.flush_wbuf(None, stage).await?;
                let reply = self.read(stage, self.command_timeout).await?;
                if let Answer::Refused(refused) = self.judge(stage, reply, class, copy, started)? {
                    let mail_deferred = stage == Stage::Mail && refused.is_transient();
                    copy.outcome = Some(negative(refused));
                    copy.xdelay = Some(started.elapsed());
                    // A refused MAIL opened no transaction; later refusals leave one open.
                    self.need_rset = stage != Stage::Mail;
                    if mail_deferred {
                        return Ok(()); // see the module docs: the rest of the batch waits
                    }
                    accepted = false;
                    break;
                }
            }
            if accepted {
                self.write_group(Some(copy.data), None).await?;
                self.finish(copy, started).await?;
                report_body_reply(on_body_reply, i, copy);
            }
        }
        Ok(())
    }

    /// Reads the MAIL, RCPT and DATA replies of one pipelined group. True when the body is due.
    async fn read_envelope(
        &mut self,
        copy: &mut OutgoingCopy<'_>,
        started: Instant,
    ) -> Result<Envelope, SessionError> {
        let mut refused: Option<Reply> = None;
        let mut mail_deferred = false;
        for stage in [Stage::Mail, Stage::Rcpt] {
            let reply = self.read(stage, self.command_timeout).await?;
            if let Answer::Refused(r) = self.judge(stage, reply, 2, copy, started)? {
                mail_deferred |= stage == Stage::Mail && r.is_transient();
                refused.get_or_insert(r);
            }
        }
        let reply = self.read(Stage::Data, self.command_timeout).await?;
        match (refused, self.judge(Stage::Data, reply, 3, copy, started)?) {
            (None, Answer::Positive(_)) => Ok(Envelope::Open),
            (Some(first), Answer::Positive(reply)) => {
                // 354 for a transaction whose MAIL or RCPT failed: sending any body (even an
                // empty one) could deliver something; only closing the connection is safe.
                copy.outcome = Some(negative(first));
                copy.xdelay = Some(started.elapsed());
                Err(self.fail(Stage::Data, ProtocolError::DataAfterFailure(reply).into()))
            }
            (first, Answer::Refused(data)) => {
                copy.outcome = Some(negative(first.unwrap_or(data)));
                copy.xdelay = Some(started.elapsed());
                self.need_rset = true;
                Ok(match mail_deferred {
                    true => Envelope::MailDeferred,
                    false => Envelope::Refused,
                })
            }
        }
    }

    /// Classifies one reply. A 421 sets the copy's outcome (unless already known) and ends the
    /// session with an error; a positive reply of the wrong class is a protocol error.
    fn judge(
        &self,
        stage: Stage,
        reply: Reply,
        positive_class: u16,
        copy: &mut OutgoingCopy<'_>,
        started: Instant,
    ) -> Result<Answer, SessionError> {
        match verdict(reply, positive_class) {
            Ok(Verdict::Accepted(r)) => Ok(Answer::Positive(r)),
            Ok(Verdict::Refused(r)) => Ok(Answer::Refused(r)),
            Ok(Verdict::Closing(r)) => {
                if copy.outcome.is_none() {
                    copy.outcome = Some(RcptOutcome::Deferred(r.clone()));
                    copy.xdelay = Some(started.elapsed());
                }
                Err(self.fail(stage, SessionErrorKind::Rejected(r)))
            }
            Err(p) => Err(self.fail(stage, p.into())),
        }
    }

    /// Reads the reply after a body and records the copy's outcome.
    async fn finish(
        &mut self,
        copy: &mut OutgoingCopy<'_>,
        started: Instant,
    ) -> Result<(), SessionError> {
        let reply = self.read(Stage::DataEnd, self.data_timeout).await?;
        copy.outcome = Some(match self.judge(Stage::DataEnd, reply, 2, copy, started)? {
            Answer::Positive(reply) => RcptOutcome::Delivered(reply),
            Answer::Refused(reply) => negative(reply),
        });
        copy.xdelay = Some(started.elapsed());
        self.transactions += 1;
        Ok(())
    }

    async fn expect_rset(&mut self) -> Result<(), SessionError> {
        let reply = self.read(Stage::Rset, self.command_timeout).await?;
        self.need_rset = false;
        match verdict(reply, 2) {
            Ok(Verdict::Accepted(_)) => Ok(()),
            Ok(Verdict::Refused(r) | Verdict::Closing(r)) => {
                Err(self.fail(Stage::Rset, SessionErrorKind::Rejected(r)))
            }
            Err(p) => Err(self.fail(Stage::Rset, p.into())),
        }
    }

    /// Writes `[body .] [RSET] [MAIL RCPT DATA]` as one group. Returns whether RSET was sent.
    async fn write_group(
        &mut self,
        body: Option<&[u8]>,
        next: Option<&OutgoingCopy<'_>>,
    ) -> Result<bool, SessionError> {
        self.wbuf.clear();
        let mut large = None;
        if let Some(body) = body {
            if body.len() <= INLINE_BODY_MAX {
                self.wbuf.extend_from_slice(body);
            } else {
                large = Some(body);
            }
            push_terminator(&mut self.wbuf, body);
        }
        let rset = next.is_some() && self.need_rset;
        if let Some(copy) = next {
            if rset {
                self.wbuf.extend_from_slice(b"RSET\r\n");
            }
            push_mail(&mut self.wbuf, copy, &self.ext);
            push_rcpt(&mut self.wbuf, copy, &self.ext);
            self.wbuf.extend_from_slice(b"DATA\r\n");
        }
        let stage = if body.is_some() {
            Stage::DataEnd
        } else {
            Stage::Mail
        };
        self.flush_wbuf(large, stage).await?;
        Ok(rset)
    }

    /// Writes `large` (in chunks) and then the write buffer.
    async fn flush_wbuf(&mut self, large: Option<&[u8]>, stage: Stage) -> Result<(), SessionError> {
        let timeout = if stage == Stage::DataEnd {
            self.data_timeout
        } else {
            self.command_timeout
        };
        for chunk in large.unwrap_or_default().chunks(BODY_CHUNK) {
            let deadline = Instant::now() + self.data_timeout;
            if let Err(k) = write_all(&mut self.stream, chunk, deadline).await {
                return Err(self.fail(stage, k));
            }
        }
        let deadline = Instant::now() + timeout;
        match write_all(&mut self.stream, &self.wbuf, deadline).await {
            Ok(()) => Ok(()),
            Err(k) => Err(self.fail(stage, k)),
        }
    }

    /// A local verdict for copies that must not be sent at all.
    fn precheck(&self, copy: &OutgoingCopy<'_>) -> Option<RcptOutcome> {
        if !valid_path(copy.return_path, true) {
            let text = "invalid return path";
            return Some(RcptOutcome::Failed(local(553, (5, 1, 7), text)));
        }
        if !valid_path(copy.rcpt, false) {
            let text = "invalid recipient address";
            return Some(RcptOutcome::Failed(local(553, (5, 1, 3), text)));
        }
        if copy.needs_smtputf8() && !self.ext.smtputf8 {
            let text = format!(
                "international address needs SMTPUTF8, which {} does not offer",
                self.host
            );
            return Some(RcptOutcome::Failed(local(553, (5, 6, 7), &text)));
        }
        let size = message_size(copy.data) as u64;
        match self.ext.size_limit() {
            Some(limit) if size > limit => {
                let text = format!(
                    "message size {size} exceeds the limit {limit} of {}",
                    self.host
                );
                Some(RcptOutcome::Failed(local(552, (5, 3, 4), &text)))
            }
            _ => None,
        }
    }
}

fn verdict(reply: Reply, positive_class: u16) -> Result<Verdict, ProtocolError> {
    match reply.code / 100 {
        c if c == positive_class => Ok(Verdict::Accepted(reply)),
        _ if reply.code == 421 => Ok(Verdict::Closing(reply)),
        4 | 5 => Ok(Verdict::Refused(reply)),
        _ => Err(ProtocolError::Unexpected(reply)),
    }
}

/// The outcome for a refusal: 4xx try later, 5xx give up.
fn negative(reply: Reply) -> RcptOutcome {
    if reply.is_permanent() {
        RcptOutcome::Failed(reply)
    } else {
        RcptOutcome::Deferred(reply)
    }
}

fn local(code: u16, (c, s, d): (u8, u16, u16), text: &str) -> Reply {
    Reply::new(code, Some(EnhancedStatus::new(c, s, d)), text)
}

/// Printable ASCII or UTF-8 (no controls — C0, DEL, C1 — no whitespace, no U+2028/U+2029),
/// no angle brackets, within the RFC length in octets; empty only for `<>`.
fn valid_path(path: &str, empty_ok: bool) -> bool {
    if path.is_empty() {
        return empty_ok;
    }
    let printable = |c: char| {
        if c.is_ascii() {
            c.is_ascii_graphic() && c != '<' && c != '>'
        } else {
            !c.is_control() && !c.is_whitespace()
        }
    };
    path.len() + 2 <= MAX_PATH_LEN && path.chars().all(printable)
}

/// Octets on the wire for DATA: payload plus terminator (what SIZE= announces).
fn message_size(data: &[u8]) -> usize {
    data.len() + terminator(data).len()
}

fn terminator(data: &[u8]) -> &'static [u8] {
    if data.is_empty() || data.ends_with(b"\r\n") {
        b".\r\n"
    } else {
        // The payload should end with CRLF; if not, end its last line so the dot stands alone.
        b"\r\n.\r\n"
    }
}

fn push_terminator(buf: &mut Vec<u8>, data: &[u8]) {
    buf.extend_from_slice(terminator(data));
}

fn push_mail(buf: &mut Vec<u8>, copy: &OutgoingCopy<'_>, ext: &crate::extensions::Extensions) {
    buf.extend_from_slice(b"MAIL FROM:<");
    buf.extend_from_slice(copy.return_path.as_bytes());
    buf.push(b'>');
    // precheck refused a copy that needs SMTPUTF8 on a server without it.
    if ext.smtputf8 && copy.needs_smtputf8() {
        buf.extend_from_slice(b" SMTPUTF8");
    }
    if ext.eight_bit_mime && copy.data.iter().any(|b| !b.is_ascii()) {
        buf.extend_from_slice(b" BODY=8BITMIME");
    }
    if ext.size.is_some() {
        // Writing to a Vec cannot fail.
        let _ = write!(buf, " SIZE={}", message_size(copy.data));
    }
    if let Some(dsn) = copy.dsn.filter(|_| ext.dsn) {
        buf.extend_from_slice(dsn.mail_params().as_bytes());
    }
    buf.extend_from_slice(b"\r\n");
}

fn push_rcpt(buf: &mut Vec<u8>, copy: &OutgoingCopy<'_>, ext: &crate::extensions::Extensions) {
    buf.extend_from_slice(b"RCPT TO:<");
    buf.extend_from_slice(copy.rcpt.as_bytes());
    buf.push(b'>');
    if let Some(dsn) = copy.dsn.filter(|_| ext.dsn) {
        buf.extend_from_slice(dsn.rcpt_params().as_bytes());
    }
    buf.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extensions::Extensions;

    #[test]
    fn mail_command_carries_body_and_size_only_when_offered() {
        let copy = OutgoingCopy::new(
            "b+x@list.example",
            "u@example.com",
            "h\u{e9}\r\n".as_bytes(),
        );
        let mut buf = Vec::new();
        push_mail(&mut buf, &copy, &Extensions::default());
        assert_eq!(buf, b"MAIL FROM:<b+x@list.example>\r\n");
        let ext = Extensions {
            eight_bit_mime: true,
            size: Some(0),
            ..Extensions::default()
        };
        buf.clear();
        push_mail(&mut buf, &copy, &ext);
        assert_eq!(
            buf,
            b"MAIL FROM:<b+x@list.example> BODY=8BITMIME SIZE=8\r\n".to_vec()
        );
    }

    #[test]
    fn smtputf8_and_dsn_parameters_only_when_needed_and_offered() {
        let dsn = herald_types::Dsn {
            ret: Some(herald_types::dsn::Ret::Hdrs),
            envid: herald_types::dsn::XText::envid("ID1").ok(),
            notify: herald_types::dsn::Notify::parse("SUCCESS").ok(),
            orcpt: herald_types::dsn::Orcpt::parse("rfc822;pm+40x.example").ok(),
        };
        let utf8 = OutgoingCopy::new(
            "l-bounces+j\u{f6}rg=x.example@l.example",
            "j\u{f6}rg@x.example",
            b"x\r\n",
        )
        .with_dsn(Some(&dsn));
        let both = Extensions {
            smtputf8: true,
            dsn: true,
            ..Extensions::default()
        };
        let mut buf = Vec::new();
        push_mail(&mut buf, &utf8, &both);
        push_rcpt(&mut buf, &utf8, &both);
        assert_eq!(
            String::from_utf8(buf).expect("utf-8"),
            "MAIL FROM:<l-bounces+j\u{f6}rg=x.example@l.example> SMTPUTF8 RET=HDRS ENVID=ID1\r\n\
             RCPT TO:<j\u{f6}rg@x.example> NOTIFY=SUCCESS ORCPT=rfc822;pm+40x.example\r\n"
        );
        // No DSN offered: the parameters are dropped (RFC 3461 §4); an ASCII envelope never
        // asks for SMTPUTF8.
        let ascii = OutgoingCopy::new("", "pm@ops.example", b"x\r\n").with_dsn(Some(&dsn));
        let plain = Extensions {
            smtputf8: true,
            ..Extensions::default()
        };
        let mut buf = Vec::new();
        push_mail(&mut buf, &ascii, &plain);
        push_rcpt(&mut buf, &ascii, &plain);
        assert_eq!(
            buf,
            b"MAIL FROM:<>\r\nRCPT TO:<pm@ops.example>\r\n".to_vec()
        );
        assert!(utf8.needs_smtputf8() && !ascii.needs_smtputf8());
    }

    #[test]
    fn paths_are_checked_for_injection() {
        assert!(valid_path("", true));
        assert!(!valid_path("", false));
        assert!(valid_path("a@b.example", false));
        assert!(valid_path("j\u{f6}rg@xn--mnchen-3ya.example", false));
        for bad in [
            "a@b\r\nRCPT TO:<x@y>",
            "a b@c",
            "<a@b>",
            "a\u{85}@b",
            "a\u{2028}@b",
            "a\u{a0}@b",
            "a@b\0",
        ] {
            assert!(!valid_path(bad, false), "{bad:?}");
        }
        assert!(!valid_path(&"a".repeat(300), false));
    }

    #[test]
    fn terminator_ends_an_unterminated_last_line() {
        assert_eq!(terminator(b"x\r\n"), b".\r\n");
        assert_eq!(terminator(b"x"), b"\r\n.\r\n");
        assert_eq!(terminator(b""), b".\r\n");
    }

    #[test]
    fn verdict_classes() {
        let r = |c| Reply::new(c, None, "");
        assert!(matches!(verdict(r(250), 2), Ok(Verdict::Accepted(_))));
        assert!(matches!(verdict(r(354), 3), Ok(Verdict::Accepted(_))));
        assert!(matches!(verdict(r(421), 2), Ok(Verdict::Closing(_))));
        assert!(matches!(verdict(r(452), 2), Ok(Verdict::Refused(_))));
        assert!(matches!(
            verdict(r(354), 2),
            Err(ProtocolError::Unexpected(_))
        ));
        assert!(matches!(
            verdict(r(250), 3),
            Err(ProtocolError::Unexpected(_))
        ));
    }
}
