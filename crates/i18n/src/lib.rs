//! The languages Herald speaks: the text of every mail it generates comes
//! from a Project Fluent message catalogue (`locales/<lang>/herald.ftl`), chosen by the list's
//! `language` setting. The catalogues are embedded in the binary and parsed once.
//!
//! English (`en`) is the reference: every shipped language has exactly its messages, with the
//! same variables (the tests below check both, so a translation cannot silently drop a link or
//! an address). A message missing from a catalogue at run time falls back to English rather
//! than sending an empty mail.
//!
//! Place in the flow: a leaf (no Herald crate); `lists` asks it for the text of its notices.
//!
//! SECURITY: the catalogues are Herald's own files, compiled in. Variables are inserted as
//! plain text (Fluent never interprets a variable's value), and Unicode isolation marks are
//! off because the output is plain-text mail, where they would show as stray characters.

pub mod overrides;

pub use overrides::{Override, Overrides, TextError, Words};

use fluent_bundle::concurrent::FluentBundle;
use fluent_bundle::{FluentArgs, FluentResource};
use std::sync::OnceLock;
use unic_langid::LanguageIdentifier;

/// The shipped languages: code and the language's own name, English first.
pub const LANGUAGES: &[(&str, &str)] = &[("en", "English"), ("de", "Deutsch")];

/// The codes of [`LANGUAGES`], in the same order (for a form's choices).
pub const CODES: &[&str] = &["en", "de"];

/// The reference language, and the fallback for a message a catalogue lacks.
pub const DEFAULT: &str = "en";

pub(crate) const SOURCES: &[(&str, &str)] = &[
    ("en", include_str!("../locales/en/herald.ftl")),
    ("de", include_str!("../locales/de/herald.ftl")),
];

/// The shipped language a browser's `Accept-Language` header prefers most (RFC 9110 §12.5.4,
/// parsed and matched by fluent-langneg: `de-AT;q=0.9` matches `de`), or `None` when it names
/// none of them (the caller's fallback decides).
pub fn negotiate(accept_language: &str) -> Option<&'static str> {
    use fluent_langneg::{negotiate_languages, NegotiationStrategy};
    // A header is at most a few dozen tags; a hostile one is cut before parsing.
    let header: String = accept_language.chars().take(512).collect();
    let requested = fluent_langneg::accepted_languages::parse(&header);
    let available: Vec<LanguageIdentifier> = CODES.iter().filter_map(|c| c.parse().ok()).collect();
    let chosen = negotiate_languages(&requested, &available, None, NegotiationStrategy::Lookup);
    let first = chosen.first()?.to_string();
    CODES.iter().copied().find(|c| *c == first)
}

/// Whether `code` is a shipped language (the check a list setting is validated with).
pub fn is_shipped(code: &str) -> bool {
    LANGUAGES.iter().any(|(c, _)| *c == code)
}

pub(crate) struct Catalogue {
    bundles: Vec<(&'static str, FluentBundle<FluentResource>)>,
}

pub(crate) fn catalogue() -> &'static Catalogue {
    static CATALOGUE: OnceLock<Catalogue> = OnceLock::new();
    CATALOGUE.get_or_init(|| Catalogue {
        bundles: SOURCES
            .iter()
            .map(|(code, src)| (*code, bundle(code, src)))
            .collect(),
    })
}

/// One language's bundle. A syntax error keeps the messages that did parse (Fluent's own
/// recovery); `the_catalogues_parse_cleanly` fails the build's tests on any.
fn bundle(code: &str, source: &str) -> FluentBundle<FluentResource> {
    plain_bundle(code, parse_resource(source.to_string()))
}

/// A resource with what parsed of `source` (Fluent's recovery keeps every valid entry).
pub(crate) fn parse_resource(source: String) -> FluentResource {
    FluentResource::try_new(source).unwrap_or_else(|(partial, _)| partial)
}

/// A bundle of one resource for plain-text output (no Unicode isolation marks).
pub(crate) fn plain_bundle(code: &str, resource: FluentResource) -> FluentBundle<FluentResource> {
    let id: LanguageIdentifier = code.parse().unwrap_or_default();
    let mut bundle = FluentBundle::new_concurrent(vec![id]);
    bundle.set_use_isolating(false);
    // Two resources cannot clash: each bundle holds one.
    let _ = bundle.add_resource(resource);
    bundle
}

/// The arguments of a message. A value written as a plain whole number (no sign, no leading
/// zero, at most 15 digits, so exact as a Fluent number) is passed as a number, so a message
/// may choose by it (`{ $count -> [one] … *[other] … }`, the language's plural rules) and
/// still prints it as given; everything else is text.
pub(crate) fn fluent_args<'a>(args: &[(&'a str, &'a str)]) -> FluentArgs<'a> {
    let mut out = FluentArgs::new();
    for (name, value) in args {
        let whole = !value.is_empty()
            && value.len() <= 15
            && value.bytes().all(|b| b.is_ascii_digit())
            && (*value == "0" || !value.starts_with('0'));
        match value.parse::<i64>() {
            Ok(n) if whole => out.set(*name, n),
            _ => out.set(*name, *value),
        }
    }
    out
}

