//! List housekeeping commands (issue 5): held posts, bounces, member details, subscription
//! requests, stored postmaster mail. Thin clients of the HTTP API, like `client.rs`.

use crate::client::{enc, Api};
use anyhow::Result;
use clap::{Args, Subcommand};
use serde_json::{json, Value};

/// `herald held [--list L] [approve|reject <id>]`.
#[derive(Args)]
pub struct HeldArgs {
    /// Only this list's held posts.
    #[arg(long)]
    list: Option<String>,
    #[command(subcommand)]
    action: Option<HeldAction>,
}

#[derive(Subcommand)]
pub enum HeldAction {
    /// Fan a held post out to the list.
    Approve { post: String },
    /// Discard a held post.
    Reject { post: String },
}

/// `herald postmaster [show|delete <id>]`.
#[derive(Args)]
pub struct PostmasterArgs {
    /// List at most this many messages (oldest first).
    #[arg(long, default_value_t = 100)]
    limit: usize,
    #[command(subcommand)]
    action: Option<PostmasterAction>,
}

#[derive(Subcommand)]
pub enum PostmasterAction {
    /// Print a stored message as it arrived (RFC 5322, to stdout).
    Show { post: String },
    /// Delete a stored message (it is not forwarded again).
    Delete { post: String },
}

/// `herald bounces [--list L] [--kind K]`.
#[derive(Args)]
pub struct BouncesArgs {
    #[arg(long)]
    list: Option<String>,
    /// hard, soft, delayed, auto_reply, policy, informational, unrecognized
    #[arg(long)]
    kind: Option<String>,
    #[arg(long, default_value_t = 50)]
    limit: usize,
}

/// `herald subscribe <list> <address> [--unsubscribe]`: sends a double opt-in confirmation.
#[derive(Args)]
pub struct SubscribeArgs {
    list: String,
    address: String,
    /// Ask to unsubscribe instead.
    #[arg(long)]
    unsubscribe: bool,
}

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

pub async fn held(api: &Api, a: HeldArgs) -> Result<()> {
    match a.action {
        Some(HeldAction::Approve { post }) => {
            let r = api
                .post_json(&format!("/api/held/{}/approve", enc(&post)), &json!({}))
                .await?;
            outln!("approved {post}: fanned out as post {}", s(&r["post"]));
        }
        Some(HeldAction::Reject { post }) => {
            api.post_json(&format!("/api/held/{}/reject", enc(&post)), &json!({}))
                .await?;
            outln!("rejected {post}");
        }
        None => {
            let q = a
                .list
                .map(|l| format!("?list={}", enc(&l)))
                .unwrap_or_default();
            let v = api.get(&format!("/api/held{q}")).await?;
            let rows = v.as_array().cloned().unwrap_or_default();
            outln!("{:<22} {:<30} {:<30} reason", "post", "list", "from");
            for r in &rows {
                outln!(
                    "{:<22} {:<30} {:<30} {}",
                    s(&r["post"]),
                    s(&r["list"]),
                    s(&r["from"]),
                    s(&r["reason"])
                );
            }
            outln!("{} held", rows.len());
        }
    }
    Ok(())
}

pub async fn postmaster(api: &Api, a: PostmasterArgs) -> Result<()> {
    match a.action {
        Some(PostmasterAction::Show { post }) => {
            let raw = api
                .get_bytes(&format!("/api/postmaster/{}", enc(&post)))
                .await?;
            crate::output::write_bytes(&raw);
        }
        Some(PostmasterAction::Delete { post }) => {
            api.delete(&format!("/api/postmaster/{}", enc(&post)))
                .await?;
            outln!("deleted {post}");
        }
        None => {
            let v = api
                .get(&format!("/api/postmaster?limit={}", a.limit))
                .await?;
            let rows = v.as_array().cloned().unwrap_or_default();
            outln!(
                "{:<17} {:<20} {:<30} {:<30} forward",
                "post",
                "received",
                "to",
                "from"
            );
            for r in &rows {
                let from = match &r["from"] {
                    Value::Null => "<>".to_string(),
                    other => s(other),
                };
                let received = r["received_at_ms"]
                    .as_u64()
                    .map(herald_telemetry::time::rfc3339_ms)
                    .and_then(|t| t.get(..19).map(str::to_string))
                    .unwrap_or_else(|| "-".into());
                outln!(
                    "{:<17} {:<20} {:<30} {:<30} {}",
                    s(&r["post"]),
                    received,
                    s(&r["to"]),
                    from,
                    s(&r["forward"])
                );
            }
            outln!("{} stored", rows.len());
        }
    }
    Ok(())
}

pub async fn bounces(api: &Api, a: BouncesArgs) -> Result<()> {
    let mut q = format!("?limit={}", a.limit);
    if let Some(l) = a.list {
        q.push_str(&format!("&list={}", enc(&l)));
    }
    if let Some(k) = a.kind {
        q.push_str(&format!("&kind={}", enc(&k)));
    }
    let v = api.get(&format!("/api/bounces{q}")).await?;
    let rows = v.as_array().cloned().unwrap_or_default();
    outln!(
        "{:<28} {:<13} {:<8} {:>5} {:<5} diagnostic",
        "member",
        "kind",
        "status",
        "score",
        "count"
    );
    for r in &rows {
        let who = match s(&r["address"]) {
            a if a.is_empty() => "(list reputation)".to_string(),
            a => a,
        };
        outln!(
            "{:<28} {:<13} {:<8} {:>5} {:<5} {}",
            who,
            s(&r["kind"]),
            s(&r["status"]),
            s(&r["score"]),
            if r["counted"] == Value::Bool(true) {
                "yes"
            } else {
                "no"
            },
            s(&r["diagnostic"])
        );
    }
    Ok(())
}

pub async fn member_show(api: &Api, list: &str, address: &str) -> Result<()> {
    let v = api
        .get(&format!(
            "/api/lists/{}/members/{}/detail",
            enc(list),
            enc(address)
        ))
        .await?;
    let m = &v["member"];
    let status = match &m["status"]["state"] {
        Value::String(st) if st == "disabled" => {
            format!("disabled ({})", s(&m["status"]["reason"]))
        }
        other => s(other),
    };
    outln!("member:       {}", s(&m["address"]));
    outln!("status:       {status}");
    outln!(
        "bounce score: {}",
        v["bounce_score"]["score"].as_f64().unwrap_or(0.0)
    );
    let hist = v["bounces"].as_array().cloned().unwrap_or_default();
    outln!("bounces:      {}", hist.len());
    for b in &hist {
        outln!(
            "  {} {:<13} {:<8} {}",
            s(&b["at_ms"]),
            s(&b["kind"]),
            s(&b["status"]),
            s(&b["diagnostic"])
        );
    }
    Ok(())
}

pub async fn subscribe(api: &Api, a: SubscribeArgs) -> Result<()> {
    let what = if a.unsubscribe {
        "unsubscribe"
    } else {
        "subscribe"
    };
    let r = api
        .post_json(
            &format!("/api/lists/{}/{what}", enc(&a.list)),
            &json!({ "address": a.address }),
        )
        .await?;
    outln!("{what} {}: {}", a.address, s(&r["status"]));
    Ok(())
}
