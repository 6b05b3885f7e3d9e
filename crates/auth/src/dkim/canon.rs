//! DKIM relaxed canonicalization (RFC 6376 §3.4.2 and §3.4.4), written for the fan-out path.
//!
//! [`BodyHasher`] is a streaming relaxed body canonicalizer feeding SHA-256. It reads the body
//! in *SMTP wire form* (dot-stuffed, as `fanout::Template` writes it) and un-stuffs as it goes:
//! DKIM signs the message, not its transport encoding. It is `Clone`, so fan-out hashes the
//! part of the body every copy shares once and continues from a copy of the saved state for
//! each copy's personal tail (the footer).
//!
//! Why not mail-auth's canonicalizer: it works on a whole message and hashes the whole body
//! per call; the shared-prefix trick needs a resumable state. The output is checked against
//! mail-auth's verifier (and dkimpy) in the tests, byte for byte.
//!
//! Invariants: the input uses CRLF line endings and every line-initial '.' is a stuffing dot
//! (SMTP DATA invariant of a spliced copy). A bare CR is hashed as content (cannot occur in a
//! spliced copy; kept defined rather than panicking).

use sha2::{Digest, Sha256};

/// Streaming relaxed body canonicalization + SHA-256 over dot-stuffed CRLF text.
#[derive(Clone)]
pub struct BodyHasher {
    hash: Sha256,
    /// Next byte starts a line (a '.' there is a stuffing dot).
    line_start: bool,
    /// A run of WSP was seen and not yet written (one SP if content follows on the line).
    pending_wsp: bool,
    /// A CR was seen; an LF next ends the line.
    pending_cr: bool,
    /// Empty lines seen and held back: trailing empty lines are not part of the body.
    pending_lines: u32,
    /// The current line has content (its CRLF is written, not held back).
    line_has_content: bool,
}

impl Default for BodyHasher {
    fn default() -> Self {
        BodyHasher::new()
    }
}

impl std::fmt::Debug for BodyHasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BodyHasher").finish_non_exhaustive()
    }
}

impl BodyHasher {
    pub fn new() -> BodyHasher {
        BodyHasher {
            hash: Sha256::new(),
            line_start: true,
            pending_wsp: false,
            pending_cr: false,
            pending_lines: 0,
            line_has_content: false,
        }
    }

    /// Feeds wire bytes. Content runs are hashed in slices, not byte by byte.
    pub fn update(&mut self, wire: &[u8]) {
        let mut i = 0;
        while i < wire.len() {
            let b = wire[i];
            if self.pending_cr {
                self.pending_cr = false;
                if b == b'\n' {
                    self.end_line();
                    i += 1;
                    continue;
                }
                self.content(b"\r");
            }
            match b {
                b'.' if self.line_start => {
                    self.line_start = false;
                    i += 1;
                }
                b'\r' => {
                    self.pending_cr = true;
                    i += 1;
                }
                b' ' | b'\t' => {
                    self.pending_wsp = true;
                    self.line_start = false;
                    i += 1;
                }
                _ => {
                    let run = wire[i..]
                        .iter()
                        .position(|c| matches!(c, b' ' | b'\t' | b'\r' | b'\n'))
                        .map_or(wire.len(), |n| i + n.max(1));
                    self.content(&wire[i..run]);
                    i = run;
                }
            }
        }
    }

    fn content(&mut self, bytes: &[u8]) {
        for _ in 0..self.pending_lines {
            self.hash.update(b"\r\n");
        }
        self.pending_lines = 0;
        if self.pending_wsp {
            self.hash.update(b" ");
            self.pending_wsp = false;
        }
        self.hash.update(bytes);
        self.line_has_content = true;
        self.line_start = false;
    }

    fn end_line(&mut self) {
        if self.line_has_content {
            self.hash.update(b"\r\n");
        } else {
            self.pending_lines = self.pending_lines.saturating_add(1);
        }
        self.pending_wsp = false;
        self.line_has_content = false;
        self.line_start = true;
    }

