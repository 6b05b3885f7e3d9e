//! Just enough HTTP/1.1 (RFC 9112) to read one policy response: the status line, the header
//! block, and a body framed by Content-Length, chunked transfer coding, or the end of the
//! connection. No I/O: [`parse_response`] is fed everything read so far and says whether the
//! response is complete.
//!
//! Policy (RFC 8461 §3.3): only `200` is accepted — redirects are not followed — and a
//! Content-Type, when present, must be `text/plain`.
//!
//! Limits: the header block at most [`MAX_HEADER_BYTES`] and [`MAX_HEADERS`] fields, the body
//! at most [`MAX_BODY_BYTES`], chunk sizes at most 8 hex digits.
//!
//! SECURITY: the response is hostile. Sizes are checked before anything is copied; conflicting
//! framing (Transfer-Encoding with Content-Length, differing Content-Lengths) is refused rather
//! than guessed at.

/// Largest policy body accepted (RFC 8461 gives no limit; real policies are a few hundred bytes).
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// Largest header block (status line included).
pub const MAX_HEADER_BYTES: usize = 16 * 1024;
/// Most header fields.
pub const MAX_HEADERS: usize = 100;

/// Why a response was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpError {
    #[error("header block longer than {MAX_HEADER_BYTES} octets or {MAX_HEADERS} fields")]
    HeaderTooLarge,
    #[error("malformed status line")]
    StatusLine,
    #[error("status {0} (only 200 is accepted; redirects are not followed)")]
    Status(u16),
    #[error("malformed header field")]
    Header,
    #[error("unsupported transfer coding")]
    TransferCoding,
    #[error("invalid or conflicting Content-Length")]
    ContentLength,
    #[error("content type {0:?} is not text/plain")]
    ContentType(String),
    #[error("body longer than {MAX_BODY_BYTES} octets")]
    BodyTooLarge,
    #[error("malformed chunked body")]
    Chunk,
    #[error("connection closed before the end of the response")]
    Truncated,
}

/// What the bytes so far amount to.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// Read more (or, at the end of the stream, [`HttpError::Truncated`]).
    Incomplete,
    /// The whole body of a `200` response.
    Body(Vec<u8>),
}

/// How the body's end is found.
enum Framing {
    Length(usize),
    Chunked,
    Close,
}

/// Parses `buf` (everything received so far). `eof`: the peer closed the stream cleanly, so a
/// close-delimited body is complete.
pub fn parse_response(buf: &[u8], eof: bool) -> Result<Parsed, HttpError> {
    let Some(head_len) = find(buf, b"\r\n\r\n").map(|i| i + 4) else {
        if buf.len() > MAX_HEADER_BYTES {
            return Err(HttpError::HeaderTooLarge);
        }
        return if eof {
            Err(HttpError::Truncated)
        } else {
            Ok(Parsed::Incomplete)
        };
    };
    if head_len > MAX_HEADER_BYTES {
        return Err(HttpError::HeaderTooLarge);
    }
    let framing = parse_head(&buf[..head_len - 4])?;
    let body = &buf[head_len..];
    let done = match framing {
        Framing::Length(n) if body.len() >= n => Some(body[..n].to_vec()),
        Framing::Length(_) => None,
        Framing::Chunked => dechunk(body)?,
        Framing::Close if body.len() > MAX_BODY_BYTES => return Err(HttpError::BodyTooLarge),
        Framing::Close => eof.then(|| body.to_vec()),
    };
    match done {
        Some(body) => Ok(Parsed::Body(body)),
        None if eof => Err(HttpError::Truncated),
        None => Ok(Parsed::Incomplete),
    }
}

