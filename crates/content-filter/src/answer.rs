//! rspamd's answer to `POST /checkv2`, read into the few fields Herald acts on.
//!
//! The protocol (rspamd.com/doc/developers/protocol.html) answers with a JSON object:
//! `action` ("no action", "greylist", "add header", "rewrite subject", "soft reject",
//! "reject"), `score`, `required_score`, `symbols` (name → `{score, …}`), `messages`
//! (`smtp_message`), and more that Herald does not need. serde_json reads it (the well-kept
//! parser; no hand-written JSON here), into typed fields with `#[serde(default)]` only where
//! rspamd itself may leave a field out.
//!
//! SECURITY: the answer comes over the network from a process Herald does not control (and
//! could be something else listening on that port). It is read only up to
//! [`MAX_ANSWER_BYTES`] (the reader in `client.rs` stops there); a wrong type, a truncated
//! document or a missing `action`/`score` is an error, which the caller turns into a held
//! post, never an accepted one. Strings kept from it are cut to a few dozen characters and
//! stripped of control characters before they reach a hold reason or a log line.

use serde::Deserialize;
use std::collections::BTreeMap;

/// Most bytes of an answer Herald reads. A real answer with every symbol and its options is a
/// few kilobytes; anything near this is not rspamd.
pub const MAX_ANSWER_BYTES: usize = 256 * 1024;
/// Most symbols named in a hold reason (the highest scoring).
pub const MAX_NAMED_SYMBOLS: usize = 5;
/// Longest action word, symbol name or message kept, in characters.
const MAX_WORD_CHARS: usize = 64;

/// What rspamd said about a post.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// rspamd's action word, as sent (cut and cleaned).
    pub action: String,
    pub score: f64,
    /// The score of rspamd's `reject` action, when it says.
    pub required_score: Option<f64>,
    /// The highest-scoring symbols, highest first (at most [`MAX_NAMED_SYMBOLS`]).
    pub symbols: Vec<(String, f64)>,
    /// rspamd's own SMTP text (`messages.smtp_message`), for the log only: peers get our
    /// generic reply.
    pub smtp_message: Option<String>,
}

/// Why an answer could not be read.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum AnswerError {
    #[error("answer larger than {MAX_ANSWER_BYTES} bytes")]
    TooLarge,
    #[error("answer is not rspamd's JSON: {0}")]
    Json(String),
    #[error("answer has a score that is not a finite number")]
    BadScore,
}

#[derive(Deserialize)]
struct Raw {
    action: String,
    score: f64,
    #[serde(default)]
    required_score: Option<f64>,
    #[serde(default)]
    symbols: BTreeMap<String, RawSymbol>,
    #[serde(default)]
    messages: RawMessages,
}

#[derive(Deserialize)]
struct RawSymbol {
    #[serde(default)]
    score: f64,
}

#[derive(Deserialize, Default)]
struct RawMessages {
    #[serde(default)]
    smtp_message: Option<String>,
}

impl Answer {
    /// Reads an answer body (already bounded by the reader).
    pub fn parse(body: &[u8]) -> Result<Answer, AnswerError> {
        if body.len() > MAX_ANSWER_BYTES {
            return Err(AnswerError::TooLarge);
        }
        let raw: Raw = serde_json::from_slice(body).map_err(|e| {
            // serde_json's message names the line and column, never the input itself.
            AnswerError::Json(e.to_string())
        })?;
        if !raw.score.is_finite() || raw.required_score.is_some_and(|s| !s.is_finite()) {
            return Err(AnswerError::BadScore);
        }
        let mut symbols: Vec<(String, f64)> = raw
            .symbols
            .into_iter()
            .filter(|(_, s)| s.score.is_finite())
            .map(|(name, s)| (clean(&name), s.score))
            .collect();
        symbols.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        symbols.truncate(MAX_NAMED_SYMBOLS);
        Ok(Answer {
            action: clean(&raw.action),
            score: raw.score,
            required_score: raw.required_score,
            symbols,
            smtp_message: raw.messages.smtp_message.map(|m| clean(&m)),
        })
    }

    /// The symbol names, for a hold reason: `GTUBE, BAYES_SPAM`.
    pub fn symbol_names(&self) -> String {
        let names: Vec<&str> = self.symbols.iter().map(|(n, _)| n.as_str()).collect();
        names.join(", ")
    }
}

