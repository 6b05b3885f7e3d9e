//! End-to-end tests whose subject is Herald's behaviour under a load the test makes itself — a
//! connection flood, a long soak with dead hosts, a descriptor-starved listener — and which
//! hold that behaviour to times, rates and resource figures. They run one at a time, and in a
//! test binary of their own, so nothing else shares the process's descriptors or the cores'
//! time with them: as modules of `tests/it`, a functional test running beside the flood made a
//! legitimate post wait for a session slot past its bound, where alone it never did.
//!
//! Run one: `cargo test --test load flood:: -- --nocapture` (each prints its figures).

#[path = "../it/support/mod.rs"]
mod support;

mod descriptors;
mod flood;
mod soak;

/// Held for a whole test: the tests here run one after another (libtest would run two at
/// once).
static ALONE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Waits until no other test of this binary runs; the guard lets the next one start.
pub async fn alone() -> tokio::sync::MutexGuard<'static, ()> {
    ALONE.lock().await
}
