//! Mail addresses (RFC 5321 `Mailbox`, RFC 6531 international form): validated once,
//! normalized once.
//!
//! Normalization, so that one mailbox is one `Address` (one member, never two):
//! - the local part is kept as given except for Unicode normalization to NFC (RFC 6532 §3.1):
//!   `jo\u{308}rg` (NFD) and `jörg` (NFC) are the same mailbox; RFC 5321 §2.4 leaves its case to
//!   the receiving host, so case is kept;
//! - the domain is lower-cased and, when it is an IDN, mapped by UTS-46 (IDNA2008,
//!   non-transitional: `ß` stays `ß`) and stored as its **A-label** (`münchen.example` →
//!   `xn--mnchen-3ya.example`; `ß.example` and `xn--zca.example` are the same domain). The
//!   A-label is the one form every other part already speaks: DNS lookups, MX routing, shaping
//!   by domain, the directory's unique index and VERP return paths stay ASCII, and an address
//!   whose only non-ASCII part is its domain needs no SMTPUTF8 at all (RFC 6531 §3.2 lets an
//!   SMTPUTF8 envelope carry either form). [`Address::domain_unicode`] gives the U-label form
//!   for display.
//!
//! Limits: local part ≤ 64 octets (after NFC; UTF-8 octets, not characters), domain ≤ 253
//! octets and labels ≤ 63 octets in A-label form (RFC 5321 §4.5.3.1). Address literals
//! (`user@[127.0.0.1]`) are refused because a list member must be reachable through DNS.
//!
//! SECURITY: the checks here are what make an `Address` safe to splice into an SMTP command or a
//! header: no whitespace outside quotes, no control characters (C0, DEL, C1), no CR or LF
//! anywhere, no U+2028/U+2029 line separators, no bidirectional overrides or BOM (they make an
//! address display as another), no `<>`. A Rust `str` is valid UTF-8, so overlong and invalid
//! sequences were refused before this point (by the SMTP parser or the CSV/JSON reader).
//! [`Address::needs_smtputf8`] tells a sender whether the address may leave in a plain envelope.

use serde::{Deserialize, Serialize};
use std::fmt;
use unicode_normalization::UnicodeNormalization;

/// Longest local part RFC 5321 allows.
pub const MAX_LOCAL_LEN: usize = 64;
/// Longest domain name (without a trailing dot).
pub const MAX_DOMAIN_LEN: usize = 253;
const MAX_LABEL_LEN: usize = 63;
/// Longest local part looked at before normalization: NFC never grows a string by more than a
/// small factor, so anything longer cannot fit [`MAX_LOCAL_LEN`] and is refused before the work.
const MAX_RAW_LOCAL_LEN: usize = 4 * MAX_LOCAL_LEN;

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
    #[error("domain {0:?} is not a valid internationalized domain name")]
    BadIdn(String),
}

/// On the wire an address is its text (`local@domain`, the serde attribute above), so its
/// OpenAPI schema is a string in the `email` format.
impl utoipa::PartialSchema for Address {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, Type};
        ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Email)))
            .into()
    }
}

