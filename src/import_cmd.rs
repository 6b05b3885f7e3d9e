//! `herald import <source> …` and `herald export herald <dir>`: moving lists,
//! members, settings, bans, suppressions and archives in from listmonk, Mailman 2, Mailman 3 or
//! another Herald, and out to another Herald. The work is `herald-import`'s; this file reads
//! the arguments, prints the plan (a dry run unless `--apply`), drives a progress bar and
//! prints the report of everything skipped.
//!
//! Like `herald archive`, it opens the data directory's databases itself (see `herald-import`'s
//! crate doc for why), so it runs on the machine of the server, running or not.
//!
//! SECURITY: reads the operator's files (and, for Mailman 3, the operator's Mailman REST API);
//! everything read is untrusted and checked by `herald-import` and the directory.

use crate::client::{enc, Api};
use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use herald_directory::Directory;
use herald_import::{Ledger, Plan, Progress, Skip, Snapshot};
use herald_server::Config;
use herald_types::Address;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};

#[derive(Subcommand)]
pub enum ImportCommand {
    /// listmonk's subscriber export (CSV) into one list.
    Listmonk(ListmonkArgs),
    /// A Mailman 2.1 list: its directory (…/lists/<name>, with config.pck) and its pipermail
    /// archive (…/archives/private/<name>.mbox or the monthly .txt files).
    Mailman2(Mailman2Args),
    /// Mailman 3 core over its REST API: lists, members, roles, bans (held posts are saved
    /// as files, see --held-dir).
    Mailman3(Mailman3Args),
    /// Another Herald's export (`herald export herald`).
    Herald(HeraldArgs),
}

#[derive(Subcommand)]
pub enum ExportCommand {
    /// Every list, member, setting, ban and suppression (and archives) as documented JSON.
    Herald(ExportArgs),
}

/// What every import takes.
#[derive(Args)]
pub struct Common {
    /// Write the plan (without it, only print what would change).
    #[arg(long)]
    apply: bool,
    /// Members per directory transaction.
    #[arg(long, default_value_t = herald_import::DEFAULT_BATCH_ROWS, hide = true)]
    batch_rows: usize,
    /// Mail each member this import adds the list's welcome (through the running server). An
    /// import sends nothing without it.
    #[arg(long)]
    send_welcome: bool,
}

