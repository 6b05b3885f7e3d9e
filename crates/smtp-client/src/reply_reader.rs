//! Reading SMTP replies from a server, bounded in size and in time.
//!
//! [`ReplyReader`] keeps the bytes received but not yet consumed (with PIPELINING several replies
//! arrive in one read) and hands out one complete [`Reply`] at a time. The framing is pure
//! ([`ReplyReader::next_buffered`]) and tested without sockets; [`ReplyReader::read_reply`] adds
//! the I/O with one deadline for the *whole* reply, not per read, so a server trickling one byte
//! per second is cut off at the deadline just like a silent one.
//!
//! Limits (RFC 5321 §4.5.3.1.5 allows 512 octets per reply line; we allow more, for the many
//! servers that send long explanations): a line of at most [`MAX_LINE_LEN`] octets without its
//! line ending and at most [`MAX_LINES`] lines per reply. The buffer therefore never holds more
//! than one bounded reply in progress plus one read.
//!
//! SECURITY: the input is hostile. Nothing here panics on any byte sequence; lines ending in a
//! bare LF are tolerated (the code, not the line ending, is what matters when reading); invalid
//! UTF-8 is replaced and control characters become `?` before the text is kept, so a reply can be
//! logged or shown without terminal or log injection.

use crate::error::ProtocolError;
use bytes::{Buf, BytesMut};
use herald_types::Reply;
use std::io;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::time::Instant;

pub use crate::limits::{MAX_LINES, MAX_LINE_LEN};
/// Room made before each read.
const READ_CHUNK: usize = 8 * 1024;

/// Why no reply could be read.
#[derive(Debug)]
pub enum ReadError {
    /// The deadline passed before the reply was complete.
    Timeout,
    /// End of stream, or the connection was reset.
    Closed,
    Io(io::Error),
    Protocol(ProtocolError),
}

/// Buffered, bounded reply framing for one connection.
#[derive(Debug, Default)]
pub struct ReplyReader {
    buf: BytesMut,
    /// Octets at the start of `buf` already checked: complete continuation lines of the reply in
    /// progress. Kept so that a reply arriving in many small reads is scanned once, not once per
    /// read.
    scanned: usize,
    /// Lines of the reply in progress seen so far.
    lines: usize,
}

impl ReplyReader {
    pub fn new() -> Self {
        ReplyReader::default()
    }

    /// Octets received and not yet consumed.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Appends received octets (tests and callers that read themselves).
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete reply among the octets received, `Ok(None)` when more are needed.
    pub fn next_buffered(&mut self) -> Result<Option<Reply>, ProtocolError> {
        loop {
            let rest = &self.buf[self.scanned..];
            let Some(lf) = rest.iter().position(|&b| b == b'\n') else {
                // +1: the CR of a line that is exactly at the limit may already be here.
                if rest.len() > MAX_LINE_LEN + 1 {
                    return Err(ProtocolError::LineTooLong);
                }
                return Ok(None);
            };
            let line = strip_cr(&rest[..lf]);
            if line.len() > MAX_LINE_LEN {
                return Err(ProtocolError::LineTooLong);
            }
            self.lines += 1;
            if self.lines > MAX_LINES {
                return Err(ProtocolError::TooManyLines);
            }
            let is_last = line.get(3) != Some(&b'-');
            self.scanned += lf + 1;
            if is_last {
                let raw = self.buf.split_to(self.scanned);
                self.scanned = 0;
                self.lines = 0;
                return parse(&raw).map(Some);
            }
        }
    }

    /// Reads until one complete reply is available or `deadline` passes.
    pub async fn read_reply<S: AsyncRead + Unpin>(
        &mut self,
        stream: &mut S,
        deadline: Instant,
    ) -> Result<Reply, ReadError> {
        loop {
            if let Some(reply) = self.next_buffered().map_err(ReadError::Protocol)? {
                return Ok(reply);
            }
            self.buf.reserve(READ_CHUNK);
            match tokio::time::timeout_at(deadline, stream.read_buf(&mut self.buf)).await {
                Err(_elapsed) => return Err(ReadError::Timeout),
                Ok(Ok(0)) => return Err(ReadError::Closed),
                Ok(Ok(_)) => {}
                Ok(Err(e)) if is_closed(&e) => return Err(ReadError::Closed),
                Ok(Err(e)) => return Err(ReadError::Io(e)),
            }
        }
    }

