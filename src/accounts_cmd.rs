//! `herald account add|passwd|ls|rm|role` and `herald audit`: clients of `/api/v1/accounts` and
//! `/api/v1/audit`, with the admin token like every other command.
//!
//! Passwords are read from standard input (`--password-stdin`, one line), never from the
//! command line, where other users could read them in the process list.

use crate::client::{enc, Api};
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use herald_api_types::accounts::{AccountUpdate, AccountView, AuditView, NewAccount, RoleRequest};
use std::io::BufRead;

#[derive(Subcommand)]
pub enum AccountCommand {
    /// Create an account (sign-in by mailed link unless --password-stdin).
    Add {
        address: String,
        /// Full rights over every list and the server.
        #[arg(long)]
        site_admin: bool,
        /// Read a password from standard input (one line).
        #[arg(long)]
        password_stdin: bool,
    },
    /// Set an account's password from standard input (or --clear: mailed links only). Ends
    /// its sessions.
    Passwd {
        address: String,
        #[arg(long)]
        clear: bool,
    },
    /// Every account with its roles.
    Ls,
    /// Remove an account (its roles and sessions go with it).
    Rm { address: String },
    /// Give an account a role on a list: owner, moderator or none.
    Role {
        address: String,
        list: String,
        role: String,
    },
    /// Grant or withdraw site administration.
    SiteAdmin {
        address: String,
        #[arg(long, action = clap::ArgAction::Set)]
        on: bool,
    },
}

#[derive(Args)]
pub struct AuditArgs {
    /// Only this list's events.
    #[arg(long)]
    list: Option<String>,
    /// Only events at or after this Unix time in milliseconds.
    #[arg(long)]
    since_ms: Option<u64>,
    #[arg(long, default_value_t = 100)]
    limit: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

fn read_password() -> Result<String> {
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .context("reading the password from standard input")?;
    let p = line.trim_end_matches(['\r', '\n']).to_string();
    if p.is_empty() {
        bail!("no password on standard input");
    }
    Ok(p)
}

fn print(a: &AccountView) {
    let roles: Vec<String> = a
        .roles
        .iter()
        .map(|r| format!("{}:{}", r.role, r.list))
        .collect();
    outln!(
        "{:<36} {:<10} {:<9} {}",
        a.address,
        if a.site_admin { "site-admin" } else { "-" },
        if a.has_password { "password" } else { "link" },
        roles.join(" ")
    );
}

pub async fn account(api: &Api, cmd: AccountCommand) -> Result<()> {
    match cmd {
        AccountCommand::Add {
            address,
            site_admin,
            password_stdin,
        } => {
            let password = password_stdin.then(read_password).transpose()?;
            let req = NewAccount {
                address,
                site_admin,
                password,
            };
            let a: AccountView = api.post_json("/api/v1/accounts", &req).await?;
            outln!("added {}", a.address);
        }
        AccountCommand::Passwd { address, clear } => {
            let u = AccountUpdate {
                password: (!clear).then(read_password).transpose()?,
                clear_password: clear,
                site_admin: None,
            };
            let a: AccountView = api
                .patch_json(&format!("/api/v1/accounts/{}", enc(&address)), &u)
                .await?;
            let how = if a.has_password {
                "password set"
            } else {
                "password removed"
            };
            outln!("{}: {how}; its sessions ended", a.address);
        }
        AccountCommand::Ls => {
            let all: Vec<AccountView> = api.get("/api/v1/accounts").await?;
            outln!("{:<36} {:<10} {:<9} roles", "address", "admin", "sign-in");
            for a in &all {
                print(a);
            }
            outln!("{} accounts", all.len());
        }
        AccountCommand::Rm { address } => {
            api.delete(&format!("/api/v1/accounts/{}", enc(&address)))
                .await?;
            outln!("removed {address}");
        }
        AccountCommand::Role {
            address,
            list,
            role,
        } => {
            let path = format!("/api/v1/accounts/{}/roles/{}", enc(&address), enc(&list));
            let a: AccountView = api.put_json(&path, &RoleRequest { role }).await?;
            print(&a);
        }
        AccountCommand::SiteAdmin { address, on } => {
            let u = AccountUpdate {
                site_admin: Some(on),
                ..AccountUpdate::default()
            };
            let a: AccountView = api
                .patch_json(&format!("/api/v1/accounts/{}", enc(&address)), &u)
                .await?;
            print(&a);
        }
    }
    Ok(())
}

pub async fn audit(api: &Api, a: AuditArgs) -> Result<()> {
    let mut q = format!("?limit={}", a.limit);
    if let Some(l) = &a.list {
        q.push_str(&format!("&list={}", enc(l)));
    }
    if let Some(s) = a.since_ms {
        q.push_str(&format!("&since={s}"));
    }
    let rows: Vec<AuditView> = api.get(&format!("/api/v1/audit{q}")).await?;
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    outln!(
        "{:<24} {:<28} {:<16} {:<26} {:<24} {:<24} outcome",
        "at",
        "actor",
        "client",
        "action",
        "list",
        "target"
    );
    for r in &rows {
        outln!(
            "{:<24} {:<28} {:<16} {:<26} {:<24} {:<24} {}",
            herald_telemetry::time::rfc3339_ms(r.at_ms),
            r.actor,
            r.client.as_deref().unwrap_or("-"),
            r.action,
            r.list.as_deref().unwrap_or("-"),
            r.target.as_deref().unwrap_or("-"),
            r.outcome
        );
    }
    outln!("{} events", rows.len());
    Ok(())
}
