//! The DATA body reader: turns the dot-stuffed wire form (RFC 5321 §4.5.2) back into the message,
//! and decides at the real end of the data whether the message is acceptable.
//!
//! The body it hands over keeps CRLF line endings and excludes the terminating `.` line.
//!
//! Invariants:
//! - Only `<CRLF>.<CRLF>` ends the data: a `.` line ends it only when the line before it (or the
//!   DATA command) ended with CRLF. So `\n.\n`, `\r\n.\n`, `\n.\r\n` and `\r.\r` are content, and
//!   the bytes after them are never read as commands (SMTP smuggling).
//! - A bare LF or bare CR anywhere poisons the message: reading continues to the real end, then
//!   the whole message is refused ([`DataProblem::BareLineEnding`]). It is never accepted, never
//!   split, never "repaired".
//! - A NUL octet anywhere poisons the message the same way ([`DataProblem::NulOctet`]): RFC 5321
//!   §4.1.1.4 forbids it in text, and a receiver down the line that strips NULs would turn
//!   `\r\n\0.\r\n` into an end of data followed by smuggled commands in every member's copy.
//! - Once a message is refused its body is freed and no more bytes are kept; reading continues
//!   only to find the end.
//!
//! Limits: at most one partial line (≤ `max_data_line_octets` + 1 for a stuffing dot) stays in the
//! caller's buffer; the body never exceeds `max_message_octets`, nor what its [`Reservation`]
//! against the global [`BufferBudget`](crate::budget::BufferBudget) covers (the first allocation
//! included; allocator growth slack is not counted, so real memory is at most about twice the
//! budget). Line length is measured after
//! dot-unstuffing, CRLF included. When several problems occur, the first one found is reported.
//!
//! SECURITY: the input is untrusted and may be arbitrarily long; nothing here grows without the
//! bounds above, and no byte pattern makes it panic (tests feed every split of hostile inputs).

use bytes::{Bytes, BytesMut};
use herald_types::Reply;

use crate::budget::Reservation;
use crate::{replies, Limits};

/// Largest initial allocation taken on the word of a `SIZE=` declaration: the body still grows
/// to the real limit, but a lying peer cannot make every session reserve the maximum up front.
const MAX_PREALLOCATION: usize = 1024 * 1024;

/// Why a message was refused at the end of DATA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataProblem {
    /// A bare CR or LF (smuggling defence): `550 5.6.0`.
    BareLineEnding,
    /// A NUL octet (RFC 5321 §4.1.1.4; stripped downstream it smuggles): `550 5.6.0`.
    NulOctet,
    /// A line over `max_data_line_octets`: `500 5.5.2` (RFC 5321 §4.5.3.1.10 "Line too long").
    LineTooLong,
    /// More than `max_message_octets`: `552 5.3.4` (RFC 1870).
    TooBig,
    /// The global buffer budget was spent while the body grew: `452 4.3.1`, transient, so the
    /// client keeps its copy and retries. Reading continues to the real end (the protocol stays
    /// in sync) without keeping anything.
    NoBufferSpace,
}

impl DataProblem {
    pub fn reply(self) -> Reply {
        match self {
            DataProblem::BareLineEnding => replies::BARE_LINE_ENDING.reply(),
            DataProblem::NulOctet => replies::NUL_IN_DATA.reply(),
            DataProblem::LineTooLong => replies::DATA_LINE_TOO_LONG.reply(),
            DataProblem::TooBig => replies::MESSAGE_TOO_BIG.reply(),
            DataProblem::NoBufferSpace => replies::INSUFFICIENT_STORAGE.reply(),
        }
    }
}

/// What [`DataReader::consume`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum DataStep {
    /// No end of data in the buffer yet; everything usable was consumed.
    NeedMore,
    /// The terminating `.` line was consumed; bytes after it are left in the buffer.
    Done(Result<Bytes, DataProblem>),
}

/// State of a line longer than the limit whose end has not arrived yet.
#[derive(Debug, Clone, Copy)]
struct LongLine {
    /// The discarded part ended in CR, which the next chunk's first byte must complete to CRLF.
    ends_with_cr: bool,
}

/// Reads one message body, chunk by chunk.
#[derive(Debug)]
pub struct DataReader {
    body: BytesMut,
    max_message_octets: u64,
    max_line_octets: usize,
    /// The previous line (or the DATA command) ended with CRLF, so a `.` line may end the data.
    prev_crlf: bool,
    long_line: Option<LongLine>,
    problem: Option<DataProblem>,
    /// What the body holds against the global budget; `None`: unbounded (tests, tools).
    reservation: Option<Reservation>,
}