#[derive(Args)]
pub struct ListmonkArgs {
    /// The CSV from listmonk's Subscribers → Export.
    csv: PathBuf,
    /// The Herald list the subscribers join (created if absent).
    #[arg(long)]
    list: String,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
pub struct Mailman2Args {
    /// The list's directory, e.g. /var/lib/mailman/lists/dev.
    list_dir: PathBuf,
    /// The Herald list address (default: <list name>@<host_name>).
    #[arg(long)]
    address: Option<String>,
    /// Mailman's archives/private directory (default: <list_dir>/../../archives/private).
    #[arg(long)]
    archives: Option<PathBuf>,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
pub struct Mailman3Args {
    /// Mailman core's REST API, e.g. http://127.0.0.1:8001
    #[arg(long)]
    url: String,
    /// Its admin user ([webservice] admin_user).
    #[arg(long)]
    user: String,
    /// Its admin password ([webservice] admin_pass).
    #[arg(long, env = "MAILMAN_REST_PASSWORD")]
    password: String,
    /// Only this list (posting address or list id); repeat for more. Default: every list.
    #[arg(long)]
    list: Vec<String>,
    /// An mbox for the list's archive (HyperKitty's export); needs exactly one --list.
    #[arg(long)]
    archive: Option<PathBuf>,
    /// Where held posts are saved when the server's API cannot take them (default:
    /// <data_dir>/import-held).
    #[arg(long)]
    held_dir: Option<PathBuf>,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
pub struct HeraldArgs {
    /// The directory `herald export herald` wrote.
    dir: PathBuf,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
pub struct ExportArgs {
    /// A new (or empty) directory.
    dir: PathBuf,
}

pub async fn import(cmd: ImportCommand, config: &Config, api: Option<Api>) -> Result<()> {
    let mut held_dir = None;
    let (snap, common) = match cmd {
        ImportCommand::Listmonk(a) => {
            let list = parse_list(&a.list)?;
            (herald_import::listmonk::read(&a.csv, &list)?, a.common)
        }
        ImportCommand::Mailman2(a) => {
            let source = herald_import::mailman2::Mailman2Source {
                list_dir: a.list_dir,
                address: a.address.as_deref().map(parse_list).transpose()?,
                archives: a.archives,
            };
            (herald_import::mailman2::read(&source)?, a.common)
        }
        ImportCommand::Mailman3(a) => {
            let source = herald_import::mailman3::Mailman3Source {
                url: a.url,
                user: a.user,
                password: a.password,
                lists: a.list,
                archive: a.archive,
            };
            held_dir = a.held_dir;
            (herald_import::mailman3::read(&source).await?, a.common)
        }
        ImportCommand::Herald(a) => (herald_import::herald::read(&a.dir)?, a.common),
    };
    let held_dir = held_dir.unwrap_or_else(|| config.data_dir.join("import-held"));
    run(snap, &common, config, api, &held_dir).await
}

pub fn export(cmd: ExportCommand, config: &Config) -> Result<()> {
    let ExportCommand::Herald(a) = cmd;
    let dir = open_directory(config)?;
    let done = herald_import::herald::export(&dir, &config.data_dir.join("archive.db"), &a.dir)?;
    outln!(
        "exported {} lists, {} members, {} archived messages to {}",
        done.lists,
        done.members,
        done.archived_messages,
        a.dir.display()
    );
    if done.suppressed_members > 0 {
        outln!(
            "left out {} members whose address is suppressed (the suppressions are exported)",
            done.suppressed_members
        );
    }
    Ok(())
}

fn parse_list(s: &str) -> Result<Address> {
    Address::parse(s).with_context(|| format!("--list {s:?} is not a list address"))
}

fn open_directory(config: &Config) -> Result<Directory> {
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("creating {}", config.data_dir.display()))?;
    Ok(config.store.open(&config.data_dir)?)
}

async fn run(
    snap: Snapshot,
    common: &Common,
    config: &Config,
    api: Option<Api>,
    held_dir: &Path,
) -> Result<()> {
    // The directory is synchronous, and on PostgreSQL its client must not block a thread the
    // runtime drives: every directory step of this async command runs in `block_in_place`.
    let dir = tokio::task::block_in_place(|| open_directory(config))?;
    let archive_db = config.data_dir.join("archive.db");
    let mut ledger = Ledger::load(&config.data_dir)?;
    if let Some(u) = &ledger.under_way {
        outln!(
            "an earlier import ({}) stopped after {} of {} member writes; this run plans again \
             from the directory and finishes it",
            u.source,
            u.members_written,
            u.members_planned
        );
    }
    let archive = if archive_db.exists() {
        Some(herald_archive::Archive::open(&archive_db)?)
    } else {
        None
    };
    let mut plan = tokio::task::block_in_place(|| {
        herald_import::compute(&dir, archive.as_ref(), &ledger, snap)
    })?;
    drop(archive);
    let accounts = herald_accounts::Accounts::open(
        &config.data_dir.join("accounts.db"),
        config.accounts.clone(),
    )?;
    owners::drop_known(&accounts, &mut plan)?;
    let held_api = held::drop_already_held(api.as_ref(), &mut plan).await;
    for line in plan.describe() {
        outln!("{line}");
    }
    if common.send_welcome {
        let added: usize = plan.lists.iter().map(|l| l.added as usize).sum();
        outln!("welcome: {added} added members will be welcomed by the running server");
    }
    if !common.apply {
        print_skips(&plan.skipped);
        outln!(
            "{}",
            if plan.is_empty() {
                "dry run: nothing to change"
            } else {
                "dry run: nothing written; run again with --apply to make these changes"
            }
        );
        return Ok(());
    }
    let held: Vec<(String, Vec<herald_import::HeldPost>)> = plan
        .lists
        .iter_mut()
        .map(|l| (l.address.to_string(), std::mem::take(&mut l.held)))
        .collect();
    let new_owners: Vec<(herald_types::Address, Vec<herald_types::Address>)> = plan
        .lists
        .iter_mut()
        .map(|l| (l.address.clone(), std::mem::take(&mut l.owners)))
        .collect();
    let mut skipped = tokio::task::block_in_place(|| {
        apply(&dir, &archive_db, &mut ledger, plan, common, config)
    })?;
    owners::apply(&accounts, &new_owners)?;
    skipped.extend(held::bring_over(held_api, held, held_dir).await?);
    print_skips(&skipped);
    welcome::send_pending(api.as_ref(), &mut ledger).await
}

/// List owners (Mailman's owner role): the accounts store is the server's `accounts.db` in the
/// same data directory; an owner without an account gets one without a password (they sign in
/// by a mailed link), and the owner role on the list. Idempotent: owners who have the role
/// already are dropped from the plan, so a second run plans nothing.
mod owners {
    use super::*;
    use herald_accounts::{Accounts, AccountsError, Role};
    use herald_types::Address;

