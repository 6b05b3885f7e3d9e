//! FETCH data items for one archived message: FLAGS, UID, RFC822.SIZE, INTERNALDATE, ENVELOPE,
//! BODY[...] / BODY.PEEK[...] (whole message, HEADER, TEXT, HEADER.FIELDS[.NOT], part numbers
//! and their MIME headers, partial `<origin.length>`), RFC822, RFC822.HEADER, RFC822.TEXT.
//!
//! Section cutting is written here on purpose: imap-codec parses the *names* of sections, not
//! messages; the MIME tree (part numbers and their byte offsets) is mail-parser's; header
//! fields are read by [`crate::envelope`].
//!
//! BODYSTRUCTURE and BODY come from [`crate::structure`]. BINARY[part]<partial>,
//! BINARY.PEEK and BINARY.SIZE (RFC 3516, part of IMAP4rev2) give a part's content with its
//! Content-Transfer-Encoding undone (base64 and quoted-printable by mail-parser's decoders,
//! 7bit/8bit/binary as they are); another encoding, or one that does not decode, is
//! `NO [UNKNOWN-CTE]` ([`UnknownCte`]). `BINARY[]` is the whole message as stored.
//!
//! SECURITY: messages are untrusted bytes from the archive (parsed by mail-parser, which
//! bounds nothing itself, but the archive refused anything over `max_message_bytes`). A
//! partial range is clamped to the data; a part number that does not exist yields an empty
//! string (RFC 9051 §6.4.5), never a panic.

use crate::envelope::{field_name, fields, header, literal, text};
use chrono::{DateTime, FixedOffset};
use herald_archive::MessageSummary;
use imap_codec::imap_types::core::{AString, Vec1};
use imap_codec::imap_types::core::{LiteralMode, NString8};
use imap_codec::imap_types::datetime::DateTime as ImapDateTime;
use imap_codec::imap_types::extensions::binary::Literal8;
use imap_codec::imap_types::fetch::{MessageDataItem, MessageDataItemName, Part, Section};
use imap_codec::imap_types::flag::{Flag, FlagFetch};
use mail_parser::decoders::base64::base64_decode;
use mail_parser::decoders::quoted_printable::quoted_printable_decode;
use mail_parser::{Message as MailMessage, MessageParser, MessagePart, MimeHeaders, PartType};
use std::num::NonZeroU32;

/// What a list of item names needs from the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Needs {
    /// The overview row (size, date).
    pub summary: bool,
    /// The message bytes.
    pub raw: bool,
}

/// What the store and the session give for one message.
pub struct Message<'m> {
    pub uid: u32,
    pub seen: bool,
    pub summary: Option<&'m MessageSummary>,
    pub raw: Option<&'m [u8]>,
}

