//! Herald's end-to-end tests: a real server (in this process or the `herald` binary) against the
//! simulated Internet (crates/sim) on 127.0.0.0/8, driven the way an operator, a poster or a
//! receiving MTA meets it. One test binary with a module per area, so `cargo test` links the
//! whole server once instead of once per file (each link was the slowest step of a build, and
//! each binary took some 150 MB of disk).
//!
//! Run one area: `cargo test --test it faults::` (a module path is a test-name filter); one test:
//! `cargo test --test it faults::kill9_loop -- --nocapture`.
//!
//! Every test shares this process with the others (the libtest thread pool runs as many at a
//! time as there are cores): a test must not set environment variables, change the working
//! directory or lower a process limit, and it binds only ports the system chooses. A test that
//! needs process-wide state runs the `herald` binary instead (`support::binary`). Tests that
//! hold Herald to times and resource figures under a load they make themselves (flood, soak,
//! descriptors) are in `tests/load`, which runs them one at a time.

mod support;

mod abuse;
mod accounts;
mod admin_tls;
mod api_contract;
mod api_v1;
mod archive;
mod backup;
mod bans;
mod bounded;
mod cli;
mod cluster;
mod cluster_faults;
mod complaints;
mod consent_links;
mod content_filter;
mod copy_budget;
mod crash;
mod dane;
mod deferred;
mod digest;
mod dmarc;
mod doctor;
mod dsn;
mod egress;
mod fanout;
mod faults;
mod full_disk;
mod gdpr;
mod hostile;
mod i18n;
mod imap;
mod import;
mod import_mailman2;
mod import_mailman3;
mod intake;
mod knowledge;
mod lists;
mod metrics_series;
mod moderators_web;
mod mta_sts;
mod notice_limits;
mod observe;
mod pacing;
mod postmaster;
mod privileges;
mod reload;
mod resilience;
mod roles_every_route;
mod selfservice;
mod shards;
mod signals;
mod signing_pool;
mod sim_cli;
mod smtputf8;
mod store_pg;
mod tarpit;
mod tls;
mod tlsrpt;
mod upgrade;
mod webadmin;
