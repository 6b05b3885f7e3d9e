//! Header rewriting, done once per post: what is removed, replaced and added.
//!
//! Removed: incoming `List-*` fields (RFC 2369 / 2919 / 8058), `Precedence`, `Return-Path`, and
//! `Bcc` (RFC 5322 §3.6.3: never shown to recipients; a post should not carry one, and if it
//! does it must not reach a thousand members). Replaced: `To` (personalized lists: a slot per
//! member), `Subject` (prefix added once), `Reply-To` (per policy), and `Content-*` fields as
//! the body plan requires. Every other field is kept byte-for-byte, folding included.
//!
//! DMARC (see `dmarc`): when the post's From is rewritten, `From` is replaced by the list's,
//! the poster goes to `Reply-To` (or `Cc` when replies go to the list), and the poster's
//! `DKIM-Signature` fields are kept, renamed `X-Original-DKIM-Signature` or removed as the
//! list's `poster_dkim` says.
//!
//! Added at the end of the header: `List-Id`, `List-Unsubscribe` (per member),
//! `List-Unsubscribe-Post`, `List-Archive` (when configured, or the public archive's page),
//! `Archived-At` (RFC 5064, when the list's archive is public), `List-Post`, `List-Help`,
//! `List-Subscribe`, `Precedence: list`.
//!
//! Invariants: generated fields are folded before 78 octets where a token boundary allows and
//! never exceed 998 octets per line (URLs are bounded by the `ListContext` checks).
//!
//! SECURITY: operator text (display name, subject prefix) is sanitized like member names;
//! the post's own fields are copied, never re-interpreted, except Subject, which is read with
//! mail-parser only to decide whether the prefix is already there.

use crate::dmarc::{trim_value, FromRewritePlan};
use crate::encode::{clean_line, for_each_word, write_phrase, Folder};
use crate::message::{Field, Post};
use crate::mime::HeaderEdits;
use crate::template::{Builder, Slot};
use crate::ListContext;
use herald_types::{list_id_label, verp, List, PosterDkim, ReplyToPolicy};
use mail_parser::MessageParser;

/// Incoming fields a list always drops (it sets its own, or they must not be forwarded).
const REMOVED: &[&str] = &[
    "List-Id",
    "List-Post",
    "List-Archive",
    "List-Help",
    "List-Subscribe",
    "List-Unsubscribe",
    "List-Unsubscribe-Post",
    "List-Owner",
    "Precedence",
    "Return-Path",
    "Bcc",
    // RFC 5064: only the list knows where it archived the post; a poster's own field would
    // point members anywhere.
    "Archived-At",
];

/// Writes the rewritten header block (without the blank line that ends it). `from`: the
/// DMARC From rewrite decided for this post (see `dmarc`).
pub(crate) fn write(
    b: &mut Builder,
    post: &Post<'_>,
    list: &List,
    ctx: &ListContext,
    edits: &HeaderEdits,
    url_prefix: &[u8],
    from: Option<&FromRewritePlan>,
) {
    let s = &list.settings;
    let prefix = s
        .subject_prefix
        .as_deref()
        .map(clean_line)
        .filter(|p| !p.is_empty());
    let mut saw_to = false;
    let mut saw_subject = false;
    let mut saw_from = false;
    let mut saw_cc = false;
    for f in &post.fields {
        if REMOVED.iter().any(|n| f.is(n)) {
            continue;
        }
        if let Some(plan) = from {
            if f.is("From") {
                if !saw_from {
                    b.push(&plan.from_field);
                    saw_from = true;
                }
                continue;
            }
            let cc_poster = plan
                .original_value
                .as_deref()
                .filter(|_| s.reply_to != ReplyToPolicy::Poster);
            if let (true, false, Some(poster)) = (f.is("Cc"), saw_cc, cc_poster) {
                // Replies go to the list (or a fixed address): the poster is copied, as
                // Mailman does, so "reply all" still reaches them.
                saw_cc = true;
                b.push(&field_with_poster("Cc", Some(f.value), poster));
                continue;
            }
        }
        if f.is("DKIM-Signature") {
            match s.poster_dkim {
                PosterDkim::Remove => continue,
                PosterDkim::RenameWhenRewritten if from.is_some() => {
                    let mut renamed = b"X-Original-".to_vec();
                    renamed.extend_from_slice(f.raw);
                    b.push(&renamed);
                    continue;
                }
                PosterDkim::Keep | PosterDkim::RenameWhenRewritten => {}
            }
        }
        if f.is("To") && s.personalize {
            if !saw_to {
                b.slot(Slot::To);
                saw_to = true;
            }
            continue;
        }
        if f.is("Subject") && !saw_subject {
            saw_subject = true;
            if let Some(p) = &prefix {
                b.push(&subject_with_prefix(f, p));
                continue;
            }
        }
        let dropped = (f.is("Reply-To") && s.reply_to != ReplyToPolicy::Poster)
            || (f.is_content_field() && edits.drop_content_fields)
            || (f.is("Content-Type") && edits.content_type.is_some())
            || (f.is("Content-Transfer-Encoding") && edits.transfer_encoding.is_some());
        if !dropped {
            b.push(f.raw);
        }
    }
    if s.personalize && !saw_to {
        b.slot(Slot::To);
    }
    if let (Some(p), false) = (&prefix, saw_subject) {
        let mut out = Vec::new();
        let mut f = Folder::new(&mut out, "Subject");
        write_prefix(&mut f, p, false);
        f.finish();
        b.push(&out);
    }
    let reply_to = match &s.reply_to {
        ReplyToPolicy::Poster => None,
        ReplyToPolicy::List => Some(&list.address),
        ReplyToPolicy::Explicit(a) => Some(a),
    };
    if let Some(a) = reply_to {
        b.push(format!("Reply-To: <{a}>\r\n").as_bytes());
    }
    if let Some(poster) = from.and_then(|p| p.original_value.as_deref()) {
        if post.first("Reply-To").is_none() && reply_to.is_none() {
            b.push(&field_with_poster("Reply-To", None, poster));
        } else if reply_to.is_some() && !saw_cc {
            b.push(&field_with_poster("Cc", None, poster));
        }
    }
    write_mime_edits(b, edits);
    write_list_fields(b, list, ctx, url_prefix, post);
}

