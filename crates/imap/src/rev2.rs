//! The pieces of IMAP4rev2 (RFC 9051) that imap-codec 2.0.0-alpha.10 does not parse or
//! encode: ESEARCH (RFC 4731: `SEARCH RETURN (MIN MAX COUNT ALL)` and the `* ESEARCH`
//! response) and SEARCHRES (RFC 5182: `RETURN (SAVE)` and `$` as a sequence set). Written here
//! because no released imap-codec/imap-types has them (imap-codec issue #379, "Implement
//! ESEARCH", is open); this is the smallest layer that fills the gap, and it goes away when the
//! codec grows them.
//!
//! How: [`prepare`] reads a complete command (as the fragmentizer framed it) *before* the
//! codec does, and only where these extensions live:
//! - `[UID] SEARCH RETURN (options) …`: the options are parsed here and the `RETURN (…)` is
//!   cut out, so the codec sees a plain rev1 SEARCH;
//! - `$` where a search key stands (`SEARCH $`, `SEARCH UID $`, inside `NOT`/`OR`/parentheses):
//!   its span is noted, and the session replaces it with the saved result (`UID a:b,c`, or
//!   `NOT ALL` when the saved result is empty) before decoding — a `$` in an argument
//!   position (`SUBJECT $`) is a string and is left alone;
//! - `[UID] FETCH/STORE/COPY/MOVE $ …`: the `$` becomes `1` for the codec and the session
//!   uses the saved result instead of the decoded set;
//! - `LIST (selection options) ref (patterns) RETURN (return options)` (LIST-EXTENDED, RFC
//!   5258, and LIST-STATUS, RFC 5819, both part of rev2's LIST): the options are read here, and
//!   each pattern becomes a plain `LIST ref pattern` (and the STATUS items a `STATUS INBOX
//!   (items)`) for the codec to decode, so mailbox names and literals stay the codec's.
//!
//! Everything else passes through untouched, and anything this scanner does not understand is
//! left for the codec to judge (so its BADs stay the grammar's).
//!
//! Limits: the command is already bounded by `max_command_bytes`; RETURN takes at most
//! [`MAX_RETURN_OPTIONS`] options and no nesting; search keys are followed to a depth of
//! [`MAX_DEPTH`] (the codec itself allows 9); at most [`MAX_DOLLARS`] `$` keys in one command.
//!
//! SECURITY: every byte here is the client's. The scanner never indexes past the buffer
//! (literal lengths are checked against what is there), never recurses deeper than
//! [`MAX_DEPTH`], and its only output is spans into the input and a few flags.

use std::borrow::Cow;
use std::ops::Range;

/// RETURN options accepted in one SEARCH (each of the five, repeated, fits).
pub const MAX_RETURN_OPTIONS: usize = 16;
/// Parentheses, NOT and OR nest at most this deep in the scan for `$`.
pub const MAX_DEPTH: usize = 32;
/// `$` search keys in one command.
pub const MAX_DOLLARS: usize = 64;
/// Patterns in one extended LIST.
pub const MAX_PATTERNS: usize = 16;

/// The options of an extended LIST (RFC 5258, RFC 5819, RFC 6154), with each of its pieces as
/// a command the codec can decode.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListOptions {
    /// `(SUBSCRIBED)`: every readable list counts as subscribed, so this selects them all
    /// and marks them `\Subscribed`.
    pub select_subscribed: bool,
    /// `(SPECIAL-USE)`: only special-use mailboxes, of which the archive has none.
    pub select_special_use: bool,
    pub return_subscribed: bool,
    pub return_children: bool,
    /// `RETURN (STATUS (…))` as `tag STATUS INBOX (…)`.
    pub status: Option<Vec<u8>>,
    /// Each pattern as `tag LIST ref pattern` (the first is also `Prepared::bytes`).
    pub patterns: Vec<Vec<u8>>,
}

/// The result options of an extended SEARCH (RFC 4731 §3.1, RFC 5182 §2.4).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SearchReturn {
    pub min: bool,
    pub max: bool,
    pub count: bool,
    pub all: bool,
    pub save: bool,
}

impl SearchReturn {
    /// `RETURN ()` (and a rev2 SEARCH without RETURN) means `RETURN (ALL)`.
    pub fn all() -> Self {
        SearchReturn {
            all: true,
            ..Default::default()
        }
    }

    /// RFC 5182 §2.4: with SAVE and nothing else, no ESEARCH response is sent.
    pub fn answers(&self) -> bool {
        self.min || self.max || self.count || self.all
    }

