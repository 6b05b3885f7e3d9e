//! Reading an archived message's header as IMAP shows it: the header and text split, header
//! fields with their continuation lines, unfolded values, the ENVELOPE structure, and IMAP
//! strings for values (quoted or literal). A leaf: FETCH ([`crate::fetch`]), BODYSTRUCTURE
//! ([`crate::structure`]) and SEARCH ([`crate::search`]) use it.
//!
//! Hand-written on purpose: fields are split at line starts only (a continuation line starts
//! with a space or tab, RFC 5322 §2.2.3), with no decoding, so the bytes served are the
//! archived bytes; addresses are mail-parser's.
//!
//! SECURITY: headers are untrusted bytes; every cut is bounded by the data (no index can pass
//! its end), a header with no empty line is all header, and a NUL byte (which an IMAP literal
//! cannot carry) becomes a space.

use imap_codec::imap_types::core::{IString, Literal, NString, Quoted};
use imap_codec::imap_types::envelope::{Address as ImapAddress, Envelope};
use mail_parser::MessageParser;

/// Bytes as an IMAP literal. A NUL byte cannot be in one (RFC 9051 CHAR8); an archived
/// message with one has it served as a space rather than not at all.
pub fn literal(mut data: Vec<u8>) -> NString<'static> {
    for b in data.iter_mut() {
        if *b == 0 {
            *b = b' ';
        }
    }
    match Literal::try_from(data) {
        Ok(l) => NString(Some(IString::Literal(l))),
        Err(_) => NString(None),
    }
}

/// A string value for ENVELOPE: quoted when it can be, else a literal; NIL when absent.
pub fn nstring_value(value: Option<&str>) -> NString<'static> {
    let Some(v) = value else {
        return NString(None);
    };
    match Quoted::try_from(v.to_string()) {
        Ok(q) => NString(Some(IString::Quoted(q))),
        Err(_) => literal(v.as_bytes().to_vec()),
    }
}

/// The header of a message, up to and including the empty line.
pub fn header(raw: &[u8]) -> &[u8] {
    &raw[..header_len(raw)]
}

/// The body of a message, after the empty line.
pub fn text(raw: &[u8]) -> &[u8] {
    &raw[header_len(raw)..]
}

fn header_len(raw: &[u8]) -> usize {
    if raw.starts_with(b"\r\n") {
        return 2;
    }
    match raw.windows(4).position(|w| w == b"\r\n\r\n") {
        Some(i) => i + 4,
        None => match raw.windows(2).position(|w| w == b"\n\n") {
            Some(i) => i + 2,
            None => raw.len(),
        },
    }
}

/// The header's fields, each with its continuation lines and line ending.
pub fn fields(header: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < header.len() {
        let Some(nl) = header[i..].iter().position(|b| *b == b'\n') else {
            break;
        };
        let next = i + nl + 1;
        let continues = matches!(header.get(next), Some(b' ' | b'\t'));
        if !continues {
            let field = &header[start..next];
            if field != b"\r\n" && field != b"\n" {
                out.push(field);
            }
            start = next;
        }
        i = next;
    }
    out
}

/// A field's name (before the colon), if it has one.
pub fn field_name(field: &[u8]) -> Option<&[u8]> {
    let colon = field.iter().position(|b| *b == b':')?;
    Some(field[..colon].trim_ascii_end())
}

/// A field's value, unfolded (line breaks removed, the folding white space kept).
pub fn field_value(field: &[u8]) -> String {
    let colon = field.iter().position(|b| *b == b':').unwrap_or(field.len());
    let v: Vec<u8> = field[(colon + 1).min(field.len())..]
        .iter()
        .copied()
        .filter(|b| *b != b'\r' && *b != b'\n')
        .collect();
    String::from_utf8_lossy(&v).trim().to_string()
}

/// The first value of the field `name` (any case) in a header.
pub fn header_value(header: &[u8], name: &str) -> Option<String> {
    fields(header)
        .into_iter()
        .find(|f| field_name(f).is_some_and(|n| n.eq_ignore_ascii_case(name.as_bytes())))
        .map(field_value)
}

/// The ENVELOPE of a message (RFC 9051 §7.5.2): date, subject, message-id and in-reply-to as
/// written (unfolded); addresses as mail-parser reads them (a group's members listed without
/// the group markers). Sender and Reply-To default to From.
pub fn envelope(raw: &[u8]) -> Envelope<'static> {
    let head = header(raw);
    let parsed = MessageParser::default().parse_headers(head);
    let list = |a: Option<&mail_parser::Address<'_>>| -> Vec<ImapAddress<'static>> {
        let Some(a) = a else { return Vec::new() };
        a.iter()
            .filter_map(|addr| {
                let email = addr.address.as_deref()?;
                let (mailbox, host) = email.rsplit_once('@').unwrap_or((email, ""));
                Some(ImapAddress {
                    name: nstring_value(addr.name.as_deref()),
                    adl: NString(None),
                    mailbox: nstring_value(Some(mailbox)),
                    host: nstring_value(Some(host).filter(|h| !h.is_empty())),
                })
            })
            .collect()
    };
    let (from, sender, reply_to, to, cc, bcc) = match &parsed {
        Some(m) => (
            list(m.from()),
            list(m.sender()),
            list(m.reply_to()),
            list(m.to()),
            list(m.cc()),
            list(m.bcc()),
        ),
        None => Default::default(),
    };
    let value = |name: &str| header_value(head, name);
    Envelope {
        date: nstring_value(value("Date").as_deref()),
        subject: nstring_value(value("Subject").as_deref()),
        sender: if sender.is_empty() {
            from.clone()
        } else {
            sender
        },
        reply_to: if reply_to.is_empty() {
            from.clone()
        } else {
            reply_to
        },
        from,
        to,
        cc,
        bcc,
        in_reply_to: nstring_value(value("In-Reply-To").as_deref()),
        message_id: nstring_value(value("Message-ID").as_deref()),
    }
}
