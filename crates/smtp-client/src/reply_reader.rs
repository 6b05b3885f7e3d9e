//! Reading SMTP replies from a server, bounded in size and in time.
//!
//! [`ReplyReader`] keeps the bytes received but not yet consumed (with PIPELINING several replies
//! arrive in one read) and hands out one complete [`Reply`] at a time. The framing is pure
//! ([`ReplyReader::next_buffered`]) and tested without sockets; [`ReplyReader::read_reply`] adds
//! the I/O under a [`ReplyDeadline`]: a total for the *whole* reply (never per read), and how
//! patient to be with a reply that is arriving (tarpits):
//!
//! * **idle**: once a byte of the reply has arrived, the next must follow within `idle`, or the
//!   reply has stalled ([`ReadError::Timeout`]: a host that stops mid-line is as dead as a
//!   silent one, and is cut off long before the total);
//! * **trickle** (the first pass): a reply still incomplete `trickle` after its first byte, or
//!   at the total while bytes keep coming, is a tarpit's — slow but steady. That is
//!   [`ReadError::TooSlow`], not a timeout: the host answers, only not at first-pass speed, so
//!   the scheduler moves it to the slow lane instead of counting it down;
//! * without `trickle` (the slow lane) a steady reply may take up to the total, which the caller
//!   sets from RFC 5321 §4.5.3.2's per-command limits; a reply that trickles past even that
//!   (endless slow bytes) is a timeout.
//!
//! Why a hand-written loop rather than a codec crate's framed reader: the deadline rules above
//! need the arrival time of each read, which `tokio_util::codec::Framed` does not expose.
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
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::time::Instant;

pub use crate::limits::{MAX_LINES, MAX_LINE_LEN};
/// Room made before each read.
const READ_CHUNK: usize = 8 * 1024;

/// How long a reply may take: see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyDeadline {
    /// The whole reply must be complete by then.
    pub total: Instant,
    /// Longest silence between two reads once the reply has begun.
    pub idle: Duration,
    /// A reply still arriving this long after its first byte is a tarpit's (`None`: patient).
    pub trickle: Option<Duration>,
}

impl ReplyDeadline {
    /// One total, no other rule (QUIT, tests).
    pub fn total(total: Instant) -> ReplyDeadline {
        ReplyDeadline {
            total,
            idle: Duration::MAX,
            trickle: None,
        }
    }
}

impl From<Instant> for ReplyDeadline {
    fn from(total: Instant) -> ReplyDeadline {
        ReplyDeadline::total(total)
    }
}

/// A lane's patience with replies that are arriving, applied to each reply's total.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Patience {
    pub idle: Duration,
    pub trickle: Option<Duration>,
}

impl Patience {
    /// The deadline of one reply that must be complete by `total`.
    pub fn deadline(self, total: Instant) -> ReplyDeadline {
        ReplyDeadline {
            total,
            idle: self.idle,
            trickle: self.trickle,
        }
    }
}