    pub fn drop_known(accounts: &Accounts, plan: &mut Plan) -> Result<()> {
        for l in &mut plan.lists {
            let list = herald_accounts::key(&l.address);
            let mut kept = Vec::with_capacity(l.owners.len());
            for o in std::mem::take(&mut l.owners) {
                let has = accounts
                    .principal(&herald_accounts::key(&o))?
                    .is_some_and(|p| p.role(&list) == Some(Role::Owner));
                if !has && !kept.contains(&o) {
                    kept.push(o);
                }
            }
            l.owners = kept;
        }
        Ok(())
    }

    pub fn apply(accounts: &Accounts, owners: &[(Address, Vec<Address>)]) -> Result<()> {
        for (list, people) in owners {
            for o in people {
                match accounts.add(o, false, None, herald_types::unix_ms_now()) {
                    Ok(_) | Err(AccountsError::AlreadyExists(_)) => {}
                    Err(e) => return Err(e.into()),
                }
                accounts.set_role(o, list, Some(Role::Owner))?;
                outln!("{list}: {o} is an owner (an account without a password: sign-in by link)");
            }
        }
        Ok(())
    }
}

/// Welcomes for the members an import added (`--send-welcome`): the ledger holds each list's
/// member-id range; the running server sends the list's welcome one page at a time (`POST
/// /api/v1/lists/<list>/welcome`), and the ledger moves past each page as it is sent, so a crash
/// or an unreachable server leaves the rest for the next `--apply` run.
mod welcome {
    use super::*;
    use herald_api_types::{WelcomeRequest, WelcomeSent};

    pub async fn send_pending(api: Option<&Api>, ledger: &mut Ledger) -> Result<()> {
        let pending: Vec<_> = ledger
            .welcome
            .iter()
            .filter_map(|w| Some((w.list.clone(), w.after_member_id, w.up_to_member_id?)))
            .collect();
        if pending.is_empty() {
            return Ok(());
        }
        let Some(api) = api else {
            anyhow::bail!(
                "welcomes for {} list(s) are waiting but no server API is reachable; start                  Herald and run the import again with --apply to send them",
                pending.len()
            );
        };
        for (list, mut after, up_to) in pending {
            let (mut sent, mut skipped) = (0u64, 0u64);
            loop {
                let req = WelcomeRequest {
                    after_member_id: after,
                    up_to_member_id: up_to,
                    limit: None,
                };
                let page: WelcomeSent = api
                    .post_json(&format!("/api/v1/lists/{}/welcome", enc(&list)), &req)
                    .await
                    .with_context(|| {
                        format!(
                            "welcoming {list}'s new members (the rest is kept for the next run)"
                        )
                    })?;
                sent += page.sent;
                skipped += page.skipped;
                after = page.last_member_id;
                ledger.welcome_sent(&list, after, page.done)?;
                if page.done {
                    break;
                }
            }
            outln!(
                "welcome: {sent} sent to {list}'s new members ({skipped} suppressed, not mailed)"
            );
        }
        Ok(())
    }
}

fn apply(
    dir: &Directory,
    archive_db: &Path,
    ledger: &mut Ledger,
    plan: Plan,
    common: &Common,
    config: &Config,
) -> Result<Vec<Skip>> {
    let bar = ProgressBar::new(plan.member_writes());
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} [{bar:40}] {pos}/{len} {per_sec} {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message("members");
    let opts = herald_import::ApplyOptions {
        batch_rows: common.batch_rows,
        max_message_bytes: config.archive.max_message_bytes,
        pause_per_batch: test_pause(),
        send_welcome: common.send_welcome,
    };
    let done = herald_import::apply(dir, archive_db, ledger, plan, &opts, &mut |p| match p {
        Progress::Members { done, .. } => bar.set_position(done),
        Progress::Archive { bytes } => {
            bar.set_message(format!("archive {bytes} bytes read"));
        }
    })?;
    bar.finish_and_clear();
    outln!(
        "applied: {} lists created, {} updated; {} members added, {} updated; {} bans, {} \
         suppressions added; archive: {} messages added, {} already there",
        done.lists_created,
        done.lists_updated,
        done.members_added,
        done.members_updated,
        done.bans_added,
        done.suppressions_added,
        done.archive_added,
        done.archive_duplicates
    );
    Ok(done.skipped)
}

/// Held posts: the running server owns them (they live in its spool), so they go through its
/// API, `POST /api/v1/lists/<list>/held`, and come out held there too. Without a reachable server
/// they are saved as `.eml` files and reported.
mod held {
    use super::*;
    use herald_api_types::{HeldView, Injected};
    use herald_import::{HeldPost, SkipKind};

