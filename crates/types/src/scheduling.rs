//! The scheduler's decisions as fixed words: which lane a copy is in ([`LaneKind`]), why it was
//! deferred ([`DeferralKind`]) and how a host is doing ([`HostStateKind`]). They are shared
//! vocabulary rather than telemetry's own: the scheduler decides with them and telemetry writes
//! them to the delivery log and `/metrics`. Their serde names, log words and label strings are a
//! public contract (`/metrics` label values, delivery-log words, JSON field values), pinned by
//! `tests/golden/`; renaming a variant changes what operators see.

/// Why a copy was deferred, as the scheduler classified the reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeferralKind {
    /// The server asks us to slow down (421, 4.7.28, "too many", "rate"): not the member's fault.
    Throttle,
    /// Greylisting: retried after the interval the server implies.
    Greylist,
    /// No host of the destination could be reached (connect, banner, EHLO).
    HostDown,
    /// Any other temporary failure.
    Other,
}

impl DeferralKind {
    /// Every kind, in the order of the `/metrics` series.
    pub const ALL: [DeferralKind; 4] = [
        DeferralKind::Throttle,
        DeferralKind::Greylist,
        DeferralKind::HostDown,
        DeferralKind::Other,
    ];

    /// The word in the delivery log and the `reason` label of `/metrics`.
    pub fn word(self) -> &'static str {
        match self {
            DeferralKind::Throttle => "throttle",
            DeferralKind::Greylist => "greylist",
            DeferralKind::HostDown => "host_down",
            DeferralKind::Other => "other",
        }
    }

    /// Position in [`DeferralKind::ALL`] (the metric's counter array).
    pub fn index(self) -> usize {
        self as usize
    }
}

/// A host's health state as the scheduler sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HostStateKind {
    /// Answering; new connections allowed.
    Up,
    /// Failing; no new connection before the probe time.
    Down,
    /// One probe connection is testing whether it is back.
    Probing,
}

/// A lane of the scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LaneKind {
    /// First attempts, short timeouts.
    Fast,
    /// Retries of copies whose attempt failed temporarily, RFC 5321 timeouts.
    Slow,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The words are `/metrics` label values and delivery-log words: a rename is visible to
    /// operators, so it must be deliberate.
    #[test]
    fn deferral_words_and_serde_names_are_the_published_ones() {
        let words: Vec<_> = DeferralKind::ALL.iter().map(|k| k.word()).collect();
        assert_eq!(words, ["throttle", "greylist", "host_down", "other"]);
        for (i, k) in DeferralKind::ALL.iter().enumerate() {
            assert_eq!(k.index(), i);
            assert_eq!(
                serde_json::to_value(k).ok(),
                Some(serde_json::Value::from(k.word()))
            );
        }
    }

    #[test]
    fn lane_and_host_state_serialize_in_snake_case() {
        let json =
            serde_json::to_string(&(LaneKind::Fast, LaneKind::Slow, HostStateKind::Probing)).ok();
        assert_eq!(json.as_deref(), Some(r#"["fast","slow","probing"]"#));
    }
}
