//! The `herald` binary: command-line parsing and wiring only. `serve` runs the server
//! (`herald_server::run`), `demo` runs it against a simulated Internet, and the admin commands
//! talk to a running server over its HTTP API (`client.rs`); `archive` opens the data
//! directory's archive itself (`archive_cmd.rs`); `backup` streams one from the server's API and
//! `restore` writes one into the data directory (`backup_cmd.rs`).

#[macro_use]
mod output;
mod accounts_cmd;
mod archive_cmd;
mod backup_cmd;
mod bans_cmd;
mod client;
mod csv_import;
mod demo;
mod dkim_cmd;
mod doctor_cmd;
mod import_cmd;
mod list_cmd;
mod lists_cmd;
mod node_cmd;
mod post_cmd;
mod probe_cmd;
mod queue_cmd;
mod report;
mod sim_cmd;
mod stragglers;
mod texts_cmd;
mod top;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use herald_server::{Config, Listeners};
use std::path::PathBuf;
use tokio_util::sync::CancellationToken;

/// mimalloc instead of glibc's malloc: fan-out and intake allocate and free many small,
/// short-lived buffers across tokio's threads, where glibc's arenas showed as ~9-16 % of the
/// CPU in `perf`; with mimalloc a ten-million fan-out takes 54 µs of CPU a copy instead of 78
/// (BENCHMARKS.md). Built from C by the `cc` crate: gcc alone, no system library.
#[cfg(not(feature = "system-alloc"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "herald",
    version,
    about = "Herald: a mailing-list server that gets a personal copy of every post to every member, fast."
)]
struct Cli {
    /// Configuration file (TOML). Without it Herald runs on built-in defaults.
    #[arg(long, short, global = true, env = "HERALD_CONFIG")]
    config: Option<PathBuf>,
    /// URL of a running server's HTTP API (default: from the config's listen.http).
    #[arg(long, global = true, env = "HERALD_SERVER")]
    server: Option<String>,
    /// PEM file of the CA certificate(s) to trust when the server's API is https.
    #[arg(long, global = true, env = "HERALD_CA_FILE")]
    ca_file: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the server: SMTP, LMTP and HTTP listeners, fan-out and delivery.
    Serve,
    /// Start a simulated Internet and a real server on loopback, fan a post out to its members
    /// and print a summary.
    Demo(demo::DemoArgs),
    /// Manage lists.
    #[command(subcommand)]
    List(list_cmd::ListCommand),
    /// Manage list members.
    #[command(subcommand)]
    Member(lists_cmd::MemberCommand),
    /// Post a message (an .eml file) to a list, as an approved post.
    Post(PostArgs),
    /// Pending work by destination.
    Queue(QueueArgs),
    /// Server status: lists, queue, recent posts, spool.
    Status,
    /// Is the server alive (`/healthz`), or ready to take mail (`--ready`: `/readyz`)? Exit
    /// status 0 when it is: for service managers and container health checks.
    Probe(probe_cmd::ProbeArgs),
    /// Held posts: list them, approve or reject one.
    Held(lists_cmd::HeldArgs),
    /// Recent bounces by member and reason.
    Bounces(lists_cmd::BouncesArgs),
    /// Mail to postmaster stored for the operator: list it, show or delete one.
    Postmaster(lists_cmd::PostmasterArgs),
    /// Ask for a subscription (or, with --unsubscribe, its end) with double opt-in.
    Subscribe(lists_cmd::SubscribeArgs),
    /// Banned addresses and patterns (address, @domain, ^regex), global or with --list.
    #[command(subcommand)]
    Ban(bans_cmd::BanCommand),
    /// The suppression list: addresses never mailed or added again, global or with --list.
    #[command(subcommand)]
    Suppress(bans_cmd::SuppressCommand),
    /// A list's own wording of the mail and pages Herald writes for it (per message and
    /// language; the web page /admin/lists/<list>/texts edits the same).
    #[command(subcommand)]
    Texts(texts_cmd::TextsCommand),
    /// DKIM keys for list domains.
    #[command(subcommand)]
    Dkim(dkim_cmd::DkimCommand),
    /// Reports from the server's delivery statistics: hourly table, day picture, one post.
    #[command(subcommand)]
    Report(report::ReportCommand),
    /// Live terminal view: rates, posts, queue, hosts, process, where time is lost.
    Top(top::TopArgs),
    /// Recipients and destinations holding the most deferred copies, and actions on them.
    Stragglers(stragglers::StragglersArgs),
    /// The simulated Internet on its own: `sim run` (with --config naming a world file) and
    /// `sim report <run-dir>`.
    #[command(subcommand)]
    Sim(sim_cmd::SimCommand),
    /// The list archive in this machine's data directory: ls, show, search, rm, import,
    /// export, privacy.
    #[command(subcommand)]
    Archive(archive_cmd::ArchiveCommand),
    /// List digests: `digest send-now <list>`.
    #[command(subcommand)]
    Digest(lists_cmd::DigestCommand),
    /// SMTP TLS reports (RFC 8460): `tls-report send [--day YYYY-MM-DD]`.
    #[command(subcommand)]
    TlsReport(lists_cmd::TlsReportCommand),
    /// This node in a cluster: `node drain [--wait-secs N]` hands its shards of
    /// shared posts back and stops claiming.
    #[command(subcommand)]
    Node(node_cmd::NodeCommand),
    /// Copy a running server (lists, members, pending deliveries, archive, secret, keys) into
    /// a new directory, without stopping delivery.
    Backup(DirArg),
    /// Bring a backup into this machine's (fresh) data directory, before `herald serve`.
    Restore(DirArg),
    /// Check list domains' DNS (MX, SPF, DKIM, DMARC, MTA-STS, TLS-RPT), reverse DNS, the HELO
    /// name, the TLS certificate and port 25; print the records to publish.
    Doctor(doctor_cmd::DoctorArgs),
    /// Move in: lists, members, settings, bans, suppressions and archives from listmonk,
    /// Mailman 2, Mailman 3 or another Herald's export. A dry run unless --apply.
    #[command(subcommand)]
    Import(import_cmd::ImportCommand),
    /// Move out: `export herald <dir>` writes everything in Herald's documented JSON format.
    #[command(subcommand)]
    Export(import_cmd::ExportCommand),
    /// Web accounts: add, passwd, ls, rm, role <addr> <list> owner|moderator|none, site-admin.
    #[command(subcommand)]
    Account(accounts_cmd::AccountCommand),
    /// The audit log of administrative actions (who, what, when), newest first.
    Audit(accounts_cmd::AuditArgs),
}

