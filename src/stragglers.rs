//! `herald stragglers`: seeds/000's latedudes — who holds the most deferred copies, how old they
//! are and the last error — and the operator's actions on them (retry now, give up, disable
//! the member), all through the server's API.

use crate::client::Api;
use anyhow::{bail, Result};
use clap::{Args, ValueEnum};
use herald_api_types::{ActionResult, StragglerGroup, StragglerTarget, Stragglers};

#[derive(Clone, Copy, ValueEnum)]
pub enum Act {
    /// Move the copies to the ready queue now (a destination marked down is tried again).
    Retry,
    /// Fail the copies now ("given up by the list operator").
    GiveUp,
    /// Disable the member and give up its copies.
    Disable,
}

#[derive(Args)]
pub struct StragglersArgs {
    /// Rows per table.
    #[arg(long, default_value_t = 20)]
    limit: usize,
    #[arg(long)]
    json: bool,
    /// Act on the copies of --recipient or --domain.
    #[arg(long, value_enum, requires = "target")]
    action: Option<Act>,
    #[arg(long, group = "target")]
    recipient: Option<String>,
    #[arg(long, group = "target")]
    domain: Option<String>,
    /// With --action disable: the list (default: the lists of the recipient's pending posts).
    #[arg(long)]
    list: Option<String>,
}

pub async fn run(api: &Api, a: StragglersArgs) -> Result<()> {
    if let Some(act) = a.action {
        let path = match act {
            Act::Retry => "/api/v1/stragglers/retry",
            Act::GiveUp => "/api/v1/stragglers/give-up",
            Act::Disable => "/api/v1/stragglers/disable",
        };
        if matches!(act, Act::Disable) && a.recipient.is_none() {
            bail!("--action disable needs --recipient");
        }
        let body = StragglerTarget {
            recipient: a.recipient,
            domain: a.domain,
            list: a.list,
        };
        let r: ActionResult = api.post_json(path, &body).await?;
        outln!("{} queued copies matched", r.matched);
        for l in &r.disabled_on {
            outln!("member disabled on {l}");
        }
        return Ok(());
    }
    let s: Stragglers = api
        .get(&format!(
            "/api/v1/stragglers?limit={}",
            a.limit.clamp(1, 1000)
        ))
        .await?;
    if a.json {
        outln!("{}", crate::client::pretty(&s)?);
        return Ok(());
    }
    outln!(
        "{} deferred copies pending{}",
        s.total,
        match s.untracked {
            n if n > 0 => format!(" (+{n} not tracked: book full)"),
            _ => String::new(),
        }
    );
    table("RECIPIENT", &s.recipients);
    table("DESTINATION", &s.destinations);
    Ok(())
}

fn age(secs: u64) -> String {
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s => format!("{:.1}h", s as f64 / 3600.0),
    }
}

fn table(title: &str, rows: &[StragglerGroup]) {
    outln!();
    outln!(
        "{title:<40} {:>7} {:>6} {:>5}  LAST ERROR",
        "PENDING",
        "AGE",
        "TRIES"
    );
    for g in rows {
        outln!(
            "{:<40} {:>7} {:>6} {:>5}  {}",
            g.key,
            g.pending,
            age(g.oldest_secs),
            g.max_tries,
            g.last_error
        );
    }
}