impl DataReader {
    /// `size_hint` is the `SIZE=` the peer declared, used only to size the first allocation.
    /// With a `reservation`, that first allocation is reserved too, or not made.
    pub fn new(
        limits: &Limits,
        size_hint: Option<u64>,
        mut reservation: Option<Reservation>,
    ) -> DataReader {
        let hint = size_hint.unwrap_or(0).min(limits.max_message_octets);
        let mut capacity = usize::try_from(hint)
            .unwrap_or(usize::MAX)
            .min(MAX_PREALLOCATION);
        if let Some(r) = reservation.as_mut() {
            if !r.grow_to(capacity as u64, capacity as u64) {
                capacity = 0;
            }
        }
        DataReader {
            body: BytesMut::with_capacity(capacity),
            max_message_octets: limits.max_message_octets,
            max_line_octets: limits.max_data_line_octets,
            prev_crlf: true,
            long_line: None,
            problem: None,
            reservation,
        }
    }

    /// The reservation, for the session to hold until the finished message is stored.
    pub fn take_reservation(&mut self) -> Option<Reservation> {
        self.reservation.take()
    }

    /// Consumes every complete line in `buf`, and any over-long partial line. Leaves at most one
    /// legal-length partial line, or the bytes after the end of data.
    pub fn consume(&mut self, buf: &mut BytesMut) -> DataStep {
        loop {
            let Some(lf) = buf.iter().position(|&b| b == b'\n') else {
                // A legal line without its LF is at most max_line octets (one stuffing dot, the
                // content and CR): anything longer is dropped now so the buffer stays bounded.
                if buf.len() > self.max_line_octets {
                    let chunk = buf.split();
                    self.discard_long(&chunk);
                }
                return DataStep::NeedMore;
            };
            let line = buf.split_to(lf + 1);
            if self.take_line(&line) {
                return DataStep::Done(self.finish());
            }
        }
    }

    /// The part of a too-long line seen so far (no LF in it).
    fn discard_long(&mut self, chunk: &[u8]) {
        self.note(DataProblem::LineTooLong);
        self.check_nul(chunk);
        let continues_cr = self.long_line.is_some_and(|l| l.ends_with_cr);
        // No LF in the chunk: every CR but a final one is bare, and so is a CR left over from the
        // previous chunk (this chunk is non-empty and does not start with LF).
        if continues_cr || chunk[..chunk.len().saturating_sub(1)].contains(&b'\r') {
            self.note(DataProblem::BareLineEnding);
        }
        self.long_line = Some(LongLine {
            ends_with_cr: chunk.last() == Some(&b'\r'),
        });
    }

    /// One line ending in LF. Returns true when it is the terminating `.` line.
    fn take_line(&mut self, line: &[u8]) -> bool {
        let n = line.len();
        self.check_nul(line);
        if let Some(long) = self.long_line.take() {
            // The tail of an over-long line: never a terminator, never kept.
            let crlf = (n >= 2 && line[n - 2] == b'\r') || (n == 1 && long.ends_with_cr);
            if long.ends_with_cr && n > 1 {
                self.note(DataProblem::BareLineEnding);
            }
            self.check_line_ending(&line[..n - 1], crlf);
            return false;
        }
        let crlf = n >= 2 && line[n - 2] == b'\r';
        if crlf && self.prev_crlf && line == b".\r\n" {
            return true;
        }
        self.check_line_ending(&line[..n - 1], crlf);
        let unstuffed = line.strip_prefix(b".").unwrap_or(line);
        if unstuffed.len() > self.max_line_octets {
            self.note(DataProblem::LineTooLong);
        }
        self.append(unstuffed);
        false
    }

    /// Any NUL poisons the message; a line holding one is never the terminator either, since
    /// `\0.\r\n` is not `.\r\n`.
    fn check_nul(&mut self, bytes: &[u8]) {
        if bytes.contains(&0) {
            self.note(DataProblem::NulOctet);
        }
    }

    /// `before_lf` is the line without its LF; `crlf` says whether the LF had a CR before it.
    fn check_line_ending(&mut self, before_lf: &[u8], crlf: bool) {
        let content = if crlf {
            before_lf.strip_suffix(b"\r").unwrap_or(before_lf)
        } else {
            before_lf
        };
        if !crlf || content.contains(&b'\r') {
            self.note(DataProblem::BareLineEnding);
        }
        self.prev_crlf = crlf;
    }

    fn append(&mut self, data: &[u8]) {
        if self.problem.is_some() {
            return;
        }
        let would_be = self.body.len() as u64 + data.len() as u64;
        if would_be > self.max_message_octets {
            self.note(DataProblem::TooBig);
            return;
        }
        if let Some(r) = self.reservation.as_mut() {
            // One atomic update per GRANT_STEP octets, not per line.
            if !r.grow_to(would_be, self.max_message_octets) {
                self.note(DataProblem::NoBufferSpace);
                return;
            }
        }
        self.body.extend_from_slice(data);
    }

