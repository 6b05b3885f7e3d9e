//! Mail addresses (RFC 5321 `Mailbox`): validated once, normalized once.
//!
//! Normalization: the domain is lower-cased (domains are case-insensitive); the local part is kept
//! exactly as given, because RFC 5321 §2.4 leaves its case to the receiving host.
//!
//! Limits: local part ≤ 64 octets, domain ≤ 253 octets, labels ≤ 63 octets (RFC 5321 §4.5.3.1).
//! Only ASCII addresses are accepted (no SMTPUTF8); address literals (`user@[127.0.0.1]`) are
//! refused because a list member must be reachable through DNS.
//!
//! SECURITY: the checks here are what make an `Address` safe to splice into an SMTP command or a
//! header: no whitespace outside quotes, no control characters, no CR or LF anywhere, no `<>`.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Longest local part RFC 5321 allows.
pub const MAX_LOCAL_LEN: usize = 64;
/// Longest domain name (without a trailing dot).
pub const MAX_DOMAIN_LEN: usize = 253;
const MAX_LABEL_LEN: usize = 63;

/// A validated, normalized mailbox address.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Address {
    local: String,
    domain: String,
}

/// Why an address was refused. The text names the rule, so an operator importing a CSV or a
/// sender reading a 501 reply can fix the input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    #[error("address is empty")]
    Empty,
    #[error("address has no '@'")]
    MissingAt,
    #[error("local part is empty")]
    EmptyLocal,
    #[error("local part is longer than {MAX_LOCAL_LEN} octets")]
    LocalTooLong,
    #[error("local part has a character that is not allowed: {0:?}")]
    BadLocalChar(char),
    #[error("local part has a misplaced dot")]
    BadDot,
    #[error("quoted local part is not terminated")]
    UnterminatedQuote,
    #[error("domain is empty")]
    EmptyDomain,
    #[error("domain is longer than {MAX_DOMAIN_LEN} octets")]
    DomainTooLong,
    #[error("domain label {0:?} is not a valid host name label")]
    BadLabel(String),
    #[error("address literals are not accepted")]
    AddressLiteral,
    #[error("non-ASCII addresses are not supported")]
    NonAscii,
}

impl Address {
    /// Parses `local@domain`. Surrounding whitespace and one pair of angle brackets are tolerated
    /// (`<a@b>` as found in SMTP paths and CSV files); anything else must be a valid mailbox.
    pub fn parse(input: &str) -> Result<Address, AddressError> {
        let s = input.trim();
        let s = s
            .strip_prefix('<')
            .and_then(|t| t.strip_suffix('>'))
            .unwrap_or(s);
        if s.is_empty() {
            return Err(AddressError::Empty);
        }
        if !s.is_ascii() {
            return Err(AddressError::NonAscii);
        }
        let at = s.rfind('@').ok_or(AddressError::MissingAt)?;
        let (local, domain) = (&s[..at], &s[at + 1..]);
        validate_local(local)?;
        let domain = normalize_domain(domain)?;
        Ok(Address {
            local: local.to_string(),
            domain,
        })
    }

    /// Builds an address from parts that are validated the same way as [`Address::parse`].
    pub fn from_parts(local: &str, domain: &str) -> Result<Address, AddressError> {
        if !local.is_ascii() || !domain.is_ascii() {
            return Err(AddressError::NonAscii);
        }
        validate_local(local)?;
        Ok(Address {
            local: local.to_string(),
            domain: normalize_domain(domain)?,
        })
    }

    /// The local part, exactly as given.
    pub fn local(&self) -> &str {
        &self.local
    }

    /// The domain, lower-cased.
    pub fn domain(&self) -> &str {
        &self.domain
    }

    /// True when the local part is a dot-atom (no quoting needed). Only such addresses can be
    /// carried inside a VERP return path.
    pub fn is_dot_atom(&self) -> bool {
        !self.local.starts_with('"')
    }

    /// True for the `postmaster` mailbox of this address's domain (RFC 5321 §4.5.1): the local
    /// part compares case-insensitively, and the quoted form `"postmaster"` names the same
    /// mailbox (§4.1.2: quoting is only syntax).
    pub fn is_postmaster(&self) -> bool {
        let local = self.local.as_str();
        let bare = local
            .strip_prefix('"')
            .and_then(|l| l.strip_suffix('"'))
            .unwrap_or(local);
        bare.eq_ignore_ascii_case(POSTMASTER)
    }
}

/// The reserved local part every SMTP server must accept mail for (RFC 5321 §4.5.1).
pub const POSTMASTER: &str = "postmaster";

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.local, self.domain)
    }
}

impl std::str::FromStr for Address {
    type Err = AddressError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Address::parse(s)
    }
}

impl TryFrom<String> for Address {
    type Error = AddressError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Address::parse(&s)
    }
}

impl From<Address> for String {
    fn from(a: Address) -> String {
        a.to_string()
    }
}

