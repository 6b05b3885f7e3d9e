//! The archive's start-up and its policy in the running server:
//! - [`start`]: the writer as a row of the running table — the writer thread, and the list
//!   posts the spool recovered offered to it again (a post accepted just before a crash may
//!   not have been stored; a stored one is a no-op by its Message-ID). The writer is stopped
//!   after the stages: it ends once every sender is gone (the fan-out consumer's tap, the
//!   replay), after storing what was queued;
//! - [`archived_at`]: whether a copy names its archive page (`Archived-At`, public lists);
//! - [`web`]: the web archive, with who may read a `members` archive and in which language
//!   its pages are shown.

use crate::stage::{list_url, message_url, spawn, ArchiveSender, StageConfig};
use crate::store::{Archive, Privacy};
use crate::web::{MemberKeys, WebArchive};
use herald_spool::PostKind;
use std::sync::Arc;

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

/// `Archived-At` for fan-out (RFC 5064): a read connection of its own to the archive, asked
/// once per post whether the list's archive is public (a primary-key read; privacy can change
/// while the server runs, `herald archive privacy`). Fan-out starts before the writer, so this
/// is made before [`start`].
pub fn archived_at(cfg: &StageConfig) -> Result<herald_fanout::ArchivedAt, crate::ArchiveError> {
    let db = Archive::open(&cfg.path)?.with_default_privacy(cfg.default_privacy);
    let db = std::sync::Mutex::new(db);
    let base = cfg.public_base_url.clone().unwrap_or_default();
    Ok(Arc::new(move |list: &herald_types::Address, mid: &str| {
        let key = list.to_string().to_lowercase();
        let privacy = db
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .privacy(&key);
        match privacy {
            Ok(Privacy::Public) => Some(herald_fanout::ArchivePage {
                message: message_url(&base, &key, mid),
                list: list_url(&base, &key),
            }),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(list = %key, error = %e, "archive privacy unknown: no Archived-At");
                None
            }
        }
    }))
}

/// The web archive's read connection, with who may read a `members` archive and the language
/// of its pages, both asked of the directory; `writer` shows the writer's counters.
pub fn web(
    cx: &herald_stage::StartCx,
    cfg: &StageConfig,
    writer: Option<&ArchiveSender>,
) -> Result<WebArchive, crate::ArchiveError> {
    let web = WebArchive::new(Archive::open(&cfg.path)?.with_default_privacy(cfg.default_privacy));
    // Members read a `members` archive with the key on their subscriptions page, while the
    // directory says they are still enabled members.
    let dir = cx.directory.clone();
    let web = web.with_member_keys(MemberKeys {
        secret: cx.secret.clone(),
        is_member: Arc::new(move |list, who| match dir.list_by_address(list) {
            Ok(Some(l)) => matches!(dir.member(l.id, who), Ok(Some(m)) if m.status.is_enabled()),
            _ => false,
        }),
    });
    // A list's pages in its language (a member reading with their key: their own) with the
    // list's own texts; a store error falls back to the list's language and the shipped
    // texts, an unknown list to the browser's language.
    let dir = cx.directory.clone();
    let web = web.with_words(Arc::new(move |list, who| {
        let l = dir.list_by_address(list).ok()??;
        let lang = match who {
            Some(who) => dir
                .language_for(&l, who)
                .unwrap_or_else(|_| l.settings.language.clone()),
            None => l.settings.language.clone(),
        };
        let overrides = dir.overrides(l.id).unwrap_or_default();
        Some((lang, overrides))
    }));
    Ok(match writer {
        Some(w) => web.with_writer_stats(w.stats()),
        None => web,
    })
}
