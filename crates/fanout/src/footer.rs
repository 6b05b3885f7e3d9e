//! The list footer template, parsed once per post into text and per-member slots.
//!
//! Placeholders: `{{name}}`, `{{email}}`, `{{unsubscribe_url}}`, `{{list_name}}`,
//! `{{list_address}}` and any member custom field `{{field}}` (names of ASCII letters, digits,
//! `_`, `-`, `.`; spaces inside the braces are ignored). `{{list_name}}` and `{{list_address}}`
//! are the same for every copy, so they become text here. A placeholder naming no field of a
//! member renders empty; text that is not a placeholder (e.g. `{{ not valid! }}`) stays literal.
//!
//! Invariants: the footer's text uses CRLF line endings and ends with CRLF. Each member slot
//! carries a byte cap chosen so that the line it sits on stays within 998 octets (RFC 5322
//! §2.1.1) whatever the member data: the line's free space is shared among its slots, and no
//! slot gets more than [`MAX_VALUE_BYTES`]. The unsubscribe URL is never cut (a cut URL is
//! useless); it is bounded by construction (see `ListContext` checks in the crate root).
//!
//! SECURITY: the template comes from the list administrator; member values are untrusted and
//! are sanitized at splice time by `encode::write_value`.

use crate::encode::MAX_VALUE_BYTES;

/// Longest line a message may carry, without its CRLF (RFC 5322 §2.1.1).
const MAX_LINE: usize = 998;
/// Longest placeholder name considered; longer `{{...}}` runs are literal text.
const MAX_PLACEHOLDER: usize = 64;

/// What a footer slot is filled with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Value {
    Name,
    Email,
    UnsubscribeUrl,
    Field(String),
}

/// One piece of a parsed footer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Piece {
    Text(String),
    Slot { value: Value, cap: usize },
}

/// Parses `template` into pieces. `list_name` and `list_address` are substituted now.
pub(crate) fn parse(template: &str, list_name: &str, list_address: &str) -> Vec<Piece> {
    let text = normalize_lines(template);
    let mut pieces: Vec<Piece> = Vec::new();
    let mut rest = text.as_str();
    while let Some(open) = rest.find("{{") {
        let Some((name, after)) = placeholder(&rest[open + 2..]) else {
            push_text(&mut pieces, &rest[..open + 2]);
            rest = &rest[open + 2..];
            continue;
        };
        push_text(&mut pieces, &rest[..open]);
        match name {
            "list_name" => push_text(&mut pieces, list_name),
            "list_address" => push_text(&mut pieces, list_address),
            _ => pieces.push(Piece::Slot {
                value: match name {
                    "name" => Value::Name,
                    "email" => Value::Email,
                    "unsubscribe_url" => Value::UnsubscribeUrl,
                    other => Value::Field(other.to_string()),
                },
                cap: MAX_VALUE_BYTES,
            }),
        }
        rest = after;
    }
    push_text(&mut pieces, rest);
    cap_lines(&mut pieces);
    pieces
}

/// `name }}…` → (name, text after the braces), or None when this is not a placeholder.
fn placeholder(s: &str) -> Option<(&str, &str)> {
    // Searched as bytes: a byte cap can fall inside a multi-byte character, and slicing the
    // `str` there panicked (found by the footer_splice fuzz target). `}` is ASCII, so `close`
    // is always a character boundary.
    let window = &s.as_bytes()[..s.len().min(MAX_PLACEHOLDER + 2)];
    let close = window.windows(2).position(|w| w == b"}}")?;
    let name = s[..close].trim_matches(' ');
    let valid = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    valid.then(|| (name, &s[close + 2..]))
}

fn push_text(pieces: &mut Vec<Piece>, s: &str) {
    if s.is_empty() {
        return;
    }
    if let Some(Piece::Text(t)) = pieces.last_mut() {
        t.push_str(s);
    } else {
        pieces.push(Piece::Text(s.to_string()));
    }
}

