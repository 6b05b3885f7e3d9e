//! herald-content-filter: the content-filter hook. Operators run rspamd in
//! front of their mail; with `[content_filter] enabled = true` Herald asks it about each list
//! post arriving over SMTP/LMTP, over rspamd's HTTP protocol (`POST /checkv2`), and accepts,
//! holds or refuses the post by rspamd's verdict (`config.rs`: rspamd's action word mapped
//! through `[content_filter.actions]`, and Herald's own score thresholds; the stricter wins).
//!
//! Place in the flow: a library. The enqueue path (`herald-enqueue`, `posting_kind`) calls
//! [`ContentFilter::check`] after the ban and loop guards and before the posting
//! authorization, inside the SMTP session, at the end of DATA: a refused post gets `550 5.7.1`
//! while the sender is still connected, so the sending MTA tells its user (a bounce written
//! later by Herald would go to a sender address that spam forges: backscatter). Mail from
//! administrators and approved held posts are not checked.
//!
//! Invariants: nothing is lost. A timeout, a refused connection, an HTTP error or an answer
//! that does not parse is [`FilterVerdict::Failed`]: the post is held with the reason (visible
//! in `herald held`) and counted, so a moderator can release it once rspamd is back. The check
//! is async I/O with one deadline (`timeout_ms`): a silent rspamd delays the waiting session
//! only, never the listeners' other sessions.
//!
//! SECURITY: rspamd's answer is untrusted input (`answer.rs`: bounded, typed, cleaned before it
//! reaches a hold reason); what Herald sends it is the post it already accepted and the
//! validated envelope (`client.rs`).

mod answer;
mod client;
mod config;

pub use answer::{Answer, AnswerError, MAX_ANSWER_BYTES};
pub use client::{CheckRequest, FilterError, Rspamd, SetupError};
pub use config::{ActionMap, ContentFilterConfig, FilterAction};
pub use herald_types::FilterVerdict;

use bytes::Bytes;
use std::time::{Duration, Instant};

/// What became of one post.
#[derive(Debug, Clone)]
pub struct Decision {
    pub verdict: FilterVerdict,
    /// Why, in words a moderator reads as the hold reason and an operator in the log:
    /// `content filter (rspamd): add header, score 7.20 (BAYES_SPAM, …)` or
    /// `content filter unavailable: no answer within 2000 ms`.
    pub reason: String,
    /// Header fields to put on an accepted post (`X-Spam: Yes`, `X-Spam-Score:`), CRLF-ended;
    /// empty when there are none (see `add_spam_headers`).
    pub headers: String,
    /// How long rspamd took (or how long Herald waited).
    pub elapsed: Duration,
}

/// The configured filter: an rspamd client and what its verdicts mean.
#[derive(Clone)]
pub struct ContentFilter {
    cfg: ContentFilterConfig,
    rspamd: Rspamd,
}

impl ContentFilter {
    /// The filter `[content_filter]` asks for, or `None` when it is off.
    pub fn new(cfg: &ContentFilterConfig) -> Result<Option<ContentFilter>, SetupError> {
        if !cfg.enabled {
            return Ok(None);
        }
        let rspamd = Rspamd::new(
            &cfg.rspamd_url,
            &cfg.password,
            Duration::from_millis(cfg.timeout_ms),
        )?;
        Ok(Some(ContentFilter {
            cfg: cfg.clone(),
            rspamd,
        }))
    }

    /// Asks rspamd about `message` and decides. Never fails: an unusable answer is
    /// [`FilterVerdict::Failed`].
    pub async fn check(&self, req: &CheckRequest, message: Bytes) -> Decision {
        let started = Instant::now();
        let answer = self.rspamd.check(req, message).await;
        let elapsed = started.elapsed();
        match answer {
            Ok(a) => {
                let mut d = decide(&self.cfg, &a);
                d.elapsed = elapsed;
                d
            }
            Err(e) => Decision {
                verdict: FilterVerdict::Failed,
                reason: format!("content filter unavailable: {e}"),
                headers: String::new(),
                elapsed,
            },
        }
    }
}

