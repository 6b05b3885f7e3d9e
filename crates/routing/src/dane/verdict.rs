//! What DANE says of a domain ([`MxSecurity`]) and of one MX host ([`HostDane`]): the values the
//! lookups produce, the cache keeps and [`super::apply`] turns into a route. A leaf, so the cache
//! and the rules depend on these words without depending on the lookups.
//!
//! SECURITY: a `Required` verdict is only ever built from AD=1 answers (see `super`); the
//! `Failed` reasons quote DNS names and errors for the log, never for a peer.

use super::tlsa::TlsaSet;
use std::sync::Arc;

/// Whether a domain's MX answer is DNSSEC-secure (RFC 7672 §2.2.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MxSecurity {
    Secure,
    Insecure,
    /// No answer could be had (bogus or indeterminate): the domain cannot be routed safely now.
    Failed(String),
}

/// What DANE requires of one MX host.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HostDane {
    /// Secure TLSA records, some usable: TLS is required and must be authenticated by them.
    Required(Arc<TlsaSet>),
    /// Secure, and no usable TLSA record (none published, or all unusable): DANE does not apply
    /// to the host; ordinary TLS policy does (RFC 7672 §2.2).
    NoRecords,
    /// The host's address or TLSA answer is not DNSSEC-signed: DANE does not apply.
    Insecure,
    /// Its address or TLSA lookup failed (bogus or no answer): the host must not be used
    /// (RFC 7672 §2.2). The reason is for the log.
    Failed(String),
}
