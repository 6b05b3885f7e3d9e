//! The MTA-STS policy file (RFC 8461 §3.2) and MX pattern matching (§4.1). No I/O.
//!
//! The parser is strict where a mistake would change what the policy means: the known keys are
//! case-sensitive, `version` must be `STSv1`, `mode` one of `enforce`/`testing`/`none`,
//! `max_age` at most [`MAX_MAX_AGE_SECS`], every `mx` a host name or a `*.`-wildcard, and a policy
//! that is not `none` must name at least one MX pattern. A non-repeated key given twice counts
//! once, with its first value (§3.2). Unknown keys are extensions and are ignored (§3.2). It is
//! lenient only where meaning cannot change: LF or CRLF line ends, blank lines, and a trailing dot
//! on an MX pattern.
//!
//! Limits: at most [`MAX_MX_PATTERNS`] patterns (a real policy has a handful); the body itself is
//! bounded by the fetcher (64 KiB).
//!
//! SECURITY: the text comes from an HTTPS server the recipient domain controls, which may be
//! hostile or broken. Every byte is checked; nothing here panics or allocates beyond the input.

use std::fmt;

/// The longest `max_age` RFC 8461 allows (about one year).
pub const MAX_MAX_AGE_SECS: u64 = 31_557_600;
/// Most `mx` patterns accepted in one policy.
pub const MAX_MX_PATTERNS: usize = 64;

/// What a policy asks of senders.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Deliver only to matching MX hosts over TLS whose certificate verifies.
    Enforce,
    /// Deliver as usual, but report what enforcement would have refused.
    Testing,
    /// The domain has withdrawn its policy.
    None,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::Testing => "testing",
            Mode::None => "none",
        }
    }
}

/// One `mx:` line: an exact host name, or `*.` plus a domain (exactly one more label).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MxPattern {
    wildcard: bool,
    /// Lower case, without a trailing dot (and without the `*.` of a wildcard).
    domain: String,
}

impl MxPattern {
    /// Parses one pattern; None when it is not a valid host name pattern.
    pub fn parse(text: &str) -> Option<MxPattern> {
        let (wildcard, rest) = match text.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let rest = rest.strip_suffix('.').unwrap_or(rest);
        is_host_name(rest).then(|| MxPattern {
            wildcard,
            domain: rest.to_ascii_lowercase(),
        })
    }

    /// RFC 8461 §4.1: case-insensitive; a wildcard stands for exactly one leftmost label.
    pub fn matches(&self, mx_name: &str) -> bool {
        let name = mx_name.strip_suffix('.').unwrap_or(mx_name);
        if !self.wildcard {
            return name.eq_ignore_ascii_case(&self.domain);
        }
        match name.split_once('.') {
            Some((label, parent)) => !label.is_empty() && parent.eq_ignore_ascii_case(&self.domain),
            None => false,
        }
    }
}

impl fmt::Display for MxPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.wildcard {
            f.write_str("*.")?;
        }
        f.write_str(&self.domain)
    }
}

/// A parsed, valid policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub mode: Mode,
    /// How long the policy may be cached, seconds (≤ [`MAX_MAX_AGE_SECS`]).
    pub max_age_secs: u64,
    /// Never empty unless `mode` is `none`.
    pub mx: Vec<MxPattern>,
}

impl Policy {
    /// True when `mx_name` matches one of the policy's patterns.
    pub fn allows(&self, mx_name: &str) -> bool {
        self.mx.iter().any(|p| p.matches(mx_name))
    }

    /// The policy in its canonical file form (what the persistent cache stores; it is parsed
    /// again, by [`parse`], when read back).
    pub fn to_text(&self) -> String {
        let mut s = format!(
            "version: STSv1\nmode: {}\nmax_age: {}\n",
            self.mode.as_str(),
            self.max_age_secs
        );
        for p in &self.mx {
            s.push_str(&format!("mx: {p}\n"));
        }
        s
    }
}

/// Why a policy file was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("line {line} is not `key: value`")]
    Syntax { line: usize },
    #[error("line {line} has a control character")]
    Control { line: usize },
    #[error("no version field, or it is not STSv1")]
    Version,
    #[error("missing or unknown mode")]
    Mode,
    #[error("missing or invalid max_age (0 to {MAX_MAX_AGE_SECS} seconds)")]
    MaxAge,
    #[error("invalid mx pattern on line {line}")]
    Mx { line: usize },
    #[error("more than {MAX_MX_PATTERNS} mx patterns")]
    TooManyMx,
    #[error("mode {0} needs at least one mx pattern")]
    NoMx(&'static str),
}