    /// Records the first problem and frees the body: a refused message is not kept.
    fn note(&mut self, problem: DataProblem) {
        if self.problem.is_none() {
            self.problem = Some(problem);
            self.body = BytesMut::new();
            if let Some(r) = self.reservation.as_mut() {
                r.release();
            }
        }
    }

    fn finish(&mut self) -> Result<Bytes, DataProblem> {
        match self.problem {
            Some(p) => Err(p),
            None => Ok(std::mem::take(&mut self.body).freeze()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_message_octets: u64) -> Limits {
        Limits {
            max_message_octets,
            ..Limits::default()
        }
    }

    /// Feeds `input` split at every position (and in one piece) and checks every split gives the
    /// same result and leftover, so chunk boundaries never change a decision.
    fn read_all_splits(input: &[u8], max: u64) -> (Result<Bytes, DataProblem>, Vec<u8>) {
        let whole = read_in_chunks(&[input], max);
        for at in 0..input.len() {
            let split = read_in_chunks(&[&input[..at], &input[at..]], max);
            let shown = String::from_utf8_lossy(&input[..input.len().min(80)]);
            assert_eq!(split, whole, "split at {at} of {shown:?}");
        }
        whole
    }

    fn read_in_chunks(chunks: &[&[u8]], max: u64) -> (Result<Bytes, DataProblem>, Vec<u8>) {
        let mut reader = DataReader::new(&limits(max), None, None);
        let mut buf = BytesMut::new();
        for (i, chunk) in chunks.iter().enumerate() {
            buf.extend_from_slice(chunk);
            if let DataStep::Done(r) = reader.consume(&mut buf) {
                let mut rest = buf.to_vec();
                chunks[i + 1..]
                    .iter()
                    .for_each(|c| rest.extend_from_slice(c));
                return (r, rest);
            }
            assert!(buf.len() <= 1001, "buffer must stay bounded");
        }
        panic!("no end of data in {chunks:?}");
    }

    #[test]
    fn unstuffs_dots_and_keeps_crlf() {
        let (r, rest) = read_all_splits(b"Subject: x\r\n\r\n..leading dot\r\n.\r\nQUIT\r\n", 1000);
        assert_eq!(
            r.unwrap(),
            Bytes::from_static(b"Subject: x\r\n\r\n.leading dot\r\n")
        );
        assert_eq!(rest, b"QUIT\r\n");
        let (r, _) = read_all_splits(b".\r\n", 1000);
        assert_eq!(r.unwrap(), Bytes::new());
    }

    #[test]
    fn smuggling_sequences_never_end_the_data() {
        for evil in [
            &b"a\r\n\n.\nMAIL FROM:<x@y.example>\r\n.\r\n"[..],
            b"a\r\n.\nMAIL FROM:<x@y.example>\r\n.\r\n",
            b"a\n.\r\nMAIL FROM:<x@y.example>\r\n.\r\n",
            b"a\r.\rMAIL FROM:<x@y.example>\r\n.\r\n",
            b"a\r\n.\r\r\nMAIL FROM:<x@y.example>\r\n.\r\n",
        ] {
            let (r, rest) = read_all_splits(evil, 1000);
            assert_eq!(
                r,
                Err(DataProblem::BareLineEnding),
                "{:?}",
                String::from_utf8_lossy(evil)
            );
            assert!(
                rest.is_empty(),
                "the smuggled command must be swallowed as content"
            );
        }
    }

    #[test]
    fn bare_cr_or_lf_anywhere_poisons_the_message() {
        for evil in [
            &b"a\nb\r\n.\r\n"[..],
            b"a\rb\r\n.\r\n",
            b"a\r\r\n.\r\n",
            b"\n.\r\n.\r\n",
        ] {
            let (r, _) = read_all_splits(evil, 1000);
            assert_eq!(
                r,
                Err(DataProblem::BareLineEnding),
                "{:?}",
                String::from_utf8_lossy(evil)
            );
        }
    }

    /// `\r\n\0.\r\n` was once accepted and fanned out with the NUL intact; a receiver that
    /// strips NULs would read the dot as the end of data.
    #[test]
    fn a_nul_octet_anywhere_refuses_the_message_and_never_ends_the_data() {
        for evil in [
            &b"a\r\n\0.\r\nMAIL FROM:<x@y.example>\r\n.\r\n"[..],
            b"\0\r\n.\r\n",
            b"Subject: a\0b\r\n\r\nbody\r\n.\r\n",
            b"a\r\n.\0\r\n.\r\n",
        ] {
            let (r, rest) = read_all_splits(evil, 1000);
            assert_eq!(
                r,
                Err(DataProblem::NulOctet),
                "{:?}",
                String::from_utf8_lossy(evil)
            );
            assert!(rest.is_empty(), "the bytes after the NUL line are content");
        }
        let reply = DataProblem::NulOctet.reply();
        assert_eq!(reply.code, 550);
        // Inside an over-long line the NUL is seen too (which problem comes first depends on the
        // split; either way the message is refused).
        let mut input = vec![b'x'; 1500];
        input[900] = 0;
        input.extend_from_slice(b"\r\n.\r\n");
        for at in [0, 500, 901, 1200] {
            let (r, _) = read_in_chunks(&[&input[..at], &input[at..]], 1 << 20);
            assert!(r.is_err(), "split at {at}");
        }
    }

    #[test]
    fn long_lines_are_refused_at_the_real_end() {
        let mut input = vec![b'x'; 998];
        input.extend_from_slice(b"\r\n.");
        input.extend_from_slice(&[b'y'; 998]);
        input.extend_from_slice(b"\r\n.\r\n");
        let (r, _) = read_all_splits(&input, 1 << 20);
        assert!(r.is_ok(), "998 + CRLF and a stuffed 998 are legal");

        let mut input = vec![b'x'; 5000];
        input.extend_from_slice(b"\r\n.\r\nNOOP\r\n");
        let (r, rest) = read_all_splits(&input, 1 << 20);
        assert_eq!(
            (r, rest),
            (Err(DataProblem::LineTooLong), b"NOOP\r\n".to_vec())
        );
    }

    #[test]
    fn bare_cr_inside_a_long_line_is_still_seen() {
        let mut input = vec![b'x'; 1500];
        input[700] = b'\r';
        input.extend_from_slice(b"\r\n.\r\n");
        // Which problem is found first depends on where a chunk boundary falls; either way the
        // message is refused.
        for at in [0, 500, 701, 1200] {
            let (r, _) = read_in_chunks(&[&input[..at], &input[at..]], 1 << 20);
            assert!(r.is_err(), "split at {at}");
        }
        let mut input = vec![b'x'; 1500];
        input.extend_from_slice(b"\r\r\n.\r\n");
        let (r, _) = read_in_chunks(&[&input[..1500], &input[1500..]], 1 << 20);
        assert_eq!(r, Err(DataProblem::LineTooLong));
    }

    #[test]
    fn oversize_stops_buffering_and_reads_to_the_end() {
        let mut reader = DataReader::new(&limits(10), Some(u64::MAX), None);
        let mut buf = BytesMut::from(&b"0123456789\r\n"[..]);
        assert_eq!(reader.consume(&mut buf), DataStep::NeedMore);
        assert_eq!(reader.body.capacity(), 0, "refused body is freed");
        buf.extend_from_slice(b"more\r\n.\r\n");
        assert_eq!(
            reader.consume(&mut buf),
            DataStep::Done(Err(DataProblem::TooBig))
        );
        let (r, _) = read_all_splits(b"01234567\r\n.\r\n", 10);
        assert_eq!(r.unwrap().len(), 10, "exactly the limit is accepted");
    }

    #[test]
    fn a_spent_budget_refuses_transiently_reads_to_the_end_and_frees_everything() {
        let budget = crate::budget::BufferBudget::new(20);
        let mut reader = DataReader::new(&limits(1000), Some(500), Some(budget.reservation()));
        assert_eq!(reader.body.capacity(), 0, "no unreserved preallocation");
        let mut buf = BytesMut::from(&b"0123456789\r\n"[..]);
        assert_eq!(reader.consume(&mut buf), DataStep::NeedMore);
        assert_eq!(
            budget.used(),
            12,
            "no room for a step: exactly what is needed"
        );
        buf.extend_from_slice(b"0123456789\r\n.\r\nQUIT\r\n");
        assert_eq!(
            reader.consume(&mut buf),
            DataStep::Done(Err(DataProblem::NoBufferSpace))
        );
        assert_eq!(&buf[..], b"QUIT\r\n", "in sync: the next command is intact");
        assert_eq!(budget.used(), 0, "a refused message holds nothing");
        assert!(DataProblem::NoBufferSpace.reply().is_transient());

        let mut reader = DataReader::new(&limits(1000), None, Some(budget.reservation()));
        let mut buf = BytesMut::from(&b"0123456789\r\n.\r\n"[..]);
        assert!(matches!(reader.consume(&mut buf), DataStep::Done(Ok(_))));
        assert_eq!(budget.used(), 12, "held until the session lets go");
        drop(reader.take_reservation());
        assert_eq!(budget.used(), 0);
    }
}
