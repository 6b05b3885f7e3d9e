//! Integration tests for herald-smtp-client against scripted servers on 127.0.0.1 (ports chosen by
//! the OS). One test binary, so the workspace links it once.

// Test code may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

mod client;
mod dane;
mod hostile;
mod support;
mod tls;