    /// Drops everything buffered (used only when the connection is being abandoned).
    pub fn clear(&mut self) {
        self.buf.advance(self.buf.len());
        self.scanned = 0;
        self.lines = 0;
    }
}

/// I/O errors that mean the peer went away rather than something local failing.
pub(crate) fn is_closed(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::UnexpectedEof
    )
}

fn strip_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// Parses the complete lines of one reply (each ending in LF).
fn parse(raw: &[u8]) -> Result<Reply, ProtocolError> {
    let lines: Vec<String> = raw
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| sanitize(strip_cr(l)))
        .collect();
    Ok(Reply::parse_lines(&lines)?)
}

/// Lossy UTF-8 with control characters (except TAB) replaced by `?`.
fn sanitize(line: &[u8]) -> String {
    String::from_utf8_lossy(line)
        .chars()
        .map(|c| if c.is_control() && c != '\t' { '?' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(bytes: &[u8]) -> ReplyReader {
        let mut r = ReplyReader::new();
        r.push(bytes);
        r
    }

    #[test]
    fn frames_pipelined_replies_one_at_a_time() {
        let mut r = reader(b"250 2.1.0 ok\r\n250-2.1.5 a\r\n250 2.1.5 b\r\n354 go");
        assert_eq!(r.next_buffered().expect("ok").expect("reply").code, 250);
        let second = r.next_buffered().expect("ok").expect("reply");
        assert_eq!(second.text, "a\nb");
        assert_eq!(r.next_buffered().expect("ok"), None);
        r.push(b" ahead\r\n");
        assert_eq!(r.next_buffered().expect("ok").expect("reply").code, 354);
        assert_eq!(r.buffered(), 0);
    }

    #[test]
    fn reply_split_across_reads_is_scanned_incrementally() {
        let mut r = ReplyReader::new();
        for chunk in [&b"250-a"[..], b"\r\n250-b\r", b"\n25", b"0 c\r\n"] {
            let before = r.next_buffered().expect("ok");
            assert!(before.is_none());
            r.push(chunk);
        }
        let reply = r.next_buffered().expect("ok").expect("reply");
        assert_eq!(reply.text, "a\nb\nc");
    }

    #[test]
    fn bounds_line_length_even_without_line_end() {
        let mut r = reader(&vec![b'2'; MAX_LINE_LEN + 2]);
        assert_eq!(r.next_buffered(), Err(ProtocolError::LineTooLong));
        let mut line = b"250 ".to_vec();
        line.extend(std::iter::repeat_n(b'x', MAX_LINE_LEN));
        line.extend_from_slice(b"\r\n");
        assert_eq!(
            reader(&line).next_buffered(),
            Err(ProtocolError::LineTooLong)
        );
        let ok = format!("250 {}\r\n", "x".repeat(MAX_LINE_LEN - 4));
        assert!(reader(ok.as_bytes()).next_buffered().is_ok());
    }

    #[test]
    fn bounds_line_count() {
        let many = "250-x\r\n".repeat(MAX_LINES + 1);
        assert_eq!(
            reader(many.as_bytes()).next_buffered(),
            Err(ProtocolError::TooManyLines)
        );
    }

    #[test]
    fn refuses_invalid_codes_and_sanitizes_text() {
        assert!(matches!(
            reader(b"hello world\r\n").next_buffered(),
            Err(ProtocolError::Malformed(_))
        ));
        assert!(matches!(
            reader(b"999 nope\r\n").next_buffered(),
            Err(ProtocolError::Malformed(_))
        ));
        let r = reader(b"550 bad \x1b[31mred\xff\n")
            .next_buffered()
            .expect("ok")
            .expect("reply");
        assert_eq!(r.text, "bad ?[31mred\u{fffd}");
    }
}