pub fn needs(items: &[MessageDataItemName<'_>]) -> Needs {
    let mut n = Needs::default();
    for i in items {
        match i {
            MessageDataItemName::Flags | MessageDataItemName::Uid => {}
            MessageDataItemName::Rfc822Size | MessageDataItemName::InternalDate => n.summary = true,
            MessageDataItemName::Envelope
            | MessageDataItemName::BodyExt { .. }
            | MessageDataItemName::Rfc822
            | MessageDataItemName::Rfc822Header
            | MessageDataItemName::Rfc822Text => {
                n.summary = true;
                n.raw = true;
            }
            MessageDataItemName::Body
            | MessageDataItemName::BodyStructure
            | MessageDataItemName::Binary { .. }
            | MessageDataItemName::BinarySize { .. } => n.raw = true,
        }
    }
    n
}

/// Whether fetching these items sets `\Seen` (RFC 9051 §6.4.5: BODY[...] without PEEK,
/// RFC822, RFC822.TEXT).
pub fn sets_seen(items: &[MessageDataItemName<'_>]) -> bool {
    items.iter().any(|i| {
        matches!(
            i,
            MessageDataItemName::BodyExt { peek: false, .. }
                | MessageDataItemName::Binary { peek: false, .. }
                | MessageDataItemName::Rfc822
                | MessageDataItemName::Rfc822Text
        )
    })
}

/// A part whose Content-Transfer-Encoding this server cannot undo (RFC 3516 §4.3: the FETCH
/// is answered `NO [UNKNOWN-CTE]`).
#[derive(Debug, PartialEq, Eq)]
pub struct UnknownCte;

/// The data items for one message. `with_uid` adds UID (UID FETCH always returns it);
/// `newly_seen` adds FLAGS when this fetch just set `\Seen`. `Ok(None)` when the store had
/// no row for an item that needed it (the message was removed meanwhile).
pub fn items(
    names: &[MessageDataItemName<'_>],
    m: &Message<'_>,
    with_uid: bool,
    newly_seen: bool,
) -> Result<Option<Vec1<MessageDataItem<'static>>>, UnknownCte> {
    let mut out = Vec::with_capacity(names.len() + 2);
    let Some(uid) = NonZeroU32::new(m.uid) else {
        return Ok(None);
    };
    if with_uid && !names.contains(&MessageDataItemName::Uid) {
        out.push(MessageDataItem::Uid(uid));
    }
    for name in names {
        let item = match name {
            MessageDataItemName::Binary {
                section, partial, ..
            } => {
                let Some(raw) = m.raw else { return Ok(None) };
                let data = binary(raw, section)?;
                let data = match partial {
                    Some((start, len)) => cut(data, *start, len.get()),
                    None => data,
                };
                MessageDataItem::Binary {
                    section: section.clone(),
                    value: binary_value(data),
                }
            }
            MessageDataItemName::BinarySize { section } => {
                let Some(raw) = m.raw else { return Ok(None) };
                MessageDataItem::BinarySize {
                    section: section.clone(),
                    size: u32::try_from(binary(raw, section)?.len()).unwrap_or(u32::MAX),
                }
            }
            other => match item(other, m, uid) {
                Some(i) => i,
                None => return Ok(None),
            },
        };
        out.push(item);
    }
    if newly_seen && !names.contains(&MessageDataItemName::Flags) {
        out.push(MessageDataItem::Flags(flags(true)));
    }
    Ok(Vec1::try_from(out).ok())
}

/// One item other than BINARY; `None` when the store had no row for it.
fn item(
    name: &MessageDataItemName<'_>,
    m: &Message<'_>,
    uid: NonZeroU32,
) -> Option<MessageDataItem<'static>> {
    Some(match name {
        MessageDataItemName::Uid => MessageDataItem::Uid(uid),
        MessageDataItemName::Flags => MessageDataItem::Flags(flags(m.seen)),
        MessageDataItemName::Rfc822Size => {
            MessageDataItem::Rfc822Size(u32::try_from(m.summary?.size).unwrap_or(u32::MAX))
        }
        MessageDataItemName::InternalDate => {
            MessageDataItem::InternalDate(internal_date(m.summary?.date_ms))
        }
        MessageDataItemName::Envelope => {
            MessageDataItem::Envelope(crate::envelope::envelope(m.raw?))
        }
        MessageDataItemName::Rfc822 => MessageDataItem::Rfc822(literal(m.raw?.to_vec())),
        MessageDataItemName::Rfc822Header => {
            MessageDataItem::Rfc822Header(literal(header(m.raw?).to_vec()))
        }
        MessageDataItemName::Rfc822Text => {
            MessageDataItem::Rfc822Text(literal(text(m.raw?).to_vec()))
        }
        MessageDataItemName::BodyExt {
            section, partial, ..
        } => {
            let data = section_bytes(m.raw?, section.as_ref());
            let (origin, data) = match partial {
                Some((start, len)) => (Some(*start), cut(data, *start, len.get())),
                None => (None, data),
            };
            MessageDataItem::BodyExt {
                section: section.clone().map(owned_section),
                origin,
                data: literal(data),
            }
        }
        MessageDataItemName::Body => {
            MessageDataItem::Body(crate::structure::body_structure(m.raw?, false))
        }
        MessageDataItemName::BodyStructure => {
            MessageDataItem::BodyStructure(crate::structure::body_structure(m.raw?, true))
        }
        // Answered by `items`.
        MessageDataItemName::Binary { .. } | MessageDataItemName::BinarySize { .. } => return None,
    })
}

/// The content of the part `section` names with its transfer encoding undone; `[]` is the
/// whole message. A part number that does not exist is empty (as for BODY[]).
fn binary(raw: &[u8], section: &[NonZeroU32]) -> Result<Vec<u8>, UnknownCte> {
    if section.is_empty() {
        return Ok(raw.to_vec());
    }
    let Some(message) = MessageParser::default().parse(raw) else {
        return Ok(Vec::new());
    };
    let Some(this) = locate(&message, section) else {
        return Ok(Vec::new());
    };
    let body = raw
        .get(this.offset_body as usize..this.offset_end as usize)
        .unwrap_or_default();
    let cte = this
        .content_transfer_encoding()
        .map(|c| c.trim().to_ascii_lowercase());
    match cte.as_deref() {
        None | Some("7bit" | "8bit" | "binary") => Ok(body.to_vec()),
        Some("base64") => base64_decode(body).ok_or(UnknownCte),
        Some("quoted-printable") => quoted_printable_decode(body).ok_or(UnknownCte),
        Some(_) => Err(UnknownCte),
    }
}

/// Decoded content as a string (`literal8` when it holds NUL, which a plain literal cannot).
fn binary_value(data: Vec<u8>) -> NString8<'static> {
    if data.contains(&0) {
        return NString8::Literal8(Literal8 {
            data: data.into(),
            mode: LiteralMode::Sync,
        });
    }
    NString8::NString(literal(data))
}