/// Why no reply could be read.
#[derive(Debug)]
pub enum ReadError {
    /// The total passed with nothing arriving (or, in a patient lane, with the reply still
    /// incomplete), or the reply stalled for `idle` after it began.
    Timeout,
    /// The reply was arriving, slowly but steadily, past the lane's `trickle` (or its total):
    /// a tarpit, not a dead host.
    TooSlow,
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
    /// When the first byte of the reply in progress arrived (`None`: none yet).
    started: Option<Instant>,
    /// When the last read returned bytes.
    last_read: Option<Instant>,
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
                // What is left (a pipelined reply) arrived with the last read.
                self.started = match self.buf.is_empty() {
                    true => None,
                    false => self.last_read,
                };
                return parse(&raw).map(Some);
            }
        }
    }

    /// Reads until one complete reply is available, within `deadline`'s rules (module docs).
    pub async fn read_reply<S: AsyncRead + Unpin>(
        &mut self,
        stream: &mut S,
        deadline: impl Into<ReplyDeadline>,
    ) -> Result<Reply, ReadError> {
        let deadline = deadline.into();
        loop {
            if let Some(reply) = self.next_buffered().map_err(ReadError::Protocol)? {
                return Ok(reply);
            }
            self.buf.reserve(READ_CHUNK);
            let wake = self.wake_at(&deadline);
            match tokio::time::timeout_at(wake, stream.read_buf(&mut self.buf)).await {
                Err(_elapsed) => return Err(self.expired(&deadline)),
                Ok(Ok(0)) => return Err(ReadError::Closed),
                Ok(Ok(_)) => {
                    let now = Instant::now();
                    self.last_read = Some(now);
                    self.started.get_or_insert(now);
                }
                Ok(Err(e)) if is_closed(&e) => return Err(ReadError::Closed),
                Ok(Err(e)) => return Err(ReadError::Io(e)),
            }
        }
    }

    /// When the first rule of `deadline` that could end the reply in progress runs out.
    fn wake_at(&self, deadline: &ReplyDeadline) -> Instant {
        let mut wake = deadline.total;
        if let Some(started) = self.started {
            if let Some(stall) = self.last_read.and_then(|t| t.checked_add(deadline.idle)) {
                wake = wake.min(stall);
            }
            if let Some(tarpit) = deadline.trickle.and_then(|t| started.checked_add(t)) {
                wake = wake.min(tarpit);
            }
        }
        wake
    }

    /// What the rule that ran out means: a stall or silence is a timeout; a reply still
    /// arriving is too slow for an impatient lane (a tarpit), a timeout for a patient one.
    fn expired(&self, deadline: &ReplyDeadline) -> ReadError {
        let now = Instant::now();
        let Some(last) = self.started.and(self.last_read) else {
            return ReadError::Timeout;
        };
        let stalled = last
            .checked_add(deadline.idle)
            .is_some_and(|stall| stall <= now);
        match (stalled, deadline.trickle) {
            (false, Some(_)) => ReadError::TooSlow,
            _ => ReadError::Timeout,
        }
    }

    /// Drops everything buffered (used only when the connection is being abandoned).
    pub fn clear(&mut self) {
        self.buf.advance(self.buf.len());
        self.scanned = 0;
        self.lines = 0;
        self.started = None;
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

    /// Writes `bytes` one at a time, `gap` apart (the first after one gap), then holds the
    /// stream open without writing.
    fn trickle(bytes: Vec<u8>, gap: Duration) -> tokio::io::DuplexStream {
        use tokio::io::AsyncWriteExt;
        let (client, mut server) = tokio::io::duplex(64);
        tokio::spawn(async move {
            for b in bytes {
                tokio::time::sleep(gap).await;
                if server.write_all(&[b]).await.is_err() {
                    return;
                }
            }
            std::future::pending::<()>().await;
        });
        client
    }

    fn first_pass(total: Duration) -> ReplyDeadline {
        Patience {
            idle: Duration::from_secs(10),
            trickle: Some(Duration::from_secs(2)),
        }
        .deadline(Instant::now() + total)
    }

    fn patient(total: Duration) -> ReplyDeadline {
        Patience {
            idle: Duration::from_secs(10),
            trickle: None,
        }
        .deadline(Instant::now() + total)
    }

    #[tokio::test(start_paused = true)]
    async fn a_steady_trickle_is_too_slow_for_the_first_pass_not_a_timeout() {
        let mut s = trickle(
            b"220 tarpit.example ESMTP\r\n".to_vec(),
            Duration::from_millis(500),
        );
        let start = Instant::now();
        let r = ReplyReader::new()
            .read_reply(&mut s, first_pass(Duration::from_secs(15)))
            .await;
        assert!(matches!(r, Err(ReadError::TooSlow)), "{r:?}");
        // Given up 2 s after the first byte (0.5 s), long before the 15 s total.
        assert_eq!(start.elapsed(), Duration::from_millis(2500));
    }

    #[tokio::test(start_paused = true)]
    async fn progress_at_the_first_pass_total_is_too_slow_not_a_timeout() {
        let mut s = trickle(b"220 x\r\n".to_vec(), Duration::from_secs(1));
        let deadline = ReplyDeadline {
            total: Instant::now() + Duration::from_millis(3500),
            idle: Duration::from_secs(10),
            trickle: Some(Duration::from_secs(60)),
        };
        let r = ReplyReader::new().read_reply(&mut s, deadline).await;
        assert!(matches!(r, Err(ReadError::TooSlow)), "{r:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_patient_lane_reads_a_steady_trickle_to_its_end() {
        let mut s = trickle(
            b"220 tarpit.example ESMTP\r\n".to_vec(),
            Duration::from_secs(1),
        );
        let start = Instant::now();
        let reply = ReplyReader::new()
            .read_reply(&mut s, patient(Duration::from_secs(300)))
            .await
            .expect("a steady reply is read whole");
        assert_eq!(reply.code, 220);
        assert_eq!(start.elapsed(), Duration::from_secs(26));
    }

    #[tokio::test(start_paused = true)]
    async fn endless_slow_bytes_end_at_the_cap() {
        // A line that never ends, one byte a second: the line limit (2048 octets) would take
        // 34 minutes; the RFC total (300 s) ends it first.
        let mut s = trickle(vec![b'2'; 1 << 20], Duration::from_secs(1));
        let start = Instant::now();
        let r = ReplyReader::new()
            .read_reply(&mut s, patient(Duration::from_secs(300)))
            .await;
        assert!(matches!(r, Err(ReadError::Timeout)), "{r:?}");
        assert_eq!(start.elapsed(), Duration::from_secs(300));
        // Endless continuation lines end at the line-count limit or the same cap.
        let mut s = trickle(b"250-x\r\n".repeat(10_000), Duration::from_millis(10));
        let r = ReplyReader::new()
            .read_reply(&mut s, patient(Duration::from_secs(300)))
            .await;
        assert!(
            matches!(r, Err(ReadError::Protocol(ProtocolError::TooManyLines))),
            "{r:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_reply_that_stalls_mid_line_is_cut_at_idle() {
        let mut s = trickle(b"25".to_vec(), Duration::from_secs(1));
        let start = Instant::now();
        let r = ReplyReader::new()
            .read_reply(&mut s, patient(Duration::from_secs(300)))
            .await;
        assert!(matches!(r, Err(ReadError::Timeout)), "{r:?}");
        // Last byte at 2 s, then 10 s of silence: a stall, not the 300 s total.
        assert_eq!(start.elapsed(), Duration::from_secs(12));
        // The same stall in the first pass is a timeout too, not a tarpit: nothing is coming.
        let mut s = trickle(b"25".to_vec(), Duration::from_secs(1));
        let deadline = ReplyDeadline {
            total: Instant::now() + Duration::from_secs(60),
            idle: Duration::from_secs(3),
            trickle: Some(Duration::from_secs(30)),
        };
        let r = ReplyReader::new().read_reply(&mut s, deadline).await;
        assert!(matches!(r, Err(ReadError::Timeout)), "{r:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_host_is_a_timeout_even_in_the_first_pass() {
        let mut s = trickle(Vec::new(), Duration::from_secs(1));
        let r = ReplyReader::new()
            .read_reply(&mut s, first_pass(Duration::from_secs(15)))
            .await;
        assert!(matches!(r, Err(ReadError::Timeout)), "{r:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_huge_line_is_refused_with_bounded_memory() {
        use tokio::io::AsyncWriteExt;
        let (mut client, mut server) = tokio::io::duplex(64 * 1024);
        tokio::spawn(async move {
            let chunk = vec![b'x'; 64 * 1024];
            while server.write_all(&chunk).await.is_ok() {}
        });
        let mut r = ReplyReader::new();
        let got = r
            .read_reply(&mut client, patient(Duration::from_secs(300)))
            .await;
        assert!(
            matches!(got, Err(ReadError::Protocol(ProtocolError::LineTooLong))),
            "{got:?}"
        );
        assert!(
            r.buffered() <= MAX_LINE_LEN + 2 + 64 * 1024,
            "{}",
            r.buffered()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn pipelined_replies_after_a_fast_one_keep_their_own_clock() {
        // Two replies in one read, then a third trickling: the third's trickle is measured
        // from its own first byte, so a fast burst before it does not make it look slow.
        use tokio::io::AsyncWriteExt;
        let (mut client, mut server) = tokio::io::duplex(1024);
        tokio::spawn(async move {
            let _ = server.write_all(b"250 a\r\n250 b\r\n2").await;
            tokio::time::sleep(Duration::from_millis(1500)).await;
            let _ = server.write_all(b"50 c\r\n").await;
            std::future::pending::<()>().await;
        });
        let mut r = ReplyReader::new();
        for want in ["a", "b"] {
            let reply = r
                .read_reply(&mut client, first_pass(Duration::from_secs(15)))
                .await
                .expect("reply");
            assert_eq!(reply.text, want);
        }
        let third = r
            .read_reply(&mut client, first_pass(Duration::from_secs(15)))
            .await
            .expect("1.5 s after its first byte is within the 2 s trickle");
        assert_eq!(third.text, "c");
    }
}