impl utoipa::ToSchema for Address {}

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
        let at = s.rfind('@').ok_or(AddressError::MissingAt)?;
        Address::from_parts(&s[..at], &s[at + 1..])
    }

    /// Builds an address from parts that are validated and normalized the same way as
    /// [`Address::parse`].
    pub fn from_parts(local: &str, domain: &str) -> Result<Address, AddressError> {
        let local = normalize_local(local)?;
        Ok(Address {
            local,
            domain: normalize_domain(domain)?,
        })
    }

    /// The local part as given, in NFC.
    pub fn local(&self) -> &str {
        &self.local
    }

    /// The domain, lower-cased, IDNs as A-labels (`xn--…`): the form DNS and SMTP without
    /// SMTPUTF8 use.
    pub fn domain(&self) -> &str {
        &self.domain
    }

    /// The domain with its A-labels shown as U-labels (`münchen.example`), for people to read.
    /// Never used on the wire or as a key: [`Address::domain`] is the stored form.
    pub fn domain_unicode(&self) -> String {
        if !self.domain.split('.').any(is_a_label) {
            return self.domain.clone();
        }
        match idna::domain_to_unicode(&self.domain) {
            (unicode, Ok(())) => unicode,
            // A malformed A-label kept from an older Herald (see `normalize_domain`): shown as
            // stored, the exact form.
            (_, Err(_)) => self.domain.clone(),
        }
    }

    /// True when this address cannot travel in a plain (RFC 5321) envelope: its local part has
    /// UTF-8 beyond ASCII, so a copy to or from it needs `SMTPUTF8` (RFC 6531 §3.4). The domain
    /// never decides it: it is stored as A-labels.
    pub fn needs_smtputf8(&self) -> bool {
        !self.local.is_ascii()
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

    /// Whether `self` and `other` name the same mailbox under Herald's one rule, the one the
    /// member table's uniqueness uses (`COLLATE NOCASE` in SQLite, `lower(address COLLATE "C")`
    /// in PostgreSQL): ASCII letters compare without case, everything else exactly. RFC 5321
    /// §2.4 leaves a local part's case to its host, but in practice hosts ignore ASCII case,
    /// and two members differing only in it would get every post twice. Non-ASCII letters of a
    /// UTF-8 local part (already NFC) are not folded: Unicode case folding of local parts is
    /// the receiving host's business (RFC 6531 §3.2), so `Jörg` and `JÖRG` are two mailboxes
    /// while `Jörg` and `JöRG` are one. Domains are lower-case A-labels, so they compare as is.
    pub fn same_mailbox(&self, other: &Address) -> bool {
        self.domain == other.domain && self.local.eq_ignore_ascii_case(&other.local)
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

/// RFC 5322 `atext`: the characters allowed in a dot-atom besides dots, extended by RFC 6531
/// §3.3 with `UTF8-non-ascii` (see [`is_allowed_non_ascii`]).
fn is_atext(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-/=?^_`{|}~".contains(c) || is_allowed_non_ascii(c)
}

/// A character beyond ASCII that may appear in a local part. RFC 6531 admits any
/// `UTF8-non-ascii`; we refuse the ones that break a line or a log (C1 controls, U+0085 NEL,
/// U+2028/U+2029), that are invisible whitespace (U+00A0, U+3000, …: a space outside quotes is
/// refused in ASCII too), and that make an address display as another (bidirectional
/// embeddings, overrides and isolates, U+FEFF).
fn is_allowed_non_ascii(c: char) -> bool {
    !c.is_ascii()
        && !c.is_control()
        && !c.is_whitespace()
        && !matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
}

/// Validates a local part and returns it in NFC.
fn normalize_local(local: &str) -> Result<String, AddressError> {
    if local.is_empty() {
        return Err(AddressError::EmptyLocal);
    }
    if local.len() > MAX_RAW_LOCAL_LEN {
        return Err(AddressError::LocalTooLong);
    }
    // Validate before normalizing, so a refused character is reported as the peer wrote it
    // (NFC maps no allowed character to a refused one, nor the reverse: controls, spaces and
    // format characters have no decomposition).
    validate_local(local)?;
    let nfc: String = if local.is_ascii() {
        local.to_string()
    } else {
        local.nfc().collect()
    };
    if nfc.len() > MAX_LOCAL_LEN {
        return Err(AddressError::LocalTooLong);
    }
    Ok(nfc)
}

fn validate_local(local: &str) -> Result<(), AddressError> {
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

/// RFC 5321 `Quoted-string` (RFC 6531 §3.3: `qtextSMTP` and `quoted-pairSMTP` extended with
/// `UTF8-non-ascii`): printable ASCII and space, with `\` escaping one printable character.
/// Control characters (CR, LF, NUL, C1, …) are refused even when escaped.
fn validate_quoted_local(local: &str) -> Result<(), AddressError> {
    let inner = local
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .filter(|_| local.len() >= 2)
        .ok_or(AddressError::UnterminatedQuote)?;
    let printable = |c: char| (' '..='~').contains(&c) || is_allowed_non_ascii(c);
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e) if printable(e) => {}
                Some(e) => return Err(AddressError::BadLocalChar(e)),
                None => return Err(AddressError::UnterminatedQuote),
            },
            '"' => return Err(AddressError::UnterminatedQuote),
            c if printable(c) => {}
            c => return Err(AddressError::BadLocalChar(c)),
        }
    }
    Ok(())
}

/// An A-label (`xn--…`, any case): an IDN label in its ASCII form.
fn is_a_label(label: &str) -> bool {
    label
        .get(..4)
        .is_some_and(|p| p.eq_ignore_ascii_case("xn--"))
}

/// Validates a domain and returns it lower-cased, IDN labels as A-labels.
fn normalize_domain(domain: &str) -> Result<String, AddressError> {
    let domain = domain.strip_suffix('.').unwrap_or(domain);
    if domain.is_empty() {
        return Err(AddressError::EmptyDomain);
    }
    if domain.starts_with('[') {
        return Err(AddressError::AddressLiteral);
    }
    // An IDN written in Unicode: UTS-46 with IDNA2008's rules (STD3 ASCII, hyphen and bidi
    // checks, DNS lengths), non-transitional, to A-labels. A U-label domain longer than four
    // times the DNS limit cannot fit it in A-label form: refused before the work. An ASCII
    // domain is only lower-cased and checked by the LDH rules below, A-labels included, as
    // before SMTPUTF8: a valid A-label is already in the form UTS-46 gives (`XN--ZCA` and
    // `ß` both become `xn--zca`), and refusing a malformed one now would make members an older
    // Herald stored unreadable (it can receive no mail either way: DNS has no such name).
    let domain = if !domain.is_ascii() {
        if domain.len() > 4 * MAX_DOMAIN_LEN {
            return Err(AddressError::DomainTooLong);
        }
        idna::domain_to_ascii_strict(domain)
            .map_err(|_| AddressError::BadIdn(domain.chars().take(70).collect()))?
    } else {
        domain.to_ascii_lowercase()
    };
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
    Ok(domain)
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

    #[test]
    fn international_addresses_are_accepted_and_normalized() {
        let a = Address::parse("Jörg@München.Example").expect("valid");
        assert_eq!(a.local(), "Jörg");
        assert_eq!(a.domain(), "xn--mnchen-3ya.example");
        assert_eq!(a.domain_unicode(), "münchen.example");
        assert!(a.needs_smtputf8());
        let cjk = Address::parse("用户@例子.example").expect("valid");
        assert_eq!(cjk.to_string(), "用户@xn--fsqu00a.example");
        // An ASCII local part at an IDN domain travels in a plain envelope.
        let ascii = Address::parse("info@münchen.example").expect("valid");
        assert_eq!(ascii.to_string(), "info@xn--mnchen-3ya.example");
        assert!(!ascii.needs_smtputf8());
        assert!(!Address::parse("a@b.example")
            .expect("valid")
            .needs_smtputf8());
        // Mixed scripts are fine (RFC 6531 leaves the choice to the mailbox's owner).
        assert!(Address::parse("jörg.用户.ñandú.Ωμέγα@例子.example").is_ok());
        // Quoted UTF-8 local parts (RFC 6531 qtextSMTP).
        assert!(Address::parse("\"jörg m\"@example.org").is_ok());
    }

    #[test]
    fn one_mailbox_is_one_address_whatever_its_form() {
        // NFC and NFD local parts; U-label, A-label and upper-case domains; ß non-transitional.
        let same = [
            (
                "j\u{f6}rg@m\u{fc}nchen.example",
                "jo\u{308}rg@mu\u{308}nchen.example",
            ),
            ("jörg@münchen.example", "jörg@xn--mnchen-3ya.example"),
            ("jörg@münchen.example", "jörg@MÜNCHEN.EXAMPLE"),
            ("jörg@münchen.example", "jörg@XN--MNCHEN-3YA.example"),
            ("a@ß.example", "a@xn--zca.example"),
            // UTS-46 maps an invisible zero-width space away: the same domain, not a look-alike.
            ("a@a\u{200b}.example", "a@a.example"),
        ];
        for (x, y) in same {
            let (x, y) = (Address::parse(x).expect(x), Address::parse(y).expect(y));
            assert_eq!(x, y);
            assert_eq!(x.to_string(), y.to_string());
        }
        assert_eq!(
            Address::parse("a@ß.example").expect("valid").domain(),
            "xn--zca.example",
            "non-transitional: ß is not mapped to ss"
        );
        // Case of a local part is the receiving host's business: kept.
        assert_ne!(
            Address::parse("Jörg@x.example").expect("valid"),
            Address::parse("jörg@x.example").expect("valid")
        );
    }

    #[test]
    fn refuses_hostile_international_input() {
        for (input, bad) in [
            ("a\u{85}b@ex.com", '\u{85}'),         // C1 NEL
            ("a\u{9b}b@ex.com", '\u{9b}'),         // C1 CSI
            ("a\u{2028}b@ex.com", '\u{2028}'),     // line separator
            ("a\u{2029}b@ex.com", '\u{2029}'),     // paragraph separator
            ("a\u{a0}b@ex.com", '\u{a0}'),         // no-break space
            ("a\u{3000}b@ex.com", '\u{3000}'),     // ideographic space
            ("adm\u{202e}nib@ex.com", '\u{202e}'), // right-to-left override
            ("\u{feff}a@ex.com", '\u{feff}'),
            ("\"a\u{2028}\"@ex.com", '\u{2028}'),
            ("\"a\\\u{85}\"@ex.com", '\u{85}'),
        ] {
            assert_eq!(
                Address::parse(input),
                Err(AddressError::BadLocalChar(bad)),
                "{input:?}"
            );
        }
        // Length is counted in octets after NFC: 22 three-octet characters are 66 octets.
        let cjk = format!("{}@ex.com", "用".repeat(22));
        assert_eq!(Address::parse(&cjk), Err(AddressError::LocalTooLong));
        assert!(Address::parse(&format!("{}@ex.com", "用".repeat(21))).is_ok());
        // NFD that fits only once composed is fine; huge input is refused before the work.
        let nfd = format!("{}@ex.com", "o\u{308}".repeat(32));
        assert_eq!(Address::parse(&nfd).expect("fits in NFC").local().len(), 64);
        let huge = format!("{}@ex.com", "o\u{308}".repeat(1000));
        assert_eq!(Address::parse(&huge), Err(AddressError::LocalTooLong));
        // Invalid IDNs: disallowed code points, controls, overlong.
        for input in [
            "a@ex\u{2028}.com",
            "a@ex\u{85}.com",
            "a@☃_.example",
            &format!("a@{}.example", "ü".repeat(70)),
        ] {
            assert!(
                matches!(
                    Address::parse(input),
                    Err(AddressError::BadIdn(_) | AddressError::DomainTooLong)
                ),
                "{input:?}: {:?}",
                Address::parse(input)
            );
        }
        // A malformed A-label in ASCII is kept as an older Herald stored it (LDH rules only),
        // and shown as is.
        let legacy = Address::parse("a@XN--ZZ.example").expect("as before international addresses");
        assert_eq!(legacy.domain(), "xn--zz.example");
        assert_eq!(legacy.domain_unicode(), "xn--zz.example");
        assert!(matches!(
            Address::parse("a@xn--.example"),
            Err(AddressError::BadLabel(_))
        ));
        let long = format!("a@{}", "ü".repeat(2000));
        assert_eq!(Address::parse(&long), Err(AddressError::DomainTooLong));
    }
}
