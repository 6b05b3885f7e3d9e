//! What one outbound SMTP session tells TLS reporting (RFC 8460): the recipient domain it
//! carried mail for, the policy that applied, the MX host and address, and whether TLS was
//! negotiated as the policy demands — or, if not, the RFC's result type. Made by the
//! scheduler's workers and actor, aggregated per day by `herald-tlsrpt`. The words are the
//! RFC's registry values (§6.6), so they are a public contract.

use std::net::IpAddr;
use std::sync::Arc;

/// Which policy applied to a session (RFC 8460 §4.3 `policy-type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TlsPolicyKind {
    /// An MTA-STS policy (`enforce` or `testing`).
    Sts,
    /// DANE TLSA records.
    Tlsa,
    /// Neither: opportunistic TLS.
    NoPolicyFound,
}

impl TlsPolicyKind {
    /// The RFC's `policy-type` value.
    pub fn word(self) -> &'static str {
        match self {
            TlsPolicyKind::Sts => "sts",
            TlsPolicyKind::Tlsa => "tlsa",
            TlsPolicyKind::NoPolicyFound => "no-policy-found",
        }
    }

    /// The kind a stored word names.
    pub fn from_word(word: &str) -> Option<TlsPolicyKind> {
        [
            TlsPolicyKind::Sts,
            TlsPolicyKind::Tlsa,
            TlsPolicyKind::NoPolicyFound,
        ]
        .into_iter()
        .find(|k| k.word() == word)
    }
}

/// Why a session failed its TLS requirement (RFC 8460 §4.3.2 `result-type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TlsResultType {
    StarttlsNotSupported,
    CertificateHostMismatch,
    CertificateExpired,
    CertificateNotTrusted,
    ValidationFailure,
    TlsaInvalid,
    DnssecInvalid,
    DaneRequired,
    StsPolicyFetchError,
    StsPolicyInvalid,
    StsWebpkiInvalid,
}

impl TlsResultType {
    /// Every result type, in the registry's order.
    pub const ALL: [TlsResultType; 11] = [
        TlsResultType::StarttlsNotSupported,
        TlsResultType::CertificateHostMismatch,
        TlsResultType::CertificateExpired,
        TlsResultType::CertificateNotTrusted,
        TlsResultType::ValidationFailure,
        TlsResultType::TlsaInvalid,
        TlsResultType::DnssecInvalid,
        TlsResultType::DaneRequired,
        TlsResultType::StsPolicyFetchError,
        TlsResultType::StsPolicyInvalid,
        TlsResultType::StsWebpkiInvalid,
    ];

    /// The RFC's `result-type` value.
    pub fn word(self) -> &'static str {
        match self {
            TlsResultType::StarttlsNotSupported => "starttls-not-supported",
            TlsResultType::CertificateHostMismatch => "certificate-host-mismatch",
            TlsResultType::CertificateExpired => "certificate-expired",
            TlsResultType::CertificateNotTrusted => "certificate-not-trusted",
            TlsResultType::ValidationFailure => "validation-failure",
            TlsResultType::TlsaInvalid => "tlsa-invalid",
            TlsResultType::DnssecInvalid => "dnssec-invalid",
            TlsResultType::DaneRequired => "dane-required",
            TlsResultType::StsPolicyFetchError => "sts-policy-fetch-error",
            TlsResultType::StsPolicyInvalid => "sts-policy-invalid",
            TlsResultType::StsWebpkiInvalid => "sts-webpki-invalid",
        }
    }

    /// The type a stored word names.
    pub fn from_word(word: &str) -> Option<TlsResultType> {
        TlsResultType::ALL.into_iter().find(|t| t.word() == word)
    }

    /// The result type for a certificate that did not verify, from the verifier's reason
    /// (rustls's error text names expiry and name mismatch; anything else is an untrusted
    /// chain).
    pub fn for_unverified(reason: &str) -> TlsResultType {
        let r = reason.to_ascii_lowercase();
        if r.contains("expired") || r.contains("not valid yet") || r.contains("notvalidyet") {
            TlsResultType::CertificateExpired
        } else if r.contains("not valid for name") || r.contains("notvalidforname") {
            TlsResultType::CertificateHostMismatch
        } else {
            TlsResultType::CertificateNotTrusted
        }
    }
}

/// The policy that applied to a session, as the report names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TlsPolicy {
    pub kind: TlsPolicyKind,
    /// The policy itself (`policy-string`): an MTA-STS policy's lines, or the TLSA records in
    /// presentation form; empty for `no-policy-found`.
    pub strings: Arc<[String]>,
}

impl TlsPolicy {
    /// No policy: opportunistic TLS.
    pub fn none() -> TlsPolicy {
        TlsPolicy {
            kind: TlsPolicyKind::NoPolicyFound,
            strings: Arc::from(Vec::new()),
        }
    }
}

/// One session's result for one recipient domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSessionRecord {
    /// The recipient domain the session carried mail for (`policy-domain`), lower case.
    pub policy_domain: String,
    pub policy: TlsPolicy,
    /// The MX host's name (`receiving-mx-hostname`).
    pub mx_host: String,
    /// The MX host's address (`receiving-ip`).
    pub receiving_ip: IpAddr,
    /// `None`: TLS negotiated as the policy demands. Otherwise the RFC's result type and a
    /// short human-readable reason (`additional-information`).
    pub failure: Option<(TlsResultType, String)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip_and_unverified_reasons_are_classified() {
        for t in TlsResultType::ALL {
            assert_eq!(TlsResultType::from_word(t.word()), Some(t));
        }
        for k in [
            TlsPolicyKind::Sts,
            TlsPolicyKind::Tlsa,
            TlsPolicyKind::NoPolicyFound,
        ] {
            assert_eq!(TlsPolicyKind::from_word(k.word()), Some(k));
        }
        assert_eq!(TlsResultType::from_word("nonsense"), None);
        assert_eq!(
            TlsResultType::for_unverified("invalid peer certificate: Expired"),
            TlsResultType::CertificateExpired
        );
        assert_eq!(
            TlsResultType::for_unverified("invalid peer certificate: NotValidForName"),
            TlsResultType::CertificateHostMismatch
        );
        assert_eq!(
            TlsResultType::for_unverified("invalid peer certificate: UnknownIssuer"),
            TlsResultType::CertificateNotTrusted
        );
    }
}
