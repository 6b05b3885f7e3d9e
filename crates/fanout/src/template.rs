//! The rendered post: static byte segments and per-member slots, spliced per copy.
//!
//! A [`Template`] holds every byte that is the same for all members in one buffer, already in
//! wire form (CRLF line endings, dot-stuffed), and a short list of segments: ranges of that
//! buffer and slots (the `To:` field, the end of the unsubscribe URL, footer values). Splicing
//! is a walk over the segments: `extend_from_slice` for ranges, a few small writes for slots.
//!
//! Dot-stuffing invariant: a '.' is doubled at render time wherever it starts a line *inside*
//! a static range. A range that starts right after a footer slot may start a line or not,
//! depending on the value (an empty `{{name}}` at the start of a line); such a range is marked
//! `dot_check` and stuffed at splice time if the copy so far ends with LF. Slot values never
//! contain CR or LF, so a value's only possible line start is its first byte, which
//! `encode::write_value` checks the same way. Header slots always write whole fields that start
//! with a field name, so they never start with '.'.
//!
//! Limits: splicing allocates nothing beyond growing `out` (the caller reuses it); all
//! per-member scratch space is on the stack.
//!
//! SECURITY: member data reaches the copy only through `encode` (sanitized names, encoded
//! words, capped values) and `token` (percent-encoded addresses).

use crate::encode::{sanitize_name, write_phrase, write_value, Folder, NAME_BUF};
use crate::footer::Value;
use crate::sign::{CopyAuth, Signing};
use crate::token::{token_with, write_url_tail, HmacSha256, TOKEN_CHARS};
use herald_auth::{ArcHop, DkimSigner};
use herald_types::{verp, Address, Member};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A per-member hole in the template.
#[derive(Debug, Clone)]
pub(crate) enum Slot {
    /// The whole `To:` field for the member (personalized lists).
    To,
    /// `{member}/{token}`: the end of the unsubscribe URL, inside `List-Unsubscribe`.
    UrlTail,
    /// A footer value, cut at `cap` bytes. When the list does not personalize, only the
    /// unsubscribe URL is filled (it is per member anyway) and personal values render empty.
    Footer { value: Value, cap: usize },
}

#[derive(Debug, Clone)]
enum Seg {
    Static {
        start: usize,
        end: usize,
        dot_check: bool,
    },
    Slot(Slot),
}

/// What is known about the byte before the next static byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Prev {
    /// At a line start for sure (message start, or after CRLF).
    LineStart,
    /// In the middle of a line for sure.
    MidLine,
    /// After a footer slot: depends on the member's value.
    Unknown,
}

/// Builds a [`Template`]: static bytes are stuffed as they are pushed.
pub(crate) struct Builder {
    bytes: Vec<u8>,
    segs: Vec<Seg>,
    prev: Prev,
    /// Offset in `bytes` where the body starts (set by [`Builder::mark_body`]).
    body_start: Option<usize>,
    /// The first footer slot: (its index in `segs`, `bytes.len()` when it was pushed). The
    /// body bytes before it are the same for every copy (the DKIM shared prefix).
    first_body_slot: Option<(usize, usize)>,
}

impl Builder {
    pub fn new(capacity: usize) -> Builder {
        Builder {
            bytes: Vec::with_capacity(capacity + capacity / 64 + 1024),
            segs: Vec::new(),
            prev: Prev::LineStart,
            body_start: None,
            first_body_slot: None,
        }
    }

    /// Records that the header block (with its blank line) is complete: the body starts here.
    pub fn mark_body(&mut self) {
        self.body_start = Some(self.bytes.len());
    }

    /// Appends static bytes (CRLF line endings already), dot-stuffing line-initial dots.
    pub fn push(&mut self, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let start = self.bytes.len();
        let mut dot_check = false;
        let mut at_line_start = self.prev;
        let mut from = 0;
        for (i, &b) in data.iter().enumerate() {
            if b == b'.' {
                match at_line_start {
                    Prev::LineStart => {
                        self.bytes.extend_from_slice(&data[from..i]);
                        self.bytes.push(b'.');
                        from = i;
                    }
                    Prev::Unknown => dot_check = i == 0,
                    Prev::MidLine => {}
                }
            }
            at_line_start = if b == b'\n' {
                Prev::LineStart
            } else {
                Prev::MidLine
            };
        }
        self.bytes.extend_from_slice(&data[from..]);
        self.prev = at_line_start;
        let end = self.bytes.len();
        match self.segs.last_mut() {
            Some(Seg::Static { end: last_end, .. }) if *last_end == start && !dot_check => {
                *last_end = end
            }
            _ => self.segs.push(Seg::Static {
                start,
                end,
                dot_check,
            }),
        }
    }