/// `name: <existing value>,\r\n <poster>` (or just the poster): the poster's original From
/// value, copied byte-for-byte, added to an address field.
fn field_with_poster(name: &str, existing: Option<&[u8]>, poster: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(name.len() + poster.len() + 8);
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    if let Some(v) = existing.map(trim_value).filter(|v| !v.is_empty()) {
        out.extend_from_slice(v);
        out.extend_from_slice(b",\r\n ");
    }
    out.extend_from_slice(poster);
    out.extend_from_slice(b"\r\n");
    out
}

fn write_mime_edits(b: &mut Builder, edits: &HeaderEdits) {
    if edits.add_mime_version {
        b.push(b"MIME-Version: 1.0\r\n");
    }
    for field in [&edits.content_type, &edits.transfer_encoding]
        .into_iter()
        .flatten()
    {
        b.push(field);
    }
}

/// `Subject: [prefix] original`, unless the decoded subject already contains the prefix.
fn subject_with_prefix(f: &Field<'_>, prefix: &str) -> Vec<u8> {
    let decoded = MessageParser::new()
        .parse_headers(f.raw)
        .and_then(|m| m.subject().map(str::to_lowercase))
        .unwrap_or_default();
    if decoded.contains(&prefix.to_lowercase()) {
        return f.raw.to_vec();
    }
    let start = f
        .value
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t' | b'\r' | b'\n'));
    let value = start.map_or(&f.value[..0], |i| &f.value[i..]);
    let mut out = Vec::with_capacity(f.raw.len() + prefix.len() + 4);
    let mut folder = Folder::new(&mut out, "Subject");
    write_prefix(&mut folder, prefix, value.starts_with(b"=?"));
    folder.finish();
    if value.is_empty() {
        return out;
    }
    // Put the original value back after the prefix, keeping its own folding. If its first line
    // would make the prefixed line too long, fold first (unfolding restores "prefix value").
    out.truncate(out.len() - 2);
    let first_line = value
        .iter()
        .position(|&b| b == b'\r')
        .unwrap_or(value.len());
    let line_len = out
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(out.len(), |i| out.len() - i - 1);
    out.extend_from_slice(if line_len + 1 + first_line > 78 {
        b"\r\n "
    } else {
        b" "
    });
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
    out
}

/// The subject prefix as a token: ASCII as is; otherwise encoded words. When the original
/// subject starts with an encoded word, the separating space goes inside the prefix's word,
/// because whitespace between two encoded words disappears when they are decoded.
fn write_prefix(f: &mut Folder<'_>, prefix: &str, next_is_encoded_word: bool) {
    if prefix.is_ascii() {
        f.token(&[prefix.as_bytes()]);
    } else if next_is_encoded_word {
        for_each_word(format!("{prefix} ").as_bytes(), |w| f.token(&[w]));
    } else {
        for_each_word(prefix.as_bytes(), |w| f.token(&[w]));
    }
}

