//! herald-tlsrpt: SMTP TLS reporting (RFC 8460). Outbound sessions' TLS
//! results — successes, failures by type, and the MTA-STS / DANE policy that applied — are
//! counted per recipient domain and UTC day, and a daily JSON report goes to every domain that
//! publishes a `_smtp._tls` TXT record, by mail (DKIM-signed with the submitter domain's key) or
//! HTTPS POST.
//!
//! Place in the flow: after the scheduler (whose workers make the records: `TlsSessionRecord`
//! in `herald-types`) and enqueue (reports by mail leave through it); before the API (which
//! calls [`TlsReporting::send_day`]).
//!
//! Modules: `record` (the `_smtp._tls` record), `report` (the JSON and the mail, pure),
//! `ledger` (`tlsrpt.db`), `stage` (the loop, the lookups, the sending).
//!
//! SECURITY: see each module; the `_smtp._tls` record is hostile input to `record`.

pub mod ledger;
mod offers;
/// The `_smtp._tls` record's parser lives in `herald-routing` (with the other DNS policy records),
/// so `herald doctor` checks a domain's record with the same rules the reports are sent by.
pub use herald_routing::tlsrpt_record as record;
pub mod report;
pub mod stage;

pub use stage::{start, SentReport, TlsReportConfig, TlsReportError, TlsReporting};