/// CRLF line endings everywhere, a final CRLF, and no other control characters (a footer is
/// text; a stray NUL or ESC from a web form would only confuse readers).
fn normalize_lines(s: &str) -> String {
    let unified = s.replace("\r\n", "\n").replace('\r', "\n");
    let mut out = String::with_capacity(unified.len() + 8);
    for c in unified.chars() {
        match c {
            '\n' => out.push_str("\r\n"),
            '\t' => out.push('\t'),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    if !out.ends_with("\r\n") {
        out.push_str("\r\n");
    }
    out
}

/// Gives each slot a cap so its line stays within [`MAX_LINE`] octets.
fn cap_lines(pieces: &mut [Piece]) {
    let mut line_start = 0; // index of the first piece touching the current line
    let mut static_len = 0; // text bytes on the current line
    let mut slots = 0; // slots on the current line
    for i in 0..pieces.len() {
        let Piece::Text(t) = &pieces[i] else {
            slots += 1;
            continue;
        };
        let first_len = t.find("\r\n").unwrap_or(t.len());
        static_len += first_len;
        let Some(last_len) = t.rfind("\r\n").map(|p| t.len() - p - 2) else {
            continue;
        };
        set_caps(&mut pieces[line_start..i], static_len, slots);
        line_start = i;
        static_len = last_len;
        slots = 0;
    }
    set_caps(&mut pieces[line_start..], static_len, slots);
}

fn set_caps(pieces: &mut [Piece], static_len: usize, slots: usize) {
    if slots == 0 {
        return;
    }
    let share = MAX_LINE.saturating_sub(static_len) / slots;
    for p in pieces {
        if let Piece::Slot { cap, .. } = p {
            *cap = share.min(MAX_VALUE_BYTES);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(value: Value, cap: usize) -> Piece {
        Piece::Slot { value, cap }
    }

    /// Regression (fuzz/regressions/footer_splice/): `{{` followed by non-ASCII text longer
    /// than a placeholder name panicked: the search window was cut inside a character.
    #[test]
    fn non_ascii_after_open_braces_is_literal_text() {
        let template = format!("{{{{f1}}}} and {{{{{}", "\u{10f4f4}".repeat(40));
        let pieces = parse(&template, "L", "l@example.org");
        assert!(matches!(&pieces[0], Piece::Slot { value: Value::Field(f), .. } if f == "f1"));
        assert!(matches!(&pieces[1], Piece::Text(t) if t.starts_with(" and {{")));
        let near = format!("{{{{{}}}}}", "é".repeat(40));
        assert!(matches!(
            &parse(&near, "L", "l@example.org")[0],
            Piece::Text(_)
        ));
    }

    #[test]
    fn parses_placeholders_and_list_values() {
        let p = parse("Hi {{ name }} ({{email}})\n{{list_name}} <{{list_address}}>\n{{unsubscribe_url}}\n{{company}}{{x y}}", "Dev", "dev@l.example");
        assert_eq!(
            p,
            vec![
                Piece::Text("Hi ".into()),
                slot(Value::Name, 496),
                Piece::Text(" (".into()),
                slot(Value::Email, 496),
                Piece::Text(")\r\nDev <dev@l.example>\r\n".into()),
                slot(Value::UnsubscribeUrl, 998),
                Piece::Text("\r\n".into()),
                slot(Value::Field("company".into()), 998 - 7),
                Piece::Text("{{x y}}\r\n".into()),
            ]
        );
    }

    #[test]
    fn caps_never_exceed_value_limit() {
        let p = parse("{{a}}", "", "");
        assert_eq!(
            p[0],
            slot(Value::Field("a".into()), MAX_VALUE_BYTES.min(998))
        );
    }

    #[test]
    fn unterminated_braces_are_text() {
        let p = parse("a {{ b", "", "");
        assert_eq!(p, vec![Piece::Text("a {{ b\r\n".into())]);
    }
}