/// Parses a policy file. See the module docs for what is accepted.
pub fn parse(text: &str) -> Result<Policy, PolicyError> {
    let mut version: Option<&str> = None;
    let mut mode: Option<&str> = None;
    let mut max_age: Option<&str> = None;
    let mut mx = Vec::new();
    for (i, raw) in text.split('\n').enumerate() {
        let line_no = i + 1;
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        if line.is_empty() {
            continue;
        }
        if line.chars().any(|c| c.is_control() && c != '\t') {
            return Err(PolicyError::Control { line: line_no });
        }
        let (key, value) = line
            .split_once(':')
            .ok_or(PolicyError::Syntax { line: line_no })?;
        let value = value.trim_matches([' ', '\t']);
        if !is_field_name(key) || value.is_empty() {
            return Err(PolicyError::Syntax { line: line_no });
        }
        match key {
            "version" => {
                version.get_or_insert(value);
            }
            "mode" => {
                mode.get_or_insert(value);
            }
            "max_age" => {
                max_age.get_or_insert(value);
            }
            "mx" => {
                let p = MxPattern::parse(value).ok_or(PolicyError::Mx { line: line_no })?;
                if mx.len() == MAX_MX_PATTERNS {
                    return Err(PolicyError::TooManyMx);
                }
                mx.push(p);
            }
            _ => {} // an extension (§3.2): ignored
        }
    }
    if version != Some("STSv1") {
        return Err(PolicyError::Version);
    }
    let mode = match mode {
        Some("enforce") => Mode::Enforce,
        Some("testing") => Mode::Testing,
        Some("none") => Mode::None,
        _ => return Err(PolicyError::Mode),
    };
    let max_age_secs = max_age
        .filter(|v| (1..=10).contains(&v.len()) && v.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|&v| v <= MAX_MAX_AGE_SECS)
        .ok_or(PolicyError::MaxAge)?;
    if mx.is_empty() && mode != Mode::None {
        return Err(PolicyError::NoMx(mode.as_str()));
    }
    Ok(Policy {
        mode,
        max_age_secs,
        mx,
    })
}

/// `(ALPHA / DIGIT) *31(ALPHA / DIGIT / "_" / "-" / ".")`: the field-name grammar of RFC 8461
/// (known keys and extensions alike).
fn is_field_name(key: &str) -> bool {
    let b = key.as_bytes();
    (1..=32).contains(&b.len())
        && b[0].is_ascii_alphanumeric()
        && b[1..]
            .iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.'))
}

