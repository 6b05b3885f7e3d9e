//! An authoritative DNS server for the simulated Internet: UDP and TCP on one loopback port,
//! answering from a [`Zone`] built in code.
//!
//! Herald's resolver (hickory-resolver) is pointed at [`DnsServer::local_addr`]; every answer
//! echoes the query id, question and RD flag, and sets AA and RA, which is what a stub resolver
//! expects from its configured nameserver. UDP answers longer than the client's limit (512
//! octets, or its EDNS payload size up to 4096) are sent truncated (TC) so that the client
//! retries over TCP, as RFC 1035 requires. Answers for names in signed zones carry the AD bit
//! when the query asks for DNSSEC (see [`Zone`] for how DNSSEC is simulated).
//!
//! Limits: one UDP task answers queries in order (a query costs microseconds; the simulated
//! Internet needs thousands, not millions); at most [`MAX_TCP_CONNECTIONS`] TCP connections, each
//! closed after [`TCP_IDLE_SECS`] idle seconds.
//!
//! SECURITY: binds only 127.0.0.0/8 (checked in [`DnsServer::start`]); query bytes are decoded by
//! hickory-proto and malformed ones get FORMERR or are dropped, never a panic.

mod server;
mod zone;

pub use server::{DnsServer, MAX_TCP_CONNECTIONS, TCP_IDLE_SECS};
pub use zone::{Zone, DEFAULT_NEGATIVE_TTL_SECS, DEFAULT_TTL_SECS};
