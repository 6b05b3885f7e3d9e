//! Completing a post's header on arrival: a list post without `Date:` or `Message-ID:` gets one
//! added, as RFC 5322 §3.6 requires (`Date:` is mandatory; `Message-ID:` SHOULD be present) and
//! as MTAs do on submission (Postfix cleanup's `always_add_missing_headers`). Without them some
//! receivers refuse or score every member's copy, and the duplicate check has nothing to key on.
//!
//! Place in the flow: the enqueue path calls [`complete_header`] on list posts after the
//! arrival check (which must see the post as the poster's DKIM signed it) and before the
//! duplicate check and moderation, so a held post and the copies fanned out carry the same
//! fields.
//!
//! Invariants: the added fields go at the end of the header block, just before the blank line
//! (nothing the poster wrote moves); a field counts as present when a line of the header block
//! starts with its name and a colon (any case, RFC 5322 §3.6.1 `field-name ":"`); a body with
//! no header/body separator is taken as all header and gets the fields and a blank line at its
//! end. The input is CRLF (the SMTP reader refuses anything else).
//!
//! SECURITY: the post is untrusted; this reads only field names and never copies any of the
//! poster's bytes into what it adds. A header block of any size is scanned once, linearly.

use bytes::Bytes;

/// What [`complete_header`] writes into the fields it adds.
#[derive(Debug, Clone, Copy)]
pub struct Stamp<'a> {
    /// Unix seconds of arrival, for `Date:`.
    pub now_secs: u64,
    /// Random bits for the Message-ID's left side, so two posts in the same second differ.
    pub nonce: u64,
    /// Our host name, the Message-ID's right side (RFC 5322 §3.6.4: a domain we control).
    pub host: &'a str,
}

/// `body` with `Date:` and `Message-ID:` added where missing; `body` itself (no copy) when
/// both are there.
pub fn complete_header(body: Bytes, stamp: Stamp<'_>) -> Bytes {
    let header_end = header_end(&body);
    let (has_date, has_id) = present(&body[..header_end.fields]);
    if has_date && has_id {
        return body;
    }
    let mut added = Vec::with_capacity(128);
    if !has_date {
        added.extend_from_slice(b"Date: ");
        added.extend_from_slice(herald_telemetry::time::rfc5322_date(stamp.now_secs).as_bytes());
        added.extend_from_slice(b"\r\n");
    }
    if !has_id {
        let id = format!(
            "Message-ID: <{}.{:016x}@{}>\r\n",
            stamp.now_secs, stamp.nonce, stamp.host
        );
        added.extend_from_slice(id.as_bytes());
    }
    let mut out = Vec::with_capacity(body.len() + added.len() + 2);
    out.extend_from_slice(&body[..header_end.fields]);
    // A last field without its CRLF (an all-header post cut short) ends here first.
    if header_end.fields > 0 && !body[..header_end.fields].ends_with(b"\r\n") {
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(&added);
    if header_end.separator {
        out.extend_from_slice(&body[header_end.fields..]);
    } else {
        out.extend_from_slice(b"\r\n");
    }
    Bytes::from(out)
}

/// Where the header fields end.
struct HeaderEnd {
    /// Length of the header fields, their last CRLF included.
    fields: usize,
    /// True when a blank line (the header/body separator) follows at `fields`.
    separator: bool,
}

fn header_end(body: &[u8]) -> HeaderEnd {
    if body.starts_with(b"\r\n") {
        return HeaderEnd {
            fields: 0,
            separator: true,
        };
    }
    match body.windows(4).position(|w| w == b"\r\n\r\n") {
        Some(i) => HeaderEnd {
            fields: i + 2,
            separator: true,
        },
        None => HeaderEnd {
            fields: body.len(),
            separator: false,
        },
    }
}

/// Whether the header block holds a `Date:` and a `Message-ID:` field.
fn present(fields: &[u8]) -> (bool, bool) {
    let (mut date, mut id) = (false, false);
    for line in fields.split(|&b| b == b'\n') {
        // Continuation lines start with white space and never name a field.
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let name = &line[..colon];
        date |= name.eq_ignore_ascii_case(b"date");
        id |= name.eq_ignore_ascii_case(b"message-id");
    }
    (date, id)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAMP: Stamp<'static> = Stamp {
        now_secs: 0,
        nonce: 0xabc,
        host: "mx.herald.test",
    };

    fn complete(body: &[u8]) -> Vec<u8> {
        complete_header(Bytes::copy_from_slice(body), STAMP).to_vec()
    }

    #[test]
    fn adds_both_fields_at_the_end_of_the_header() {
        assert_eq!(
            complete(b"From: a@x.test\r\nSubject: hi\r\n\r\nbody\r\n"),
            b"From: a@x.test\r\nSubject: hi\r\nDate: Thu, 1 Jan 1970 00:00:00 +0000\r\n\
Message-ID: <0.0000000000000abc@mx.herald.test>\r\n\r\nbody\r\n"
        );
    }

    #[test]
    fn keeps_a_complete_post_byte_for_byte_and_adds_only_what_is_missing() {
        let full = b"DATE: x\r\nmessage-id: <a@b>\r\n\r\nb\r\n";
        assert_eq!(complete(full), full);
        let got = complete(b"Message-Id: <a@b>\r\n\r\nb\r\n");
        assert_eq!(
            got,
            b"Message-Id: <a@b>\r\nDate: Thu, 1 Jan 1970 00:00:00 +0000\r\n\r\nb\r\n"
        );
    }

    /// Hostile shapes: names hidden in the body or in folded values, an empty post, no
    /// separator, a last field without CRLF, NUL-free junk. The result always has exactly one
    /// of each field in the header block and keeps every byte of the input in order.
    #[test]
    fn hostile_posts_get_exactly_one_of_each_field() {
        for evil in [
            &b""[..],
            b"\r\n",
            b"\r\nDate: in the body\r\nMessage-ID: <body@x>\r\n",
            b"Subject: a\r\n\r\nDate: x\r\n",
            b"Subject: a\r\n Date: folded\r\n\r\n",
            b"Subject: no separator\r\n",
            b"Subject: no crlf at all",
            b"X-Date: x\r\nDateX: y\r\nMessage-IDs: z\r\n\r\n",
            b":\r\n::\r\n\r\n",
            b"\xff\xfe: junk\r\n\r\nb",
        ] {
            let out = complete(evil);
            let head_len = out
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
                .map(|i| i + 2)
                .or_else(|| out.starts_with(b"\r\n").then_some(0))
                .expect("a separator");
            let (date, id) = present(&out[..head_len]);
            assert!(date && id, "{:?}", String::from_utf8_lossy(&out));
            let head = String::from_utf8_lossy(&out[..head_len]);
            assert_eq!(
                head.matches("\nDate: ").count() + usize::from(head.starts_with("Date: ")),
                1,
                "{head:?}"
            );
            // Every input byte survives, in order.
            let mut rest = out.iter();
            assert!(evil.iter().all(|b| rest.any(|o| o == b)), "{evil:?}");
        }
    }
}