fn owned_section(s: Section<'_>) -> Section<'static> {
    use imap_codec::imap_types::IntoStatic;
    s.into_static()
}

fn flags(seen: bool) -> Vec<FlagFetch<'static>> {
    if seen {
        vec![FlagFetch::Flag(Flag::Seen)]
    } else {
        Vec::new()
    }
}

/// The archive's date of a message (its `Date:`, or when it arrived) as INTERNALDATE, UTC.
pub fn internal_date(ms: i64) -> ImapDateTime {
    let utc = FixedOffset::east_opt(0).unwrap_or_else(|| unreachable!("0 is a valid offset"));
    let dt = DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .with_timezone(&utc);
    // INTERNALDATE's year has four digits; the archive's dates are 1970 to a day ahead.
    ImapDateTime::try_from(dt).unwrap_or_else(|_| {
        ImapDateTime::try_from(DateTime::<chrono::Utc>::default().with_timezone(&utc))
            .unwrap_or_else(|_| unreachable!("the epoch is a valid INTERNALDATE"))
    })
}

fn cut(data: Vec<u8>, start: u32, len: u32) -> Vec<u8> {
    let start = (start as usize).min(data.len());
    let end = start.saturating_add(len as usize).min(data.len());
    data[start..end].to_vec()
}

fn filter_fields(header: &[u8], names: &[AString<'_>], keep: bool) -> Vec<u8> {
    let mut out = Vec::new();
    for f in fields(header) {
        let listed = field_name(f).is_some_and(|n| {
            names
                .iter()
                .any(|want| want.as_ref().eq_ignore_ascii_case(n))
        });
        if listed == keep {
            out.extend_from_slice(f);
        }
    }
    // The section ends with the empty line, as the header does (RFC 9051 §6.4.5).
    out.extend_from_slice(b"\r\n");
    out
}

fn section_bytes(raw: &[u8], section: Option<&Section<'_>>) -> Vec<u8> {
    let Some(section) = section else {
        return raw.to_vec();
    };
    match section {
        Section::Header(None) => header(raw).to_vec(),
        Section::Text(None) => text(raw).to_vec(),
        Section::HeaderFields(None, names) => filter_fields(header(raw), names.as_ref(), true),
        Section::HeaderFieldsNot(None, names) => filter_fields(header(raw), names.as_ref(), false),
        Section::Part(p) => part(raw, p, PartPiece::Body),
        Section::Mime(p) => part(raw, p, PartPiece::Mime),
        Section::Header(Some(p)) => nested(raw, p, |m| header(m).to_vec()),
        Section::Text(Some(p)) => nested(raw, p, |m| text(m).to_vec()),
        Section::HeaderFields(Some(p), names) => {
            nested(raw, p, |m| filter_fields(header(m), names.as_ref(), true))
        }
        Section::HeaderFieldsNot(Some(p), names) => {
            nested(raw, p, |m| filter_fields(header(m), names.as_ref(), false))
        }
    }
}

#[derive(Clone, Copy)]
enum PartPiece {
    Body,
    Mime,
}

/// The bytes of the part a part number names (RFC 9051 §6.4.5: in a non-multipart message,
/// part 1 is its body).
fn part(raw: &[u8], p: &Part, piece: PartPiece) -> Vec<u8> {
    let Some(message) = MessageParser::default().parse(raw) else {
        return Vec::new();
    };
    let Some(this) = locate(&message, p.0.as_ref()) else {
        return Vec::new();
    };
    let (from, to) = match piece {
        PartPiece::Body => (this.offset_body, this.offset_end),
        PartPiece::Mime => (this.offset_header, this.offset_body),
    };
    raw.get(from as usize..to as usize)
        .map(<[u8]>::to_vec)
        .unwrap_or_default()
}

/// The MIME part a part number names, if there is one.
fn locate<'m>(message: &'m MailMessage<'m>, p: &[NonZeroU32]) -> Option<&'m MessagePart<'m>> {
    let mut current = 0usize;
    for (depth, n) in p.iter().enumerate() {
        let this = message.parts.get(current)?;
        match &this.body {
            PartType::Multipart(children) => {
                current = *children.get(n.get() as usize - 1)? as usize;
            }
            // Part 1 of a single-part message (or of a leaf) is the leaf itself.
            _ if n.get() == 1 && depth == 0 => {}
            _ => return None,
        }
    }
    message.parts.get(current)
}