/// Checks the status line and headers; returns the body framing.
fn parse_head(head: &[u8]) -> Result<Framing, HttpError> {
    let text = std::str::from_utf8(head).map_err(|_| HttpError::Header)?;
    let mut lines = text.split("\r\n");
    let status = lines.next().ok_or(HttpError::StatusLine)?;
    check_status(status)?;
    let mut length: Option<usize> = None;
    let mut chunked = false;
    let mut te = false;
    for (i, line) in lines.enumerate() {
        if i >= MAX_HEADERS {
            return Err(HttpError::HeaderTooLarge);
        }
        let (name, value) = line.split_once(':').ok_or(HttpError::Header)?;
        let value = value.trim_matches([' ', '\t']);
        // obs-fold and whitespace before the colon are refused by RFC 9112 §5.
        if name.is_empty()
            || !name.bytes().all(is_tchar)
            || value.bytes().any(|b| b.is_ascii_control() && b != b'\t')
        {
            return Err(HttpError::Header);
        }
        if name.eq_ignore_ascii_case("content-length") {
            let n = parse_length(value)?;
            if length.is_some_and(|l| l != n) {
                return Err(HttpError::ContentLength);
            }
            length = Some(n);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            te = true;
            // Only "chunked" alone is understood (a policy server has no reason for more).
            chunked = value.eq_ignore_ascii_case("chunked");
            if !chunked {
                return Err(HttpError::TransferCoding);
            }
        } else if name.eq_ignore_ascii_case("content-type") {
            let media = value
                .split(';')
                .next()
                .unwrap_or("")
                .trim_matches([' ', '\t']);
            if !media.eq_ignore_ascii_case("text/plain") {
                return Err(HttpError::ContentType(value.chars().take(64).collect()));
            }
        }
    }
    match (te, length) {
        (true, Some(_)) => Err(HttpError::ContentLength),
        (true, None) if chunked => Ok(Framing::Chunked),
        (true, None) => Err(HttpError::TransferCoding),
        (false, Some(n)) if n > MAX_BODY_BYTES => Err(HttpError::BodyTooLarge),
        (false, Some(n)) => Ok(Framing::Length(n)),
        (false, None) => Ok(Framing::Close),
    }
}

/// `HTTP/1.x 200 reason`: anything but 200 is an error (no redirects, RFC 8461 §3.3).
fn check_status(line: &str) -> Result<(), HttpError> {
    let mut parts = line.splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    let code = parts.next().unwrap_or("");
    if !(version == "HTTP/1.1" || version == "HTTP/1.0")
        || code.len() != 3
        || !code.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(HttpError::StatusLine);
    }
    match code.parse::<u16>() {
        Ok(200) => Ok(()),
        Ok(other) => Err(HttpError::Status(other)),
        Err(_) => Err(HttpError::StatusLine),
    }
}

fn parse_length(value: &str) -> Result<usize, HttpError> {
    if value.is_empty() || value.len() > 12 || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(HttpError::ContentLength);
    }
    value.parse().map_err(|_| HttpError::ContentLength)
}