/// The public archive's pages for this post, when the list's archive is public and the post
/// has a Message-ID; `None` too when a URL would not fit on one header line (998 octets).
fn archive_page(ctx: &ListContext, list: &List, post: &Post<'_>) -> Option<crate::ArchivePage> {
    let archived_at = ctx.archived_at.as_ref()?;
    let mid = post.fields.iter().find(|f| f.is("Message-ID"))?;
    let mid = String::from_utf8_lossy(trim_value(mid.value)).into_owned();
    let page = archived_at(&list.address, &mid)?;
    const FIT: usize = 998 - "List-Archive: <>".len();
    (page.message.len() <= FIT && page.list.len() <= FIT).then_some(page)
}

/// The RFC 2369 / 2919 / 8058 fields and `Precedence`.
fn write_list_fields(
    b: &mut Builder,
    list: &List,
    ctx: &ListContext,
    url_prefix: &[u8],
    post: &Post<'_>,
) {
    let addr = &list.address;
    let mut out = Vec::with_capacity(512);
    let mut f = Folder::new(&mut out, "List-Id");
    write_phrase(&mut f, &clean_line(&list.settings.display_name), true);
    f.token(&[
        b"<",
        list_id_label(addr.local()).as_bytes(),
        b".",
        addr.domain().as_bytes(),
        b">",
    ]);
    f.finish();
    out.extend_from_slice(b"List-Unsubscribe: <");
    out.extend_from_slice(url_prefix);
    b.push(&out);
    b.slot(Slot::UrlTail);
    out.clear();
    let request = verp::request_address(addr);
    out.extend_from_slice(b">,\r\n <mailto:");
    mailto_addr(&mut out, &request);
    out.extend_from_slice(
        b"?subject=unsubscribe>\r\nList-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n",
    );
    let page = archive_page(ctx, list, post);
    let archive = ctx
        .archive_url
        .clone()
        .or_else(|| page.as_ref().map(|p| p.list.clone()));
    if let Some(archive) = archive {
        out.extend_from_slice(format!("List-Archive: <{archive}>\r\n").as_bytes());
    }
    if let Some(p) = page {
        out.extend_from_slice(format!("Archived-At: <{}>\r\n", p.message).as_bytes());
    }
    for (name, target, query) in [
        ("List-Post", addr.to_string(), ""),
        ("List-Help", request.clone(), "?subject=help"),
        ("List-Subscribe", request.clone(), "?subject=subscribe"),
    ] {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": <mailto:");
        mailto_addr(&mut out, &target);
        out.extend_from_slice(query.as_bytes());
        out.extend_from_slice(b">\r\n");
    }
    out.extend_from_slice(b"Precedence: list\r\n");
    b.push(&out);
}

/// An address inside a `mailto:` URI (RFC 6068): unreserved and "some-delims" characters stay,
/// the rest are percent-encoded (matters only for exotic, quoted list addresses).
fn mailto_addr(out: &mut Vec<u8>, addr: &str) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &c in addr.as_bytes() {
        if c.is_ascii_alphanumeric() || b"-._~!$'()*+,;:@".contains(&c) {
            out.push(c);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(c >> 4)], HEX[usize::from(c & 15)]]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::split;

    fn prefixed(raw: &[u8], prefix: &str) -> String {
        let post = split(raw).unwrap();
        String::from_utf8(subject_with_prefix(&post.fields[0], prefix)).unwrap()
    }

    #[test]
    fn prefix_is_added_once() {
        assert_eq!(
            prefixed(b"Subject: hi\r\n\r\n", "[dev]"),
            "Subject: [dev] hi\r\n"
        );
        assert_eq!(
            prefixed(b"Subject: Re: [DEV] hi\r\n\r\n", "[dev]"),
            "Subject: Re: [DEV] hi\r\n"
        );
        assert_eq!(
            prefixed(b"Subject: =?utf-8?q?Re=3A_=5Bdev=5D_hi?=\r\n\r\n", "[dev]"),
            "Subject: =?utf-8?q?Re=3A_=5Bdev=5D_hi?=\r\n"
        );
        assert_eq!(prefixed(b"Subject:\r\n\r\n", "[dev]"), "Subject: [dev]\r\n");
    }

    #[test]
    fn long_subject_is_folded_after_prefix() {
        let raw = format!("Subject: {}\r\n next\r\n\r\n", "x".repeat(70));
        let got = prefixed(raw.as_bytes(), "[dev]");
        assert_eq!(
            got,
            format!("Subject: [dev]\r\n {}\r\n next\r\n", "x".repeat(70))
        );
    }
}
