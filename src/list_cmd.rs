//! `herald list`: create, show, change and delete lists through the HTTP API. The create
//! options are typed here (clap value enums) and sent as the API's list settings; `list set`
//! takes the settings' own names, as `list show` prints them.

use crate::client::{enc, pretty, Api};
use anyhow::{Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use herald_api_types::{ListInfo, ListView};
use serde_json::{json, Value};
use std::path::PathBuf;

/// When From is rewritten to the list address (DMARC).
#[derive(Clone, Copy, ValueEnum)]
pub enum FromRewrite {
    /// When the poster's domain publishes DMARC p=reject or p=quarantine.
    WhenNeeded,
    Always,
    Never,
}

/// The poster's own DKIM-Signature in copies.
#[derive(Clone, Copy, ValueEnum)]
pub enum PosterDkim {
    Keep,
    /// Renamed to X-Original-DKIM-Signature when From is rewritten.
    RenameWhenRewritten,
    Remove,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Policy {
    Members,
    Anyone,
    Moderators,
}

#[derive(Subcommand)]
pub enum ListCommand {
    /// Create a list.
    Create(CreateArgs),
    /// List all lists with member counts.
    Ls,
    /// Show one list's settings and counts.
    Show { address: String },
    /// Change settings of a list: `name=value` pairs with the names `list show` prints, e.g.
    /// `from_rewrite=always`, `subject_prefix="[dev]"`, `personalize=false`. A value that
    /// reads as JSON (true, 5, "x", null, [..]) is taken as such; anything else as a string.
    Set {
        address: String,
        #[arg(required = true, value_parser = parse_setting)]
        settings: Vec<(String, Value)>,
    },
    /// Delete a list and its members.
    Rm { address: String },
}

/// `herald list create`.
#[derive(Args)]
pub struct CreateArgs {
    /// The posting address, e.g. announce@lists.example.org
    address: String,
    /// Display name (List-Id, footers).
    #[arg(long)]
    name: Option<String>,
    /// Who may post without moderation.
    #[arg(long, value_enum, default_value_t = Policy::Members)]
    policy: Policy,
    /// Subject prefix, e.g. "[announce]".
    #[arg(long)]
    prefix: Option<String>,
    /// Reply-To: "poster", "list" or an address.
    #[arg(long, default_value = "poster")]
    reply_to: String,
    /// Footer template ({{name}}, {{email}}, {{unsubscribe_url}}, custom fields).
    #[arg(long, conflicts_with = "footer_file")]
    footer: Option<String>,
    /// Read the footer template from a file.
    #[arg(long)]
    footer_file: Option<PathBuf>,
    /// Do not address each copy's To: to its member.
    #[arg(long)]
    no_personalize: bool,
    /// Give up on a copy after this many hours (default 120).
    #[arg(long)]
    max_age_hours: Option<u64>,
    /// Rewrite From to "Poster via List" <list> (DMARC).
    #[arg(long, value_enum, default_value_t = FromRewrite::WhenNeeded)]
    from_rewrite: FromRewrite,
    /// What becomes of the poster's DKIM-Signature.
    #[arg(long, value_enum, default_value_t = PosterDkim::RenameWhenRewritten)]
    poster_dkim: PosterDkim,
}

fn parse_setting(s: &str) -> Result<(String, Value), String> {
    let (k, v) = s
        .split_once('=')
        .filter(|(k, _)| !k.trim().is_empty())
        .ok_or_else(|| format!("expected name=value, got {s:?}"))?;
    let value = serde_json::from_str(v).unwrap_or_else(|_| Value::String(v.to_string()));
    Ok((k.trim().to_string(), value))
}

/// `herald list …`.
pub async fn list(api: &Api, cmd: ListCommand) -> Result<()> {
    match cmd {
        ListCommand::Create(args) => create(api, args).await?,
        ListCommand::Ls => {
            let lists: Vec<ListView> = api.get("/api/v1/lists").await?;
            outln!(
                "{:<40} {:>10} {:>10} {:>10}",
                "LIST",
                "MEMBERS",
                "ENABLED",
                "DISABLED"
            );
            for l in &lists {
                outln!(
                    "{:<40} {:>10} {:>10} {:>10}",
                    l.list.address,
                    l.members.total,
                    l.members.enabled,
                    l.members.disabled
                );
            }
        }
        ListCommand::Show { address } => {
            let l: ListView = api.get(&format!("/api/v1/lists/{}", enc(&address))).await?;
            outln!("{}", pretty(&l)?);
        }
        ListCommand::Set { address, settings } => {
            let changes: serde_json::Map<String, Value> = settings.into_iter().collect();
            let l: ListInfo = api
                .patch_json(
                    &format!("/api/v1/lists/{}", enc(&address)),
                    &Value::Object(changes),
                )
                .await?;
            outln!("{}", pretty(&l.settings)?);
        }
        ListCommand::Rm { address } => {
            api.delete(&format!("/api/v1/lists/{}", enc(&address)))
                .await?;
            outln!("deleted list {address}");
        }
    }
    Ok(())
}

/// `herald list create`: the options as the API's list settings.
async fn create(api: &Api, a: CreateArgs) -> Result<()> {
    let footer = match a.footer_file {
        Some(p) => {
            Some(std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?)
        }
        None => a.footer,
    };
    let reply_to = match a.reply_to.as_str() {
        "poster" => json!({"kind": "poster"}),
        "list" => json!({"kind": "list"}),
        addr => json!({"kind": "explicit", "address": addr}),
    };
    let policy = match a.policy {
        Policy::Members => "members",
        Policy::Anyone => "anyone",
        Policy::Moderators => "moderators",
    };
    let mut settings = json!({
        "display_name": a.name.unwrap_or_default(),
        "posting_policy": policy,
        "subject_prefix": a.prefix,
        "reply_to": reply_to,
        "footer": footer,
        "personalize": !a.no_personalize,
        "from_rewrite": match a.from_rewrite {
            FromRewrite::WhenNeeded => "when_needed",
            FromRewrite::Always => "always",
            FromRewrite::Never => "never",
        },
        "poster_dkim": match a.poster_dkim {
            PosterDkim::Keep => "keep",
            PosterDkim::RenameWhenRewritten => "rename_when_rewritten",
            PosterDkim::Remove => "remove",
        },
    });
    // Only when given: an absent setting takes the server's default.
    if let (Some(h), Value::Object(m)) = (a.max_age_hours, &mut settings) {
        m.insert("max_age_secs".into(), json!(h * 3600));
    }
    let list: ListInfo = api
        .post_json(
            "/api/v1/lists",
            &json!({"address": a.address, "settings": settings}),
        )
        .await?;
    outln!("created list {} (id {})", list.address, list.id);
    Ok(())
}
