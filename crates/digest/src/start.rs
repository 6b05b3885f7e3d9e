//! The digest stage as a row of the running table: it first settles the digests a crash
//! interrupted — against the digests the spool still holds, which recovery delivers or which
//! were completed before the stop, so none is sent twice — then checks lists on its timer.

use crate::{DigestConfig, DigestError, Digests};
use herald_enqueue::Enqueuer;
use herald_spool::PostKind;
use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

/// Where the digest stage keeps and reads its state.
pub struct DigestPaths<'a> {
    /// The archive the digests are built from.
    pub archive: &'a Path,
    /// The digest ledger (`digest.db`).
    pub ledger: &'a Path,
}

/// Opens the stage, then recovers and runs it until stopped with the other stages.
pub fn start(
    cx: &herald_stage::StartCx,
    enqueuer: Arc<Enqueuer>,
    paths: DigestPaths<'_>,
    cfg: DigestConfig,
    hostname: String,
) -> Result<herald_stage::Started<Arc<Digests>>, DigestError> {
    let digests = Digests::open(
        cx.directory.clone(),
        enqueuer,
        paths.archive,
        paths.ledger,
        cfg,
        hostname,
    )?;
    let live = live_digests(cx);
    let d = digests.clone();
    Ok(
        herald_stage::Started::spawn("digests", herald_stage::StopAt::Stages, |stop| async move {
            if let Err(e) = d.recover(&live).await {
                tracing::error!(error = %e, "digest recovery failed");
            }
            d.run(stop).await;
        })
        .map_offers(|()| digests),
    )
}

/// The Message-IDs (without angle brackets) of the digests the spool holds live or
/// completed before the stop: recovery delivers the first, the second are done.
fn live_digests(cx: &herald_stage::StartCx) -> HashSet<String> {
    cx.recovered_posts()
        .iter()
        .filter(|p| p.meta.kind == PostKind::ListPost && p.meta.audience.is_digest())
        .filter_map(|p| p.meta.message_id.as_deref())
        .chain(
            cx.spool
                .completed_digests_at_open()
                .iter()
                .map(String::as_str),
        )
        .map(|m| {
            m.trim()
                .trim_start_matches('<')
                .trim_end_matches('>')
                .to_string()
        })
        .collect()
}