    /// What SAVE keeps of a result (sorted numbers): with MIN and/or MAX but neither ALL nor
    /// COUNT, just those; otherwise all of it (RFC 5182 §2.4).
    pub fn saved(&self, found: &[u32]) -> Vec<u32> {
        if (self.min || self.max) && !self.all && !self.count {
            let mut out = Vec::with_capacity(2);
            if let (true, Some(&first)) = (self.min, found.first()) {
                out.push(first);
            }
            if let (true, Some(&last)) = (self.max, found.last()) {
                if out.last() != Some(&last) {
                    out.push(last);
                }
            }
            return out;
        }
        found.to_vec()
    }
}

/// A command that cannot be right whatever the codec thinks (answered BAD with this text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

/// A command ready for the codec, with what this layer took out of it.
#[derive(Debug)]
pub struct Prepared<'a> {
    /// What the codec decodes.
    pub bytes: Cow<'a, [u8]>,
    /// The SEARCH had `RETURN (…)`.
    pub search_return: Option<SearchReturn>,
    /// Spans in `bytes` of `$` search keys (`$` or `UID $`), in order.
    pub dollar_keys: Vec<Range<usize>>,
    /// The FETCH/STORE/COPY/MOVE set was `$` (the codec was given `1`).
    pub dollar_set: bool,
    /// An extended LIST's options (`None`: a plain LIST, or not a LIST).
    pub list: Option<ListOptions>,
}

impl<'a> Prepared<'a> {
    fn untouched(bytes: &'a [u8]) -> Self {
        Prepared {
            bytes: Cow::Borrowed(bytes),
            search_return: None,
            dollar_keys: Vec::new(),
            dollar_set: false,
            list: None,
        }
    }

    /// The bytes with every `$` key replaced by `with` (a search key: `UID 3:5,9` or
    /// `NOT ALL`).
    pub fn substituted(&self, with: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.bytes.len() + self.dollar_keys.len() * with.len());
        let mut at = 0;
        for span in &self.dollar_keys {
            out.extend_from_slice(&self.bytes[at..span.start]);
            out.extend_from_slice(with);
            at = span.end;
        }
        out.extend_from_slice(&self.bytes[at..]);
        out
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Atom,
    Quoted,
    Literal,
    Open,
    Close,
    End,
}

#[derive(Debug, Clone)]
struct Token {
    kind: Kind,
    span: Range<usize>,
}

/// A tokenizer over one framed command: atoms, quoted strings, literals, parentheses, and
/// the final CRLF. `None` when the bytes are not tokens at all (left to the codec).
struct Scanner<'b> {
    b: &'b [u8],
    at: usize,
}

impl<'b> Scanner<'b> {
    fn skip_spaces(&mut self) {
        while self.b.get(self.at) == Some(&b' ') {
            self.at += 1;
        }
    }

    fn next(&mut self) -> Option<Token> {
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

    fn text(&self, t: &Token) -> &'b [u8] {
        &self.b[t.span.clone()]
    }

    fn is(&self, t: &Token, word: &str) -> bool {
        t.kind == Kind::Atom && self.text(t).eq_ignore_ascii_case(word.as_bytes())
    }
}

/// Reads `msg` (one complete command) for RETURN options and `$`; see the module header.
pub fn prepare(msg: &[u8]) -> Result<Prepared<'_>, Malformed> {
    let mut s = Scanner { b: msg, at: 0 };
    let (Some(tag), Some(mut name)) = (s.next(), s.next()) else {
        return Ok(Prepared::untouched(msg));
    };
    if s.is(&name, "LIST") {
        return prepare_list(msg, &msg[tag.span], s);
    }
    if s.is(&name, "UID") {
        match s.next() {
            Some(t) => name = t,
            None => return Ok(Prepared::untouched(msg)),
        }
    }
    if s.is(&name, "SEARCH") {
        return prepare_search(msg, s);
    }
    let takes_set = ["FETCH", "STORE", "COPY", "MOVE"]
        .iter()
        .any(|w| s.is(&name, w));
    if takes_set {
        if let Some(set) = s.next() {
            if s.text(&set) == b"$" {
                let mut bytes = msg.to_vec();
                bytes[set.span.start] = b'1';
                return Ok(Prepared {
                    bytes: Cow::Owned(bytes),
                    search_return: None,
                    dollar_keys: Vec::new(),
                    dollar_set: true,
                    list: None,
                });
            }
        }
    }
    Ok(Prepared::untouched(msg))
}

