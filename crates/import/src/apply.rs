//! Applying a [`Plan`]: lists first (created or updated), then bans and suppressions (so a
//! member the import itself bans or suppresses is refused by the directory's check), then
//! members in batches of [`ApplyOptions::batch_rows`], each batch one directory transaction
//! through the member lifecycle (`herald_lists::Membership::import`), then the archive files
//! through the archive importer.
//!
//! Crash safety: every batch is committed or not at all, and the ledger records how far the
//! import got after each one. A run after a crash plans again from the directory, which holds
//! every committed batch, so it writes only what is missing and ends where the first would
//! have. Nothing here sends mail: members are written straight to the directory, the way
//! `herald archive import` writes the archive, so no welcome or confirmation can leave. Asked
//! to (`send_welcome`), it records in the ledger the member-id range each list gained, and the
//! CLI has the running server welcome that range.

use crate::ledger::{Ledger, UnderWay};
use crate::plan::{ListAction, ListPlan, Plan};
use crate::source::{Skip, SkipKind};
use crate::ImportError;
use herald_directory::{Consent, ConsentSource, Directory, ImportOutcome, Refusal};
use herald_lists::Membership;
use herald_types::ListId;
use std::path::Path;
use std::time::Duration;

/// Members per transaction unless told otherwise: large enough that a million members take
/// 200 commits, small enough that a crash loses at most seconds of work.
pub const DEFAULT_BATCH_ROWS: usize = 5_000;

#[derive(Debug, Clone)]
pub struct ApplyOptions {
    pub batch_rows: usize,
    /// Largest archive message accepted (`[archive] max_message_bytes`).
    pub max_message_bytes: usize,
    /// A pause after each member batch; tests use it to kill an import mid-way.
    pub pause_per_batch: Option<Duration>,
    /// Record in the ledger the member-id range each list's import adds, for the running
    /// server to welcome (`herald import … --send-welcome`).
    pub send_welcome: bool,
}

impl Default for ApplyOptions {
    fn default() -> Self {
        ApplyOptions {
            batch_rows: DEFAULT_BATCH_ROWS,
            max_message_bytes: 64 * 1024 * 1024,
            pause_per_batch: None,
            send_welcome: false,
        }
    }
}

/// What applying did.
#[derive(Debug, Default)]
pub struct Applied {
    pub lists_created: u64,
    pub lists_updated: u64,
    pub members_added: u64,
    pub members_updated: u64,
    pub bans_added: u64,
    pub suppressions_added: u64,
    pub archive_added: u64,
    pub archive_duplicates: u64,
    /// The plan's skips and whatever was refused while writing.
    pub skipped: Vec<Skip>,
}

/// Progress events for a bar.
#[derive(Debug, Clone, Copy)]
pub enum Progress {
    /// Members written so far, of the plan's member writes.
    Members { done: u64, total: u64 },
    /// Bytes of archive input read so far in the current file.
    Archive { bytes: u64 },
}

/// Applies `plan` to `dir` (and the archive database at `archive_db`).
pub fn apply(
    dir: &Directory,
    archive_db: &Path,
    ledger: &mut Ledger,
    plan: Plan,
    opts: &ApplyOptions,
    progress: &mut dyn FnMut(Progress),
) -> Result<Applied, ImportError> {
    let mut done = Applied {
        skipped: plan.skipped,
        ..Applied::default()
    };
    let total = plan.lists.iter().map(|l| l.members.len() as u64).sum();
    ledger.under_way = Some(UnderWay {
        source: plan.source.clone(),
        started_ms: herald_types::unix_ms_now(),
        members_planned: total,
        members_written: 0,
    });
    ledger.save()?;
    let members = Membership::new(dir);
    for b in &plan.global_bans {
        dir.add_ban(None, b)?;
        done.bans_added += 1;
    }
    for s in &plan.global_suppressions {
        if members.import_suppressed(None, &s.address, &s.reason, s.source, s.at_ms)? {
            done.suppressions_added += 1;
        }
    }
    let consent = Consent::now(ConsentSource::Import, None);
    let default_consent = (!plan.consent_as_given).then_some(&consent);
    let mut written = 0u64;
    for lp in plan.lists {
        let id = apply_list(dir, &members, &lp, &mut done)?;
        let list_key = lp.address.to_string();
        if opts.send_welcome {
            ledger.welcome_from(&list_key, dir.last_member_id(id)?.0)?;
        }
        for batch in lp.members.chunks(opts.batch_rows.max(1)) {
            let outcomes = members.import(id, batch, default_consent)?;
            for (m, o) in batch.iter().zip(outcomes) {
                tally(&mut done, &lp, &m.member.address, o);
            }
            written += batch.len() as u64;
            if let Some(u) = ledger.under_way.as_mut() {
                u.members_written = written;
            }
            ledger.save()?;
            progress(Progress::Members {
                done: written,
                total,
            });
            if let Some(p) = opts.pause_per_batch {
                std::thread::sleep(p);
            }
        }
        if opts.send_welcome {
            ledger.welcome_up_to(&list_key, dir.last_member_id(id)?.0)?;
        }
        apply_archive(archive_db, ledger, &lp, opts, &mut done, progress)?;
    }
    ledger.under_way = None;
    ledger.save()?;
    Ok(done)
}

