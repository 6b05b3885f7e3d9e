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
//! - `[UID] FETCH/STORE/COPY/MOVE/EXPUNGE $ …`: the `$` becomes `1` for the codec and the session
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

mod list;
mod scan;

pub use list::{ListOptions, MAX_PATTERNS};
use scan::{Kind, Scanner, Token};

/// RETURN options accepted in one SEARCH (each of the five, repeated, fits).
pub const MAX_RETURN_OPTIONS: usize = 16;
/// Parentheses, NOT and OR nest at most this deep in the scan for `$`.
pub const MAX_DEPTH: usize = 32;
/// `$` search keys in one command.
pub const MAX_DOLLARS: usize = 64;

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
    /// The FETCH/STORE/COPY/MOVE/EXPUNGE set was `$` (the codec was given `1`).
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
    /// `NOT ALL`), if that stays under `max_bytes`: a large, scattered saved result used many
    /// times in one command would otherwise make a command of any size.
    pub fn substituted(&self, with: &[u8], max_bytes: usize) -> Result<Vec<u8>, Malformed> {
        let size = with
            .len()
            .saturating_mul(self.dollar_keys.len())
            .saturating_add(self.bytes.len());
        if size > max_bytes {
            return Err(Malformed(
                "the saved result is too large to use that many times",
            ));
        }
        let mut out = Vec::with_capacity(size);
        let mut at = 0;
        for span in &self.dollar_keys {
            out.extend_from_slice(&self.bytes[at..span.start]);
            out.extend_from_slice(with);
            at = span.end;
        }
        out.extend_from_slice(&self.bytes[at..]);
        Ok(out)
    }
}

/// Reads `msg` (one complete command) for RETURN options and `$`; see the module header.
pub fn prepare(msg: &[u8]) -> Result<Prepared<'_>, Malformed> {
    let mut s = Scanner { b: msg, at: 0 };
    let (Some(tag), Some(mut name)) = (s.next(), s.next()) else {
        return Ok(Prepared::untouched(msg));
    };
    if s.is(&name, "LIST") {
        return list::prepare_list(msg, &msg[tag.span], s);
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
    let takes_set = ["FETCH", "STORE", "COPY", "MOVE", "EXPUNGE"]
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
mod tests;
