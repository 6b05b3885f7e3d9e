//! How the transport-security policies applied to one delivery attempt: [`DaneNote`] (RFC 7672)
//! and [`MtaStsNote`] (RFC 8461). Shared vocabulary: the scheduler's SMTP worker and route lookup
//! decide them, telemetry writes their words into the delivery log (`dane=`, `mta-sts=`) and as
//! `/metrics` label values, so the words below are a public contract pinned by `tests/golden/`.

/// How DANE (RFC 7672) applied to one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DaneNote {
    /// The MX host's TLSA records authenticated the TLS session.
    Verified,
    /// DANE applied and failed: no TLS, a certificate the records do not authenticate, or a
    /// bogus / unanswered TLSA or MX lookup. The copy was deferred, never sent in plaintext.
    Failed,
    /// The domain's MX answer, or the host's address or TLSA answer, is not DNSSEC-signed:
    /// ordinary delivery.
    Insecure,
    /// Signed answers, but no usable TLSA record for the host: ordinary delivery.
    None,
}

impl DaneNote {
    /// Every note, in the order of the `/metrics` series.
    pub const ALL: [DaneNote; 4] = [
        DaneNote::Verified,
        DaneNote::Failed,
        DaneNote::Insecure,
        DaneNote::None,
    ];

    /// Position in [`DaneNote::ALL`] (the metric's counter array).
    pub fn index(self) -> usize {
        match self {
            DaneNote::Verified => 0,
            DaneNote::Failed => 1,
            DaneNote::Insecure => 2,
            DaneNote::None => 3,
        }
    }

    /// The word in the delivery log and the metric label.
    pub fn word(self) -> &'static str {
        match self {
            DaneNote::Verified => "verified",
            DaneNote::Failed => "failed",
            DaneNote::Insecure => "insecure",
            DaneNote::None => "none",
        }
    }
}

/// How MTA-STS (RFC 8461) applied to one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MtaStsNote {
    /// An `enforce` policy: only its MX hosts, verified TLS (or the copy was deferred).
    Enforce,
    /// A `testing` policy, and the delivery satisfied it.
    Testing,
    /// A `testing` policy that enforcement would have failed (MX not in the policy, or TLS
    /// missing or unverified): delivered as usual, logged and counted.
    TestingFailed,
}

impl MtaStsNote {
    /// Every note, in the order of the `/metrics` series.
    pub const ALL: [MtaStsNote; 3] = [
        MtaStsNote::Enforce,
        MtaStsNote::Testing,
        MtaStsNote::TestingFailed,
    ];

    /// Position in [`MtaStsNote::ALL`] (the metric's counter array).
    pub fn index(self) -> usize {
        match self {
            MtaStsNote::Enforce => 0,
            MtaStsNote::Testing => 1,
            MtaStsNote::TestingFailed => 2,
        }
    }

    /// The word in the delivery log and the metric label.
    pub fn word(self) -> &'static str {
        match self {
            MtaStsNote::Enforce => "enforce",
            MtaStsNote::Testing => "testing",
            MtaStsNote::TestingFailed => "testing-failed",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `dane=` / `mta-sts=` words and label values, in the order of the counter arrays.
    #[test]
    fn notes_keep_their_words_and_counter_positions() {
        let dane: Vec<_> = DaneNote::ALL.iter().map(|n| n.word()).collect();
        assert_eq!(dane, ["verified", "failed", "insecure", "none"]);
        let sts: Vec<_> = MtaStsNote::ALL.iter().map(|n| n.word()).collect();
        assert_eq!(sts, ["enforce", "testing", "testing-failed"]);
        assert!(DaneNote::ALL
            .iter()
            .enumerate()
            .all(|(i, n)| n.index() == i));
        assert!(MtaStsNote::ALL
            .iter()
            .enumerate()
            .all(|(i, n)| n.index() == i));
    }
}