    fn bare(mid: &str) -> String {
        mid.trim()
            .trim_start_matches('<')
            .trim_end_matches('>')
            .to_string()
    }

    /// Drops from the plan the held posts the server already holds (by Message-ID), so a
    /// second run plans nothing. `None` when there is no server to hand them to.
    pub async fn drop_already_held<'a>(api: Option<&'a Api>, plan: &mut Plan) -> Option<&'a Api> {
        if plan.lists.iter().all(|l| l.held.is_empty()) {
            return api;
        }
        let api = api?;
        let held: Vec<HeldView> = api.get("/api/v1/held?limit=10000").await.ok()?;
        for l in &mut plan.lists {
            let list = l.address.to_string();
            l.held.retain(|h| {
                !held.iter().any(|v| {
                    v.list.eq_ignore_ascii_case(&list)
                        && h.message_id.is_some()
                        && v.message_id.as_deref().map(bare) == h.message_id.as_deref().map(bare)
                })
            });
        }
        Some(api)
    }

    pub async fn bring_over(
        api: Option<&Api>,
        held: Vec<(String, Vec<HeldPost>)>,
        dir: &Path,
    ) -> Result<Vec<Skip>> {
        let mut skipped = Vec::new();
        for (list, posts) in held {
            for h in posts {
                let item = format!("held post {} of {list}", h.id);
                let path = format!(
                    "/api/v1/lists/{list}/held?reason={}&from={}",
                    encode(&h.reason),
                    encode(&h.from.as_ref().map(ToString::to_string).unwrap_or_default())
                );
                let sent = match api {
                    Some(api) => {
                        api.post_bytes::<Injected>(&path, h.raw.clone(), "message/rfc822")
                            .await
                    }
                    None => Err(anyhow::anyhow!("no server API to hand it to")),
                };
                match sent {
                    Ok(p) => outln!("{item}: held in Herald as post {}", p.post),
                    Err(e) => {
                        let d = dir.join(list.replace('/', "_"));
                        std::fs::create_dir_all(&d)
                            .with_context(|| format!("creating {}", d.display()))?;
                        let file = d.join(format!("{}.eml", skipped.len() + 1));
                        std::fs::write(&file, &h.raw)
                            .with_context(|| format!("writing {}", file.display()))?;
                        skipped.push(Skip::new(
                            SkipKind::Unmapped,
                            item,
                            format!(
                                "the server could not take it ({e}); saved to {} for a moderator",
                                file.display()
                            ),
                        ));
                    }
                }
            }
        }
        Ok(skipped)
    }

    /// Percent-encoding for a query value (unreserved characters kept).
    fn encode(s: &str) -> String {
        let mut out = String::with_capacity(s.len());
        for b in s.bytes() {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                out.push(b as char);
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
        out
    }
}

/// `HERALD_IMPORT_PAUSE_MS`: a pause after each member batch, so a test can kill an import
/// mid-way and check that the next run finishes it.
fn test_pause() -> Option<std::time::Duration> {
    std::env::var("HERALD_IMPORT_PAUSE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map(std::time::Duration::from_millis)
}

/// Every skipped item, grouped by kind, then a total per kind.
fn print_skips(skipped: &[Skip]) {
    if skipped.is_empty() {
        outln!("skipped: nothing");
        return;
    }
    let mut sorted: Vec<&Skip> = skipped.iter().collect();
    sorted.sort_by_key(|s| s.kind);
    outln!("skipped {} items:", skipped.len());
    for s in &sorted {
        outln!("  {}: {}: {}", s.kind.as_str(), s.item, s.reason);
    }
    let mut counts = std::collections::BTreeMap::new();
    for s in skipped {
        *counts.entry(s.kind).or_insert(0u64) += 1;
    }
    let summary: Vec<String> = counts
        .iter()
        .map(|(k, n)| format!("{n} {}", k.as_str()))
        .collect();
    outln!("skipped by reason: {}", summary.join(", "));
}
