//! Ban patterns, parsed and compiled (see `bans` for the forms and the limits): a leaf, so
//! the store can hold the compiled set without importing the module that fills it.
//!
//! SECURITY: patterns are matched against addresses from anyone; the `regex` crate runs in
//! time linear in the input (no backtracking) and refuses programs over [`REGEX_SIZE_LIMIT`].

use crate::error::DirectoryError;
use crate::model::is_forbidden_char;
use crate::refusal::Ban;
use herald_types::{Address, ListId};
use std::sync::{Arc, Mutex};

/// Longest ban pattern, in characters.
pub const MAX_BAN_PATTERN_CHARS: usize = 512;
/// Largest compiled regex (and its lazy DFA cache), in bytes.
pub const REGEX_SIZE_LIMIT: usize = 256 * 1024;

/// A parsed, matchable pattern.
#[derive(Debug, Clone)]
pub(crate) enum Matcher {
    Address(String),
    Domain(String),
    Regex(regex::Regex),
}

impl Matcher {
    pub(crate) fn matches(&self, address: &str, domain: &str) -> bool {
        match self {
            Matcher::Address(a) => a.eq_ignore_ascii_case(address),
            Matcher::Domain(d) => d.eq_ignore_ascii_case(domain),
            Matcher::Regex(r) => r.is_match(address),
        }
    }
}

/// Parses and normalizes a pattern: `(stored form, matcher)`, or why it is refused.
pub(crate) fn parse(pattern: &str) -> Result<(String, Matcher), DirectoryError> {
    let bad = |reason: String| DirectoryError::invalid("pattern", reason);
    let p = pattern.trim();
    if p.is_empty() {
        return Err(bad("empty pattern".into()));
    }
    if p.chars().count() > MAX_BAN_PATTERN_CHARS {
        return Err(bad(format!(
            "longer than {MAX_BAN_PATTERN_CHARS} characters"
        )));
    }
    if let Some(c) = p.chars().find(|&c| is_forbidden_char(c)) {
        return Err(bad(format!("contains control character {c:?}")));
    }
    if p.starts_with('^') {
        let re = regex::RegexBuilder::new(p)
            .case_insensitive(true)
            .size_limit(REGEX_SIZE_LIMIT)
            .dfa_size_limit(REGEX_SIZE_LIMIT)
            .nest_limit(64)
            .build()
            .map_err(|e| bad(format!("not a usable regular expression: {e}")))?;
        return Ok((p.to_string(), Matcher::Regex(re)));
    }
    if let Some(domain) = p.strip_prefix('@') {
        let d = ascii_domain(domain).map_err(bad)?;
        // Validated the way an address's domain is: through a dummy address.
        Address::from_parts("x", &d).map_err(|e| bad(format!("not a domain: {e}")))?;
        return Ok((format!("@{d}"), Matcher::Domain(d)));
    }
    let Some(at) = p.rfind('@') else {
        return Err(bad(
            "expected an address, @domain, or a regular expression starting with ^".into(),
        ));
    };
    let d = ascii_domain(&p[at + 1..]).map_err(bad)?;
    let a = Address::from_parts(&p[..at], &d).map_err(|e| bad(format!("not an address: {e}")))?;
    let text = a.to_string().to_ascii_lowercase();
    Ok((text.clone(), Matcher::Address(text)))
}

/// The ASCII (A-label) form of a domain written in Unicode or ASCII, lower-cased.
fn ascii_domain(domain: &str) -> Result<String, String> {
    if domain.is_ascii() {
        return Ok(domain.to_ascii_lowercase());
    }
    idna::domain_to_ascii(domain).map_err(|_| format!("{domain:?} is not a valid IDN domain"))
}

/// Every ban, compiled.
#[derive(Debug, Default)]
pub(crate) struct BanSet {
    pub(crate) bans: Vec<(Ban, Matcher)>,
}

impl BanSet {
    /// The first ban of `list` or global scope that matches `address`.
    pub(crate) fn find(&self, list: Option<ListId>, address: &Address) -> Option<&Ban> {
        let text = address.to_string();
        self.bans
            .iter()
            .filter(|(b, _)| b.list.is_none() || b.list == list)
            .find(|(_, m)| m.matches(&text, address.domain()))
            .map(|(b, _)| b)
    }
}

