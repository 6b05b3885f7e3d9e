//! Making untrusted text safe to splice: sanitizing, RFC 2047 phrases, folding, percent-encoding.
//!
//! Everything here writes into a caller's buffer and, on the per-member path, uses only stack
//! scratch space: the splice loop must not allocate per copy.
//!
//! Invariants: [`sanitize_name`] and [`write_value`] never emit a control character (C0, DEL,
//! C1), CR, LF or a Unicode line/paragraph separator or bidi override; [`Folder`] starts every
//! continuation line with a space, so a generated header can never begin a new field.
//!
//! Limits: display names are capped at [`MAX_NAME_CHARS`] characters, footer values at the cap
//! the caller passes (at most [`MAX_VALUE_BYTES`]); encoded words are at most 72 characters;
//! folded lines aim at 78 octets and never exceed 998.
//!
//! SECURITY: member names and fields come from CSV imports and the HTTP API. A name such as
//! `Eve\r\nBcc: victim@x` must not add a header line: CR and LF become spaces inside a quoted
//! string or an encoded word, where they are inert.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;

/// Longest display name kept, in characters (longer names are cut, not refused).
pub const MAX_NAME_CHARS: usize = 128;
/// Longest member value spliced into a footer, in bytes.
pub const MAX_VALUE_BYTES: usize = 1024;
/// Scratch size for a sanitized name: every kept character is at most 4 UTF-8 bytes.
pub const NAME_BUF: usize = MAX_NAME_CHARS * 4;
/// Preferred line length for generated header lines (RFC 5322 §2.1.1 "SHOULD").
const FOLD_AT: usize = 78;
/// Input bytes per B-encoded word: 45 bytes → 60 base64 characters → a 72-character word.
const WORD_INPUT_BYTES: usize = 45;
const WORD_PREFIX: &[u8] = b"=?utf-8?B?";

/// Characters that must never reach a copy from member data: controls, and Unicode characters
/// that some readers treat as line breaks or use to reorder text (display-name spoofing).
fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{200E}' | '\u{200F}' | '\u{FEFF}'
        )
        || ('\u{202A}'..='\u{202E}').contains(&c)
        || ('\u{2066}'..='\u{2069}').contains(&c)
}

/// Sanitizes a display name into `buf`: unsafe characters dropped, whitespace runs (CR, LF and
/// tabs included) collapsed to one space, trimmed, cut at [`MAX_NAME_CHARS`] characters.
pub fn sanitize_name<'a>(name: &'a str, buf: &'a mut [u8; NAME_BUF]) -> &'a str {
    // Fast path for the common case (printable ASCII, single spaces, trimmed, short): the
    // name is already what the slow path would produce, so no copy is needed.
    let b = name.as_bytes();
    let clean = b.len() <= MAX_NAME_CHARS
        && b.first() != Some(&b' ')
        && b.last() != Some(&b' ')
        && b.iter().all(|&c| (0x20..0x7f).contains(&c))
        && !b.windows(2).any(|w| w == b"  ");
    if clean {
        return name;
    }
    let mut len = 0;
    let mut chars = 0;
    let mut pending_space = false;
    for c in name.chars() {
        if chars == MAX_NAME_CHARS {
            break;
        }
        if c.is_whitespace() {
            pending_space = len > 0;
            continue;
        }
        if is_unsafe(c) {
            continue;
        }
        if pending_space {
            // A space is only worth keeping if the character after it fits too.
            if chars + 2 > MAX_NAME_CHARS {
                break;
            }
            buf[len] = b' ';
            len += 1;
            chars += 1;
        }
        pending_space = false;
        len += c.encode_utf8(&mut buf[len..]).len();
        chars += 1;
    }
    // Only whole characters were written, so this cannot fail; "" keeps it panic-free anyway.
    std::str::from_utf8(&buf[..len]).unwrap_or("")
}

/// Writes a member value into a body: line breaks and other whitespace become spaces, other unsafe
/// characters are dropped, the result is cut at `cap` bytes on a character boundary, and a
/// leading '.' at the start of a line is dot-stuffed (SMTP DATA transparency).
pub fn write_value(out: &mut Vec<u8>, value: &str, cap: usize) {
    let b = value.as_bytes();
    if b.len() <= cap && b.iter().all(|&c| (0x20..0x7f).contains(&c)) {
        // Fast path: printable ASCII within the cap is written as is.
        if b.first() == Some(&b'.') && out.last() == Some(&b'\n') {
            out.push(b'.');
        }
        out.extend_from_slice(b);
        return;
    }
    let mut written = 0;
    let mut buf = [0u8; 4];
    let mut after_cr = false;
    for c in value.chars() {
        // CRLF is one line break: it becomes one space, not two.
        let skip = after_cr && c == '\n';
        after_cr = c == '\r';
        if skip {
            continue;
        }
        let c = if c.is_whitespace() { ' ' } else { c };
        if is_unsafe(c) {
            continue;
        }
        let enc = c.encode_utf8(&mut buf).as_bytes();
        if written + enc.len() > cap {
            break;
        }
        if written == 0 && c == '.' && out.last() == Some(&b'\n') {
            out.push(b'.');
        }
        out.extend_from_slice(enc);
        written += enc.len();
    }
}

