//! Mail to postmaster (RFC 5321 §4.5.1: every SMTP server must accept it). Herald accepts the
//! bare `<Postmaster>` (the session turns it into `postmaster@<hostname>`) and
//! `postmaster@<domain>` for its hostname and every domain it has a list in, the local part in
//! any case. Any other domain's postmaster is refused like every unknown address (never an open
//! relay); the recipient check is in `herald_enqueue` (`inbound.rs`, with its
//! [`herald_enqueue::PostmasterPolicy`]).
//!
//! Flow: inbound → `Enqueuer::enqueue(Submission::Postmaster)` (spooled as `PostKind::Postmaster`, 250 only
//! after fsync) → the lists stage → [`Postmaster::handle`]: forward or keep, journal that it was
//! handled, log and count it (`Event::Postmaster`). The stored message stays for the operator
//! (`herald postmaster`, `/api/v1/postmaster`) until it is deleted or `retention_days` pass
//! ([`Postmaster::sweep`]); forwarding does not consume it.
//!
//! Forwarding wraps, it does not redirect: the operators get a short note (envelope sender and
//! recipient, the stored id) with the original attached unchanged as `message/rfc822`. A
//! redirect (the original bytes with `Resent-*` headers) keeps the original From: domain, so
//! any message from a domain with DMARC `p=reject` whose DKIM signature does not survive — or
//! that was never signed, typical of the broken systems that write to postmaster — would be
//! refused by the operators' server, Herald's address not being in that domain's SPF. The
//! wrapper is From: our postmaster address (DKIM-signed when that domain has a key), shows the
//! SMTP envelope a redirect loses, and a reply to it goes to the original sender (Reply-To).
//!
//! Loops: a forward goes out from the null reverse path `<>` (no bounce and no vacation reply can
//! come back, RFC 3834 §3.3), says `Auto-Submitted: auto-generated` and carries our marker
//! `X-Loop: postmaster@<hostname>`. A postmaster message with `Auto-Submitted` other than `no`,
//! or with our marker, is stored but not forwarded: two servers forwarding to each other's
//! postmaster exchange one message each, then stop.
//!
//! Limits: postmaster mail passes the same SMTP limits as any mail (size, line length,
//! recipients, sessions, errors). At most `postmaster.max_stored` messages are kept: beyond,
//! RCPT gets 452 4.3.1 so a flood waits in the senders' queues, not on our disk. Each is kept
//! `retention_days`; `postmaster.forward` names at most 10 addresses.
//!
//! SECURITY: the message is untrusted and is never parsed beyond its top-level headers. The note
//! copies validated addresses and the subject (control characters dropped, at most 150
//! characters, RFC 2047-encoded when not ASCII); the original is attached as it arrived.

use crate::mail::{self, Stamp};
use bytes::Bytes;
use herald_enqueue::{EnqueueError, Enqueuer, Submission};
use herald_spool::{FinalState, PostKind, RecoveredPost, Spool, SpooledPost};
use herald_telemetry::{Event, PostmasterForward, PostmasterMail};
use herald_types::{Address, MemberId, PostId};
use mail_builder::headers::address::Address as MailAddress;
use mail_builder::headers::content_type::ContentType;
use mail_builder::headers::raw::Raw;
use mail_builder::mime::{BodyPart, MimePart};
use mail_builder::MessageBuilder;

/// The one journaled outcome of a postmaster post: it was handled at arrival (`Delivered`:
/// forwarded, `Failed`: kept only), so a restart does not handle it again.
pub const HANDLED: MemberId = MemberId(1);

/// Longest subject copied into the forward's note, in characters.
const MAX_SUBJECT_CHARS: usize = 150;

/// Postmaster settings and the operations on stored postmaster mail.
pub struct Postmaster {
    hostname: String,
    forward: Vec<Address>,
    retention_days: u32,
}