/// Applies `f` to an embedded message (`message/rfc822` part) named by `p`.
fn nested(raw: &[u8], p: &Part, f: impl Fn(&[u8]) -> Vec<u8>) -> Vec<u8> {
    let body = part(raw, p, PartPiece::Body);
    if body.is_empty() {
        return body;
    }
    f(&body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::{envelope, header_value, nstring_value};
    use imap_codec::imap_types::core::{IString, Literal, NString};

    const MULTI: &[u8] = b"From: Ann <ann@x.test>\r\nTo: dev@l.test\r\nSubject: hi\r\n there\r\n\
Message-ID: <1@x>\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"b\"\r\n\r\n\
--b\r\nContent-Type: text/plain\r\n\r\nfirst\r\n--b\r\nContent-Type: text/html\r\n\r\n<p>second</p>\r\n--b--\r\n";

    #[test]
    fn header_text_fields_and_parts_are_cut_from_the_stored_bytes() {
        assert!(header(MULTI).ends_with(b"boundary=\"b\"\r\n\r\n"));
        assert!(text(MULTI).starts_with(b"--b\r\n"));
        assert_eq!(header_value(MULTI, "subject").as_deref(), Some("hi there"));
        let names = vec![AString::try_from("SUBJECT").unwrap()];
        let only = filter_fields(header(MULTI), &names, true);
        assert_eq!(only, b"Subject: hi\r\n there\r\n\r\n");
        let not = filter_fields(header(MULTI), &names, false);
        assert!(!not.windows(8).any(|w| w == b"Subject:"));
        let p = |s: &[u32]| {
            Part(
                Vec1::try_from(
                    s.iter()
                        .map(|n| NonZeroU32::new(*n).unwrap())
                        .collect::<Vec<_>>(),
                )
                .unwrap(),
            )
        };
        assert!(
            String::from_utf8_lossy(&part(MULTI, &p(&[1]), PartPiece::Body)).starts_with("first")
        );
        assert!(
            String::from_utf8_lossy(&part(MULTI, &p(&[2]), PartPiece::Body))
                .starts_with("<p>second")
        );
        assert!(
            String::from_utf8_lossy(&part(MULTI, &p(&[2]), PartPiece::Mime)).contains("text/html")
        );
        assert!(part(MULTI, &p(&[3]), PartPiece::Body).is_empty());
        assert!(part(MULTI, &p(&[1, 4, 9]), PartPiece::Body).is_empty());
        let single = b"Subject: x\r\n\r\nbody\r\n";
        assert_eq!(part(single, &p(&[1]), PartPiece::Body), b"body\r\n");
        assert_eq!(cut(b"abcdef".to_vec(), 2, 3), b"cde");
        assert_eq!(cut(b"abcdef".to_vec(), 9, 3), b"");
    }

    #[test]
    fn envelope_reads_addresses_and_raw_fields() {
        let e = envelope(MULTI);
        assert_eq!(e.from.len(), 1);
        assert_eq!(e.sender, e.from);
        assert_eq!(e.to.len(), 1);
        assert_eq!(e.message_id, nstring_value(Some("<1@x>")));
        assert_eq!(e.subject, nstring_value(Some("hi there")));
        // Garbage: no header at all, no panic.
        let g = envelope(b"\x00\xff garbage with no colon");
        assert!(g.from.is_empty());
        assert_eq!(
            literal(vec![0, b'a']),
            NString(Some(IString::Literal(
                Literal::try_from(&b" a"[..]).unwrap().into_static_owned()
            )))
        );
    }

    trait Owned {
        fn into_static_owned(self) -> Literal<'static>;
    }
    impl Owned for Literal<'_> {
        fn into_static_owned(self) -> Literal<'static> {
            use imap_codec::imap_types::IntoStatic;
            self.into_static()
        }
    }
}
