//! LIST-EXTENDED (RFC 5258) and LIST-STATUS (RFC 5819), which RFC 9051 folds into LIST:
//! `LIST (selection options) reference (patterns) RETURN (return options)`. The options are
//! read here; each pattern becomes a plain `tag LIST reference pattern` and the STATUS items a
//! `tag STATUS INBOX (items)`, which the session has the codec decode, so mailbox names,
//! quoting and literals stay the codec's.
//!
//! Limits: [`MAX_PATTERNS`] patterns, [`super::MAX_RETURN_OPTIONS`] options of each kind and
//! STATUS items; no nesting beyond `STATUS (…)`; an unknown option is an error (RFC 5258 §3).
//!
//! SECURITY: the bytes are the client's; only spans of them are copied into the plain
//! commands, which the codec then judges like any other.

use super::scan::{Kind, Scanner, Token};
use super::{Malformed, Prepared, MAX_RETURN_OPTIONS};
use std::borrow::Cow;
use std::ops::Range;

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

/// `LIST [SP "(" select-opts ")"] SP mailbox SP (pattern / "(" patterns ")")
/// [SP "RETURN" SP "(" return-opts ")"]` (RFC 9051 §6.3.9). A LIST with none of the extended
/// parts is left to the codec as it is.
pub(super) fn prepare_list<'a>(
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
        patterns = pattern_list(&mut s)?;
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

/// A mailbox name or pattern: an atom, a quoted string or a literal.
fn is_string(t: &Token) -> bool {
    matches!(t.kind, Kind::Atom | Kind::Quoted | Kind::Literal)
}

/// The patterns after a `(` (RFC 5258 §3): at least one, at most [`MAX_PATTERNS`].
fn pattern_list(s: &mut Scanner<'_>) -> Result<Vec<Range<usize>>, Malformed> {
    let mut patterns = Vec::new();
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
    Ok(patterns)
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