    /// Appends a slot. Header slots end with CRLF; footer slots leave the line state unknown.
    pub fn slot(&mut self, slot: Slot) {
        if matches!(slot, Slot::Footer { .. }) && self.first_body_slot.is_none() {
            self.first_body_slot = Some((self.segs.len(), self.bytes.len()));
        }
        self.prev = match slot {
            Slot::To => Prev::LineStart,
            Slot::UrlTail => Prev::MidLine,
            Slot::Footer { .. } => Prev::Unknown,
        };
        self.segs.push(Seg::Slot(slot));
    }

    pub fn finish(self, mut parts: TemplateParts) -> Template {
        let slots = self
            .segs
            .iter()
            .filter(|s| matches!(s, Seg::Slot(_)))
            .count();
        // The ARC hop goes with the key: a list without a DKIM key (or whose key is configured
        // not to seal) seals nothing.
        let arc = parts
            .arc
            .take()
            .filter(|_| parts.signer.as_ref().is_some_and(|s| s.seals_arc()));
        let signing = parts.signer.clone().map(|signer| {
            let body_start = self.body_start.unwrap_or(self.bytes.len());
            let prefix_end = self.first_body_slot.map_or(self.bytes.len(), |(_, at)| at);
            Signing::new(
                signer,
                &self.bytes[body_start.min(prefix_end)..prefix_end],
                self.first_body_slot.map(|(seg, _)| seg),
                arc,
            )
        });
        // The builder grew by doubling: up to half of a long post's buffer would be spare
        // capacity, held for as long as any copy of the post waits.
        let mut bytes = self.bytes;
        bytes.shrink_to_fit();
        Template {
            static_len: bytes.len(),
            body_start: self.body_start.unwrap_or(bytes.len()),
            bytes,
            segs: self.segs,
            dynamic_hint: slots * 128
                + parts.url_prefix.len()
                + signing.as_ref().map_or(0, Signing::fields_hint),
            parts,
            signing,
        }
    }
}

/// List-wide values the slots need.
pub(crate) struct TemplateParts {
    pub list: Address,
    pub personalize: bool,
    pub mac: HmacSha256,
    /// `{base}/unsubscribe/{list}/`, for `{{unsubscribe_url}}` in footers.
    pub url_prefix: Vec<u8>,
    /// The list domain's DKIM key, when one is configured.
    pub signer: Option<Arc<DkimSigner>>,
    /// The ARC set every copy gets (from the post's trusted Authentication-Results), sealed
    /// with `signer`; taken by `Builder::finish`.
    pub arc: Option<ArcHop>,
    /// Send with the null reverse path `<>` instead of VERP (see
    /// [`Template::with_null_return_path`]).
    pub null_return_path: bool,
}

/// A post rendered once for a list; each member's copy is spliced from it.
pub struct Template {
    bytes: Vec<u8>,
    segs: Vec<Seg>,
    static_len: usize,
    /// Offset in `bytes` where the body starts (after the blank line).
    body_start: usize,
    dynamic_hint: usize,
    parts: TemplateParts,
    signing: Option<Signing>,
}

impl std::fmt::Debug for Template {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The keyed MAC is deliberately left out: it is derived from the list secret.
        f.debug_struct("Template")
            .field("list", &self.parts.list)
            .field("static_len", &self.static_len)
            .field("segments", &self.segs.len())
            .finish_non_exhaustive()
    }
}