/// RFC 5322 `atext`: the characters allowed in a dot-atom besides dots.
fn is_atext(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-/=?^_`{|}~".contains(c)
}

fn validate_local(local: &str) -> Result<(), AddressError> {
    if local.is_empty() {
        return Err(AddressError::EmptyLocal);
    }
    if local.len() > MAX_LOCAL_LEN {
        return Err(AddressError::LocalTooLong);
    }
    if local.starts_with('"') {
        return validate_quoted_local(local);
    }
    if local.starts_with('.') || local.ends_with('.') || local.contains("..") {
        return Err(AddressError::BadDot);
    }
    match local.chars().find(|&c| c != '.' && !is_atext(c)) {
        Some(c) => Err(AddressError::BadLocalChar(c)),
        None => Ok(()),
    }
}

/// RFC 5321 `Quoted-string`: printable ASCII and space, with `\` escaping one printable
/// character. Control characters (CR, LF, NUL, …) are refused even when escaped.
fn validate_quoted_local(local: &str) -> Result<(), AddressError> {
    let inner = local
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .filter(|_| local.len() >= 2)
        .ok_or(AddressError::UnterminatedQuote)?;
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e) if (' '..='~').contains(&e) => {}
                Some(e) => return Err(AddressError::BadLocalChar(e)),
                None => return Err(AddressError::UnterminatedQuote),
            },
            '"' => return Err(AddressError::UnterminatedQuote),
            c if (' '..='~').contains(&c) => {}
            c => return Err(AddressError::BadLocalChar(c)),
        }
    }
    Ok(())
}

fn normalize_domain(domain: &str) -> Result<String, AddressError> {
    let domain = domain.strip_suffix('.').unwrap_or(domain);
    if domain.is_empty() {
        return Err(AddressError::EmptyDomain);
    }
    if domain.starts_with('[') {
        return Err(AddressError::AddressLiteral);
    }
    if domain.len() > MAX_DOMAIN_LEN {
        return Err(AddressError::DomainTooLong);
    }
    for label in domain.split('.') {
        let ok = !label.is_empty()
            && label.len() <= MAX_LABEL_LEN
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
        if !ok {
            return Err(AddressError::BadLabel(label.chars().take(70).collect()));
        }
    }
    Ok(domain.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_domain_and_keeps_local_case() {
        let a = Address::parse("  <John.Smith@Example.ORG.>  ").expect("valid");
        assert_eq!(a.local(), "John.Smith");
        assert_eq!(a.domain(), "example.org");
        assert_eq!(a.to_string(), "John.Smith@example.org");
    }

    #[test]
    fn accepts_common_and_quoted_forms() {
        for ok in [
            "a@b.c",
            "first+tag@x-y.example",
            "o'brien@ex.ie",
            "\"john doe\"@ex.com",
            "\"a\\\"b\"@ex.com",
            "user@localhost",
        ] {
            assert!(Address::parse(ok).is_ok(), "{ok} should parse");
        }
    }

    #[test]
    fn refuses_hostile_and_malformed_input() {
        let cases = [
            ("", AddressError::Empty),
            ("nobody", AddressError::MissingAt),
            ("@ex.com", AddressError::EmptyLocal),
            ("a@", AddressError::EmptyDomain),
            ("a..b@ex.com", AddressError::BadDot),
            (".a@ex.com", AddressError::BadDot),
            ("a b@ex.com", AddressError::BadLocalChar(' ')),
            (
                "a\r\nRCPT TO:<x@y>@ex.com",
                AddressError::BadLocalChar('\r'),
            ),
            ("a@ex\r\n.com", AddressError::BadLabel("ex\r\n".into())),
            ("a@[127.0.0.1]", AddressError::AddressLiteral),
            ("a@-ex.com", AddressError::BadLabel("-ex".into())),
            ("a@ex..com", AddressError::BadLabel("".into())),
            ("jöhn@ex.com", AddressError::NonAscii),
            ("\"unterminated@ex.com", AddressError::UnterminatedQuote),
            ("\"a\rb\"@ex.com", AddressError::BadLocalChar('\r')),
            ("a<b>@ex.com", AddressError::BadLocalChar('<')),
        ];
        for (input, want) in cases {
            assert_eq!(Address::parse(input), Err(want), "input {input:?}");
        }
    }

    #[test]
    fn enforces_length_limits() {
        let long_local = format!("{}@ex.com", "a".repeat(65));
        assert_eq!(Address::parse(&long_local), Err(AddressError::LocalTooLong));
        let long_label = format!("a@{}.com", "b".repeat(64));
        assert!(matches!(
            Address::parse(&long_label),
            Err(AddressError::BadLabel(_))
        ));
        let long_domain = format!("a@{}com", "abcdefghi.".repeat(26));
        assert_eq!(
            Address::parse(&long_domain),
            Err(AddressError::DomainTooLong)
        );
    }

    #[test]
    fn postmaster_in_any_case_or_quoting_but_nothing_else() {
        for yes in [
            "postmaster@a.test",
            "PostMaster@a.test",
            "\"POSTMASTER\"@a.test",
        ] {
            assert!(Address::parse(yes).expect("valid").is_postmaster(), "{yes}");
        }
        for no in [
            "postmaster1@a.test",
            "post.master@a.test",
            "x-postmaster@a.test",
        ] {
            assert!(!Address::parse(no).expect("valid").is_postmaster(), "{no}");
        }
    }

    #[test]
    fn serde_round_trip_validates() {
        let a: Address = serde_json::from_str("\"X@Ex.com\"").expect("valid");
        assert_eq!(a.domain(), "ex.com");
        assert!(serde_json::from_str::<Address>("\"bad address\"").is_err());
    }
}
