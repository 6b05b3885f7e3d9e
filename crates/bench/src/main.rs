//! `herald-bench`: the helpers `bench/run.sh` needs around a Herald-versus-Postfix run.
//!
//! - `feed`: plays the list manager in front of another MTA — renders the post once with Herald's
//!   own fan-out crate and submits one personalized copy per member over SMTP (same bytes as
//!   Herald sends, each with its VERP return path), or Postfix's XVERP best case.
//! - `intake`: many concurrent SMTP senders posting small posts to one address; durable
//!   posts/s and the latency from the end of DATA to `250`.
//! - `post`: writes the scenario posts (text of N KB, a multipart/related with an inline image).
//! - `watch`: samples a process tree's CPU time and RSS until told to stop.
//! - `table`: prints the comparison table from each system's report and resources.
//! - `soak`, `soak-report`, `soak-check`: the hours-long load of a busy site for `bench/soak.sh`,
//!   its table and slopes, and the check of every copy against the posts and membership changes.
//!
//! Benchmarks are not tests: nothing here runs under `cargo test` beyond its unit tests.

mod feed;
mod intake;
mod posts;
mod soak;
mod table;
mod watch;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "herald-bench", about = "Helpers for bench/run.sh")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Submit one personalized copy per member to an SMTP server (a list manager in front of an MTA).
    Feed(feed::FeedArgs),
    /// Post small messages from many concurrent SMTP senders (durable intake).
    Intake(intake::IntakeArgs),
    /// Write a scenario post.
    Post(posts::PostArgs),
    /// Sample a process tree's CPU and RSS until a stop file appears.
    Watch(watch::WatchArgs),
    /// Print the comparison table of a benchmark's results directory.
    Table(table::TableArgs),
    /// Hold a busy site's load (posts, membership changes, bounces, polls) and sample Herald.
    Soak(soak::SoakArgs),
    /// Print a soak's table, slopes and fresh-versus-drained RSS.
    SoakReport(soak::report::SoakReportArgs),
    /// Check a drained soak's copies: none missing, none twice, none to non-members.
    SoakCheck(soak::check::SoakCheckArgs),
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Command::Feed(a) => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()?;
            rt.block_on(feed::run(a))
        }
        Command::Intake(a) => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()?;
            rt.block_on(intake::run(a))
        }
        Command::Post(a) => posts::run(a),
        Command::Watch(a) => watch::run(a),
        Command::Table(a) => table::run(a),
        Command::Soak(a) => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()?;
            rt.block_on(soak::run(a))
        }
        Command::SoakReport(a) => soak::report::run(a),
        Command::SoakCheck(a) => soak::check::run(a),
    }
}