/// The text of message `id` in `lang` (English when `lang` is not shipped or lacks the
/// message), with `args` filled in. Never fails: a variable not given shows as `{$name}`, which
/// the tests rule out for every message Herald sends.
pub fn text(lang: &str, id: &str, args: &[(&str, &str)]) -> String {
    let c = catalogue();
    let find = |code: &str| {
        c.bundles
            .iter()
            .find(|(l, _)| *l == code)
            .and_then(|(_, b)| b.get_message(id).and_then(|m| m.value()).map(|p| (b, p)))
    };
    let Some((bundle, pattern)) = find(lang).or_else(|| find(DEFAULT)) else {
        return format!("[{id}]");
    };
    let fluent_args = fluent_args(args);
    let mut errors = Vec::new();
    bundle
        .format_pattern(pattern, Some(&fluent_args), &mut errors)
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Every variable any message uses, each with a value that cannot occur in a catalogue.
    const ARGS: &[(&str, &str)] = &[
        ("list", "VAR-list@lists.test"),
        ("reason", "VAR-reason"),
        ("days", "VAR-days"),
        ("poster", "VAR-poster@d.test"),
        ("subject", "VAR-subject"),
        ("id", "VAR-id"),
        ("request", "VAR-request@lists.test"),
        ("token", "VAR-token"),
        ("who", "VAR-who@d.test"),
        ("url", "https://VAR-url.test/confirm"),
        ("name", "VAR-name"),
        ("manage", "https://VAR-manage.test/manage"),
        ("hours", "VAR-hours"),
        ("volume", "VAR-volume"),
        ("issue", "VAR-issue"),
        ("count", "VAR-count"),
        ("query", "VAR-query"),
        ("field", "VAR-field"),
        ("value", "VAR-value"),
        ("page", "VAR-page"),
        ("pages", "VAR-pages"),
    ];

    fn ids(source: &str) -> BTreeSet<String> {
        let resource = FluentResource::try_new(source.to_string()).expect("parses");
        resource
            .entries()
            .filter_map(|e| match e {
                fluent_syntax::ast::Entry::Message(m) => Some(m.id.name.to_string()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn whole_numbers_choose_plural_forms_and_print_as_given() {
        let n = |lang: &str, count: &str| text(lang, "archive-count", &[("count", count)]);
        assert_eq!(n("en", "1"), "one message");
        assert_eq!(n("en", "0"), "0 messages");
        assert_eq!(n("en", "123456789012345"), "123456789012345 messages");
        assert_eq!(n("de", "1"), "eine Nachricht");
        assert_eq!(n("de", "2"), "2 Nachrichten");
        // Not a plain whole number: passed as text, printed exactly, the other branch.
        for odd in ["007", "-1", "1.5", "1234567890123456", "", "1e3"] {
            assert_eq!(n("en", odd), format!("{odd} messages"), "{odd:?}");
        }
        let r = |count: &str| text("en", "archive-results", &[("count", count), ("query", "x")]);
        assert_eq!(r("0"), "No results for “x”");
        assert_eq!(r("1"), "One result for “x”");
        assert_eq!(r("100"), "100 results for “x”");
    }

    #[test]
    fn the_catalogues_parse_cleanly() {
        for (code, src) in SOURCES {
            if let Err((_, errors)) = FluentResource::try_new(src.to_string()) {
                panic!("{code}: {errors:?}");
            }
        }
    }

    #[test]
    fn every_language_has_every_message_with_the_same_variables() {
        let reference = ids(SOURCES[0].1);
        assert!(reference.len() >= 15, "{reference:?}");
        assert_eq!(CODES.len(), LANGUAGES.len());
        for (code, src) in SOURCES {
            assert!(is_shipped(code), "{code} is listed in LANGUAGES");
            assert!(CODES.contains(code), "{code} is listed in CODES");
            assert_eq!(
                ids(src),
                reference,
                "{code} has exactly the English messages"
            );
            for id in &reference {
                // The selector's every branch: the confirmation's action takes each value.
                for action in [
                    "subscribe",
                    "unsubscribe",
                    "regular",
                    "digest-mime",
                    "digest-plain",
                    "nomail",
                ] {
                    let mut args = ARGS.to_vec();
                    args.push(("action", action));
                    let used = |lang: &str| -> BTreeSet<&str> {
                        let out = text(lang, id, &args);
                        assert!(
                            !out.contains("{$"),
                            "{lang} {id}: a variable is missing: {out}"
                        );
                        assert!(!out.contains('\u{2068}'), "{lang} {id}: isolation marks");
                        ARGS.iter()
                            .map(|(_, v)| *v)
                            .filter(|v| out.contains(v))
                            .collect()
                    };
                    assert_eq!(
                        used(code),
                        used(DEFAULT),
                        "{code} {id} ({action}): the same variables"
                    );
                }
            }
        }
    }

    #[test]
    fn a_browsers_languages_pick_a_shipped_one() {
        assert_eq!(negotiate("de-AT,de;q=0.9,en;q=0.5"), Some("de"));
        assert_eq!(negotiate("fr-CH, en;q=0.8"), Some("en"));
        assert_eq!(negotiate("fr"), None);
        assert_eq!(negotiate(""), None);
        assert_eq!(negotiate("*"), None);
        // Hostile headers: garbage, huge, control characters — an answer, never a panic.
        assert_eq!(negotiate(";;;q=,,,\u{0}"), None);
        assert_eq!(negotiate(&"x-".repeat(100_000)), None);
        assert_eq!(negotiate(&format!("{}de", "a,".repeat(10_000))), None);
    }

    #[test]
    fn an_unknown_language_or_message_falls_back_and_never_panics() {
        let en = text("en", "rejected-subject", &[]);
        assert_eq!(text("xx", "rejected-subject", &[]), en);
        assert_eq!(text("", "rejected-subject", &[]), en);
        assert_eq!(text("de", "no-such-message", &[]), "[no-such-message]");
        // Hostile values go in as text: a placeable in a value is not expanded.
        let out = text("en", "rejected-text", &[("list", "{ $list } <script>")]);
        assert!(out.contains("{ $list } <script>"), "{out}");
        assert!(!is_shipped("xx") && is_shipped("de"));
    }
}
