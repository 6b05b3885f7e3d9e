//! herald-routing: a library (not a stage) that decides *where* and *how securely* a copy for a
//! recipient domain may go. The scheduler's route lookups call it; the delivery workers hand its
//! decision to `herald-smtp-client`, which carries it out.
//!
//! ```text
//! scheduler routing a domain ─► MxResolver::resolve ───────────────┐
//!                           ├─► MtaSts::lookup (TXT, HTTPS, cache) ─┼─► mta_sts::apply / dane::apply
//!                           └─► Dane::mx_security, Dane::hosts ─────┘      │
//!                   hosts in order + per-host TlsPolicy / TlsaSet ◄────────┘
//! worker: herald_smtp_client::Connection::connect_with / connect_dane (obeys the decision)
//! ```
//!
//! What it owns:
//! * [`resolve`]: MX resolution through hickory-resolver (with its cache), failures classified
//!   permanent (null MX, no such domain, no address) or transient (timeouts, SERVFAIL).
//! * [`tls_policy`]: the STARTTLS modes and the operator's per-destination rules
//!   (`[[delivery.tls_policy]]`), and how MTA-STS and DANE demands combine with them.
//! * [`mta_sts`]: MTA-STS (RFC 8461) discovery, policy fetch over HTTPS (reqwest), cache and apply.
//! * [`dane`]: DANE (RFC 7672) TLSA lookups over [`secure_dns`] (the AD bit), cache and apply.
//!   [`TlsaSet`] lives here because it is what the DNS answers *decide*; the certificate check
//!   that matches a handshake against it is the SMTP client's (`herald_smtp_client::dane_verify`).
//!   So the arrow is one way: `smtp-client → routing` (the client names the decisions it obeys);
//!   routing never opens an SMTP session.
//! * [`trust`]: the trust anchors, shared with the client so both verify against the same roots.
//!
//! Invariants:
//! * A lookup is bounded: every DNS query by the resolver's `timeout_ms × attempts`, the policy
//!   fetch by `fetch_timeout_secs` and 64 KiB of body; caches are bounded by their `*_max_*` keys.
//! * A failure to *learn* a policy never blocks delivery by itself (RFC 8461 §5.1); only a valid
//!   `enforce` policy or a secure DANE verdict can demand TLS, and then it is never weakened.
//! * Errors are typed with classifiers ([`ResolveError::is_permanent`], [`SetupError::is_config`]);
//!   nothing matches strings.
//!
//! SECURITY: everything read from DNS and from MTA-STS policy hosts is hostile input. DANE trusts
//! only answers the configured validating resolver marked authentic (AD=1); MTA-STS policies are
//! trusted only after the HTTPS certificate verified for `mta-sts.<domain>` against the
//! configured roots, and policy responses are bounded and parsed strictly (see [`mta_sts`]).

pub mod config;
pub mod dane;
pub mod error;
pub mod mta_sts;
pub mod resolve;
pub mod secure_dns;
pub mod tls_policy;
pub mod tlsrpt_record;
pub mod trust;

pub use config::ResolverConfig;
pub use dane::{Dane, DaneConfig, DaneRoute, HostDane, MxSecurity, TlsaSet};
pub use error::SetupError;
pub use mta_sts::config::MtaStsConfig;
pub use mta_sts::{MtaSts, StsLookup, StsRoute};
pub use resolve::{build_resolver, MxHost, MxResolver, ResolveError};
pub use tls_policy::{TlsMode, TlsPolicy, TlsPolicyRule};