/// At most [`MAX_WORD_CHARS`] characters, control characters dropped: safe in a log line or a
/// hold reason a moderator's notice quotes.
fn clean(s: &str) -> String {
    s.chars()
        .filter(|c| !c.is_control())
        .take(MAX_WORD_CHARS)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GTUBE: &str = r#"{"is_skipped":true,"score":15.0,"required_score":15.0,"action":"reject","symbols":{"GTUBE":{"name":"GTUBE","score":0.0,"metric_score":0.0}},"messages":{"smtp_message":"Gtube pattern"},"message-id":"x@b.test","time_real":0.055507}"#;

    #[test]
    fn reads_a_real_answer() {
        let a = Answer::parse(GTUBE.as_bytes()).expect("parses");
        assert_eq!(a.action, "reject");
        assert_eq!(a.score, 15.0);
        assert_eq!(a.required_score, Some(15.0));
        assert_eq!(a.symbol_names(), "GTUBE");
        assert_eq!(a.smtp_message.as_deref(), Some("Gtube pattern"));
        let clean = r#"{"is_skipped":false,"score":0.0,"required_score":15.0,"action":"no action","symbols":{},"messages":{}}"#;
        let a = Answer::parse(clean.as_bytes()).expect("parses");
        assert_eq!(a.action, "no action");
        assert!(a.symbols.is_empty());
    }

    #[test]
    fn hostile_answers_are_errors_never_verdicts() {
        let truncated = &GTUBE[..GTUBE.len() / 2];
        let huge = format!(
            "{{\"action\":\"no action\",\"score\":0,\"x\":\"{}\"}}",
            "a".repeat(MAX_ANSWER_BYTES)
        );
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        for bad in [
            "",
            "null",
            "[]",
            "not json",
            truncated,
            r#"{"score":1.0}"#,
            r#"{"action":"reject"}"#,
            r#"{"action":7,"score":1.0}"#,
            r#"{"action":"reject","score":"15"}"#,
            r#"{"action":"reject","score":1e999}"#,
            r#"{"action":"reject","score":1.0,"symbols":[1,2]}"#,
            r#"{"action":"reject","score":1.0,"symbols":{"A":{"score":"x"}}}"#,
            r#"{"action":"reject","score":1.0,"messages":"hi"}"#,
            r#"{"action":"reject","score":1.0,"required_score":"x"}"#,
            huge.as_str(),
            deep.as_str(),
        ] {
            assert!(Answer::parse(bad.as_bytes()).is_err(), "{bad:.80}");
        }
        assert_eq!(
            Answer::parse(huge.as_bytes()),
            Err(AnswerError::TooLarge),
            "the size bound comes first"
        );
    }

    proptest::proptest! {
        /// Whatever bytes come back, reading them ends in an answer or an error, and an
        /// answer's strings are clean and short.
        #[test]
        fn never_panics_on_arbitrary_bytes(raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..2048)) {
            if let Ok(a) = Answer::parse(&raw) {
                proptest::prop_assert!(a.action.chars().all(|c| !c.is_control()));
                proptest::prop_assert!(a.score.is_finite());
            }
        }

        /// A real answer cut short or with one byte changed.
        #[test]
        fn never_panics_on_mangled_answers(cut in 0usize..300, byte in proptest::prelude::any::<u8>(), at in 0usize..300) {
            let mut raw = GTUBE.as_bytes().to_vec();
            if at < raw.len() { raw[at] = byte; }
            raw.truncate(cut.min(raw.len()));
            if let Ok(a) = Answer::parse(&raw) {
                proptest::prop_assert!(a.action.chars().count() <= MAX_WORD_CHARS);
                proptest::prop_assert!(a.symbols.len() <= MAX_NAMED_SYMBOLS);
            }
        }
    }

    #[test]
    fn strings_are_cut_and_cleaned_and_symbols_bounded() {
        let mut symbols = String::new();
        for i in 0..200 {
            symbols.push_str(&format!("\"S{i}\":{{\"score\":{i}.0}},"));
        }
        symbols.pop();
        let text = format!(
            "{{\"action\":\"reject\\r\\nX-Evil: 1{}\",\"score\":3,\"symbols\":{{{symbols}}}}}",
            "z".repeat(500)
        );
        let a = Answer::parse(text.as_bytes()).expect("parses");
        assert!(!a.action.contains('\r') && !a.action.contains('\n'));
        assert_eq!(a.action.chars().count(), MAX_WORD_CHARS);
        assert_eq!(a.symbols.len(), MAX_NAMED_SYMBOLS);
        assert_eq!(a.symbols[0], ("S199".to_string(), 199.0));
    }
}