fn prepare_search<'a>(msg: &'a [u8], s: Scanner<'a>) -> Result<Prepared<'a>, Malformed> {
    // Where the keys (or RETURN) start; the same offset in the bytes after RETURN is cut.
    let keys_at = s.at;
    let mut search_return = None;
    let mut bytes = Cow::Borrowed(msg);
    let mut probe = Scanner {
        b: msg,
        at: keys_at,
    };
    if let Some(t) = probe.next().filter(|t| probe.is(t, "RETURN")) {
        search_return = Some(return_options(&mut probe)?);
        probe.skip_spaces();
        // The codec is given the SEARCH without its RETURN.
        let mut owned = msg[..t.span.start].to_vec();
        owned.extend_from_slice(&msg[probe.at..]);
        bytes = Cow::Owned(owned);
    }
    let dollar_keys = dollar_keys(Scanner {
        b: &bytes,
        at: keys_at,
    })?;
    Ok(Prepared {
        bytes,
        search_return,
        dollar_keys,
        dollar_set: false,
        list: None,
    })
}

/// `LIST [SP "(" select-opts ")"] SP mailbox SP (pattern / "(" patterns ")")
/// [SP "RETURN" SP "(" return-opts ")"]` (RFC 9051 §6.3.9). A LIST with none of the extended
/// parts is left to the codec as it is.
fn prepare_list<'a>(
    msg: &'a [u8],
    tag: &[u8],
    mut s: Scanner<'a>,
) -> Result<Prepared<'a>, Malformed> {
    let mut opts = ListOptions::default();
    let mut extended = false;
    let Some(mut t) = s.next() else {
        return Ok(Prepared::untouched(msg));
    };
    if t.kind == Kind::Open {
        extended = true;
        select_options(&mut s, &mut opts)?;
        match s.next() {
            Some(next) => t = next,
            None => return Err(Malformed("LIST needs a reference and a pattern")),
        }
    }
    let is_string = |t: &Token| matches!(t.kind, Kind::Atom | Kind::Quoted | Kind::Literal);
    if !is_string(&t) {
        if extended {
            return Err(Malformed("LIST needs a reference and a pattern"));
        }
        return Ok(Prepared::untouched(msg));
    }
    let reference = t.span.clone();
    let Some(p) = s.next() else {
        return Ok(Prepared::untouched(msg));
    };
    let mut patterns = Vec::new();
    if p.kind == Kind::Open {
        extended = true;
        loop {
            match s.next() {
                Some(t) if t.kind == Kind::Close => break,
                Some(t) if is_string(&t) && patterns.len() < MAX_PATTERNS => patterns.push(t.span),
                Some(t) if is_string(&t) => return Err(Malformed("too many LIST patterns")),
                _ => return Err(Malformed("LIST patterns are mailbox names in parentheses")),
            }
        }
        if patterns.is_empty() {
            return Err(Malformed("LIST needs a pattern"));
        }
    } else if is_string(&p) {
        patterns.push(p.span);
    } else {
        return Ok(Prepared::untouched(msg));
    }
    match s.next() {
        None => {}
        Some(t) if t.kind == Kind::End => {}
        Some(t) if s.is(&t, "RETURN") => {
            extended = true;
            return_list_options(&mut s, tag, &mut opts)?;
            if s.next().is_some_and(|t| t.kind != Kind::End) {
                return Err(Malformed("nothing may follow LIST's RETURN options"));
            }
        }
        // Anything else is the codec's to refuse.
        Some(_) => return Ok(Prepared::untouched(msg)),
    }
    if !extended {
        return Ok(Prepared::untouched(msg));
    }
    opts.patterns = patterns
        .into_iter()
        .map(|p| {
            let mut c = tag.to_vec();
            c.extend_from_slice(b" LIST ");
            c.extend_from_slice(&msg[reference.clone()]);
            c.push(b' ');
            c.extend_from_slice(&msg[p]);
            c.extend_from_slice(b"\r\n");
            c
        })
        .collect();
    Ok(Prepared {
        bytes: Cow::Owned(opts.patterns[0].clone()),
        search_return: None,
        dollar_keys: Vec::new(),
        dollar_set: false,
        list: Some(opts),
    })
}