/// What `cfg` makes of rspamd's answer `a` (pure: the table tests and the e2e agree on it).
pub fn decide(cfg: &ContentFilterConfig, a: &Answer) -> Decision {
    let by_action = cfg.actions.lookup(&a.action);
    let action = cfg
        .by_score(a.score)
        .map_or(by_action, |s| s.max(by_action));
    let symbols = match a.symbols.is_empty() {
        true => String::new(),
        false => format!(" ({})", a.symbol_names()),
    };
    let reason = format!(
        "content filter (rspamd): {}, score {:.2}{symbols}",
        a.action, a.score
    );
    let marked = matches!(
        a.action.replace('_', " ").as_str(),
        "add header" | "rewrite subject"
    );
    let headers = match (action, marked && cfg.add_spam_headers) {
        (FilterAction::Accept, true) => {
            let required = a
                .required_score
                .map_or_else(String::new, |r| format!(" / {r:.2}"));
            format!("X-Spam: Yes\r\nX-Spam-Score: {:.2}{required}\r\n", a.score)
        }
        _ => String::new(),
    };
    let verdict = match action {
        FilterAction::Accept => FilterVerdict::Accept,
        FilterAction::Hold => FilterVerdict::Hold,
        FilterAction::Reject => FilterVerdict::Reject,
    };
    Decision {
        verdict,
        reason,
        headers,
        elapsed: Duration::ZERO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(action: &str, score: f64) -> Answer {
        Answer {
            action: action.into(),
            score,
            required_score: Some(15.0),
            symbols: vec![("BAYES_SPAM".into(), 5.1)],
            smtp_message: None,
        }
    }

    #[test]
    fn the_stricter_of_action_and_score_wins() {
        let mut cfg = ContentFilterConfig::default();
        let d = decide(&cfg, &answer("no action", 1.0));
        assert_eq!(d.verdict, FilterVerdict::Accept);
        assert_eq!(
            decide(&cfg, &answer("add header", 7.0)).verdict,
            FilterVerdict::Hold
        );
        let r = decide(&cfg, &answer("reject", 16.0));
        assert_eq!(r.verdict, FilterVerdict::Reject);
        assert_eq!(
            r.reason,
            "content filter (rspamd): reject, score 16.00 (BAYES_SPAM)"
        );
        cfg.hold_score = Some(3.0);
        assert_eq!(
            decide(&cfg, &answer("no action", 3.5)).verdict,
            FilterVerdict::Hold
        );
        cfg.actions.reject = FilterAction::Hold;
        assert_eq!(
            decide(&cfg, &answer("reject", 16.0)).verdict,
            FilterVerdict::Hold,
            "an operator may hold what rspamd rejects"
        );
        cfg.reject_score = Some(15.0);
        assert_eq!(
            decide(&cfg, &answer("reject", 16.0)).verdict,
            FilterVerdict::Reject,
            "unless a reject_score says otherwise"
        );
    }

    #[test]
    fn spam_headers_only_on_marked_posts_that_are_accepted() {
        let mut cfg = ContentFilterConfig::default();
        assert!(decide(&cfg, &answer("add header", 7.0)).headers.is_empty());
        cfg.actions.add_header = FilterAction::Accept;
        let d = decide(&cfg, &answer("add header", 7.0));
        assert_eq!(d.verdict, FilterVerdict::Accept);
        assert_eq!(d.headers, "X-Spam: Yes\r\nX-Spam-Score: 7.00 / 15.00\r\n");
        assert!(decide(&cfg, &answer("no action", 1.0)).headers.is_empty());
        cfg.add_spam_headers = false;
        assert!(decide(&cfg, &answer("add header", 7.0)).headers.is_empty());
    }
}
