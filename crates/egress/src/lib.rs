//! herald-egress: which local source address each outbound SMTP connection uses (after
//! KumoMTA's egress sources and pools), so a sender's reputation and warm-up stay per address.
//!
//! - **Sources** (`[[delivery.egress]]`): a name, a local IP address to bind before connecting,
//!   an optional limit of connections open from it at once, and an optional warm-up schedule —
//!   daily volume caps for a new address, one per UTC day from the first day it sends, no cap
//!   once the schedule is over.
//! - **Pools** (`[[delivery.egress_pool]]`): named sets of sources, chosen per copy: the list's
//!   `egress_pool` setting first, else the first pool whose `domains` pattern matches the
//!   recipient domain, else `[delivery] default_egress_pool`, else none (the system picks the
//!   source address, as without this feature).
//! - **Within a pool**: the least-loaded source (fewest open connections) that is under its
//!   connection limit and its warm-up cap; ties rotate (round-robin). When every source of the
//!   pool is at its cap for the day, copies are deferred (not failed) with a reply saying so;
//!   when every one is at its connection limit, the connection waits for one to free up.
//!
//! Place in the flow: a library. The scheduler's actor asks [`Egress::pool_for`] which pool a
//! copy uses (the pool is part of the destination's queue key, so copies of lists bound to
//! different pools never share a connection); its workers take a [`Lease`] on a source for
//! each connection ([`Egress::acquire`]), reserve warm-up volume per batch
//! ([`Lease::reserve`]), and the SMTP client binds the lease's address. The warm-up counts
//! are kept per UTC day in `egress-warmup.json` in the data directory ([`ledger`]), written
//! about once a second while they change and at shutdown, so a restart does not reset them.
//!
//! Mutable state (open connections, counts) sits behind one std `Mutex`: held only for a few
//! integer updates, never across an `.await`.

pub mod config;
pub mod ledger;
pub mod metrics;
mod pools;

pub use config::{check, EgressConfig, EgressPoolConfig, EgressSource};
pub use pools::{Egress, EgressError, Lease, Refusal, SourceView};

/// The UTC day number (days since 1970-01-01) of a Unix time in milliseconds: the warm-up
/// caps count per UTC day.
pub fn utc_day(unix_ms: u64) -> i64 {
    i64::try_from(unix_ms / 86_400_000).unwrap_or(i64::MAX)
}