/// LIST's selection options after the `(`.
fn select_options(s: &mut Scanner<'_>, opts: &mut ListOptions) -> Result<(), Malformed> {
    let mut recursive = false;
    for _ in 0..=MAX_RETURN_OPTIONS {
        let Some(t) = s.next() else {
            return Err(Malformed("LIST selection options not closed"));
        };
        match t.kind {
            Kind::Close => {
                // RFC 5258 §3.1: RECURSIVEMATCH only modifies another option.
                if recursive && !opts.select_subscribed && !opts.select_special_use {
                    return Err(Malformed("RECURSIVEMATCH needs SUBSCRIBED or SPECIAL-USE"));
                }
                return Ok(());
            }
            Kind::Atom => {}
            _ => {
                return Err(Malformed(
                    "LIST selection options are SUBSCRIBED REMOTE RECURSIVEMATCH SPECIAL-USE",
                ))
            }
        }
        match s.text(&t).to_ascii_uppercase().as_slice() {
            b"SUBSCRIBED" => opts.select_subscribed = true,
            // Every mailbox here is local.
            b"REMOTE" => {}
            b"RECURSIVEMATCH" => recursive = true,
            b"SPECIAL-USE" => opts.select_special_use = true,
            // RFC 5258 §3: an unknown selection option is an error.
            _ => return Err(Malformed("unknown LIST selection option")),
        }
    }
    Err(Malformed("too many LIST selection options"))
}

/// LIST's `RETURN (…)` after the RETURN.
fn return_list_options(
    s: &mut Scanner<'_>,
    tag: &[u8],
    opts: &mut ListOptions,
) -> Result<(), Malformed> {
    match s.next() {
        Some(t) if t.kind == Kind::Open => {}
        _ => return Err(Malformed("RETURN needs a parenthesized list of options")),
    }
    for _ in 0..=MAX_RETURN_OPTIONS {
        let Some(t) = s.next() else {
            return Err(Malformed("RETURN options not closed"));
        };
        match t.kind {
            Kind::Close => return Ok(()),
            Kind::Atom => {}
            _ => {
                return Err(Malformed(
                    "LIST RETURN options are SUBSCRIBED CHILDREN SPECIAL-USE STATUS",
                ))
            }
        }
        match s.text(&t).to_ascii_uppercase().as_slice() {
            b"SUBSCRIBED" => opts.return_subscribed = true,
            b"CHILDREN" => opts.return_children = true,
            // No mailbox here has a special use: nothing to add.
            b"SPECIAL-USE" => {}
            b"STATUS" if opts.status.is_none() => {
                let open = s.next().filter(|t| t.kind == Kind::Open);
                let Some(open) = open else {
                    return Err(Malformed("STATUS needs a parenthesized list of items"));
                };
                let mut close = None;
                for _ in 0..=MAX_RETURN_OPTIONS {
                    match s.next() {
                        Some(t) if t.kind == Kind::Close => {
                            close = Some(t);
                            break;
                        }
                        Some(t) if t.kind == Kind::Atom => {}
                        _ => return Err(Malformed("STATUS items are atoms in parentheses")),
                    }
                }
                let Some(close) = close else {
                    return Err(Malformed("too many STATUS items"));
                };
                let mut c = tag.to_vec();
                c.extend_from_slice(b" STATUS INBOX ");
                c.extend_from_slice(&s.b[open.span.start..close.span.end]);
                c.extend_from_slice(b"\r\n");
                opts.status = Some(c);
            }
            _ => return Err(Malformed("unknown LIST RETURN option")),
        }
    }
    Err(Malformed("too many LIST RETURN options"))
}

/// `"(" [option *(SP option)] ")"` after RETURN.
fn return_options(s: &mut Scanner<'_>) -> Result<SearchReturn, Malformed> {
    match s.next() {
        Some(t) if t.kind == Kind::Open => {}
        _ => return Err(Malformed("RETURN needs a parenthesized list of options")),
    }
    let mut r = SearchReturn::default();
    let mut n = 0usize;
    loop {
        let Some(t) = s.next() else {
            return Err(Malformed("RETURN options not closed"));
        };
        match t.kind {
            Kind::Close => break,
            Kind::Atom => {}
            _ => return Err(Malformed("RETURN options are MIN MAX COUNT ALL SAVE")),
        }
        n += 1;
        if n > MAX_RETURN_OPTIONS {
            return Err(Malformed("too many RETURN options"));
        }
        let word = s.text(&t).to_ascii_uppercase();
        match word.as_slice() {
            b"MIN" => r.min = true,
            b"MAX" => r.max = true,
            b"COUNT" => r.count = true,
            b"ALL" => r.all = true,
            b"SAVE" => r.save = true,
            // RFC 4466 §2.6.1: an option the server does not know is an error.
            _ => return Err(Malformed("unknown RETURN option")),
        }
    }
    if !r.answers() && !r.save {
        // RFC 4731 §3.1: `RETURN ()` is `RETURN (ALL)`.
        r.all = true;
    }
    Ok(r)
}

