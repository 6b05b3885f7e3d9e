//! Integration tests for herald-routing against a tiny DNS responder, the simulated Internet's DNS
//! and MTA-STS policy servers on 127.0.0.1 (ports chosen by the OS). One test binary, so the
//! workspace links it once.

// Test code may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

mod mta_sts;
mod mta_sts_http;
mod resolver;
mod support;
