//! `herald archive …`: the list archive on this machine (`<data_dir>/archive.db`), opened
//! directly rather than through the HTTP API — an import of years of mail is a local, long
//! job, and SQLite's WAL lets it run beside a live server (one writer at a time, readers free).
//!
//! SECURITY: reads the operator's files and prints stored mail as bytes (`show --raw`) or as a
//! summary; nothing here renders HTML.

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use herald_archive::{import, Archive, Filters, Privacy, SearchOrder};
use herald_server::Config;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::Write;
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum ArchiveCommand {
    /// Lists with an archive: privacy, messages, raw and stored size.
    Ls,
    /// A list's months, one month's messages, a thread, or one message.
    Show(ShowArgs),
    /// Remove one message (a tombstone keeps it out of later imports).
    Rm(RmArgs),
    /// Import an mbox (mboxo/mboxrd), a pipermail .txt/.txt.gz, a Maildir, or a directory of them.
    Import(ImportArgs),
    /// Write a list's messages as mboxrd to stdout (or --out).
    Export(ExportArgs),
    /// Set a list's archive privacy: public, members, private or none.
    Privacy(PrivacyArgs),
    /// Full-text search of a list's archive.
    Search(SearchArgs),
    /// Rebuild the full-text index and the overview from the stored messages (after damage,
    /// or when an upgrade changed what is indexed). Run with the server stopped or idle.
    Reindex,
    /// Whether the web archive shows mail addresses (`show`) or writes them `user at
    /// example.org` (`hide`, the default).
    Addresses(AddressesArgs),
}

#[derive(Args)]
pub struct AddressesArgs {
    list: String,
    /// `show` or `hide`.
    mode: String,
}

#[derive(Args)]
pub struct ShowArgs {
    list: String,
    /// A month, YYYY-MM.
    #[arg(long)]
    month: Option<String>,
    /// A thread id (from the month listing).
    #[arg(long)]
    thread: Option<i64>,
    /// A Message-ID: prints the message as stored.
    #[arg(long)]
    message_id: Option<String>,
    /// Rows per page and which page (from 0).
    #[arg(long, default_value_t = 50)]
    limit: usize,
    #[arg(long, default_value_t = 0)]
    page: usize,
}

#[derive(Args)]
pub struct RmArgs {
    list: String,
    message_id: String,
}

#[derive(Args)]
pub struct ImportArgs {
    list: String,
    path: PathBuf,
}

#[derive(Args)]
pub struct ExportArgs {
    list: String,
    /// First day included, YYYY-MM-DD (UTC).
    #[arg(long)]
    since: Option<String>,
    /// First day not included, YYYY-MM-DD (UTC).
    #[arg(long)]
    until: Option<String>,
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Args)]
pub struct PrivacyArgs {
    list: String,
    privacy: String,
}

#[derive(Args)]
pub struct SearchArgs {
    list: String,
    query: String,
    #[arg(long, default_value_t = 20)]
    limit: usize,
    #[arg(long, default_value_t = 0)]
    page: usize,
    /// Best match first (bm25) instead of newest first.
    #[arg(long)]
    best_first: bool,
}

pub fn run(cmd: ArchiveCommand, config: &Config) -> Result<()> {
    let path = config.data_dir.join("archive.db");
    let mut a = Archive::open(&path)?.with_default_privacy(config.archive.default_privacy);
    match cmd {
        ArchiveCommand::Ls => ls(&a)?,
        ArchiveCommand::Show(s) => show(&a, s)?,
        ArchiveCommand::Rm(r) => {
            let list = r.list.to_lowercase();
            let found = a.remove(&list, &r.message_id, now_ms())?;
            outln!(
                "{} {} (tombstone kept: a re-import will not bring it back)",
                if found {
                    "removed"
                } else {
                    "not archived; blocked"
                },
                r.message_id
            );
        }
        ArchiveCommand::Import(i) => import_cmd(&mut a, i, config.archive.max_message_bytes)?,
        ArchiveCommand::Export(e) => export(&a, e)?,
        ArchiveCommand::Privacy(p) => {
            let privacy: Privacy = p.privacy.parse()?;
            a.set_privacy(&p.list.to_lowercase(), privacy)?;
            outln!("{}: archive {}", p.list, privacy.as_str());
        }
        ArchiveCommand::Reindex => reindex(&mut a)?,
        ArchiveCommand::Addresses(x) => {
            let show = match x.mode.as_str() {
                "show" => true,
                "hide" => false,
                other => anyhow::bail!("addresses: expected show or hide, not {other:?}"),
            };
            a.set_shows_addresses(&x.list.to_lowercase(), show)?;
            outln!(
                "{}: the web archive {} addresses",
                x.list,
                if show { "shows" } else { "hides" }
            );
        }
        ArchiveCommand::Search(s) => search(&a, s)?,
    }
    Ok(())
}