/// The compiled set and the `(MAX(id), COUNT(*))` it was built from.
pub(crate) type BanCache = Mutex<Option<((i64, i64), Arc<BanSet>)>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn a(s: &str) -> Address {
        Address::parse(s).expect("address")
    }

    fn hit(pattern: &str, address: &str) -> bool {
        let (_, m) = parse(pattern).expect("pattern");
        let addr = a(address);
        m.matches(&addr.to_string(), addr.domain())
    }

    #[test]
    fn exact_domain_and_regex_patterns_match_case_insensitively() {
        assert!(hit("eve@example.com", "Eve@EXAMPLE.com"));
        assert!(hit("EVE@Example.COM", "eve@example.com"));
        assert!(!hit("eve@example.com", "eve2@example.com"));
        assert!(hit("@Example.COM", "anyone@example.com"));
        assert!(
            !hit("@example.com", "x@sub.example.com"),
            "a subdomain is another domain"
        );
        assert!(!hit("@example.com", "x@notexample.com"));
        assert!(hit("^.*@(.*\\.)?spam\\.test$", "x@a.SPAM.test"));
        assert!(hit("^bot[0-9]+@", "BOT42@x.test"));
        assert!(
            !hit("^bot[0-9]+@", "robot42@x.test"),
            "anchored at the start"
        );
    }

    #[test]
    fn idn_domains_are_stored_and_matched_in_ascii_form() {
        let (text, _) = parse("@Bücher.example").expect("idn");
        assert_eq!(text, "@xn--bcher-kva.example");
        assert!(hit("@bücher.example", "x@xn--bcher-kva.example"));
        assert!(hit("Eve@BÜCHER.example", "eve@XN--BCHER-KVA.example"));
        // International addresses (RFC 6531): a UTF-8 local part is banned in its NFC form,
        // so the NFD spelling of the same mailbox is caught too.
        let (text, _) = parse("ëve@Bücher.example").expect("utf-8 local part");
        assert_eq!(text, "ëve@xn--bcher-kva.example");
        assert!(hit("ëve@bücher.example", "e\u{308}ve@bücher.example"));
        assert!(!hit("ëve@example.com", "eve@example.com"));
    }

    /// Hostile patterns: refused with a reason that names the problem, never a panic.
    #[test]
    fn hostile_patterns_are_refused_with_a_reason() {
        for (p, why) in [
            ("", "empty"),
            ("   ", "empty"),
            ("plainword", "expected an address"),
            ("@", "not a domain"),
            ("@exa mple.com", "not a domain"),
            ("eve@", "not a"),
            ("^(unclosed", "not a usable regular expression"),
            ("eve@example.com\r\nX: y", "control character"),
            ("^a\u{0}", "control character"),
        ] {
            let e = parse(p).expect_err(p).to_string();
            assert!(e.contains(why), "{p:?}: {e}");
        }
        let long = format!("^{}", "a".repeat(MAX_BAN_PATTERN_CHARS));
        assert!(parse(&long)
            .expect_err("long")
            .to_string()
            .contains("longer than"));
        // Small text, huge program: counted repetitions blow past the size limit.
        let e = parse("^(\\w{100}){100}{100}")
            .expect_err("huge")
            .to_string();
        assert!(e.contains("not a usable regular expression"), "{e}");
    }

    /// The classic catastrophic-backtracking patterns cost linear time here.
    #[test]
    fn catastrophic_regexes_run_in_linear_time() {
        let local = "a".repeat(64);
        let addr = a(&format!("{local}@{}.test", "b".repeat(60)));
        let text = addr.to_string() + "!";
        let start = Instant::now();
        for p in [
            "^(a+)+$",
            "^(a|a)*$",
            "^(a|aa)+$",
            "^(.*a){20}$",
            "^(\\w+\\s?)*$",
        ] {
            let (_, m) = parse(p).expect(p);
            for _ in 0..100 {
                let _ = m.matches(&text, addr.domain());
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "took {:?}",
            start.elapsed()
        );
    }
}
