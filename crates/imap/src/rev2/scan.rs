//! The tokenizer under [`super::prepare`]: one framed command as atoms, quoted strings,
//! literals (`{n}`, `{n+}`, `~{n}` with their bytes), parentheses and the final CRLF. It never
//! reads past the buffer: a literal longer than what is there, an unterminated quoted string or
//! a lone CR ends the tokens (and the bytes are left for the codec to refuse).
//!
//! SECURITY: the bytes are the client's; every index is checked (`get`), a literal's length is
//! parsed from at most 10 digits and added with `checked_add`.

use std::ops::Range;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Atom,
    Quoted,
    Literal,
    Open,
    Close,
    End,
}

#[derive(Debug, Clone)]
pub(super) struct Token {
    pub kind: Kind,
    pub span: Range<usize>,
}

/// A tokenizer over one framed command: atoms, quoted strings, literals, parentheses, and
/// the final CRLF. `None` when the bytes are not tokens at all (left to the codec).
pub(super) struct Scanner<'b> {
    pub b: &'b [u8],
    pub at: usize,
}

impl<'b> Scanner<'b> {
    pub fn skip_spaces(&mut self) {
        while self.b.get(self.at) == Some(&b' ') {
            self.at += 1;
        }
    }

    pub fn next(&mut self) -> Option<Token> {
        self.skip_spaces();
        let start = self.at;
        let c = *self.b.get(start)?;
        let kind = match c {
            b'\r' | b'\n' => {
                self.at = self.b.len();
                Kind::End
            }
            b'(' => {
                self.at += 1;
                Kind::Open
            }
            b')' => {
                self.at += 1;
                Kind::Close
            }
            b'"' => {
                let mut i = start + 1;
                loop {
                    match *self.b.get(i)? {
                        b'\\' => i += 2,
                        b'"' => break,
                        b'\r' | b'\n' => return None,
                        _ => i += 1,
                    }
                }
                self.at = i + 1;
                Kind::Quoted
            }
            b'{' | b'~' => {
                let open = if c == b'~' { start + 1 } else { start };
                if self.b.get(open) != Some(&b'{') {
                    return self.atom(start);
                }
                let close = open + self.b[open..].iter().position(|x| *x == b'}')?;
                let digits = self.b[open + 1..close]
                    .strip_suffix(b"+")
                    .unwrap_or(&self.b[open + 1..close]);
                if digits.is_empty() || digits.len() > 10 || !digits.iter().all(u8::is_ascii_digit)
                {
                    return None;
                }
                let n: usize = std::str::from_utf8(digits).ok()?.parse().ok()?;
                if self.b.get(close + 1..close + 3) != Some(b"\r\n") {
                    return None;
                }
                let end = (close + 3).checked_add(n)?;
                if end > self.b.len() {
                    return None;
                }
                self.at = end;
                Kind::Literal
            }
            _ => return self.atom(start),
        };
        Some(Token {
            kind,
            span: start..self.at,
        })
    }

    fn atom(&mut self, start: usize) -> Option<Token> {
        let len = self.b[start..]
            .iter()
            .position(|x| matches!(x, b' ' | b'(' | b')' | b'"' | b'\r' | b'\n'))
            .unwrap_or(self.b.len() - start);
        if len == 0 {
            return None;
        }
        self.at = start + len;
        Some(Token {
            kind: Kind::Atom,
            span: start..self.at,
        })
    }

    pub fn text(&self, t: &Token) -> &'b [u8] {
        &self.b[t.span.clone()]
    }

    pub fn is(&self, t: &Token, word: &str) -> bool {
        t.kind == Kind::Atom && self.text(t).eq_ignore_ascii_case(word.as_bytes())
    }
}