    /// The body hash (`bh=`). A last line without CRLF gets one (RFC 6376 §3.4.4).
    pub fn finish(mut self) -> [u8; 32] {
        if self.pending_cr {
            self.pending_cr = false;
            self.content(b"\r");
        }
        if self.line_has_content {
            self.hash.update(b"\r\n");
        }
        self.hash.finalize().into()
    }
}

/// Appends the relaxed canonical form of one header field (`raw` = name, colon, value with
/// its folding and final CRLF) to `out`: `name:value\r\n`, name lowercased, value unfolded,
/// WSP runs reduced to one SP, no WSP around the colon or at the end. Returns false (writing
/// nothing) when `raw` has no colon.
pub fn relaxed_header(raw: &[u8], out: &mut Vec<u8>) -> bool {
    let Some(colon) = raw.iter().position(|&b| b == b':') else {
        return false;
    };
    let name = trim_wsp(&raw[..colon]);
    out.extend(name.iter().map(u8::to_ascii_lowercase));
    out.push(b':');
    let mut wsp = false;
    let mut started = false;
    for &b in &raw[colon + 1..] {
        match b {
            b'\r' | b'\n' => {}
            b' ' | b'\t' => wsp = true,
            _ => {
                if wsp && started {
                    out.push(b' ');
                }
                wsp = false;
                started = true;
                out.push(b);
            }
        }
    }
    out.extend_from_slice(b"\r\n");
    true
}

fn trim_wsp(s: &[u8]) -> &[u8] {
    let start = s.iter().position(|b| !matches!(b, b' ' | b'\t'));
    let end = s.iter().rposition(|b| !matches!(b, b' ' | b'\t'));
    match (start, end) {
        (Some(a), Some(z)) => &s[a..=z],
        _ => &s[..0],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bh(chunks: &[&[u8]]) -> [u8; 32] {
        let mut h = BodyHasher::new();
        for c in chunks {
            h.update(c);
        }
        h.finish()
    }

    fn sha(data: &[u8]) -> [u8; 32] {
        Sha256::digest(data).into()
    }

    #[test]
    fn relaxed_body_rules() {
        // RFC 6376 §3.4.6 example: " C \r\nD \t E\r\n\r\n\r\n" → " C\r\nD E\r\n".
        assert_eq!(bh(&[b" C \r\nD \t E\r\n\r\n\r\n"]), sha(b" C\r\nD E\r\n"));
        assert_eq!(bh(&[b""]), sha(b""));
        assert_eq!(bh(&[b"\r\n\r\n"]), sha(b""));
        assert_eq!(bh(&[b"no newline"]), sha(b"no newline\r\n"));
        assert_eq!(bh(&[b"a\r\n \r\nb\r\n"]), sha(b"a\r\n\r\nb\r\n"));
    }

    #[test]
    fn stuffing_dots_are_removed() {
        assert_eq!(bh(&[b"..a\r\n..\r\nb.c\r\n"]), sha(b".a\r\n.\r\nb.c\r\n"));
    }

    #[test]
    fn chunk_boundaries_do_not_matter() {
        let whole = b"Hello  world \t\r\n..dot\r\n\r\n  x\r\n\r\n";
        let one = bh(&[whole]);
        for cut in 0..whole.len() {
            assert_eq!(bh(&[&whole[..cut], &whole[cut..]]), one, "cut at {cut}");
        }
        let mut saved = BodyHasher::new();
        saved.update(&whole[..9]);
        let mut resumed = saved.clone();
        resumed.update(&whole[9..]);
        assert_eq!(resumed.finish(), one);
    }

    #[test]
    fn relaxed_header_rules() {
        let mut out = Vec::new();
        assert!(relaxed_header(
            b"SubJect \t:  Hello \r\n  big\tworld  \r\n",
            &mut out
        ));
        assert_eq!(out, b"subject:Hello big world\r\n");
        out.clear();
        assert!(!relaxed_header(b"garbage\r\n", &mut out));
        assert!(out.is_empty());
    }
}