/// Search keys with no argument, with one, and with two (RFC 9051 §6.4.4).
const NO_ARG: &[&str] = &[
    "ALL",
    "ANSWERED",
    "DELETED",
    "DRAFT",
    "FLAGGED",
    "NEW",
    "OLD",
    "RECENT",
    "SEEN",
    "UNANSWERED",
    "UNDELETED",
    "UNDRAFT",
    "UNFLAGGED",
    "UNSEEN",
];
const ONE_ARG: &[&str] = &[
    "BCC",
    "BEFORE",
    "BODY",
    "CC",
    "FROM",
    "KEYWORD",
    "LARGER",
    "ON",
    "SENTBEFORE",
    "SENTON",
    "SENTSINCE",
    "SINCE",
    "SMALLER",
    "SUBJECT",
    "TEXT",
    "TO",
    "UNKEYWORD",
    "OLDER",
    "YOUNGER",
];

/// The spans of `$` where a search key stands. A scan that meets something it does not
/// follow stops and returns what it found so far: the codec judges the rest.
fn dollar_keys(mut s: Scanner<'_>) -> Result<Vec<Range<usize>>, Malformed> {
    let mut out = Vec::new();
    let mut t = s.next();
    // CHARSET x before the keys.
    if t.as_ref().is_some_and(|tok| s.is(tok, "CHARSET")) {
        let _charset = s.next();
        t = s.next();
    }
    while let Some(tok) = t {
        if tok.kind == Kind::End || key(&mut s, tok, 0, &mut out)?.is_none() {
            break;
        }
        t = s.next();
    }
    Ok(out)
}

/// One search key starting with `t`. `Ok(None)`: not followed (stop scanning).
fn key(
    s: &mut Scanner<'_>,
    t: Token,
    depth: usize,
    out: &mut Vec<Range<usize>>,
) -> Result<Option<()>, Malformed> {
    if depth > MAX_DEPTH {
        return Err(Malformed("search keys nested too deep"));
    }
    let dollar = |span: Range<usize>, out: &mut Vec<Range<usize>>| {
        if out.len() >= MAX_DOLLARS {
            return Err(Malformed("too many $ in one SEARCH"));
        }
        out.push(span);
        Ok(Some(()))
    };
    match t.kind {
        Kind::Open => loop {
            let Some(inner) = s.next() else {
                return Ok(None);
            };
            match inner.kind {
                Kind::Close => return Ok(Some(())),
                Kind::End => return Ok(None),
                _ => {
                    if key(s, inner, depth + 1, out)?.is_none() {
                        return Ok(None);
                    }
                }
            }
        },
        Kind::Atom => {
            let word = String::from_utf8_lossy(s.text(&t)).to_ascii_uppercase();
            if word == "$" {
                return dollar(t.span, out);
            }
            if word == "NOT" {
                let Some(k) = s.next() else { return Ok(None) };
                return key(s, k, depth + 1, out);
            }
            if word == "OR" {
                for _ in 0..2 {
                    let Some(k) = s.next() else { return Ok(None) };
                    if key(s, k, depth + 1, out)?.is_none() {
                        return Ok(None);
                    }
                }
                return Ok(Some(()));
            }
            if word == "UID" {
                let Some(set) = s.next() else { return Ok(None) };
                if s.text(&set) == b"$" {
                    return dollar(t.span.start..set.span.end, out);
                }
                return Ok(Some(()));
            }
            if word == "HEADER" {
                return Ok(s.next().and(s.next()).map(|_| ()));
            }
            if ONE_ARG.contains(&word.as_str()) {
                return Ok(s.next().map(|_| ()));
            }
            if NO_ARG.contains(&word.as_str()) {
                return Ok(Some(()));
            }
            // A sequence set (or an unknown key: the codec will say).
            if word
                .bytes()
                .all(|c| c.is_ascii_digit() || b",:*".contains(&c))
            {
                return Ok(Some(()));
            }
            Ok(None)
        }
        _ => Ok(None),
    }
}