/// A host name: dot-separated labels of letters, digits and inner hyphens (RFC 5321 `Domain`),
/// at most 253 octets.
pub(crate) fn is_host_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            let b = label.as_bytes();
            (1..=63).contains(&b.len())
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter().all(|&c| c.is_ascii_alphanumeric() || c == b'-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "version: STSv1\r\nmode: enforce\r\nmx: mail.example.com\r\nmx: *.example.net\r\nmx: backupmx.example.com\r\nmax_age: 604800\r\n";

    #[test]
    fn parses_the_rfc_example() {
        let p = parse(GOOD).expect("valid");
        assert_eq!(p.mode, Mode::Enforce);
        assert_eq!(p.max_age_secs, 604_800);
        assert_eq!(p.mx.len(), 3);
        assert!(p.allows("mail.example.com"));
        assert!(p.allows("MAIL.Example.COM."));
        assert!(p.allows("mx1.example.net"));
        assert!(!p.allows("example.net"), "a wildcard needs one more label");
        assert!(!p.allows("a.b.example.net"), "a wildcard is one label only");
        assert!(!p.allows("mail.example.org"));
        assert!(!p.allows("xmail.example.com"));
    }

    #[test]
    fn canonical_text_parses_back_to_the_same_policy() {
        let p = parse(GOOD).expect("valid");
        assert_eq!(parse(&p.to_text()), Ok(p));
    }

    #[test]
    fn lf_line_ends_blank_lines_extensions_and_whitespace_are_accepted() {
        let text = "version: STSv1\n\nmode:testing\nmx:\t mx.example.com. \nmax_age: 0\nx-ext: anything goes: here\n\n";
        let p = parse(text).expect("valid");
        assert_eq!(p.mode, Mode::Testing);
        assert_eq!(p.max_age_secs, 0);
        assert_eq!(p.mx[0].to_string(), "mx.example.com");
    }

    #[test]
    fn first_instance_of_a_repeated_field_wins() {
        let text = "version: STSv1\nmode: testing\nmode: enforce\nmx: a.example\nmax_age: 10\nmax_age: junk\n";
        let p = parse(text).expect("valid");
        assert_eq!((p.mode, p.max_age_secs), (Mode::Testing, 10));
    }

    #[test]
    fn mode_none_needs_no_mx() {
        let p = parse("version: STSv1\nmode: none\nmax_age: 86400\n").expect("valid");
        assert_eq!(p.mode, Mode::None);
        assert!(p.mx.is_empty());
    }

    #[test]
    fn refuses_what_would_change_the_meaning() {
        let base = |extra: &str| format!("version: STSv1\nmax_age: 100\nmx: a.example\n{extra}");
        let cases: Vec<(String, PolicyError)> = vec![
            (base("mode: Enforce\n"), PolicyError::Mode),
            (base("mode: strict\n"), PolicyError::Mode),
            (base(""), PolicyError::Mode),
            (
                "version: STSv2\nmode: enforce\nmx: a.example\nmax_age: 1\n".into(),
                PolicyError::Version,
            ),
            (
                "Version: STSv1\nmode: enforce\nmx: a.example\nmax_age: 1\n".into(),
                PolicyError::Version,
            ),
            (
                "version: STSv1\nmode: enforce\nmx: a.example\nmax_age: 31557601\n".into(),
                PolicyError::MaxAge,
            ),
            (
                "version: STSv1\nmode: enforce\nmx: a.example\nmax_age: -1\n".into(),
                PolicyError::MaxAge,
            ),
            (
                "version: STSv1\nmode: enforce\nmx: a.example\nmax_age: 99999999999\n".into(),
                PolicyError::MaxAge,
            ),
            (
                "version: STSv1\nmode: enforce\nmx: a.example\n".into(),
                PolicyError::MaxAge,
            ),
            (
                "version: STSv1\nmode: enforce\nmax_age: 5\n".into(),
                PolicyError::NoMx("enforce"),
            ),
            (
                base("mode: enforce\nmx: *.*.example\n"),
                PolicyError::Mx { line: 5 },
            ),
            (
                base("mode: enforce\nmx: a..example\n"),
                PolicyError::Mx { line: 5 },
            ),
            (
                base("mode: enforce\nmx: -a.example\n"),
                PolicyError::Mx { line: 5 },
            ),
            (
                base("mode: enforce\nmx: a_b.example\n"),
                PolicyError::Mx { line: 5 },
            ),
            (
                base("mode: enforce\njunk line\n"),
                PolicyError::Syntax { line: 5 },
            ),
            (
                base("mode: enforce\n: value\n"),
                PolicyError::Syntax { line: 5 },
            ),
            (
                base("mode: enforce\nmx:\n"),
                PolicyError::Syntax { line: 5 },
            ),
            (
                base("mode: enforce\nx: a\u{0}b\n"),
                PolicyError::Control { line: 5 },
            ),
            (
                base("mode: enforce\rmx: b.example\n"),
                PolicyError::Control { line: 4 },
            ),
        ];
        for (text, want) in cases {
            assert_eq!(parse(&text), Err(want.clone()), "{text:?}");
        }
    }

    #[test]
    fn bounds_the_number_of_patterns() {
        let mut text = String::from("version: STSv1\nmode: enforce\nmax_age: 1\n");
        for i in 0..=MAX_MX_PATTERNS {
            text.push_str(&format!("mx: mx{i}.example\n"));
        }
        assert_eq!(parse(&text), Err(PolicyError::TooManyMx));
    }

    #[test]
    fn garbage_never_panics() {
        let samples: [&[u8]; 6] = [
            b"",
            b"\xff\xfe\x00",
            b":::::",
            b"version: STSv1\nmode: enforce\nmax_age: 1\nmx: *.",
            b"mx: *\nmx: .\nmx: *..\n",
            &[b'a'; 70_000],
        ];
        for s in samples {
            let text = String::from_utf8_lossy(s);
            assert!(parse(&text).is_err());
        }
    }
}
