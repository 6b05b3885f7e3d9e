//! A list's own wording: an owner may replace any catalogue message — a
//! notice's subject or text, a digest's heading, a public page's words — for one list and one
//! language, from the web administration. The replacement is written in the catalogue's own
//! syntax (Project Fluent: `{ $list }` for a variable, `{ $action -> [subscribe] … *[other] … }`
//! for a choice), so what the owner edits is exactly what the shipped text looks like.
//!
//! [`check`] is the gate every stored text passes: the message must exist, the text must parse
//! as that message's value, it may use only the variables the shipped message is given
//! ([`variables`]) and no references to other messages, terms or functions (which an owner
//! cannot see and which would fail at send time), and it is bounded in size. [`Overrides`]
//! holds a list's checked texts, parsed once; [`Words`] is what a mail or page is written
//! with: the language, the list's texts, then the shipped catalogue.
//!
//! SECURITY: override texts come from list owners (authenticated, but not trusted with other
//! lists or with the server): bounded ([`MAX_TEXT_BYTES`]), checked before storing and again
//! when loaded (a text that no longer passes is skipped, so the shipped wording is used), and
//! variables are still inserted as plain text. Pages escape what they show; mail is plain text.

use crate::{catalogue, parse_resource, plain_bundle, DEFAULT, SOURCES};
use fluent_bundle::concurrent::FluentBundle;
use fluent_bundle::{FluentArgs, FluentResource};
use fluent_syntax::ast;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

/// Longest override text accepted (a notice is a few hundred bytes; a page's words fewer).
pub const MAX_TEXT_BYTES: usize = 8 * 1024;

/// An owner's wording of one message in one language.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Override {
    /// The catalogue message it replaces (`welcome-text`).
    pub id: String,
    /// A shipped language code.
    pub language: String,
    /// The message's value in Fluent syntax, without the `id =` line or indentation.
    pub text: String,
}

/// Why an override text is refused (shown next to the field on the web page).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TextError {
    #[error("there is no message {0:?} to replace")]
    UnknownMessage(String),
    #[error("{0:?} is not a language Herald ships")]
    UnknownLanguage(String),
    #[error("the text is empty")]
    Empty,
    #[error("the text is longer than {MAX_TEXT_BYTES} bytes")]
    TooLong,
    #[error("the text holds a control character (only line ends and tabs are allowed)")]
    ControlCharacter,
    #[error("line {line}: {reason}")]
    Syntax { line: usize, reason: String },
    #[error("{{ ${name} }} is not a field of this message (its fields: {allowed})")]
    UnknownVariable { name: String, allowed: String },
    #[error("only {{ $field }} placeables and choices on them are allowed, not {0}")]
    NotAllowed(&'static str),
}

/// The ids of every message, in the English catalogue's order (what an owner may override).
pub fn messages() -> &'static [String] {
    &metadata().order
}

/// The variables message `id` is given (its fields), as its English text uses them; empty for
/// an unknown message.
pub fn variables(id: &str) -> &'static [String] {
    metadata()
        .variables
        .get(id)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// The shipped text of `id` in `lang` (English when `lang` lacks it), as an owner edits it:
/// the value's lines without the catalogue's indentation.
pub fn shipped_source(lang: &str, id: &str) -> Option<String> {
    let find = |code: &str| {
        SOURCES
            .iter()
            .find(|(c, _)| *c == code)
            .and_then(|(_, src)| message_source(src, id))
    };
    find(lang).or_else(|| find(DEFAULT))
}

