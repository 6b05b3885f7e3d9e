//! The archive writer as a row of the running table: the writer thread, and the list posts
//! the spool recovered offered to it again (a post accepted just before a crash may not have
//! been stored; a stored one is a no-op by its Message-ID). The writer is stopped after the
//! stages: it ends once every sender is gone (the fan-out consumer's tap, the replay), after
//! storing what was queued.

use crate::stage::{spawn, ArchiveSender, StageConfig};
use herald_spool::PostKind;

/// Opens the store, starts the writer and replays the recovered list posts; offers the
/// sender the fan-out consumer taps.
pub fn start(
    cx: &herald_stage::StartCx,
    cfg: StageConfig,
) -> Result<herald_stage::Started<ArchiveSender>, crate::ArchiveError> {
    let (sender, writer) = spawn(cfg)?;
    let recovered = cx.recovered(PostKind::ListPost);
    let replay = sender.clone();
    // The replay ends by itself; it is waited for before the writer, whose sender it holds.
    let replay = tokio::spawn(async move {
        for post in &recovered {
            replay.archive(post).await;
        }
    });
    Ok(herald_stage::Started::new(
        "archive writer",
        herald_stage::StopAt::Writers,
        tokio_util::sync::CancellationToken::new(),
        sender,
    )
    .with_task(replay)
    .with_thread(writer))
}