impl Template {
    /// Writes `member`'s copy into `out` (cleared first): the exact SMTP DATA payload, CRLF
    /// line endings, dot-stuffed, without the final ".\r\n". Returns whether the copy got its
    /// DKIM signature and ARC set (for metrics; a failure never stops the copy).
    pub fn splice(&self, member: &Member, out: &mut Vec<u8>) -> CopyAuth {
        out.clear();
        out.reserve(self.size_hint());
        let token = token_with(&self.parts.mac, &self.parts.list, &member.address);
        let tail_seg = self.signing.as_ref().and_then(|s| s.tail_seg);
        let mut tail_at = None;
        // Where the body starts in this copy, noted as the static bytes that hold the blank line
        // go by, so the signer need not search the header block for it.
        let mut body_at = None;
        for (i, seg) in self.segs.iter().enumerate() {
            if Some(i) == tail_seg {
                tail_at = Some(out.len());
            }
            match seg {
                Seg::Static {
                    start,
                    end,
                    dot_check,
                } => {
                    if *dot_check && out.last() == Some(&b'\n') {
                        out.push(b'.');
                    }
                    if body_at.is_none() && (*start..=*end).contains(&self.body_start) {
                        body_at = Some(out.len() + (self.body_start - start));
                    }
                    out.extend_from_slice(&self.bytes[*start..*end]);
                }
                Seg::Slot(slot) => self.fill(slot, member, &token, out),
            }
        }
        match &self.signing {
            Some(signing) => signing.sign_copy(out, tail_at, body_at),
            None => CopyAuth::default(),
        }
    }

    /// Copies that went out unsigned because signing failed (the DKIM key is unusable, or
    /// the post has no From); zero in a healthy system. The delivery workers count the same
    /// per attempt from [`Template::splice`]'s result for `/metrics`.
    pub fn sign_failures(&self) -> u64 {
        self.signing
            .as_ref()
            .map_or(0, |s| s.failures.load(Ordering::Relaxed))
    }

    /// Whether copies of this template carry the list's DKIM signature.
    pub fn is_signed(&self) -> bool {
        self.signing.is_some()
    }

    /// Copies that went out without the ARC set they should have had (sealing failed; they
    /// are DKIM-signed if that worked); zero in a healthy system.
    pub fn seal_failures(&self) -> u64 {
        self.signing
            .as_ref()
            .map_or(0, |s| s.seal_failures.load(Ordering::Relaxed))
    }

    /// Whether copies of this template are ARC-sealed (a DKIM key for the list domain and a
    /// trusted Authentication-Results field in the post).
    pub fn is_sealed(&self) -> bool {
        self.signing.as_ref().is_some_and(Signing::seals)
    }

    fn fill(&self, slot: &Slot, member: &Member, token: &[u8; TOKEN_CHARS], out: &mut Vec<u8>) {
        let personal = self.parts.personalize;
        match slot {
            Slot::To => write_to(out, member),
            Slot::UrlTail => write_url_tail(out, &member.address, token),
            Slot::Footer {
                value: Value::UnsubscribeUrl,
                ..
            } => {
                // The URL is never cut (see footer.rs); it starts with the base URL, not '.'.
                out.extend_from_slice(&self.parts.url_prefix);
                write_url_tail(out, &member.address, token);
            }
            Slot::Footer { .. } if !personal => {}
            Slot::Footer {
                value: Value::Name,
                cap,
            } => {
                let mut buf = [0u8; NAME_BUF];
                let name = member
                    .display_name
                    .as_deref()
                    .map_or("", |n| sanitize_name(n, &mut buf));
                write_value(out, name, *cap);
            }
            Slot::Footer {
                value: Value::Email,
                cap,
            } => {
                let a = &member.address;
                if a.local().len() + 1 + a.domain().len() <= *cap {
                    write_value(out, a.local(), *cap);
                    out.push(b'@');
                    out.extend_from_slice(a.domain().as_bytes());
                }
            }
            Slot::Footer {
                value: Value::Field(name),
                cap,
            } => {
                if let Some(v) = member.fields.get(name) {
                    write_value(out, v, *cap);
                }
            }
        }
    }

    /// The VERP envelope sender for `member`'s copy, or the empty string for the null reverse
    /// path (`MAIL FROM:<>`).
    pub fn return_path(&self, member: &Member) -> String {
        if self.parts.null_return_path {
            return String::new();
        }
        verp::verp_return_path(&self.parts.list, &member.address)
    }

