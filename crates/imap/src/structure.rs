//! BODYSTRUCTURE and BODY (RFC 9051 §7.5.2) of an archived message: its MIME tree as
//! mail-parser reads it, in imap-codec's types. Sizes and line counts are of the part's bytes
//! as archived (still transfer-encoded), as the RFC asks; parameters are mail-parser's
//! (RFC 2231 continuations joined). BODYSTRUCTURE adds the extension data clients use to show
//! attachments: MD5 (always NIL), the Content-Disposition with its parameters, language and
//! location (NIL).
//!
//! An embedded message (`message/rfc822`) is parsed again from its own bytes for its ENVELOPE
//! and structure, at most [`MAX_DEPTH`] deep; deeper ones are described as opaque parts.
//!
//! SECURITY: the message is untrusted; mail-parser bounds its own recursion, this file bounds
//! the re-parsing of embedded messages, and every count saturates rather than overflows.

use crate::envelope::{envelope, nstring_value};
use imap_codec::imap_types::body::{
    BasicFields, Body, BodyStructure, Disposition, Language, Location, SinglePartExtensionData,
    SpecificFields,
};
use imap_codec::imap_types::core::{IString, NString, Vec1};
use mail_parser::{Message, MessageParser, MessagePart, MimeHeaders, PartType};

/// Embedded messages described at most this deep.
pub const MAX_DEPTH: usize = 8;

/// The structure of `raw`; `extended`: BODYSTRUCTURE (with extension data) rather than BODY.
pub fn body_structure(raw: &[u8], extended: bool) -> BodyStructure<'static> {
    match MessageParser::default().parse(raw) {
        Some(m) => part(&m, 0, raw, extended, 0),
        None => opaque_text(raw.len(), raw),
    }
}

fn istring(s: &str) -> IString<'static> {
    match IString::try_from(s.to_string()) {
        Ok(i) => i,
        // Only a NUL byte can make a value unrepresentable; it becomes a space.
        Err(_) => IString::try_from(s.replace('\0', " ")).unwrap_or_else(|_| {
            IString::try_from("").unwrap_or_else(|_| unreachable!("empty quoted"))
        }),
    }
}

fn upper(s: &str) -> IString<'static> {
    istring(&s.to_ascii_uppercase())
}

fn lines(bytes: &[u8]) -> u32 {
    u32::try_from(bytes.iter().filter(|b| **b == b'\n').count()).unwrap_or(u32::MAX)
}

fn opaque_text(len: usize, raw: &[u8]) -> BodyStructure<'static> {
    BodyStructure::Single {
        body: Body {
            basic: BasicFields {
                parameter_list: Vec::new(),
                id: NString(None),
                description: NString(None),
                content_transfer_encoding: istring("7BIT"),
                size: u32::try_from(len).unwrap_or(u32::MAX),
            },
            specific: SpecificFields::Text {
                subtype: istring("PLAIN"),
                number_of_lines: lines(raw),
            },
        },
        extension_data: None,
    }
}

fn part(
    m: &Message<'_>,
    index: usize,
    raw: &[u8],
    extended: bool,
    depth: usize,
) -> BodyStructure<'static> {
    let Some(p) = m.parts.get(index) else {
        return opaque_text(0, b"");
    };
    let ct = p.content_type();
    let params: Vec<(IString<'static>, IString<'static>)> = ct
        .and_then(|c| c.attributes())
        .unwrap_or_default()
        .iter()
        .map(|a| (upper(&a.name), istring(&a.value)))
        .collect();
    if let PartType::Multipart(children) = &p.body {
        let bodies: Vec<BodyStructure<'static>> = children
            .iter()
            .map(|c| part(m, *c as usize, raw, extended, depth))
            .collect();
        if let Ok(bodies) = Vec1::try_from(bodies) {
            let subtype = ct.and_then(|c| c.subtype()).unwrap_or("mixed");
            return BodyStructure::Multi {
                bodies,
                subtype: upper(subtype),
                extension_data: extended.then(|| {
                    imap_codec::imap_types::body::MultiPartExtensionData {
                        parameter_list: params.clone(),
                        tail: Some(disposition(p)),
                    }
                }),
            };
        }
    }
    let bytes = raw
        .get(p.offset_body as usize..p.offset_end as usize)
        .unwrap_or_default();
    let (ctype, subtype) = match ct {
        Some(c) => (c.ctype().to_string(), c.subtype().unwrap_or("").to_string()),
        // RFC 2045 §5.2: no Content-Type is text/plain.
        None => ("text".into(), "plain".into()),
    };
    let mut parameter_list = params;
    if parameter_list.is_empty() && ct.is_none() {
        parameter_list.push((istring("CHARSET"), istring("US-ASCII")));
    }
    let basic = BasicFields {
        parameter_list,
        id: nstring_value(p.content_id().map(|i| format!("<{i}>")).as_deref()),
        description: nstring_value(p.content_description()),
        content_transfer_encoding: upper(p.content_transfer_encoding().unwrap_or("7BIT")),
        size: u32::try_from(bytes.len()).unwrap_or(u32::MAX),
    };
    let specific = specific_fields(p, bytes, &ctype, &subtype, extended, depth);
    BodyStructure::Single {
        body: Body { basic, specific },
        extension_data: extended.then(|| SinglePartExtensionData {
            md5: NString(None),
            tail: Some(disposition(p)),
        }),
    }
}