impl Postmaster {
    /// `forward`: the operators' addresses (`postmaster.forward`, checked at load); empty: kept
    /// only. `retention_days`: how long stored messages are kept.
    pub fn new(hostname: &str, forward: Vec<Address>, retention_days: u32) -> Postmaster {
        Postmaster {
            hostname: hostname.to_string(),
            forward,
            retention_days,
        }
    }

    /// Forwards a freshly stored (or recovered, not yet handled) message, or keeps it only;
    /// journals the decision, logs and counts it. Never fails: a forward that cannot be
    /// spooled is logged and tried again at the next start.
    pub async fn handle(&self, enq: &Enqueuer, post: &SpooledPost) {
        let forward = match keep_reason(&self.forward, &self.hostname, &post.body) {
            Some(reason) => reason,
            None => match self.forward_one(enq, post).await {
                Ok(copy) => PostmasterForward::Forwarded { copy },
                Err(e) => {
                    tracing::error!(post = %post.id, error = %e, "postmaster mail not forwarded; tried again at the next start");
                    PostmasterForward::Failed
                }
            },
        };
        if forward != PostmasterForward::Failed {
            let state = match forward {
                PostmasterForward::Forwarded { .. } => FinalState::Delivered,
                _ => FinalState::Failed,
            };
            // Committed with the next group commit: a crash before it forwards the message once
            // more at the next start (a bounded duplicate, like copies in flight).
            if let Err(e) = enq.spool.record(post.id, HANDLED, state).await {
                tracing::warn!(post = %post.id, error = %e, "postmaster mail handled but not marked so");
            }
        }
        let from = post.meta.envelope_from.clone();
        tracing::info!(post = %post.id, to = %post.meta.list_address,
            from = %from.as_ref().map_or_else(String::new, ToString::to_string),
            forward = forward.word(), "postmaster mail stored");
        enq.telemetry
            .emit(Event::Postmaster(Box::new(PostmasterMail {
                post: post.id,
                rcpt: post.meta.list_address.clone(),
                from,
                size: post.body.len(),
                forward,
            })));
    }

    async fn forward_one(
        &self,
        enq: &Enqueuer,
        post: &SpooledPost,
    ) -> Result<PostId, EnqueueError> {
        let note = Note {
            hostname: &self.hostname,
            to: &self.forward,
            retention_days: self.retention_days,
            stamp: Stamp::now(),
        };
        let body = note.wrap(post);
        // RFC 3461 §4: a relay passes the DSN parameters on; the forward carries those the
        // message to postmaster came with (written only to servers that offer DSN).
        enq.enqueue(Submission::Server {
            from: post.meta.list_address.clone(),
            to: self.forward.clone(),
            dsn: post.meta.dsn.as_deref().cloned(),
            body,
        })
        .await
    }

    /// Deletes stored postmaster mail older than `retention_days`.
    pub async fn sweep(&self, spool: &Spool) {
        let now = herald_types::unix_ms_now();
        let max_age = u64::from(self.retention_days) * herald_directory::DAY_MS;
        for (id, meta) in spool.live_posts() {
            if meta.kind != PostKind::Postmaster
                || now.saturating_sub(meta.received_at_ms) < max_age
            {
                continue;
            }
            match spool.complete(id).await {
                Ok(()) => {
                    tracing::info!(post = %id, to = %meta.list_address, "postmaster mail expired")
                }
                Err(e) => tracing::error!(post = %id, error = %e, "cannot expire postmaster mail"),
            }
        }
    }
}

/// Recovered postmaster posts not yet handled (the crash came between storing and handling).
pub fn unhandled(recovered: &[RecoveredPost]) -> Vec<SpooledPost> {
    recovered
        .iter()
        .filter(|p| p.meta.kind == PostKind::Postmaster && !p.done.contains(HANDLED))
        .map(|p| SpooledPost {
            id: p.id,
            meta: p.meta.clone(),
            body: p.body.clone(),
        })
        .collect()
}