/// Writes one header field's tokens, separated by single spaces, folding (CRLF SP) before a
/// token that would push the line past 78 octets. Tokens never contain CR or LF.
pub struct Folder<'o> {
    out: &'o mut Vec<u8>,
    line_len: usize,
    /// False until the first token: no fold may come before it (a line of just the name).
    started: bool,
}

impl<'o> Folder<'o> {
    /// Starts a field; `name` is written followed by a colon.
    pub fn new(out: &'o mut Vec<u8>, name: &str) -> Folder<'o> {
        out.extend_from_slice(name.as_bytes());
        out.push(b':');
        Folder {
            out,
            line_len: name.len() + 1,
            started: false,
        }
    }

    /// Adds a token made of `parts` concatenated (no allocation needed to assemble it).
    pub fn token(&mut self, parts: &[&[u8]]) {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if self.started && self.line_len + 1 + len > FOLD_AT {
            self.out.extend_from_slice(b"\r\n ");
            self.line_len = 1;
        } else {
            self.out.push(b' ');
            self.line_len += 1;
        }
        for p in parts {
            self.out.extend_from_slice(p);
        }
        self.line_len += len;
        self.started = true;
    }

    /// Ends the field with CRLF.
    pub fn finish(self) {
        self.out.extend_from_slice(b"\r\n");
    }
}

/// Writes a display name (already sanitized) as RFC 5322 phrase tokens: plain atoms when
/// `atoms_ok` and the name needs no quoting, a quoted string when it is ASCII and short, else
/// RFC 2047 B-encoded words (UTF-8, split on character boundaries).
///
/// A name holding `=?` is always B-encoded whole: an encoded word inside a quoted string must
/// not be decoded (RFC 2047 §5), but lenient readers do, and `=?utf-8?q?Eve=0D=0ABcc=3A_x?=`
/// would become a header break there. Encoded as a word itself, it decodes to its literal text.
pub fn write_phrase(f: &mut Folder<'_>, name: &str, atoms_ok: bool) {
    if name.is_empty() {
        return;
    }
    if name.contains("=?") {
        for_each_word(name.as_bytes(), |word| f.token(&[word]));
        return;
    }
    if atoms_ok && name.bytes().all(|b| b == b' ' || is_atext(b)) {
        for atom in name.split(' ') {
            f.token(&[atom.as_bytes()]);
        }
        return;
    }
    if name.is_ascii() && name.len() <= 60 {
        let mut buf = [0u8; 2 + 2 * 60];
        let n = quote(name, &mut buf);
        f.token(&[&buf[..n]]);
        return;
    }
    for_each_word(name.as_bytes(), |word| f.token(&[word]));
}

/// RFC 5322 `atext`: what an atom may hold without quoting.
fn is_atext(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-/=?^_`{|}~".contains(&b)
}

/// Writes `s` as a quoted-string into `buf` (which must hold `2 + 2 * s.len()` bytes) and
/// returns its length. `"` and `\` are escaped; everything else is printable ASCII already.
fn quote(s: &str, buf: &mut [u8]) -> usize {
    let mut n = 0;
    buf[n] = b'"';
    n += 1;
    for &b in s.as_bytes() {
        if b == b'"' || b == b'\\' {
            buf[n] = b'\\';
            n += 1;
        }
        buf[n] = b;
        n += 1;
    }
    buf[n] = b'"';
    n + 1
}

/// Calls `emit` with each RFC 2047 encoded word (`=?utf-8?B?...?=`, ≤ 72 chars) for `text`,
/// which must be valid UTF-8: words end on character boundaries, as RFC 2047 §5 requires.
pub fn for_each_word(text: &[u8], mut emit: impl FnMut(&[u8])) {
    let mut start = 0;
    while start < text.len() {
        let mut end = (start + WORD_INPUT_BYTES).min(text.len());
        // Back off to a character boundary: continuation bytes are 0b10xx_xxxx.
        while end < text.len() && end > start + 1 && (text[end] & 0xC0) == 0x80 {
            end -= 1;
        }
        let mut word = [0u8; 12 + 60];
        word[..WORD_PREFIX.len()].copy_from_slice(WORD_PREFIX);
        let n = STANDARD
            .encode_slice(
                &text[start..end],
                &mut word[WORD_PREFIX.len()..WORD_PREFIX.len() + 60],
            )
            .unwrap_or(0);
        let total = WORD_PREFIX.len() + n;
        word[total..total + 2].copy_from_slice(b"?=");
        emit(&word[..total + 2]);
        start = end;
    }
}

/// Percent-encodes `s` for one URL path segment: only RFC 3986 unreserved characters stay.
pub fn percent_encode(out: &mut Vec<u8>, s: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in s {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
}

/// Drops unsafe characters and trims: for operator text that goes into headers (list name,
/// subject prefix).
pub fn clean_line(s: &str) -> String {
    let mut buf = [0u8; NAME_BUF];
    sanitize_name(s, &mut buf).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sanitized(s: &str) -> String {
        let mut buf = [0u8; NAME_BUF];
        sanitize_name(s, &mut buf).to_string()
    }

    #[test]
    fn sanitize_removes_controls_and_collapses_space() {
        assert_eq!(sanitized("  Eve\r\nBcc: victim@x "), "Eve Bcc: victim@x");
        // NEL (U+0085) is whitespace, so it becomes a space like CR and LF do.
        assert_eq!(sanitized("a\0b\x7fc\u{85}d\u{202E}e"), "abc de");
        assert_eq!(sanitized(&"é".repeat(500)).chars().count(), MAX_NAME_CHARS);
    }

    #[test]
    fn value_is_capped_on_char_boundary_and_stuffed() {
        let mut out = b"x\r\n".to_vec();
        write_value(&mut out, ".é\r\nz", 4);
        assert_eq!(out, "x\r\n..é ".as_bytes());
    }

    #[test]
    fn encoded_words_round_trip_and_stay_short() {
        let text = "Zoë 日本語の名前はとても長いかもしれません Ünïcödé".repeat(2);
        let mut decoded = Vec::new();
        for_each_word(text.as_bytes(), |w| {
            assert!(w.len() <= 72);
            let inner = &w[10..w.len() - 2];
            let bytes = STANDARD.decode(inner).unwrap();
            assert!(
                std::str::from_utf8(&bytes).is_ok(),
                "word splits a character"
            );
            decoded.extend(bytes);
        });
        assert_eq!(decoded, text.as_bytes());
    }

    #[test]
    fn folder_folds_before_long_tokens() {
        let mut out = Vec::new();
        let mut f = Folder::new(&mut out, "To");
        f.token(&[&[b'a'; 70]]);
        f.token(&[b"<b@c>"]);
        f.finish();
        assert_eq!(
            out,
            [b"To: ".as_slice(), &[b'a'; 70], b"\r\n <b@c>\r\n"].concat()
        );
    }

    #[test]
    fn quotes_specials() {
        let mut out = Vec::new();
        let mut f = Folder::new(&mut out, "To");
        write_phrase(&mut f, r#"a "b" \c"#, true);
        f.finish();
        assert_eq!(out, b"To: \"a \\\"b\\\" \\\\c\"\r\n");
    }

    /// A stored name that is itself an encoded word is re-encoded, so a lenient
    /// reader (mail-parser decodes words even inside quoted strings) sees its literal text.
    #[test]
    fn a_name_that_is_an_encoded_word_is_reencoded_not_passed_through() {
        let evil = "=?utf-8?q?Evil=0D=0ABcc=3A_victim@x.example?=";
        let mut out = Vec::new();
        let mut f = Folder::new(&mut out, "To");
        write_phrase(&mut f, evil, false);
        f.token(&[b"<m@x.example>"]);
        f.finish();
        assert!(
            out.starts_with(b"To: =?utf-8?B?"),
            "{:?}",
            String::from_utf8_lossy(&out)
        );
        out.extend_from_slice(b"Subject: s\r\n\r\nbody\r\n");
        let msg = mail_parser::MessageParser::default()
            .parse(&out)
            .expect("parses");
        let to = msg.to().and_then(|a| a.first()).expect("one To address");
        assert_eq!(to.name(), Some(evil), "decoded once, to the literal text");
        assert_eq!(to.address(), Some("m@x.example"));
        assert!(msg.header("Bcc").is_none());
    }

    #[test]
    fn percent_encodes_all_but_unreserved() {
        let mut out = Vec::new();
        percent_encode(&mut out, b"a.b+c@d/e");
        assert_eq!(out, b"a.b%2Bc%40d%2Fe");
    }
}