fn apply_list(
    dir: &Directory,
    members: &Membership,
    lp: &ListPlan,
    done: &mut Applied,
) -> Result<ListId, ImportError> {
    let id = match (&lp.action, lp.existing) {
        (ListAction::Create, _) | (_, None) => {
            // A list created by an interrupted run is found again by the plan (Update/Same).
            done.lists_created += 1;
            dir.create_list(&lp.address, &lp.settings)?.id
        }
        (ListAction::Update(_), Some(id)) => {
            done.lists_updated += 1;
            dir.update_list(id, &lp.settings)?.id
        }
        (ListAction::Same, Some(id)) => id,
    };
    for b in &lp.bans {
        dir.add_ban(Some(id), b)?;
        done.bans_added += 1;
    }
    for s in &lp.suppressions {
        if members.import_suppressed(Some(id), &s.address, &s.reason, s.source, s.at_ms)? {
            done.suppressions_added += 1;
        }
    }
    Ok(id)
}

fn tally(done: &mut Applied, lp: &ListPlan, a: &herald_types::Address, o: ImportOutcome) {
    let item = || format!("member {a} of {}", lp.address);
    match o {
        ImportOutcome::Added => done.members_added += 1,
        ImportOutcome::Updated => done.members_updated += 1,
        ImportOutcome::Refused(r) => {
            let kind = match r {
                Refusal::Suppressed(_) => SkipKind::Suppressed,
                Refusal::Banned(_) => SkipKind::Banned,
            };
            done.skipped.push(Skip::new(kind, item(), r.to_string()));
        }
        ImportOutcome::Invalid(why) => {
            done.skipped
                .push(Skip::new(SkipKind::InvalidData, item(), why));
        }
    }
}

fn apply_archive(
    archive_db: &Path,
    ledger: &mut Ledger,
    lp: &ListPlan,
    opts: &ApplyOptions,
    done: &mut Applied,
    progress: &mut dyn FnMut(Progress),
) -> Result<(), ImportError> {
    if lp.archive.is_empty() && lp.archive_privacy.is_none() {
        return Ok(());
    }
    let list = lp.address.to_string().to_lowercase();
    let mut archive = herald_archive::Archive::open(archive_db)?;
    if let Some(p) = lp.archive_privacy {
        archive.set_privacy(&list, p)?;
    }
    let now = i64::try_from(herald_types::unix_ms_now()).unwrap_or(i64::MAX);
    for file in &lp.archive {
        let report = herald_archive::import::import(
            &mut archive,
            &list,
            file,
            opts.max_message_bytes,
            now,
            |bytes| progress(Progress::Archive { bytes }),
        )?;
        done.archive_added += report.added;
        done.archive_duplicates += report.duplicates;
        for (where_, why) in report.refused {
            done.skipped.push(Skip::new(
                SkipKind::InvalidData,
                format!("archived message {where_}"),
                why,
            ));
        }
        ledger.mark_archived(&lp.address.to_string(), file)?;
    }
    Ok(())
}
