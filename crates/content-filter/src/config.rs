//! `[content_filter]`: whether list posts are checked by rspamd on arrival, where it listens,
//! how long Herald waits, and what each of rspamd's verdicts means for the post. Off by
//! default; every key has a default and unknown keys are refused (STYLE rule 9).
//!
//! What a verdict becomes is decided twice and the stricter answer wins: by rspamd's own
//! `action` (its thresholds, as the rspamd operator set them in `actions.conf`), looked up in
//! `[content_filter.actions]`, and by Herald's own optional score thresholds (`hold_score`,
//! `reject_score`), for an operator who shares one rspamd with other mail and wants lists to
//! be stricter (or who wants a threshold without touching rspamd).

use serde::Deserialize;

/// What Herald does with a post, by rspamd's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FilterAction {
    /// Passed on (posting authorization, then fan-out).
    Accept,
    /// Held for moderation with the reason.
    Hold,
    /// Refused at the end of DATA with `550 5.7.1`.
    Reject,
}

/// `[content_filter.actions]`: rspamd's action words (spaces as underscores) → Herald's.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ActionMap {
    pub no_action: FilterAction,
    /// Greylisting asks the *sending* MTA to retry; for a post already received it means
    /// "slightly suspicious", so accepted by default.
    pub greylist: FilterAction,
    /// Probable spam (rspamd's `add_header` score, 6 by default): held, since a list would
    /// otherwise send it to every member under its own name.
    pub add_header: FilterAction,
    pub rewrite_subject: FilterAction,
    /// A temporary refusal in rspamd (a rate limit, a timeout in one of its modules): held, so
    /// a moderator can release it; refusing would only make the sender retry.
    pub soft_reject: FilterAction,
    pub reject: FilterAction,
    /// Any other action word (`discard`, `quarantine`, custom actions of newer rspamd versions).
    pub other: FilterAction,
}

impl Default for ActionMap {
    fn default() -> Self {
        ActionMap {
            no_action: FilterAction::Accept,
            greylist: FilterAction::Accept,
            add_header: FilterAction::Hold,
            rewrite_subject: FilterAction::Hold,
            soft_reject: FilterAction::Hold,
            reject: FilterAction::Reject,
            other: FilterAction::Hold,
        }
    }
}

impl ActionMap {
    /// Herald's action for rspamd's action word (`"no action"`, `"add header"`, …; rspamd
    /// spells them with spaces, some clients with underscores: both are taken).
    pub fn lookup(&self, rspamd_action: &str) -> FilterAction {
        match rspamd_action.replace('_', " ").as_str() {
            "no action" => self.no_action,
            "greylist" => self.greylist,
            "add header" => self.add_header,
            "rewrite subject" => self.rewrite_subject,
            "soft reject" => self.soft_reject,
            "reject" => self.reject,
            _ => self.other,
        }
    }
}

/// `[content_filter]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ContentFilterConfig {
    /// Check each list post arriving over SMTP/LMTP with rspamd. Off by default.
    pub enabled: bool,
    /// rspamd's normal worker (or its proxy), e.g. `http://127.0.0.1:11333`; `/checkv2` is
    /// appended. Plain HTTP, as rspamd's workers speak it.
    pub rspamd_url: String,
    /// Longest Herald waits for rspamd's answer (connect included). Past it the post is held
    /// with the reason, never lost. Keep it above rspamd's own `task_timeout` (8 s).
    pub timeout_ms: u64,
    /// Sent as rspamd's `Password` header when not empty (a proxy or controller set up to ask
    /// for one).
    pub password: String,
    /// At or above this rspamd score the post is held, whatever rspamd's action says.
    pub hold_score: Option<f64>,
    /// At or above this rspamd score the post is refused, whatever rspamd's action says.
    pub reject_score: Option<f64>,
    /// Add `X-Spam: Yes` and `X-Spam-Score:` to a post that is accepted although rspamd said
    /// "add header" or "rewrite subject" (only when `actions` maps those to `accept`), so
    /// members can filter on them as on any mail rspamd marked.
    pub add_spam_headers: bool,
    pub actions: ActionMap,
}

