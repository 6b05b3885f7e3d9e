//! Line-at-a-time CSV: a bounded line reader and an RFC 4180 field splitter for one line.
//!
//! Why not the `csv` crate: in RFC 4180 a quoted field may span lines, so one stray quote in a
//! hostile or hand-edited file swallows every row after it into a single field and those good
//! rows are silently lost. Herald's member data may not contain line breaks anyway (names and
//! fields refuse control characters), so here a record *is* a physical line: a broken quote
//! costs exactly one row, which is rejected with its line number, and the next line parses
//! normally.
//!
//! Limits: a line keeps at most `max` bytes (the rest is read and discarded, and the line is
//! flagged), so a file without newlines cannot exhaust memory.
//!
//! SECURITY: input is untrusted. Nothing here assumes UTF-8 (lines are bytes; the caller decides
//! per line), nothing panics on any input, and memory is bounded by `max` per line.

use std::io::{self, BufRead};

/// Reads physical lines (LF or CRLF terminated; the terminator is removed) with a length cap.
pub(crate) struct LineReader<R> {
    inner: R,
    max: usize,
    /// 1-based number of the line most recently returned.
    line_no: u64,
}

/// One line as read: its bytes (at most `max`), its number, and whether bytes were cut off.
pub(crate) struct RawLine<'a> {
    pub bytes: &'a [u8],
    pub number: u64,
    pub too_long: bool,
}

impl<R: BufRead> LineReader<R> {
    pub(crate) fn new(inner: R, max: usize) -> LineReader<R> {
        LineReader {
            inner,
            max,
            line_no: 0,
        }
    }

    /// The next line into `buf`, or None at end of input. A final line without a newline counts.
    pub(crate) fn next_line<'b>(
        &mut self,
        buf: &'b mut Vec<u8>,
    ) -> io::Result<Option<RawLine<'b>>> {
        buf.clear();
        let mut too_long = false;
        let mut saw_any = false;
        loop {
            let avail = match self.inner.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if avail.is_empty() {
                if !saw_any {
                    return Ok(None);
                }
                break;
            }
            saw_any = true;
            let newline = avail.iter().position(|&b| b == b'\n');
            let chunk = &avail[..newline.unwrap_or(avail.len())];
            let room = self.max.saturating_sub(buf.len());
            if chunk.len() > room {
                too_long = true;
            }
            buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
            let used = newline.map_or(avail.len(), |i| i + 1);
            self.inner.consume(used);
            if newline.is_some() {
                break;
            }
        }
        if buf.last() == Some(&b'\r') {
            buf.pop();
        }
        self.line_no += 1;
        Ok(Some(RawLine {
            bytes: buf,
            number: self.line_no,
            too_long,
        }))
    }
}

/// Why a line could not be split into fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SplitError {
    /// A field opened with `"` has no closing `"` on this line.
    UnterminatedQuote,
    /// Something other than `,` follows a closing quote (`"a"b`).
    TextAfterQuote,
}

impl std::fmt::Display for SplitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SplitError::UnterminatedQuote => "unterminated quoted field",
            SplitError::TextAfterQuote => "text after the closing quote of a field",
        })
    }
}

/// Splits one line into comma-separated fields, appending them to `out` (cleared first).
///
/// Quoted fields may contain commas and `""` for a quote. Spaces before an opening quote and
/// after a closing one are ignored (`a@b.c, "Smith, J"` is two fields), because hand-written
/// files do that. A quote inside an unquoted field is kept literally (`O"Brien`).
pub(crate) fn split_fields(line: &str, out: &mut Vec<String>) -> Result<(), SplitError> {
    out.clear();
    let mut rest = line;
    loop {
        let trimmed = rest.trim_start_matches([' ', '\t']);
        if let Some(quoted) = trimmed.strip_prefix('"') {
            let (value, after) = take_quoted(quoted)?;
            out.push(value);
            let after = after.trim_start_matches([' ', '\t']);
            match after.strip_prefix(',') {
                Some(next) => rest = next,
                None if after.is_empty() => return Ok(()),
                None => return Err(SplitError::TextAfterQuote),
            }
        } else {
            match rest.split_once(',') {
                Some((field, next)) => {
                    out.push(field.to_string());
                    rest = next;
                }
                None => {
                    out.push(rest.to_string());
                    return Ok(());
                }
            }
        }
    }
}

/// Reads a quoted field body (after the opening quote): returns the unescaped value and the text
/// after the closing quote.
fn take_quoted(s: &str) -> Result<(String, &str), SplitError> {
    let mut value = String::new();
    let mut rest = s;
    loop {
        let Some(i) = rest.find('"') else {
            return Err(SplitError::UnterminatedQuote);
        };
        value.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        match after.strip_prefix('"') {
            Some(more) => {
                value.push('"');
                rest = more;
            }
            None => return Ok((value, after)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(line: &str) -> Result<Vec<String>, SplitError> {
        let mut out = Vec::new();
        split_fields(line, &mut out).map(|()| out)
    }

    #[test]
    fn splits_plain_and_quoted_fields() {
        assert_eq!(split("a,b,,c").unwrap(), ["a", "b", "", "c"]);
        assert_eq!(split("").unwrap(), [""]);
        assert_eq!(
            split("x@y.z, \"Smith, J\" ,3").unwrap(),
            ["x@y.z", "Smith, J", "3"]
        );
        assert_eq!(
            split("\"say \"\"hi\"\"\",O\"Brien").unwrap(),
            ["say \"hi\"", "O\"Brien"]
        );
        assert_eq!(split("a,\"\"").unwrap(), ["a", ""]);
        assert_eq!(split("a,").unwrap(), ["a", ""]);
    }

    #[test]
    fn reports_broken_quotes() {
        assert_eq!(
            split("a,\"unterminated"),
            Err(SplitError::UnterminatedQuote)
        );
        assert_eq!(split("\"a\"b,c"), Err(SplitError::TextAfterQuote));
        assert_eq!(split("\"a\"\""), Err(SplitError::UnterminatedQuote));
    }

    #[test]
    fn reads_lines_with_cap_and_crlf() {
        let input: &[u8] = b"one\r\ntwo\n\nlooooong\nlast";
        let mut r = LineReader::new(input, 4);
        let mut buf = Vec::new();
        let mut got = Vec::new();
        while let Some(l) = r.next_line(&mut buf).unwrap() {
            got.push((
                l.number,
                String::from_utf8_lossy(l.bytes).into_owned(),
                l.too_long,
            ));
        }
        let want = [
            (1, "one", false),
            (2, "two", false),
            (3, "", false),
            (4, "looo", true),
            (5, "last", false),
        ];
        let want: Vec<_> = want
            .iter()
            .map(|(n, s, t)| (*n, s.to_string(), *t))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn tiny_buffer_reader_still_finds_lines() {
        let data = b"abc\ndef\n".to_vec();
        let inner = io::BufReader::with_capacity(2, &data[..]);
        let mut r = LineReader::new(inner, 100);
        let mut buf = Vec::new();
        assert_eq!(r.next_line(&mut buf).unwrap().unwrap().bytes, b"abc");
        assert_eq!(r.next_line(&mut buf).unwrap().unwrap().bytes, b"def");
        assert!(r.next_line(&mut buf).unwrap().is_none());
    }
}