/// Why a message is kept without forwarding, or `None` to forward it.
fn keep_reason(forward: &[Address], hostname: &str, body: &[u8]) -> Option<PostmasterForward> {
    if forward.is_empty() {
        return Some(PostmasterForward::NotConfigured);
    }
    let marker = loop_marker(hostname);
    let parsed = mail_parser::MessageParser::new().parse_headers(body);
    let headers = parsed.iter().flat_map(|m| m.headers_raw());
    let mut auto = false;
    for (name, value) in headers {
        let value = unfold(value);
        if name.eq_ignore_ascii_case("X-Loop") && value.eq_ignore_ascii_case(&marker) {
            return Some(PostmasterForward::Loop);
        }
        // RFC 3834 §5: `Auto-Submitted: no` is the only value meaning "a person sent this";
        // parameters may follow the keyword (`auto-replied; owner-email=…`).
        if name.eq_ignore_ascii_case("Auto-Submitted") {
            let keyword = value.split(';').next().unwrap_or("").trim();
            auto |= !keyword.eq_ignore_ascii_case("no");
        }
    }
    auto.then_some(PostmasterForward::AutoSubmitted)
}

/// A raw header value on one line, trimmed.
fn unfold(raw: &str) -> String {
    raw.split(['\r', '\n'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The value of our `X-Loop` header.
fn loop_marker(hostname: &str) -> String {
    format!("postmaster@{hostname}")
}

/// What the forward of one message says, besides the message itself.
struct Note<'a> {
    hostname: &'a str,
    to: &'a [Address],
    retention_days: u32,
    /// Date, Message-ID and MIME boundary: fixed in the golden tests.
    stamp: Stamp,
}

impl Note<'_> {
    /// The forward: our note, then the original attached unchanged (CRLF line endings, as the
    /// spool keeps them; the template dot-stuffs when it is sent). From our postmaster at the
    /// domain the message was sent to (aligned with that domain's DKIM key, when it has one).
    fn wrap(&self, post: &SpooledPost) -> Bytes {
        let original = &post.body[..];
        let mut boundary = format!("herald-pm-{:016x}", self.stamp.nonce);
        // A 64-bit random boundary cannot be guessed; checking costs one scan all the same.
        while contains(original, boundary.as_bytes()) {
            boundary.push('x');
        }
        let reply_to =
            herald_enqueue::from_header(original).or_else(|| post.meta.envelope_from.clone());
        let parsed = mail_parser::MessageParser::new().parse_headers(original);
        let subject = parsed.as_ref().and_then(|m| m.subject()).unwrap_or("");
        let note = mail::plain_part(&self.note_text(post, reply_to.is_some()), "us-ascii");
        // RFC 2046 §5.2.1: message/rfc822 takes no encoding but 7bit, 8bit or binary; with the
        // encoding given, mail-builder writes the part as is. The CRLF before the closing
        // boundary belongs to the delimiter (RFC 2046 §5.1.1): the attachment is the original
        // byte for byte, final line break included.
        let cte = if original.is_ascii() { "7bit" } else { "8bit" };
        let attached = MimePart::new("message/rfc822", BodyPart::Binary(original.into()))
            .attachment(format!("postmaster-{}.eml", post.id))
            .transfer_encoding(cte);
        let mixed = ContentType::new("multipart/mixed").attribute("boundary", boundary);
        let from = MailAddress::new_address(
            Some("Herald postmaster"),
            format!("postmaster@{}", post.meta.list_address.domain()),
        );
        let to = MailAddress::new_list(self.to.iter().map(mail::bare).collect());
        let mut builder = MessageBuilder::new().from(from).to(to);
        if let Some(r) = &reply_to {
            builder = builder.reply_to(mail::bare(r));
        }
        let builder = builder
            .header("Subject", mail::subject(&postmaster_subject(subject)))
            .date(self.stamp.date())
            .message_id(format!(
                "herald.pm.{:016x}@{}",
                self.stamp.nonce, self.hostname
            ))
            .header("Auto-Submitted", Raw::new("auto-generated"))
            .header("X-Loop", Raw::new(loop_marker(self.hostname)))
            .header("MIME-Version", Raw::new("1.0"))
            .body(MimePart::new(mixed, vec![note, attached]));
        mail::finish(builder)
    }

    /// The note for the operator: the envelope, when it arrived, how long it is kept, and how
    /// to find it on the server. ASCII only (addresses are ASCII, dates and ids too).
    fn note_text(&self, post: &SpooledPost, has_reply_to: bool) -> String {
        let meta = &post.meta;
        let sender = meta.envelope_from.as_ref().map_or_else(
            || "<> (the null sender: a bounce or other automatic mail)".to_string(),
            |a| format!("<{a}>"),
        );
        let received = meta.received_at_ms / 1000;
        let until = received + u64::from(self.retention_days) * 24 * 3600;
        let mut lines = vec![
            format!(
                "A message to <{}> arrived and is stored as {}.",
                meta.list_address, post.id
            ),
            String::new(),
            format!("  Envelope sender:     {sender}"),
            format!("  Envelope recipient:  <{}>", meta.list_address),
            format!("  Received:            {}", mail::rfc822_date(received)),
            format!("  Size:                {} bytes", post.body.len()),
            format!("  Kept until:          {}", mail::rfc822_date(until)),
            String::new(),
            "It is attached unchanged. On the server:".to_string(),
            String::new(),
            format!("  herald postmaster show {}", post.id),
            format!("  herald postmaster delete {}", post.id),
        ];
        if has_reply_to {
            lines.push(String::new());
            lines.push("A reply to this note goes to the sender of the message.".into());
        }
        let mut text = lines.join("\n");
        text.push('\n');
        text
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// `[postmaster] <subject>`: control characters dropped, at most [`MAX_SUBJECT_CHARS`] of
/// the original. mail-builder encodes what is not ASCII (RFC 2047) and folds the header.
fn postmaster_subject(subject: &str) -> String {
    let clean: String = subject
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_SUBJECT_CHARS)
        .collect();
    format!("[postmaster] {}", clean.trim())
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_spool::PostMeta;
    use herald_types::ListId;

    fn a(s: &str) -> Address {
        Address::parse(s).expect("address")
    }

    fn stored(body: &str, from: Option<&str>) -> SpooledPost {
        SpooledPost {
            id: PostId(0x1234),
            meta: PostMeta {
                kind: PostKind::Postmaster,
                list_id: ListId::NONE,
                list_address: a("postmaster@lists.test"),
                envelope_from: from.map(a),
                received_at_ms: 1_700_000_000_000,
                max_member_id: MemberId(0),
                message_id: None,
                recipients: Vec::new(),
                hold_reason: None,
                null_sender: false,
                audience: Default::default(),
                dsn: None,
                member_range: None,
            },
            body: Bytes::from(body.replace('\n', "\r\n")),
        }
    }

    fn note<'a>(to: &'a [Address]) -> Note<'a> {
        Note {
            hostname: "herald.test",
            to,
            retention_days: 14,
            stamp: Stamp {
                now_secs: 1_700_000_100,
                nonce: 0xfeed,
            },
        }
    }

    #[test]
    fn only_person_sent_mail_without_our_marker_is_forwarded() {
        let ops = [a("ops@example.org")];
        let keep = |body: &str| keep_reason(&ops, "herald.test", body.as_bytes());
        assert_eq!(keep("Subject: hi\r\n\r\nbody\r\n"), None);
        assert_eq!(keep("Auto-Submitted: no\r\nSubject: hi\r\n\r\nx\r\n"), None);
        assert_eq!(keep("AUTO-SUBMITTED:  No \r\n\r\nx\r\n"), None);
        assert_eq!(
            keep("X-Loop: someone@else.test\r\n\r\nx\r\n"),
            None,
            "other systems' markers are theirs"
        );
        for auto in [
            "Auto-Submitted: auto-replied\r\n\r\nx\r\n",
            "auto-submitted: auto-generated; owner-email=\"a@b\"\r\n\r\nx\r\n",
            "Auto-Submitted:\r\n auto-notified\r\n\r\nx\r\n",
        ] {
            assert_eq!(keep(auto), Some(PostmasterForward::AutoSubmitted), "{auto}");
        }
        assert_eq!(
            keep("x-loop: POSTMASTER@herald.test\r\nAuto-Submitted: auto-generated\r\n\r\nx\r\n"),
            Some(PostmasterForward::Loop)
        );
        assert_eq!(
            keep_reason(&[], "herald.test", b"Subject: hi\r\n\r\nx\r\n"),
            Some(PostmasterForward::NotConfigured)
        );
    }

    #[test]
    fn the_forward_attaches_the_original_unchanged_and_is_marked() {
        let original = "From: Bob <bob@d0.test>\nSubject: your server\nMessage-ID: <m1@d0.test>\n\nHello postmaster,\n.\nbye\n";
        let post = stored(original, Some("bounce-handler@d0.test"));
        let ops = [a("ops@example.org"), a("noc@example.net")];
        let wrapped = note(&ops).wrap(&post);
        let msg = mail_parser::MessageParser::new()
            .parse(&wrapped[..])
            .expect("parses");
        assert_eq!(msg.subject(), Some("[postmaster] your server"));
        assert_eq!(
            msg.header_raw("Auto-Submitted").map(str::trim),
            Some("auto-generated")
        );
        assert_eq!(
            msg.header_raw("X-Loop").map(str::trim),
            Some("postmaster@herald.test")
        );
        let from = msg.from().and_then(|f| f.first()).and_then(|f| f.address());
        assert_eq!(from, Some("postmaster@lists.test"));
        let reply = msg
            .reply_to()
            .and_then(|f| f.first())
            .and_then(|f| f.address());
        assert_eq!(reply, Some("bob@d0.test"), "replies reach the writer");
        assert_eq!(msg.to().map(|t| t.iter().count()), Some(2));
        let text = msg.body_text(0).expect("note");
        assert!(text.contains("<bounce-handler@d0.test>"), "{text}");
        assert!(
            text.contains("herald postmaster show 0000000000001234"),
            "{text}"
        );
        let attached = msg.attachment(0).expect("attachment");
        let inner = attached.message().expect("message/rfc822");
        assert_eq!(inner.raw_message(), &post.body[..], "byte for byte");
        // The note says what the loop check looks for: a forward that comes back is kept.
        assert_eq!(
            keep_reason(&ops, "herald.test", &wrapped),
            Some(PostmasterForward::Loop)
        );
    }

    #[tokio::test]
    async fn the_sweep_deletes_postmaster_mail_past_its_retention_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (spool, _) =
            Spool::open(herald_spool::SpoolConfig::new(dir.path())).expect("open spool");
        let pm = Postmaster::new("herald.test", Vec::new(), 14);
        let room = herald_enqueue::PostmasterPolicy {
            hostname: "herald.test".into(),
            max_stored: 2,
            complaints_local_part: String::new(),
        };
        let day = herald_directory::DAY_MS;
        let now = herald_types::unix_ms_now();
        let mut old = stored("Subject: old\n\nx\n", None);
        old.meta.received_at_ms = now - 15 * day;
        let mut young = old.meta.clone();
        young.received_at_ms = now - 13 * day;
        let mut held = old.meta.clone();
        held.kind = PostKind::Held;
        let mut ids = Vec::new();
        for meta in [old.meta.clone(), young, held] {
            ids.push(spool.accept(meta, old.body.clone()).await.expect("accept"));
        }
        assert!(!room.has_room(&spool), "two stored, two allowed");
        pm.sweep(&spool).await;
        let live: Vec<PostId> = spool.live_posts().into_iter().map(|(id, _)| id).collect();
        assert_eq!(
            live,
            ids[1..].to_vec(),
            "14 days by default; held posts are not ours"
        );
        assert!(room.has_room(&spool));
        spool.close().await.expect("close");
    }

    fn golden_forward(original: &str, from: Option<&str>) -> String {
        let ops = [a("ops@example.org"), a("noc@example.net")];
        let w = note(&ops).wrap(&stored(original, from));
        String::from_utf8(w.to_vec()).expect("UTF-8")
    }

    /// The exact bytes of a forward: fixed date, Message-ID and boundary (the [`Stamp`]).
    #[test]
    fn a_forward_is_byte_for_byte_this() {
        let got = golden_forward(
            "From: Bob <bob@d0.test>\nSubject: your server\nMessage-ID: <m1@d0.test>\n\nHello postmaster,\n.\nbye\n",
            Some("bounce-handler@d0.test"),
        );
        assert_eq!(got, PM_FORWARD);
    }

    /// A subject and display name carrying CR/LF (encoded in the original): the subject's
    /// control characters are dropped, its 8-bit text encoded; nothing becomes a header.
    #[test]
    fn a_forward_of_a_hostile_message_is_byte_for_byte_this() {
        let got = golden_forward(
            "From: =?utf-8?q?Bob=0D=0ABcc:_victim@x.test?= <bob@d0.test>\nSubject: =?utf-8?q?Gr=C3=BC=C3=9Fe=0D=0ABcc:_victim@x.test?=\n\nx\n",
            None,
        );
        assert_eq!(got, PM_HOSTILE);
        let head = got.split("\r\n\r\n").next().unwrap_or("");
        assert!(!head.lines().any(|l| l.starts_with("Bcc:")), "{head}");
    }

    /// The `Subject:` header line as the forward writes it.
    fn subject_header(subject: &str) -> String {
        use mail_builder::headers::Header;
        let mut out = b"Subject: ".to_vec();
        mail::subject(&postmaster_subject(subject)).write_header(&mut out, "Subject: ".len());
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn hostile_subjects_stay_one_header_and_non_ascii_is_encoded() {
        let injected = stored(
            "Subject: =?utf-8?q?a=0D=0ABcc:_victim@x.test?=\n\nx\n",
            None,
        );
        let w = note(&[a("ops@example.org")]).wrap(&injected);
        let head = String::from_utf8_lossy(&w);
        let head = head.split("\r\n\r\n").next().unwrap_or("");
        assert!(!head.lines().any(|l| l.starts_with("Bcc:")), "{head}");
        assert!(
            !head.contains("Reply-To"),
            "no From and a null sender: nobody to reply to"
        );
        let long = "é".repeat(400);
        let h = subject_header(&long);
        assert!(h.lines().all(|l| l.len() <= 78), "{h}");
        let raw = format!("{h}\r\nx\r\n");
        let parsed = mail_parser::MessageParser::new()
            .parse(raw.as_bytes())
            .expect("parses");
        let want = format!("[postmaster] {}", "é".repeat(MAX_SUBJECT_CHARS));
        assert_eq!(parsed.subject(), Some(want.as_str()));
    }

    const PM_FORWARD: &str = concat!(
        "From: \"Herald postmaster\" <postmaster@lists.test>\r\n",
        "To: <ops@example.org>, <noc@example.net>\r\n",
        "Reply-To: <bob@d0.test>\r\n",
        "Subject: [postmaster] your server\r\n",
        "Date: Tue, 14 Nov 2023 22:15:00 +0000\r\n",
        "Message-ID: <herald.pm.000000000000feed@herald.test>\r\n",
        "Auto-Submitted: auto-generated\r\n",
        "X-Loop: postmaster@herald.test\r\n",
        "MIME-Version: 1.0\r\n",
        "Content-Type: multipart/mixed; boundary=\"herald-pm-000000000000feed\"\r\n",
        "\r\n",
        "\r\n",
        "--herald-pm-000000000000feed\r\n",
        "Content-Type: text/plain; charset=\"us-ascii\"\r\n",
        "Content-Transfer-Encoding: 7bit\r\n",
        "\r\n",
        "A message to <postmaster@lists.test> arrived and is stored as 0000000000001234.\r\n",
        "\r\n",
        "  Envelope sender:     <bounce-handler@d0.test>\r\n",
        "  Envelope recipient:  <postmaster@lists.test>\r\n",
        "  Received:            Tue, 14 Nov 2023 22:13:20 +0000\r\n",
        "  Size:                102 bytes\r\n",
        "  Kept until:          Tue, 28 Nov 2023 22:13:20 +0000\r\n",
        "\r\n",
        "It is attached unchanged. On the server:\r\n",
        "\r\n",
        "  herald postmaster show 0000000000001234\r\n",
        "  herald postmaster delete 0000000000001234\r\n",
        "\r\n",
        "A reply to this note goes to the sender of the message.\r\n",
        "\r\n",
        "--herald-pm-000000000000feed\r\n",
        "Content-Type: message/rfc822\r\n",
        "Content-Disposition: attachment; filename=\"postmaster-0000000000001234.eml\"\r\n",
        "Content-Transfer-Encoding: 7bit\r\n",
        "\r\n",
        "From: Bob <bob@d0.test>\r\n",
        "Subject: your server\r\n",
        "Message-ID: <m1@d0.test>\r\n",
        "\r\n",
        "Hello postmaster,\r\n",
        ".\r\n",
        "bye\r\n",
        "\r\n",
        "--herald-pm-000000000000feed--\r\n",
    );

    const PM_HOSTILE: &str = concat!(
        "From: \"Herald postmaster\" <postmaster@lists.test>\r\n",
        "To: <ops@example.org>, <noc@example.net>\r\n",
        "Reply-To: <bob@d0.test>\r\n",
        "Subject: =?utf-8?Q?[postmaster]_Gr=C3=BC=C3=9FeBcc:_victim@x.test?=\r\n",
        "Date: Tue, 14 Nov 2023 22:15:00 +0000\r\n",
        "Message-ID: <herald.pm.000000000000feed@herald.test>\r\n",
        "Auto-Submitted: auto-generated\r\n",
        "X-Loop: postmaster@herald.test\r\n",
        "MIME-Version: 1.0\r\n",
        "Content-Type: multipart/mixed; boundary=\"herald-pm-000000000000feed\"\r\n",
        "\r\n",
        "\r\n",
        "--herald-pm-000000000000feed\r\n",
        "Content-Type: text/plain; charset=\"us-ascii\"\r\n",
        "Content-Transfer-Encoding: 7bit\r\n",
        "\r\n",
        "A message to <postmaster@lists.test> arrived and is stored as 0000000000001234.\r\n",
        "\r\n",
        "  Envelope sender:     <> (the null sender: a bounce or other automatic mail)\r\n",
        "  Envelope recipient:  <postmaster@lists.test>\r\n",
        "  Received:            Tue, 14 Nov 2023 22:13:20 +0000\r\n",
        "  Size:                128 bytes\r\n",
        "  Kept until:          Tue, 28 Nov 2023 22:13:20 +0000\r\n",
        "\r\n",
        "It is attached unchanged. On the server:\r\n",
        "\r\n",
        "  herald postmaster show 0000000000001234\r\n",
        "  herald postmaster delete 0000000000001234\r\n",
        "\r\n",
        "A reply to this note goes to the sender of the message.\r\n",
        "\r\n",
        "--herald-pm-000000000000feed\r\n",
        "Content-Type: message/rfc822\r\n",
        "Content-Disposition: attachment; filename=\"postmaster-0000000000001234.eml\"\r\n",
        "Content-Transfer-Encoding: 7bit\r\n",
        "\r\n",
        "From: =?utf-8?q?Bob=0D=0ABcc:_victim@x.test?= <bob@d0.test>\r\n",
        "Subject: =?utf-8?q?Gr=C3=BC=C3=9Fe=0D=0ABcc:_victim@x.test?=\r\n",
        "\r\n",
        "x\r\n",
        "\r\n",
        "--herald-pm-000000000000feed--\r\n",
    );
}