/// Decodes a chunked body: Some(body) once the last chunk and the trailer section are in,
/// None while more is needed.
fn dechunk(mut rest: &[u8]) -> Result<Option<Vec<u8>>, HttpError> {
    let mut body = Vec::new();
    loop {
        let Some(eol) = find(rest, b"\r\n") else {
            // A chunk-size line is short; a long one without CRLF is garbage.
            return if rest.len() > 256 {
                Err(HttpError::Chunk)
            } else {
                Ok(None)
            };
        };
        let line = std::str::from_utf8(&rest[..eol]).map_err(|_| HttpError::Chunk)?;
        let size_text = line
            .split(';')
            .next()
            .unwrap_or("")
            .trim_end_matches([' ', '\t']);
        if size_text.is_empty()
            || size_text.len() > 8
            || !size_text.bytes().all(|b| b.is_ascii_hexdigit())
        {
            return Err(HttpError::Chunk);
        }
        let size = usize::from_str_radix(size_text, 16).map_err(|_| HttpError::Chunk)?;
        rest = &rest[eol + 2..];
        if size == 0 {
            // Trailer fields (ignored) end with an empty line.
            return Ok(trailers_end(rest).then_some(body));
        }
        if body.len() + size > MAX_BODY_BYTES {
            return Err(HttpError::BodyTooLarge);
        }
        if rest.len() < size + 2 {
            return Ok(None);
        }
        if &rest[size..size + 2] != b"\r\n" {
            return Err(HttpError::Chunk);
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

/// True when the trailer section (possibly empty) is complete.
fn trailers_end(rest: &[u8]) -> bool {
    rest.starts_with(b"\r\n") || find(rest, b"\r\n\r\n").is_some()
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(text: &str) -> Vec<u8> {
        text.as_bytes().to_vec()
    }

    #[test]
    fn content_length_body() {
        let r = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 5\r\n\r\nhello";
        assert_eq!(parse_response(r, false), Ok(Parsed::Body(body("hello"))));
        assert_eq!(
            parse_response(&r[..r.len() - 1], false),
            Ok(Parsed::Incomplete)
        );
        assert_eq!(
            parse_response(&r[..r.len() - 1], true),
            Err(HttpError::Truncated)
        );
    }

    #[test]
    fn chunked_body_with_extensions_and_trailers() {
        let r = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nhel\r\n2\r\nlo\r\n0\r\nX-T: 1\r\n\r\n";
        assert_eq!(parse_response(r, false), Ok(Parsed::Body(body("hello"))));
        let plain = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
        assert_eq!(
            parse_response(plain, false),
            Ok(Parsed::Body(body("hello")))
        );
        // Every prefix is incomplete, never an error.
        for n in 0..plain.len() {
            assert_eq!(
                parse_response(&plain[..n], false),
                Ok(Parsed::Incomplete),
                "{n}"
            );
        }
    }

    #[test]
    fn close_delimited_body_needs_a_clean_end() {
        let r = b"HTTP/1.0 200 OK\r\n\r\nhello";
        assert_eq!(parse_response(r, false), Ok(Parsed::Incomplete));
        assert_eq!(parse_response(r, true), Ok(Parsed::Body(body("hello"))));
    }

    #[test]
    fn refuses_other_statuses_and_redirects() {
        for (r, code) in [
            (
                &b"HTTP/1.1 301 Moved\r\nLocation: https://evil/\r\n\r\n"[..],
                301,
            ),
            (b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", 404),
            (b"HTTP/1.1 204 No Content\r\n\r\n", 204),
        ] {
            assert_eq!(parse_response(r, false), Err(HttpError::Status(code)));
        }
        assert_eq!(
            parse_response(b"HTTP/2 200\r\n\r\n", false),
            Err(HttpError::StatusLine)
        );
        assert_eq!(
            parse_response(b"garbage\r\n\r\n", false),
            Err(HttpError::StatusLine)
        );
    }

    #[test]
    fn refuses_ambiguous_or_oversized_framing() {
        let cases: [(&[u8], HttpError); 9] = [
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                HttpError::ContentLength,
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
                HttpError::ContentLength,
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
                HttpError::ContentLength,
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 65537\r\n\r\n",
                HttpError::BodyTooLarge,
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
                HttpError::TransferCoding,
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                HttpError::Chunk,
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n100000\r\n",
                HttpError::BodyTooLarge,
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n",
                HttpError::ContentType("text/html".into()),
            ),
            (b"HTTP/1.1 200 OK\r\n folded: x\r\n\r\n", HttpError::Header),
        ];
        for (r, want) in cases {
            assert_eq!(
                parse_response(r, false),
                Err(want.clone()),
                "{}",
                String::from_utf8_lossy(r)
            );
        }
        let mut big = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
        big.resize(big.len() + MAX_BODY_BYTES + 1, b'a');
        assert_eq!(parse_response(&big, false), Err(HttpError::BodyTooLarge));
        let mut head = b"HTTP/1.1 200 OK\r\n".to_vec();
        head.resize(MAX_HEADER_BYTES + 1, b'a');
        assert_eq!(parse_response(&head, false), Err(HttpError::HeaderTooLarge));
        let mut many = b"HTTP/1.1 200 OK\r\n".to_vec();
        for _ in 0..=MAX_HEADERS {
            many.extend_from_slice(b"X: y\r\n");
        }
        many.extend_from_slice(b"\r\n");
        assert_eq!(parse_response(&many, false), Err(HttpError::HeaderTooLarge));
    }

    #[test]
    fn tiny_chunks_are_bounded_by_the_body_limit() {
        let mut r = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        for _ in 0..=MAX_BODY_BYTES {
            r.extend_from_slice(b"1\r\na\r\n");
        }
        assert_eq!(parse_response(&r, false), Err(HttpError::BodyTooLarge));
    }
}
