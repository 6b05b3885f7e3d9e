//! Test servers: a tiny DNS responder (the MTA-STS tests use the simulator's DNS).

pub mod dns;