/// What a single part's structure says beyond the basic fields: a message/rfc822's envelope
/// and structure (nested at most [`MAX_DEPTH`] deep), a text part's lines, or its type.
fn specific_fields(
    p: &MessagePart<'_>,
    bytes: &[u8],
    ctype: &str,
    subtype: &str,
    extended: bool,
    depth: usize,
) -> SpecificFields<'static> {
    match (&p.body, ctype.to_ascii_lowercase().as_str()) {
        (PartType::Message(_), _) if depth < MAX_DEPTH => SpecificFields::Message {
            envelope: Box::new(envelope(bytes)),
            body_structure: Box::new(match MessageParser::default().parse(bytes) {
                Some(inner) => part(&inner, 0, bytes, extended, depth + 1),
                None => opaque_text(bytes.len(), bytes),
            }),
            number_of_lines: lines(bytes),
        },
        (_, "text") => SpecificFields::Text {
            subtype: upper(if subtype.is_empty() { "plain" } else { subtype }),
            number_of_lines: lines(bytes),
        },
        _ => SpecificFields::Basic {
            r#type: upper(ctype),
            subtype: upper(if subtype.is_empty() {
                "octet-stream"
            } else {
                subtype
            }),
        },
    }
}

fn disposition(p: &MessagePart<'_>) -> Disposition<'static> {
    Disposition {
        disposition: p.content_disposition().map(|d| {
            let params = d
                .attributes()
                .unwrap_or_default()
                .iter()
                .map(|a| (upper(&a.name), istring(&a.value)))
                .collect();
            (upper(d.ctype()), params)
        }),
        tail: Some(Language {
            language: Vec::new(),
            tail: Some(Location {
                location: NString(None),
                extensions: Vec::new(),
            }),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use imap_codec::encode::Encoder;
    use imap_codec::imap_types::fetch::MessageDataItem;
    use imap_codec::imap_types::response::{Data, Response};
    use std::num::NonZeroU32;

    fn encoded(s: BodyStructure<'static>) -> String {
        let r = Response::Data(Data::Fetch {
            seq: NonZeroU32::MIN,
            items: Vec1::from(MessageDataItem::BodyStructure(s)),
        });
        String::from_utf8(imap_codec::ResponseCodec::default().encode(&r).dump()).unwrap()
    }

    #[test]
    fn multipart_with_attachment_and_embedded_message() {
        let raw = b"From: a@x\r\nSubject: s\r\nMIME-Version: 1.0\r\n\
Content-Type: multipart/mixed; boundary=\"b\"\r\n\r\n\
--b\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nhello\r\nworld\r\n\
--b\r\nContent-Type: application/pdf; name=\"r.pdf\"\r\nContent-Transfer-Encoding: base64\r\n\
Content-Disposition: attachment; filename=\"r.pdf\"\r\n\r\nAAAA\r\n\
--b\r\nContent-Type: message/rfc822\r\n\r\nFrom: b@y\r\nSubject: inner\r\n\r\ninner body\r\n\
--b--\r\n";
        let text = encoded(body_structure(raw, true));
        assert!(
            text.contains("(\"TEXT\" \"PLAIN\" (\"CHARSET\" \"utf-8\")"),
            "{text}"
        );
        assert!(text.contains("\"APPLICATION\" \"PDF\""), "{text}");
        assert!(
            text.contains("(\"ATTACHMENT\" (\"FILENAME\" \"r.pdf\"))"),
            "{text}"
        );
        assert!(text.contains("\"MESSAGE\" \"RFC822\""), "{text}");
        assert!(text.contains("\"inner\""), "{text}");
        assert!(text.contains("\"MIXED\""), "{text}");
        // BODY (not extended) has no disposition.
        assert!(!encoded(body_structure(raw, false)).contains("ATTACHMENT"));
        // Garbage and an empty message still describe something.
        assert!(encoded(body_structure(b"\x00\xff", true)).contains("\"TEXT\""));
        assert!(encoded(body_structure(b"", true)).contains("\"TEXT\""));
    }

    #[test]
    fn deeply_nested_messages_stop_at_the_depth_limit() {
        let mut raw = b"Subject: leaf\r\n\r\nleaf\r\n".to_vec();
        for _ in 0..40 {
            let mut outer = b"Subject: wrap\r\nContent-Type: message/rfc822\r\n\r\n".to_vec();
            outer.extend_from_slice(&raw);
            raw = outer;
        }
        let text = encoded(body_structure(&raw, true));
        assert!(text.matches("RFC822").count() <= MAX_DEPTH + 1, "{text}");
    }
}
