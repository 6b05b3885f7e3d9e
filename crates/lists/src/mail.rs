//! The mail the lists stage writes itself: confirmation requests, request replies, held-post
//! and moderator notices, disabled-member notices. All go out as generated mail through the one
//! enqueue path (`Submission::Generated`), from `<list>-request`.
//!
//! Messages are built with `mail-builder`, not by pasting strings: it encodes non-ASCII header
//! text (RFC 2047), folds long header lines and writes MIME parts, so a subject carrying CR/LF
//! or 8-bit text comes out as encoded words inside one header, never as a header of its own.
//!
//! Everything that varies between two builds of the same message (the date, the Message-ID and
//! the MIME boundary) comes from a [`Stamp`], an input of the builders: production passes
//! [`Stamp::now`], the golden tests a fixed one, so they can compare exact bytes.
//!
//! SECURITY: header values are addresses, tokens (base64url) or fixed texts, and whatever else
//! reaches a header goes through `mail-builder`'s encoder; body text may quote validated
//! addresses and a sanitized subject.

use bytes::Bytes;
use herald_types::{verp, Address};
use mail_builder::headers::address::Address as MailAddress;
use mail_builder::headers::date::Date;
use mail_builder::headers::raw::Raw;
use mail_builder::headers::text::Text;
use mail_builder::headers::HeaderType;
use mail_builder::mime::{BodyPart, MimePart};
use mail_builder::MessageBuilder;

/// What differs between two builds of one message: when it is written, and a random nonce
/// naming it (Message-ID) and, in multipart mail, separating its parts (MIME boundary).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    /// Unix seconds, for the `Date:` header.
    pub now_secs: u64,
    /// Random: the Message-ID and the MIME boundary derive from it. 64 bits, so a boundary is
    /// not guessable by whoever wrote an attached message.
    pub nonce: u64,
}

impl Stamp {
    /// The current time and a fresh random nonce.
    pub fn now() -> Stamp {
        Stamp {
            now_secs: herald_types::unix_ms_now() / 1000,
            nonce: rand::random(),
        }
    }

    /// The `Date:` header value.
    pub fn date(self) -> Date {
        Date::new(secs_i64(self.now_secs))
    }
}

/// Unix seconds as mail-builder's signed timestamp; a time past `i64::MAX` seconds is not one
/// Herald will see, it saturates rather than wrapping to a date before 1970.
pub fn secs_i64(secs: u64) -> i64 {
    i64::try_from(secs).unwrap_or(i64::MAX)
}

/// An RFC 5322 date (`Tue, 14 Nov 2023 22:13:20 +0000`) for body text.
pub fn rfc822_date(unix_secs: u64) -> String {
    Date::new(secs_i64(unix_secs)).to_rfc822()
}

/// One address without a display name (`<a@b>`).
pub fn bare(address: &impl std::fmt::Display) -> MailAddress<'static> {
    MailAddress::new_address(None::<&str>, address.to_string())
}

/// A `Subject:` value. Printable ASCII goes out as it is, folded at its spaces only: the
/// subjects that carry a token (`confirm <token>`, `approve <token>`) must survive a reply
/// whole, and mail-builder would otherwise turn a word too long for one line into quoted-
/// printable encoded words split mid-token. A token longer than a line stays one word (RFC
/// 5322 §2.1.1 allows 998 characters). Anything else (8-bit text, control characters such as
/// CR/LF, or text that already looks like an encoded word) is encoded by mail-builder (RFC
/// 2047), so it can never end the header.
pub fn subject(text: &str) -> HeaderType<'static> {
    let printable = text.bytes().all(|b| (b' '..=b'~').contains(&b));
    if printable && !text.contains("=?") {
        Raw::new(text.to_string()).into()
    } else {
        Text::new(text.to_string()).into()
    }
}

/// A `text/plain` part written as is: lines end in CRLF, `7bit` when ASCII, else `8bit`
/// (RFC 6152). The transfer encoding is fixed rather than left to mail-builder's choice on
/// purpose: quoted-printable would split the long token and link lines with soft breaks, and
/// people (and the end-to-end tests) copy those from the raw text.
pub fn plain_part(text: &str, ascii_charset: &'static str) -> MimePart<'static> {
    let mut body = String::with_capacity(text.len() + text.len() / 32 + 2);
    for line in text.lines() {
        body.push_str(line);
        body.push_str("\r\n");
    }
    let (charset, cte) = if body.is_ascii() {
        (ascii_charset, "7bit")
    } else {
        ("utf-8", "8bit")
    };
    let content_type = mail_builder::headers::content_type::ContentType::new("text/plain")
        .attribute("charset", charset);
    MimePart::new(content_type, BodyPart::Text(body.into())).transfer_encoding(cte)
}

/// The message's bytes. Serializing into a `Vec` cannot fail (no I/O).
pub fn finish(builder: MessageBuilder<'_>) -> Bytes {
    let mut out = Vec::with_capacity(1024);
    builder.serialize(&mut out);
    Bytes::from(out)
}

/// A plain-text message from `<list>-request` to `to`, marked as automatic (RFC 3834) so that
/// vacation responders do not answer it.
pub fn compose(
    hostname: &str,
    list: &Address,
    to: &Address,
    subject: &str,
    text: &str,
    stamp: Stamp,
) -> Bytes {
    let request = verp::request_address(list);
    let builder = MessageBuilder::new()
        .from(bare(&request))
        .to(bare(to))
        .reply_to(bare(&request))
        .header("Subject", self::subject(subject))
        .date(stamp.date())
        .message_id(format!("herald.{:016x}@{hostname}", stamp.nonce))
        .header("Auto-Submitted", Raw::new("auto-replied"))
        .header("Precedence", Raw::new("list"))
        .header("MIME-Version", Raw::new("1.0"))
        .body(plain_part(text, "utf-8"));
    finish(builder)
}