#[derive(Args)]
struct DirArg {
    /// The backup's directory.
    dir: PathBuf,
}

#[derive(Args)]
struct PostArgs {
    /// List address, e.g. announce@lists.example.org
    list: String,
    /// The message, RFC 5322 format.
    file: PathBuf,
    /// Show a progress bar until every recipient has a final outcome.
    #[arg(long)]
    wait: bool,
}

#[derive(Args)]
struct QueueArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Show at most this many destinations.
    #[arg(long, default_value_t = 30)]
    limit: usize,
    /// Also show the recipients with the most pending (slow-lane) copies, oldest first.
    #[arg(long)]
    stragglers: bool,
}

/// Errors end the process with one line on stderr (the cause chain joined by `: `) and status
/// 1: a server that goes away mid-request is a message, never a panic or a backtrace.
fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("herald: {}", cause_chain(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

/// The error and its causes joined by `: `, each said once: many errors already include their
/// source's text in their own message (`directory: {0}`), and the reader needs it only once.
fn cause_chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

fn run() -> Result<()> {
    let cli = Cli::parse();
    let config = match &cli.config {
        // For `herald sim`, --config names a world file, not a server config.
        Some(path) if !matches!(cli.command, Command::Sim(_)) => Config::load(path)?,
        _ => Config::default(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .max_blocking_threads(config.server.blocking_pool())
        // A worker going idle gives back the heap pages other threads emptied for it, so a
        // drained server's memory comes back to its working set (herald_server::memory).
        .on_thread_park(herald_server::memory::on_worker_park)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let world_file = cli.config.clone();
    let out = runtime.block_on(dispatch(
        cli.command,
        config,
        cli.server,
        cli.ca_file,
        world_file,
    ));
    // Dropping the runtime would wait for every blocking task, and one stuck on a full disk or
    // an unreachable store would hold the exit for as long as it stays stuck.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    out
}

async fn dispatch(
    command: Command,
    config: Config,
    server: Option<String>,
    ca_file: Option<PathBuf>,
    world_file: Option<PathBuf>,
) -> Result<()> {
    let api = || client::Api::new(server.clone(), &config, ca_file.as_deref());
    match command {
        Command::Serve => serve(config).await,
        Command::Demo(args) => demo::run(args).await,
        Command::List(cmd) => list_cmd::list(&api()?, cmd).await,
        Command::Member(cmd) => lists_cmd::member(&api()?, cmd).await,
        Command::Post(a) => post_cmd::post(&api()?, &a.list, &a.file, a.wait).await,
        Command::Queue(a) => queue_cmd::queue(&api()?, a.json, a.limit, a.stragglers).await,
        Command::Status => queue_cmd::status(&api()?).await,
        Command::Probe(a) => probe_cmd::run(&api()?, a).await,
        Command::Held(a) => lists_cmd::held(&api()?, a).await,
        Command::Bounces(a) => lists_cmd::bounces(&api()?, a).await,
        Command::Postmaster(a) => lists_cmd::postmaster(&api()?, a).await,
        Command::Subscribe(a) => lists_cmd::subscribe(&api()?, a).await,
        Command::Ban(cmd) => bans_cmd::ban(&api()?, cmd).await,
        Command::Suppress(cmd) => bans_cmd::suppress(&api()?, cmd).await,
        Command::Texts(cmd) => texts_cmd::texts(&api()?, cmd).await,
        Command::Dkim(cmd) => dkim_cmd::run(cmd),
        Command::Report(cmd) => report::run(&api()?, cmd).await,
        Command::Top(a) => top::run(api()?, a).await,
        Command::Stragglers(a) => stragglers::run(&api()?, a).await,
        Command::Sim(cmd) => sim_cmd::run(cmd, world_file).await,
        Command::Archive(cmd) => archive_cmd::run(cmd, &config),
        Command::Backup(a) => backup_cmd::backup(&api()?, &a.dir).await,
        Command::Restore(a) => backup_cmd::restore_into(&config, &a.dir),
        Command::Doctor(a) => doctor_cmd::run(&config, api(), a).await,
        Command::Digest(cmd) => lists_cmd::digest(&api()?, cmd).await,
        Command::TlsReport(cmd) => lists_cmd::tls_report(&api()?, cmd).await,
        Command::Node(cmd) => node_cmd::run(&api()?, cmd).await,
        Command::Import(cmd) => import_cmd::import(cmd, &config, api().ok()).await,
        // Synchronous (the directory's API); off the runtime, as the PostgreSQL client needs.
        Command::Export(cmd) => tokio::task::block_in_place(|| import_cmd::export(cmd, &config)),
        Command::Account(cmd) => accounts_cmd::account(&api()?, cmd).await,
        Command::Audit(a) => accounts_cmd::audit(&api()?, a).await,
    }
}

async fn serve(config: Config) -> Result<()> {
    init_logging(config.log.format);
    let listeners = Listeners::bind(&config).await?;
    let shutdown = CancellationToken::new();
    let signal = shutdown.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutting down: no new connections; finishing in-flight work");
        signal.cancel();
        exit_after_stop_limit();
    });
    herald_server::run(config, listeners, shutdown).await?;
    Ok(())
}

/// The stop's backstop: every step of the drain has its own limit (together
/// `herald_server::STOP_LIMIT`), so this fires only if one misbehaves. Exiting then is what a
/// service manager's SIGKILL would do later: what was not journaled is sent again at the next
/// start, within the documented bound; nothing accepted is lost.
fn exit_after_stop_limit() {
    let limit = herald_server::STOP_LIMIT + std::time::Duration::from_secs(2);
    let spawned = std::thread::Builder::new()
        .name("herald-stop-limit".into())
        .spawn(move || {
            std::thread::sleep(limit);
            tracing::error!(
                limit_secs = limit.as_secs(),
                "the stop did not finish in time; exiting now"
            );
            std::process::exit(1);
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "no backstop thread for the stop");
    }
}

fn init_logging(format: herald_telemetry::LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        herald_telemetry::LogFormat::Text => builder.try_init(),
        // One JSON object per line, the event's fields at the top level (what Vector, Fluent
        // Bit and Loki's promtail parse without configuration).
        herald_telemetry::LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}

/// SIGTERM or SIGINT (Ctrl-C).
async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