/// Sorted numbers as a sequence set, consecutive runs as ranges (`1:3,7,9:10`); empty for
/// none.
pub fn sequence_set(numbers: &[u32]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < numbers.len() {
        let start = numbers[i];
        let mut end = start;
        while i + 1 < numbers.len() && numbers[i + 1] == end.saturating_add(1) {
            i += 1;
            end = numbers[i];
        }
        if !out.is_empty() {
            out.push(',');
        }
        if start == end {
            out.push_str(&start.to_string());
        } else {
            out.push_str(&format!("{start}:{end}"));
        }
        i += 1;
    }
    out
}

/// `UID a:b,c` naming the messages at `indexes` (sorted) of a mailbox whose UIDs are `uids`:
/// runs of neighbouring messages become one range of their first and last UID (UIDs of one
/// list are sparse, so a numeric run would rarely form). `NOT ALL` when there are none.
pub fn uid_key(uids: &[u32], indexes: &[usize]) -> Vec<u8> {
    if indexes.is_empty() {
        return b"NOT ALL".to_vec();
    }
    let mut out = String::from("UID ");
    let mut i = 0;
    while i < indexes.len() {
        let start = indexes[i];
        let mut end = start;
        while i + 1 < indexes.len() && indexes[i + 1] == end + 1 {
            i += 1;
            end = indexes[i];
        }
        if !out.ends_with(' ') {
            out.push(',');
        }
        match (uids.get(start), uids.get(end)) {
            (Some(a), Some(b)) if a == b => out.push_str(&a.to_string()),
            (Some(a), Some(b)) => out.push_str(&format!("{a}:{b}")),
            _ => {}
        }
        i += 1;
    }
    if out.ends_with(' ') {
        return b"NOT ALL".to_vec();
    }
    out.into_bytes()
}

