//! `herald ban add|rm|ls` and `herald suppress add|rm|ls`: clients of `/api/v1/bans` and
//! `/api/v1/suppressions`. Without `--list` they act on the global scope.

use crate::client::{enc, Api};
use anyhow::Result;
use clap::Subcommand;
use herald_api_types::{
    BanRequest, BanView, SuppressAnswer, SuppressRequest, SuppressionView, UnsuppressRequest,
};

#[derive(Subcommand)]
pub enum BanCommand {
    /// Ban an address (eve@example.com), a domain (@example.com) or a ^regex.
    Add {
        pattern: String,
        #[arg(long)]
        list: Option<String>,
    },
    /// Lift a ban.
    Rm {
        pattern: String,
        #[arg(long)]
        list: Option<String>,
    },
    /// The bans of one scope.
    Ls {
        #[arg(long)]
        list: Option<String>,
    },
}

#[derive(Subcommand)]
pub enum SuppressCommand {
    /// Put an address on the suppression list (it is disabled wherever it is a member).
    Add {
        address: String,
        #[arg(long)]
        reason: String,
        #[arg(long)]
        list: Option<String>,
        /// operator (default) or erasure.
        #[arg(long)]
        source: Option<String>,
    },
    /// Take an address off the suppression list (nobody is re-enabled).
    Rm {
        address: String,
        #[arg(long)]
        list: Option<String>,
    },
    /// The entries of one scope, newest first.
    Ls {
        #[arg(long)]
        list: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
}

fn scope(list: Option<&str>) -> &str {
    list.unwrap_or("(global)")
}

pub async fn ban(api: &Api, cmd: BanCommand) -> Result<()> {
    match cmd {
        BanCommand::Add { pattern, list } => {
            let b: BanView = api
                .post_json("/api/v1/bans", &BanRequest { list, pattern })
                .await?;
            outln!("banned {} on {}", b.pattern, scope(b.list.as_deref()));
        }
        BanCommand::Rm { pattern, list } => {
            let shown = format!("{pattern} on {}", scope(list.as_deref()));
            api.delete_json("/api/v1/bans", &BanRequest { list, pattern })
                .await?;
            outln!("lifted {shown}");
        }
        BanCommand::Ls { list } => {
            let q = list
                .as_deref()
                .map(|l| format!("?list={}", enc(l)))
                .unwrap_or_default();
            let rows: Vec<BanView> = api.get(&format!("/api/v1/bans{q}")).await?;
            for b in &rows {
                outln!("{:<6} {}", b.id, b.pattern);
            }
            outln!("{} bans on {}", rows.len(), scope(list.as_deref()));
        }
    }
    Ok(())
}

pub async fn suppress(api: &Api, cmd: SuppressCommand) -> Result<()> {
    match cmd {
        SuppressCommand::Add {
            address,
            reason,
            list,
            source,
        } => {
            let req = SuppressRequest {
                list,
                address,
                reason,
                source,
            };
            let r: SuppressAnswer = api.post_json("/api/v1/suppressions", &req).await?;
            let state = if r.new {
                "suppressed"
            } else {
                "already suppressed"
            };
            outln!(
                "{} {} on {} ({}: {}); {} member(s) disabled",
                state,
                r.entry.address,
                scope(r.entry.list.as_deref()),
                r.entry.source,
                r.entry.reason,
                r.disabled
            );
        }
        SuppressCommand::Rm { address, list } => {
            let shown = format!("{address} on {}", scope(list.as_deref()));
            api.delete_json("/api/v1/suppressions", &UnsuppressRequest { list, address })
                .await?;
            outln!("no longer suppressed: {shown}");
        }
        SuppressCommand::Ls { list, limit } => {
            let mut q = format!("?limit={limit}");
            if let Some(l) = &list {
                q.push_str(&format!("&list={}", enc(l)));
            }
            let rows: Vec<SuppressionView> = api.get(&format!("/api/v1/suppressions{q}")).await?;
            outln!(
                "{:<36} {:<10} {:<14} reason",
                "address",
                "source",
                "at (ms)"
            );
            for r in &rows {
                outln!(
                    "{:<36} {:<10} {:<14} {}",
                    r.address,
                    r.source,
                    r.at_ms,
                    r.reason
                );
            }
            outln!("{} suppressed on {}", rows.len(), scope(list.as_deref()));
        }
    }
    Ok(())
}
