//! The bounce score rule: the bounce stage's policy, which the directory applies inside the
//! transaction that records the bounce (`Directory::apply_bounce(…, score)`), so the read, the
//! decision and the writes cannot interleave with another bounce.
//!
//! The rule: each counted bounce adds its weight (hard 1.0, soft and expired 0.5, 0 for kinds
//! that never count); a member's score rises at most once per [`DAY_MS`]; a score whose last
//! counted bounce is older than the list's `bounce_stale_days` starts again from zero; a
//! disabled member's bounces are recorded but not counted; at `bounce_threshold` (0: never) the
//! member is disabled with the reason recorded.
//!
//! SECURITY: the kind and status come from hostile mail; they are cut (no control characters,
//! bounded) before they go into the recorded reason.

use herald_directory::{cap_bounce_text, BounceApplied, ScoreInput, Scored, DAY_MS};

/// Decides what one bounce does to its member's score (pure).
pub fn score(input: ScoreInput<'_>) -> Scored {
    let ScoreInput {
        member,
        prior,
        settings,
        bounce: b,
    } = input;
    let mut out = BounceApplied {
        member_found: member.is_some(),
        counted: false,
        score: 0.0,
        disabled: false,
    };
    let mut disable = None;
    if let Some(reason) = member {
        let stale_ms = u64::from(settings.bounce_stale_days).saturating_mul(DAY_MS);
        let mut score = match prior {
            Some(p) if b.at_ms.saturating_sub(p.last_counted_ms) <= stale_ms => p.score,
            _ => 0.0,
        };
        let due = prior.is_none_or(|p| b.at_ms.saturating_sub(p.last_counted_ms) >= DAY_MS);
        if b.weight > 0.0 && reason.is_none() && due {
            score += b.weight;
            out.counted = true;
        }
        out.score = score;
        let threshold = f64::from(settings.bounce_threshold);
        if out.counted && threshold > 0.0 && score >= threshold {
            let why = format!(
                "bounce score {score:.1} reached {threshold:.1} (last: {} {})",
                cap_bounce_text(&b.kind),
                b.status.as_deref().map(cap_bounce_text).unwrap_or_default()
            );
            disable = Some(why.trim_end().to_string());
            out.disabled = true;
        }
    }
    Scored { out, disable }
}
