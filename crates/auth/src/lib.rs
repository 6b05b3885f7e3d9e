//! herald-auth: what makes Herald's mail acceptable to the big providers — DKIM signing of
//! every copy with the list domain's key, the DMARC policy lookup that decides From
//! rewriting, ARC, and the authentication results of incoming posts.
//!
//! Place in the flow: depends only on `types`; `fanout` uses [`dkim`] and [`arc`] at render
//! and splice time, the server uses the rest on arrival and when loading the configuration.
//!
//! Crypto and record parsing are mail-auth's (Stalwart; ring backend, no OpenSSL, no aws-lc).
//! mail-auth 0.13 is the newest line that builds on the workspace toolchain: 0.15 needs
//! mail-parser 1.x, which requires rustc 1.98.

pub mod arc;
pub mod dkim;
pub mod received;
pub mod results;
pub mod verify;

pub use arc::{ArcCv, ArcError, ArcHop};
pub use dkim::{DkimAlgorithm, DkimError, DkimKeys, DkimSigner};
pub use results::ArrivalResults;
pub use verify::{ArrivalVerdict, AuthError, Authenticator, DkimVerdict, DmarcPolicy};