/// The `* ESEARCH` line (RFC 4731 §3.2, RFC 9051 §7.3.4): `(TAG "t")`, `UID` for UID SEARCH,
/// then MIN, MAX, ALL (omitted when nothing matched) and COUNT, as asked. `found` is sorted.
pub fn esearch_line(tag: &str, uid: bool, r: &SearchReturn, found: &[u32]) -> Vec<u8> {
    // A tag has no `"` or `\` (RFC 9051: tag is ASTRING-CHARs, which exclude
    // quoted-specials); they are escaped anyway so the line stays well formed.
    let tag: String = tag
        .chars()
        .flat_map(|c| match c {
            '"' | '\\' => vec!['\\', c],
            c => vec![c],
        })
        .collect();
    let mut line = format!("* ESEARCH (TAG \"{tag}\")");
    if uid {
        line.push_str(" UID");
    }
    if let (true, Some(min)) = (r.min, found.first()) {
        line.push_str(&format!(" MIN {min}"));
    }
    if let (true, Some(max)) = (r.max, found.last()) {
        line.push_str(&format!(" MAX {max}"));
    }
    if r.all && !found.is_empty() {
        line.push_str(" ALL ");
        line.push_str(&sequence_set(found));
    }
    if r.count {
        line.push_str(&format!(" COUNT {}", found.len()));
    }
    line.push_str("\r\n");
    line.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prep(s: &str) -> Prepared<'_> {
        prepare(s.as_bytes()).unwrap()
    }

    fn text(p: &Prepared<'_>) -> String {
        String::from_utf8_lossy(&p.bytes).into_owned()
    }

    #[test]
    fn return_options_are_cut_out_for_the_codec() {
        let p = prep("a UID SEARCH RETURN (MIN MAX COUNT) SUBJECT x\r\n");
        assert_eq!(text(&p), "a UID SEARCH SUBJECT x\r\n");
        let r = p.search_return.unwrap();
        assert!(r.min && r.max && r.count && !r.all && !r.save);
        let p = prep("a search return () ALL\r\n");
        assert_eq!(text(&p), "a search ALL\r\n");
        assert_eq!(p.search_return, Some(SearchReturn::all()));
        let p = prep("a SEARCH RETURN (SAVE) ALL\r\n");
        let r = p.search_return.unwrap();
        assert!(r.save && !r.answers());
        // Plain commands pass through borrowed and unchanged.
        let p = prep("a SEARCH ALL\r\n");
        assert!(matches!(p.bytes, Cow::Borrowed(_)) && p.search_return.is_none());
        let p = prep("a FETCH 1:* (FLAGS)\r\n");
        assert!(matches!(p.bytes, Cow::Borrowed(_)) && !p.dollar_set);
    }

    #[test]
    fn hostile_return_options_are_refused() {
        for bad in [
            "a SEARCH RETURN (MIN FOO) ALL\r\n",
            "a SEARCH RETURN ((MIN)) ALL\r\n",
            "a SEARCH RETURN (MIN\r\n",
            "a SEARCH RETURN MIN ALL\r\n",
            "a SEARCH RETURN\r\n",
            "a SEARCH RETURN (\"MIN\") ALL\r\n",
            "a SEARCH RETURN ({3}\r\nMIN) ALL\r\n",
            "a SEARCH RETURN (PARTIAL 1:10) ALL\r\n",
        ] {
            assert!(prepare(bad.as_bytes()).is_err(), "{bad:?}");
        }
        let many = format!("a SEARCH RETURN ({}) ALL\r\n", "MIN ".repeat(17));
        assert_eq!(
            prepare(many.as_bytes()).unwrap_err(),
            Malformed("too many RETURN options")
        );
    }

    #[test]
    fn dollar_is_found_only_where_a_key_or_a_set_stands() {
        let p = prep("a SEARCH $\r\n");
        assert_eq!(p.dollar_keys, vec![9..10]);
        assert_eq!(p.substituted(b"UID 4:9"), b"a SEARCH UID 4:9\r\n");
        let p = prep("a UID SEARCH RETURN (COUNT) UID $ SUBJECT $\r\n");
        // `SUBJECT $` is a subject containing "$", not the saved result.
        assert_eq!(text(&p), "a UID SEARCH UID $ SUBJECT $\r\n");
        assert_eq!(p.dollar_keys, vec![13..18]);
        assert_eq!(
            p.substituted(b"NOT ALL"),
            b"a UID SEARCH NOT ALL SUBJECT $\r\n"
        );
        let p = prep("a SEARCH OR $ (NOT $ FROM {1}\r\n$) HEADER $ $ CHARSET\r\n");
        assert_eq!(p.dollar_keys.len(), 2);
        let p = prep("a SEARCH CHARSET UTF-8 $\r\n");
        assert_eq!(p.dollar_keys.len(), 1);
        let p = prep("a UID FETCH $ (FLAGS)\r\n");
        assert!(p.dollar_set);
        assert_eq!(text(&p), "a UID FETCH 1 (FLAGS)\r\n");
        let p = prep("a FETCH $ FAST\r\n");
        assert!(p.dollar_set);
        let p = prep("a STORE $ +FLAGS (\\Seen)\r\n");
        assert!(p.dollar_set);
        let p = prep("a FETCH $1 FAST\r\n");
        assert!(!p.dollar_set, "only a bare $");
    }

    #[test]
    fn hostile_searches_never_panic_and_stay_bounded() {
        let deep = format!("a SEARCH {}ALL{}\r\n", "(".repeat(40), ")".repeat(40));
        assert_eq!(
            prepare(deep.as_bytes()).unwrap_err(),
            Malformed("search keys nested too deep")
        );
        let nots = format!("a SEARCH {}ALL\r\n", "NOT ".repeat(40));
        assert!(prepare(nots.as_bytes()).is_err());
        let dollars = format!("a SEARCH {}\r\n", "$ ".repeat(65));
        assert_eq!(
            prepare(dollars.as_bytes()).unwrap_err(),
            Malformed("too many $ in one SEARCH")
        );
        // Unbalanced, truncated, lying literals, binary junk: passed on for the codec to refuse.
        for junk in [
            &b"a SEARCH ((((\r\n"[..],
            b"a SEARCH ))))$\r\n",
            b"a SEARCH SUBJECT {999}\r\nabc\r\n",
            b"a SEARCH SUBJECT {99999999999999999999}\r\n\r\n",
            b"a SEARCH SUBJECT \"unterminated\r\n",
            b"a SEARCH \x00\xff\x01 $\r\n",
            b"a SEARCH ~{2}\r\n$$ $\r\n",
            b"a",
            b"",
            b"\r\n",
            b"a UID",
            b"a UID FETCH",
            b"a SEARCH RETURN (MIN) ",
        ] {
            let _ = prepare(junk);
        }
        // A huge set is one atom: scanned once, kept as it is.
        let huge = format!("a UID SEARCH UID {}\r\n", "1:2,".repeat(10_000) + "3");
        let p = prepare(huge.as_bytes()).unwrap();
        assert!(p.dollar_keys.is_empty() && matches!(p.bytes, Cow::Borrowed(_)));
    }

    #[test]
    fn extended_list_becomes_plain_lists_for_the_codec() {
        // A plain LIST is the codec's alone.
        let p = prep("a LIST \"\" *\r\n");
        assert!(p.list.is_none() && matches!(p.bytes, Cow::Borrowed(_)));
        let p = prep("a LIST (SUBSCRIBED RECURSIVEMATCH) \"\" (\"pub*\" {3}\r\nx%y) RETURN (CHILDREN STATUS (MESSAGES SIZE))\r\n");
        let l = p.list.clone().unwrap();
        assert!(l.select_subscribed && l.return_children && !l.return_subscribed);
        assert_eq!(text(&p), "a LIST \"\" \"pub*\"\r\n");
        assert_eq!(l.patterns[1], b"a LIST \"\" {3}\r\nx%y\r\n");
        assert_eq!(l.status.unwrap(), b"a STATUS INBOX (MESSAGES SIZE)\r\n");
        let p = prep("a LIST \"\" * RETURN ()\r\n");
        assert_eq!(p.list.unwrap().patterns.len(), 1);
        let p = prep("b LIST \"\" ({5}\r\npub@*) RETURN ()\r\n");
        assert_eq!(text(&p), "b LIST \"\" {5}\r\npub@*\r\n");
    }

    #[test]
    fn hostile_list_options_are_refused() {
        for bad in [
            "a LIST (BOGUS) \"\" *\r\n",
            "a LIST (RECURSIVEMATCH) \"\" *\r\n",
            "a LIST ((SUBSCRIBED)) \"\" *\r\n",
            "a LIST (SUBSCRIBED \"\" *\r\n",
            "a LIST (SUBSCRIBED)\r\n",
            "a LIST \"\" ()\r\n",
            "a LIST \"\" ((*))\r\n",
            "a LIST \"\" * RETURN (BOGUS)\r\n",
            "a LIST \"\" * RETURN (STATUS MESSAGES)\r\n",
            "a LIST \"\" * RETURN (STATUS (MESSAGES (X)))\r\n",
            "a LIST \"\" * RETURN (STATUS (MESSAGES) STATUS (SIZE))\r\n",
            "a LIST \"\" * RETURN (CHILDREN) extra\r\n",
            "a LIST \"\" * RETURN CHILDREN\r\n",
        ] {
            assert!(prepare(bad.as_bytes()).is_err(), "{bad:?}");
        }
        let many = format!("a LIST \"\" ({})\r\n", "* ".repeat(17));
        assert_eq!(
            prepare(many.as_bytes()).unwrap_err(),
            Malformed("too many LIST patterns")
        );
        let opts = format!("a LIST ({}) \"\" *\r\n", "REMOTE ".repeat(40));
        assert!(prepare(opts.as_bytes()).is_err());
    }

    #[test]
    fn sets_and_esearch_lines() {
        assert_eq!(sequence_set(&[1, 2, 3, 7, 9, 10]), "1:3,7,9:10");
        assert_eq!(sequence_set(&[]), "");
        assert_eq!(sequence_set(&[u32::MAX]), "4294967295");
        let uids = [3, 5, 9, 10, 20];
        assert_eq!(uid_key(&uids, &[0, 1, 2, 4]), b"UID 3:9,20");
        assert_eq!(uid_key(&uids, &[]), b"NOT ALL");
        assert_eq!(
            uid_key(&uids, &[7]),
            b"NOT ALL",
            "gone indexes name nothing"
        );
        let r = SearchReturn {
            min: true,
            max: true,
            count: true,
            all: true,
            save: false,
        };
        assert_eq!(
            esearch_line("A1", true, &r, &[3, 4, 9]),
            b"* ESEARCH (TAG \"A1\") UID MIN 3 MAX 9 ALL 3:4,9 COUNT 3\r\n"
        );
        assert_eq!(
            esearch_line("A2", false, &r, &[]),
            b"* ESEARCH (TAG \"A2\") COUNT 0\r\n"
        );
        let minmax = SearchReturn {
            min: true,
            max: true,
            save: true,
            ..Default::default()
        };
        assert_eq!(minmax.saved(&[2, 5, 8]), vec![2, 8]);
        assert_eq!(minmax.saved(&[5]), vec![5]);
        assert_eq!(minmax.saved(&[]), Vec::<u32>::new());
        let with_count = SearchReturn {
            min: true,
            count: true,
            save: true,
            ..Default::default()
        };
        assert_eq!(with_count.saved(&[2, 5, 8]), vec![2, 5, 8]);
    }
}
