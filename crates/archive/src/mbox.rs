//! mbox reading (mboxo and mboxrd) and mboxrd writing.
//!
//! Hand-written rather than mail-parser's `mailbox::mbox::MessageIterator`: that iterator
//! buffers a message of any size (a file with no further `From ` line is one message as large
//! as the file), and the archive needs a cap that skips an oversize message without holding
//! it. The format itself is a few lines: a message starts at a line beginning `From `; in the
//! body such lines were escaped by `>`. Reading unescapes one `>` before `>*From ` (mboxrd;
//! for mboxo files this only differs on lines that were `>From ` in the original, which mboxo
//! could not represent anyway). Writing escapes every `>*From ` line (mboxrd), so a round
//! trip is exact.
//!
//! SECURITY: input is an operator's file of untrusted mail. Memory per message is bounded by
//! `max_bytes`; a line is read in pieces of at most 64 KB, so one huge line is no problem.

use std::io::{BufRead, Write};

/// One message read from an mbox: its bytes with CRLF line ends (as SMTP delivered them),
/// or the size it had when it was over the cap.
#[derive(Debug)]
pub enum Entry {
    Message(Vec<u8>),
    Oversize(usize),
}

/// Reads messages from an mbox stream.
pub struct Reader<R> {
    input: R,
    max_bytes: usize,
    /// The `From ` line starting the next message has been consumed.
    started: bool,
    done: bool,
}

impl<R: BufRead> Reader<R> {
    pub fn new(input: R, max_bytes: usize) -> Self {
        Reader {
            input,
            max_bytes,
            started: false,
            done: false,
        }
    }

    /// The next message, `None` at the end.
    pub fn next_entry(&mut self) -> std::io::Result<Option<Entry>> {
        let mut buf = Vec::new();
        let mut size = 0usize;
        let mut line = Vec::with_capacity(128);
        // Skip anything before the first `From ` line.
        while !self.started {
            line.clear();
            if read_line(&mut self.input, &mut line)? == 0 {
                self.done = true;
                return Ok(None);
            }
            self.started = line.starts_with(b"From ");
        }
        if self.done {
            return Ok(None);
        }
        let mut at_line_start = true;
        loop {
            line.clear();
            let n = read_line(&mut self.input, &mut line)?;
            if n == 0 {
                self.done = true;
                break;
            }
            if at_line_start && line.starts_with(b"From ") {
                break;
            }
            let complete = line.ends_with(b"\n");
            let mut piece: &[u8] = &line;
            if at_line_start && piece.first() == Some(&b'>') {
                let gts = piece.iter().take_while(|&&b| b == b'>').count();
                if piece[gts..].starts_with(b"From ") {
                    piece = &piece[1..];
                }
            }
            size += piece.len() + usize::from(complete && !piece.ends_with(b"\r\n"));
            if size <= self.max_bytes {
                if complete {
                    let body = piece.strip_suffix(b"\n").unwrap_or(piece);
                    let body = body.strip_suffix(b"\r").unwrap_or(body);
                    buf.extend_from_slice(body);
                    buf.extend_from_slice(b"\r\n");
                } else {
                    buf.extend_from_slice(piece);
                }
            } else if !buf.is_empty() {
                buf = Vec::new();
            }
            at_line_start = complete;
        }
        // The blank line mbox writers put before the next `From ` belongs to the format.
        if buf.ends_with(b"\r\n\r\n") {
            buf.truncate(buf.len() - 2);
        }
        if size > self.max_bytes {
            return Ok(Some(Entry::Oversize(size)));
        }
        Ok(Some(Entry::Message(buf)))
    }
}

/// Reads up to the end of a line, or 64 KB of it.
fn read_line<R: BufRead>(r: &mut R, out: &mut Vec<u8>) -> std::io::Result<usize> {
    let mut total = 0;
    loop {
        let chunk = r.fill_buf()?;
        if chunk.is_empty() {
            return Ok(total);
        }
        let room = 65_536 - total;
        let take = chunk.len().min(room);
        let (n, eol) = match chunk[..take].iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (take, false),
        };
        out.extend_from_slice(&chunk[..n]);
        r.consume(n);
        total += n;
        if eol || total >= 65_536 {
            return Ok(total);
        }
    }
}

/// Writes one message as mboxrd: a `From ` separator line, LF line ends, `>`-escaped
/// `>*From ` lines, a blank line after.
pub fn write_message<W: Write>(
    out: &mut W,
    sender: &str,
    date_ms: i64,
    raw: &[u8],
) -> std::io::Result<()> {
    let sender: String = sender.chars().filter(|c| c.is_ascii_graphic()).collect();
    let sender = if sender.is_empty() {
        "MAILER-DAEMON".into()
    } else {
        sender
    };
    let when = jiff::Timestamp::from_millisecond(date_ms)
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        .strftime("%a %b %e %H:%M:%S %Y");
    writeln!(out, "From {sender} {when}")?;
    for line in raw.split_inclusive(|&b| b == b'\n') {
        let body = line.strip_suffix(b"\n").unwrap_or(line);
        let body = body.strip_suffix(b"\r").unwrap_or(body);
        let gts = body.iter().take_while(|&&b| b == b'>').count();
        if body[gts..].starts_with(b"From ") {
            out.write_all(b">")?;
        }
        out.write_all(body)?;
        out.write_all(b"\n")?;
    }
    if !raw.ends_with(b"\n") {
        out.write_all(b"\n")?;
    }
    out.write_all(b"\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(data: &[u8], max: usize) -> Vec<Entry> {
        let mut r = Reader::new(data, max);
        let mut out = Vec::new();
        while let Some(e) = r.next_entry().unwrap() {
            out.push(e);
        }
        out
    }

    #[test]
    fn from_lines_in_bodies_round_trip() {
        let raw =
            b"Subject: a\r\n\r\nFrom the start\r\n>From quoted\r\n>>From twice\r\nend\r\n".to_vec();
        let mut file = Vec::new();
        write_message(&mut file, "a@x", 0, &raw).unwrap();
        write_message(&mut file, "b@x", 0, b"Subject: b\r\n\r\nsecond\r\n").unwrap();
        let text = String::from_utf8(file.clone()).unwrap();
        assert!(
            text.contains("\n>From the start\n>>From quoted\n>>>From twice\n"),
            "{text}"
        );
        let got = read_all(&file, 1 << 20);
        assert_eq!(got.len(), 2);
        match &got[0] {
            Entry::Message(m) => assert_eq!(m, &raw),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn oversize_message_is_skipped_not_held() {
        let mut file = b"From a Mon Jan  1 00:00:00 2024\nSubject: big\n\n".to_vec();
        file.extend(std::iter::repeat_n(b'x', 300_000));
        file.extend_from_slice(b"\n\nFrom b Mon Jan  1 00:00:00 2024\nSubject: small\n\nok\n");
        let got = read_all(&file, 100_000);
        assert!(matches!(got[0], Entry::Oversize(n) if n > 300_000));
        assert!(matches!(&got[1], Entry::Message(m) if m.starts_with(b"Subject: small")));
    }

    #[test]
    fn garbage_before_the_first_separator_and_empty_files() {
        assert!(read_all(b"", 100).is_empty());
        assert!(read_all(b"no separator at all\n", 100).is_empty());
        let got = read_all(b"junk\nFrom x\nSubject: s\n\nb", 100);
        assert!(matches!(&got[0], Entry::Message(m) if m == b"Subject: s\r\n\r\nb"));
    }
}