/// Checks `text` as `language`'s wording of message `id` (see the module header).
pub fn check(id: &str, language: &str, text: &str) -> Result<(), TextError> {
    if !metadata().variables.contains_key(id) {
        return Err(TextError::UnknownMessage(id.chars().take(80).collect()));
    }
    if !crate::is_shipped(language) {
        return Err(TextError::UnknownLanguage(
            language.chars().take(20).collect(),
        ));
    }
    if text.trim().is_empty() {
        return Err(TextError::Empty);
    }
    if text.len() > MAX_TEXT_BYTES {
        return Err(TextError::TooLong);
    }
    if text
        .chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t' && c != '\r')
    {
        return Err(TextError::ControlCharacter);
    }
    let source = as_entry(id, text);
    let resource = match FluentResource::try_new(source.clone()) {
        Ok(r) => r,
        Err((_, errors)) => {
            let e = &errors[0];
            // Line 1 of `source` is the `id =` line Herald added; an error found at the end
            // of the text (an unclosed brace) belongs to its last line.
            let line = source[..e.pos.start.min(source.len())]
                .matches('\n')
                .count();
            let last = text.lines().count().max(1);
            return Err(TextError::Syntax {
                line: line.clamp(1, last),
                reason: e.kind.to_string(),
            });
        }
    };
    let mut entries = resource.entries();
    let value = match (entries.next(), entries.next()) {
        (Some(ast::Entry::Message(m)), None) if m.id.name == id && m.attributes.is_empty() => {
            m.value.as_ref()
        }
        _ => None,
    };
    let Some(value) = value else {
        return Err(TextError::Syntax {
            line: 1,
            reason: "the text must be one message value (a line starting with a word and \
                     `=`, `[`, `*` or `.` starts something else; write it inside { \"…\" })"
                .into(),
        });
    };
    let mut used = BTreeSet::new();
    pattern_variables(value, &mut used, true)?;
    let allowed = variables(id);
    if let Some(name) = used.iter().find(|v| !allowed.contains(v)) {
        return Err(TextError::UnknownVariable {
            name: name.clone(),
            allowed: if allowed.is_empty() {
                "none".into()
            } else {
                allowed
                    .iter()
                    .map(|v| format!("{{ ${v} }}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        });
    }
    Ok(())
}

/// A list's override texts, parsed once: one bundle per language that has any.
#[derive(Default)]
pub struct Overrides {
    bundles: Vec<(String, FluentBundle<FluentResource>)>,
}

impl std::fmt::Debug for Overrides {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.bundles.iter().map(|(l, _)| l))
            .finish()
    }
}

impl Overrides {
    /// No overrides: the shipped catalogues only.
    pub fn none() -> Self {
        Self::default()
    }

    /// The texts that pass [`check`]; one that does not (stored by an older Herald, or changed
    /// behind its back) is skipped, so the shipped wording goes out instead of a broken one.
    pub fn new(texts: impl IntoIterator<Item = Override>) -> Self {
        let mut by_lang: BTreeMap<String, String> = BTreeMap::new();
        for o in texts {
            if check(&o.id, &o.language, &o.text).is_ok() {
                let src = by_lang.entry(o.language.clone()).or_default();
                src.push_str(&as_entry(&o.id, &o.text));
                src.push('\n');
            }
        }
        Self {
            bundles: by_lang
                .into_iter()
                .map(|(lang, src)| {
                    let bundle = plain_bundle(&lang, parse_resource(src));
                    (lang, bundle)
                })
                .collect(),
        }
    }

    /// Whether any text is overridden.
    pub fn is_empty(&self) -> bool {
        self.bundles.is_empty()
    }

    fn text(&self, lang: &str, id: &str, args: &FluentArgs<'_>) -> Option<String> {
        let bundle = self
            .bundles
            .iter()
            .find(|(l, _)| l == lang)
            .map(|(_, b)| b)?;
        let pattern = bundle.get_message(id)?.value()?;
        let mut errors = Vec::new();
        let out = bundle.format_pattern(pattern, Some(args), &mut errors);
        errors.is_empty().then(|| out.into_owned())
    }
}

/// What a mail or page is written with: its language and the list's own texts.
#[derive(Clone, Copy, Debug)]
pub struct Words<'a> {
    pub lang: &'a str,
    pub overrides: &'a Overrides,
}

impl<'a> Words<'a> {
    /// The shipped catalogue of `lang` only.
    pub fn shipped(lang: &'a str) -> Self {
        static NONE: OnceLock<Overrides> = OnceLock::new();
        Self {
            lang,
            overrides: NONE.get_or_init(Overrides::none),
        }
    }

    /// Message `id`: the list's text in this language, else the catalogue's (see
    /// [`crate::text`]).
    pub fn text(&self, id: &str, args: &[(&str, &str)]) -> String {
        if !self.overrides.is_empty() {
            let fluent_args = crate::fluent_args(args);
            if let Some(t) = self.overrides.text(self.lang, id, &fluent_args) {
                return t;
            }
        }
        crate::text(self.lang, id, args)
    }
}

/// `text` as the FTL entry of message `id`: the first line inline after `=` (so it may start
/// with `[`, as a line of the catalogue may), the others indented (blank lines stay blank).
fn as_entry(id: &str, text: &str) -> String {
    let text = text.replace("\r\n", "\n");
    let mut lines = text.lines().skip_while(|l| l.trim().is_empty());
    let mut s = format!("{id} = {}\n", lines.next().unwrap_or(""));
    for line in lines {
        if line.trim().is_empty() {
            s.push('\n');
        } else {
            s.push_str("    ");
            s.push_str(line);
            s.push('\n');
        }
    }
    s
}

/// The value lines of message `id` in an FTL source, dedented by the catalogue's four spaces.
fn message_source(src: &str, id: &str) -> Option<String> {
    let mut lines = src.lines();
    let first = lines.find(|l| {
        l.strip_prefix(id)
            .is_some_and(|rest| rest.trim_start().starts_with('='))
    })?;
    let inline = first.split_once('=').map(|(_, v)| v.trim()).unwrap_or("");
    let mut out: Vec<String> = Vec::new();
    if !inline.is_empty() {
        out.push(inline.to_string());
    }
    for l in lines {
        if !l.is_empty() && !l.starts_with(' ') {
            break;
        }
        out.push(l.strip_prefix("    ").unwrap_or(l.trim_start()).to_string());
    }
    while out.last().is_some_and(|l| l.trim().is_empty()) {
        out.pop();
    }
    Some(out.join("\n"))
}

/// Collects the variables a pattern uses. `strict` refuses what an override may not use.
fn pattern_variables(
    p: &ast::Pattern<&str>,
    out: &mut BTreeSet<String>,
    strict: bool,
) -> Result<(), TextError> {
    for e in &p.elements {
        if let ast::PatternElement::Placeable { expression } = e {
            expression_variables(expression, out, strict)?;
        }
    }
    Ok(())
}

fn expression_variables(
    e: &ast::Expression<&str>,
    out: &mut BTreeSet<String>,
    strict: bool,
) -> Result<(), TextError> {
    match e {
        ast::Expression::Inline(i) => inline_variables(i, out, strict),
        ast::Expression::Select { selector, variants } => {
            inline_variables(selector, out, strict)?;
            for v in variants {
                pattern_variables(&v.value, out, strict)?;
            }
            Ok(())
        }
    }
}

fn inline_variables(
    i: &ast::InlineExpression<&str>,
    out: &mut BTreeSet<String>,
    strict: bool,
) -> Result<(), TextError> {
    match i {
        ast::InlineExpression::VariableReference { id } => {
            out.insert(id.name.to_string());
            Ok(())
        }
        ast::InlineExpression::StringLiteral { .. }
        | ast::InlineExpression::NumberLiteral { .. } => Ok(()),
        ast::InlineExpression::Placeable { expression } => {
            expression_variables(expression, out, strict)
        }
        ast::InlineExpression::FunctionReference { .. } if strict => {
            Err(TextError::NotAllowed("a function"))
        }
        ast::InlineExpression::MessageReference { .. } if strict => {
            Err(TextError::NotAllowed("a reference to another message"))
        }
        ast::InlineExpression::TermReference { .. } if strict => {
            Err(TextError::NotAllowed("a term"))
        }
        _ => Ok(()),
    }
}

struct Metadata {
    order: Vec<String>,
    variables: BTreeMap<String, Vec<String>>,
}

/// Message ids and their variables, read once from the English catalogue's syntax tree.
fn metadata() -> &'static Metadata {
    static META: OnceLock<Metadata> = OnceLock::new();
    META.get_or_init(|| {
        let _ = catalogue();
        let resource = parse_resource(SOURCES[0].1.to_string());
        let mut order = Vec::new();
        let mut variables = BTreeMap::new();
        for entry in resource.entries() {
            if let ast::Entry::Message(m) = entry {
                let mut used = BTreeSet::new();
                if let Some(v) = &m.value {
                    // The shipped catalogue is Herald's own: not held to the owner's rules.
                    let _ = pattern_variables(v, &mut used, false);
                }
                order.push(m.id.name.to_string());
                variables.insert(m.id.name.to_string(), used.into_iter().collect());
            }
        }
        Metadata { order, variables }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fields_of_a_message_are_its_english_variables() {
        assert_eq!(variables("held-subject"), &[] as &[String]);
        assert_eq!(
            variables("confirmation-text"),
            &["action", "list", "url", "who"]
        );
        assert!(messages().iter().any(|m| m == "welcome-text"));
        assert!(variables("no-such").is_empty());
    }

    #[test]
    fn the_shipped_source_is_what_an_owner_edits_and_it_passes_the_check() {
        for lang in crate::CODES {
            for id in messages() {
                let src = shipped_source(lang, id).expect("every message has a source");
                check(id, lang, &src).unwrap_or_else(|e| panic!("{lang} {id}: {e}\n{src}"));
                // Rendering the edited-back shipped text gives the shipped result.
                let o = Overrides::new([Override {
                    id: id.clone(),
                    language: lang.to_string(),
                    text: src,
                }]);
                let args = [
                    ("list", "l@x.test"),
                    ("who", "w@x.test"),
                    ("url", "https://u"),
                    ("action", "subscribe"),
                    ("name", "N"),
                ];
                let w = Words {
                    lang,
                    overrides: &o,
                };
                assert_eq!(
                    w.text(id, &args),
                    crate::text(lang, id, &args),
                    "{lang} {id}"
                );
            }
        }
    }

    #[test]
    fn an_override_replaces_the_text_in_its_language_only() {
        let o = Overrides::new([Override {
            id: "welcome-subject".into(),
            language: "de".into(),
            text: "Hallo bei { $name }!".into(),
        }]);
        let de = Words {
            lang: "de",
            overrides: &o,
        };
        let en = Words {
            lang: "en",
            overrides: &o,
        };
        assert_eq!(
            de.text("welcome-subject", &[("name", "Dev")]),
            "Hallo bei Dev!"
        );
        assert_eq!(
            en.text("welcome-subject", &[("name", "Dev")]),
            "Welcome to Dev"
        );
        assert_eq!(
            Words::shipped("de").text("welcome-subject", &[("name", "Dev")]),
            crate::text("de", "welcome-subject", &[("name", "Dev")])
        );
    }

    #[test]
    fn hostile_override_texts_are_refused_with_a_reason() {
        let cases: &[(&str, &str, &str)] = &[
            ("nope", "en", "x"),
            ("held-subject", "xx", "x"),
            ("held-subject", "en", "   \n  "),
            ("held-subject", "en", &"a".repeat(MAX_TEXT_BYTES + 1)),
            ("held-subject", "en", "bell \u{7} here"),
            ("held-subject", "en", "unclosed { $list"),
            ("held-subject", "en", "{ $list }"),
            ("held-text", "en", "{ $list } and { $password }"),
            ("held-text", "en", "{ other-message }"),
            ("held-text", "en", "{ -term }"),
            ("held-text", "en", "{ NUMBER($days) }"),
            ("held-text", "en", "line\nsecond = attribute?\n.attr = x"),
            ("held-text", "en", "{ $reason ->\n [a] A\n}"),
        ];
        for (id, lang, text) in cases {
            let err = check(id, lang, text).expect_err(text);
            assert!(!err.to_string().is_empty());
        }
        // Every line of an override is indented into one value: a line that looks like a new
        // message is text of this one.
        check("held-text", "en", "x\nanother-message = injected").expect("one value");
        // Refused texts are skipped when loaded: the shipped wording goes out.
        let o = Overrides::new([Override {
            id: "held-text".into(),
            language: "en".into(),
            text: "{ $list } and { $password }".into(),
        }]);
        assert!(o.is_empty());
        // A value that looks like a placeable is still inserted as text.
        let o = Overrides::new([Override {
            id: "rejected-text".into(),
            language: "en".into(),
            text: "Rejected on { $list }.".into(),
        }]);
        let w = Words {
            lang: "en",
            overrides: &o,
        };
        assert_eq!(
            w.text("rejected-text", &[("list", "{ $x } <b>")]),
            "Rejected on { $x } <b>."
        );
    }

    #[test]
    fn a_syntax_error_names_the_owners_line() {
        match check("held-text", "en", "fine\nalso fine\nbroken { $list") {
            Err(TextError::Syntax { line, .. }) => assert_eq!(line, 3),
            other => panic!("{other:?}"),
        }
    }
}