impl Default for ContentFilterConfig {
    fn default() -> Self {
        ContentFilterConfig {
            enabled: false,
            rspamd_url: "http://127.0.0.1:11333".into(),
            timeout_ms: 10_000,
            password: String::new(),
            hold_score: None,
            reject_score: None,
            add_spam_headers: true,
            actions: ActionMap::default(),
        }
    }
}

impl ContentFilterConfig {
    /// Checked when the server's configuration is loaded; each error names its key.
    pub fn check(&self) -> Result<(), String> {
        let url = reqwest::Url::parse(&self.rspamd_url)
            .map_err(|e| format!("content_filter.rspamd_url: {e}"))?;
        // rspamd's workers speak plain HTTP; one elsewhere is reached through a local proxy.
        if url.scheme() != "http" || url.host().is_none() {
            return Err("content_filter.rspamd_url: must be an http:// URL".into());
        }
        if self.timeout_ms == 0 || self.timeout_ms > 120_000 {
            return Err("content_filter.timeout_ms: must be between 1 and 120000".into());
        }
        if self.password.contains(|c: char| c.is_control()) {
            return Err("content_filter.password: no control characters".into());
        }
        for (key, v) in [
            ("hold_score", self.hold_score),
            ("reject_score", self.reject_score),
        ] {
            if v.is_some_and(|s| !s.is_finite()) {
                return Err(format!("content_filter.{key}: must be a finite number"));
            }
        }
        if let (Some(h), Some(r)) = (self.hold_score, self.reject_score) {
            if h > r {
                return Err("content_filter.hold_score: must not exceed reject_score".into());
            }
        }
        Ok(())
    }

    /// Herald's own threshold answer for `score` (none when no threshold applies).
    pub fn by_score(&self, score: f64) -> Option<FilterAction> {
        if self.reject_score.is_some_and(|r| score >= r) {
            Some(FilterAction::Reject)
        } else if self.hold_score.is_some_and(|h| score >= h) {
            Some(FilterAction::Hold)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ContentFilterConfig, String> {
        let c: ContentFilterConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        c.check()?;
        Ok(c)
    }

    #[test]
    fn defaults_are_off_and_map_rspamd_words() {
        let c = parse("").expect("empty is valid");
        assert!(!c.enabled);
        assert_eq!(c.actions.lookup("no action"), FilterAction::Accept);
        assert_eq!(c.actions.lookup("greylist"), FilterAction::Accept);
        assert_eq!(c.actions.lookup("add header"), FilterAction::Hold);
        assert_eq!(c.actions.lookup("rewrite_subject"), FilterAction::Hold);
        assert_eq!(c.actions.lookup("soft reject"), FilterAction::Hold);
        assert_eq!(c.actions.lookup("reject"), FilterAction::Reject);
        assert_eq!(c.actions.lookup("discard"), FilterAction::Hold);
        assert_eq!(c.actions.lookup(""), FilterAction::Hold);
    }

    #[test]
    fn overrides_and_thresholds() {
        let c = parse(
            "enabled = true\nhold_score = 5.0\nreject_score = 12\n[actions]\nreject = \"hold\"\nadd_header = \"accept\"\n",
        )
        .expect("valid");
        assert_eq!(c.actions.lookup("reject"), FilterAction::Hold);
        assert_eq!(c.actions.lookup("add header"), FilterAction::Accept);
        assert_eq!(c.by_score(4.9), None);
        assert_eq!(c.by_score(5.0), Some(FilterAction::Hold));
        assert_eq!(c.by_score(12.0), Some(FilterAction::Reject));
    }

    #[test]
    fn bad_values_name_their_key() {
        for (text, key) in [
            ("rspamd_url = \"ftp://x\"", "rspamd_url"),
            ("rspamd_url = \"https://x\"", "rspamd_url"),
            ("rspamd_url = \"not a url\"", "rspamd_url"),
            ("timeout_ms = 0", "timeout_ms"),
            ("timeout_ms = 999999", "timeout_ms"),
            ("hold_score = 9.0\nreject_score = 3.0", "hold_score"),
            ("password = \"a\\nb\"", "password"),
            ("[actions]\nreject = \"maybe\"", "reject"),
            ("bogus = 1", "bogus"),
        ] {
            let e = parse(text).expect_err(text);
            assert!(e.contains(key), "{text}: {e}");
        }
    }
}