/// `archive ls`: one line per list with an archive.
fn ls(a: &Archive) -> Result<()> {
    outln!(
        "{:<40} {:<8} {:>10} {:>12} {:>12}",
        "LIST",
        "PRIVACY",
        "MESSAGES",
        "RAW",
        "STORED"
    );
    for l in a.lists()? {
        outln!(
            "{:<40} {:<8} {:>10} {:>12} {:>12}",
            l.list,
            l.privacy.as_str(),
            l.messages,
            l.raw_bytes,
            l.stored_bytes
        );
    }
    Ok(())
}

/// `archive export`: mboxrd to `--out` or stdout; the count on stderr.
fn export(a: &Archive, e: ExportArgs) -> Result<()> {
    let since = day_ms(e.since.as_deref(), "--since")?.unwrap_or(0);
    let until = day_ms(e.until.as_deref(), "--until")?.unwrap_or(i64::MAX);
    let list = e.list.to_lowercase();
    let n = match &e.out {
        Some(p) => {
            let f =
                std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?;
            let mut w = std::io::BufWriter::new(f);
            let n = import::export(a, &list, since, until, &mut w)?;
            w.flush()
                .with_context(|| format!("writing {}", p.display()))?;
            n
        }
        None => {
            let mut w = std::io::BufWriter::new(std::io::stdout().lock());
            let n = import::export(a, &list, since, until, &mut w)?;
            w.flush().context("writing stdout")?;
            n
        }
    };
    eprintln!("exported {n} messages");
    Ok(())
}

/// `archive reindex`, under a progress bar.
fn reindex(a: &mut Archive) -> Result<()> {
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("{spinner} reindex [{bar:40}] {pos}/{len} {per_sec} {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let n = a.reindex(2_000, &mut |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    })?;
    bar.finish_and_clear();
    outln!("reindexed {n} messages");
    Ok(())
}

/// `archive search`: the rows on stdout, the count on stderr.
fn search(a: &Archive, s: SearchArgs) -> Result<()> {
    let order = if s.best_first {
        SearchOrder::Relevance
    } else {
        SearchOrder::Newest
    };
    let found = a.search_page(
        &s.list.to_lowercase(),
        &s.query,
        &Filters::default(),
        order,
        s.limit,
        s.page.saturating_mul(s.limit),
    )?;
    for m in &found.rows {
        print_summary(m);
    }
    // The count goes to stderr, so the rows on stdout stay a plain table for scripts.
    eprintln!(
        "{} matching, page {} of {}",
        found.total,
        s.page + 1,
        found.total.div_ceil(s.limit.max(1) as u64).max(1)
    );
    Ok(())
}

fn show(a: &Archive, s: ShowArgs) -> Result<()> {
    let list = s.list.to_lowercase();
    let offset = s.page * s.limit;
    if let Some(mid) = s.message_id {
        let m = a
            .message(&list, &mid)?
            .with_context(|| format!("no message {mid} in {list}'s archive"))?;
        let mut out = std::io::stdout().lock();
        out.write_all(&m.raw).context("writing stdout")?;
        return Ok(());
    }
    if let Some(t) = s.thread {
        for m in a.thread(&list, t, s.limit, offset)? {
            print_summary(&m);
        }
        return Ok(());
    }
    if let Some(month) = s.month {
        let (y, m) = month
            .split_once('-')
            .and_then(|(y, m)| Some((y.parse().ok()?, m.parse().ok()?)))
            .with_context(|| format!("--month {month:?} is not YYYY-MM"))?;
        for m in a.month_page(&list, y, m, s.limit, offset)? {
            print_summary(&m);
        }
        return Ok(());
    }
    for m in a.months(&list)? {
        outln!("{:04}-{:02} {:>8}", m.year, m.month, m.count);
    }
    Ok(())
}

fn print_summary(m: &herald_archive::MessageSummary) {
    outln!(
        "{}  thread {:<8} {:<30.30} {:<50.50} <{}>",
        herald_telemetry::time::rfc3339_ms(u64::try_from(m.date_ms).unwrap_or(0)),
        m.thread_id,
        m.from,
        m.subject,
        m.message_id
    );
}

fn import_cmd(a: &mut Archive, i: ImportArgs, max_message_bytes: usize) -> Result<()> {
    let (files, total) = import::plan(&i.path)?;
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} importing [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message(format!("{} files", files.len()));
    let list = i.list.to_lowercase();
    let report = import::import(a, &list, &i.path, max_message_bytes, now_ms(), |b| {
        bar.set_position(b)
    })?;
    bar.finish_and_clear();
    outln!(
        "{}: {} added, {} already archived, {} refused",
        list,
        report.added,
        report.duplicates,
        report.refused.len()
    );
    for (where_, why) in &report.refused {
        outln!("  refused {where_}: {why}");
    }
    Ok(())
}

fn day_ms(day: Option<&str>, flag: &str) -> Result<Option<i64>> {
    day.map(|d| {
        herald_telemetry::time::parse_date_ms(d)
            .and_then(|ms| i64::try_from(ms).ok())
            .with_context(|| format!("{flag} {d:?} is not a day YYYY-MM-DD (1970 or later)"))
    })
    .transpose()
}

fn now_ms() -> i64 {
    i64::try_from(herald_types::unix_ms_now()).unwrap_or(i64::MAX)
}