    /// The same template sent with the null reverse path (`MAIL FROM:<>`): for server mail
    /// that must draw no bounce or auto-reply back to Herald (RFC 3834 §3.3), such as
    /// postmaster forwards, so nothing can loop.
    pub fn with_null_return_path(mut self) -> Template {
        self.parts.null_return_path = true;
        self
    }

    /// A capacity that fits a typical spliced copy (static bytes plus room for the slots), so
    /// a reused buffer stops growing after the first copy.
    pub fn size_hint(&self) -> usize {
        self.static_len + self.dynamic_hint
    }

    /// The list this template was rendered for.
    pub fn list_address(&self) -> &Address {
        &self.parts.list
    }

    /// Takes the static bytes (nearly all of a template's memory: the rendered post) out,
    /// leaving a shell that cannot splice until [`TemplateShell::fill`] puts them back. The
    /// scheduler keeps the bytes of a post on disk while every copy of it waits for a retry,
    /// so days of posts with a copy for a dead host do not stay in memory.
    pub fn into_shell(mut self) -> (TemplateShell, Vec<u8>) {
        let bytes = std::mem::take(&mut self.bytes);
        let shell = TemplateShell {
            len: bytes.len(),
            check: checksum(&bytes),
            template: Box::new(self),
        };
        (shell, bytes)
    }
}

/// A [`Template`] without its static bytes (see [`Template::into_shell`]): it has no way to
/// make a copy, so a copy can never be spliced from a template whose bytes are away.
pub struct TemplateShell {
    template: Box<Template>,
    len: usize,
    /// Of the bytes taken out: [`TemplateShell::fill`] refuses others (a damaged file would
    /// otherwise send members garbage).
    check: u64,
}

impl TemplateShell {
    /// Bytes the template needs back.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The template again, with `bytes`; the shell back when they are not the bytes taken out.
    pub fn fill(mut self, bytes: Vec<u8>) -> Result<Template, TemplateShell> {
        if bytes.len() != self.len || checksum(&bytes) != self.check {
            return Err(self);
        }
        self.template.bytes = bytes;
        Ok(*self.template)
    }
}

impl std::fmt::Debug for TemplateShell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TemplateShell")
            .field("template", &self.template)
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

/// 64-bit FNV-1a: catches a truncated or damaged file of the process's own writing (not an
/// adversary: the files are its own, in a `0700` directory).
fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// `To: "Name" <member@addr>` (or encoded words, or just `<addr>`), folded, CRLF-terminated.
fn write_to(out: &mut Vec<u8>, member: &Member) {
    let mut buf = [0u8; NAME_BUF];
    let name = member
        .display_name
        .as_deref()
        .map_or("", |n| sanitize_name(n, &mut buf));
    let a = &member.address;
    let mut f = Folder::new(out, "To");
    // The To field always quotes the name: the form readers and filters expect.
    write_phrase(&mut f, name, false);
    f.token(&[
        b"<",
        a.local().as_bytes(),
        b"@",
        a.domain().as_bytes(),
        b">",
    ]);
    f.finish();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contents(b: &Builder) -> Vec<u8> {
        b.bytes.clone()
    }

    #[test]
    fn template_can_be_shared_by_workers() {
        fn shareable<T: Send + Sync + 'static>() {}
        shareable::<Template>();
    }

    #[test]
    fn push_stuffs_line_initial_dots() {
        let mut b = Builder::new(0);
        b.push(b".a\r\n.b.c\r\n");
        b.push(b".d");
        assert_eq!(contents(&b), b"..a\r\n..b.c\r\n..d");
        assert_eq!(b.segs.len(), 1);
    }

    #[test]
    fn dot_after_footer_slot_is_checked_at_splice() {
        let mut b = Builder::new(0);
        b.push(b"x\r\n");
        b.slot(Slot::Footer {
            value: Value::Name,
            cap: 10,
        });
        b.push(b".y\r\n.z");
        assert_eq!(contents(&b), b"x\r\n.y\r\n..z");
        assert!(matches!(
            b.segs[2],
            Seg::Static {
                dot_check: true,
                ..
            }
        ));
    }
}
