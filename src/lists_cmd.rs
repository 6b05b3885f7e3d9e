//! List housekeeping commands: held posts, bounces, member details, subscription
//! requests, stored postmaster mail. Thin clients of the HTTP API (`client.rs`). The `member`
//! arguments are typed here, beside the command that sends them.

use crate::client::{enc, Api};
use crate::csv_import::import;
use anyhow::Result;
use clap::{Args, Subcommand};
use herald_api_types::{
    AddMember, Approved, BounceEvent, HeldView, MemberDetail, MemberUpdate, MemberView,
    PostmasterView, SubscribeAnswer, SubscribeRequest,
};
use herald_types::MemberStatus;
use serde_json::json;
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum MemberCommand {
    /// Add (or update) one member.
    Add {
        list: String,
        address: String,
        #[arg(long)]
        name: Option<String>,
        /// A custom field for footers, as key=value (repeatable).
        #[arg(long = "field", value_parser = parse_field)]
        fields: Vec<(String, String)>,
    },
    /// Remove a member.
    Rm { list: String, address: String },
    /// List members.
    Ls {
        list: String,
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Import members from a CSV file with a header row: email[,name][,custom fields…].
    Import { list: String, file: PathBuf },
    /// A member's status, bounce score and bounce history.
    Show { list: String, address: String },
    /// Re-enable a member (e.g. one disabled for bouncing) and clear their bounce score.
    Enable { list: String, address: String },
    /// Clear a member's bounce score; their status and bounce history stay.
    ResetBounces { list: String, address: String },
    /// Everything Herald holds about an address, on every list (GDPR art. 15), as JSON: memberships
    /// with consent, bounce history, suppression entries, bans, archived posts and recent
    /// delivery-log lines.
    Export { address: String },
    /// Erase an address everywhere (GDPR art. 17): memberships, bounce history, suppression
    /// entries, bans and archived posts go; only a keyed hash stays, so imports and subscriptions
    /// refuse the address from then on. Asks for --yes.
    Erase {
        address: String,
        /// Really erase (there is no undo).
        #[arg(long)]
        yes: bool,
    },
    /// Change a member's settings: `delivery=regular|digest-mime|digest-plain|nomail`.
    Set {
        list: String,
        address: String,
        /// name=value (repeatable); today only `delivery`.
        #[arg(required = true, value_parser = parse_member_setting)]
        settings: Vec<MemberSetting>,
    },
}

/// One `name=value` of `herald member set`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberSetting {
    Delivery(herald_types::DeliveryMode),
    /// Hold the member's posts for a moderator.
    Moderated(bool),
    /// The member's language (a shipped code); empty: the list's.
    Language(String),
}

/// Parses `delivery=<mode>`, `moderated=<yes|no>` or `language=<code>` (empty: the list's);
/// anything else is a clear error naming what is accepted.
pub fn parse_member_setting(s: &str) -> Result<MemberSetting, String> {
    let words = || {
        herald_types::DeliveryMode::ALL
            .iter()
            .map(|m| m.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match s.split_once('=') {
        Some(("delivery", v)) => herald_types::DeliveryMode::parse(v)
            .map(MemberSetting::Delivery)
            .ok_or_else(|| format!("delivery must be one of {}, not {v:?}", words())),
        Some(("moderated", v)) => match v.to_ascii_lowercase().as_str() {
            "true" | "yes" | "on" | "1" => Ok(MemberSetting::Moderated(true)),
            "false" | "no" | "off" | "0" => Ok(MemberSetting::Moderated(false)),
            _ => Err(format!("moderated must be true or false, not {v:?}")),
        },
        // Checked here for a clear message before any request; the server checks again.
        Some(("language", v)) if v.is_empty() || herald_i18n::is_shipped(v) => {
            Ok(MemberSetting::Language(v.to_string()))
        }
        Some(("language", v)) => Err(format!(
            "language must be one of {} (or empty for the list's), not {v:?}",
            herald_i18n::CODES.join(", ")
        )),
        Some((k, _)) => Err(format!(
            "unknown member setting {k:?} (known: delivery, moderated, language)"
        )),
        None => Err(format!(
            "expected delivery=<mode>, moderated=<true|false> or language=<code>, got {s:?}"
        )),
    }
}

fn parse_field(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.to_string()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| format!("expected key=value, got {s:?}"))
}

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
    /// hard, soft, expired, delayed, auto_reply, policy, informational, unrecognized
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

/// An optional text as the tables show it (`-` when absent).
fn s(v: Option<&str>) -> String {
    v.unwrap_or("-").to_string()
}

pub async fn held(api: &Api, a: HeldArgs) -> Result<()> {
    match a.action {
        Some(HeldAction::Approve { post }) => {
            let r: Approved = api
                .post_json(&format!("/api/v1/held/{}/approve", enc(&post)), &json!({}))
                .await?;
            outln!("approved {post}: fanned out as post {}", r.post);
        }
        Some(HeldAction::Reject { post }) => {
            api.post_json_unit(&format!("/api/v1/held/{}/reject", enc(&post)), &json!({}))
                .await?;
            outln!("rejected {post}");
        }
        None => {
            let q = a
                .list
                .map(|l| format!("?list={}", enc(&l)))
                .unwrap_or_default();
            let rows: Vec<HeldView> = api.get(&format!("/api/v1/held{q}")).await?;
            outln!("{:<22} {:<30} {:<30} reason", "post", "list", "from");
            for r in &rows {
                outln!(
                    "{:<22} {:<30} {:<30} {}",
                    r.post,
                    r.list,
                    s(r.from.as_deref()),
                    s(r.reason.as_deref())
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
                .get_bytes(&format!("/api/v1/postmaster/{}", enc(&post)))
                .await?;
            crate::output::write_bytes(&raw);
        }
        Some(PostmasterAction::Delete { post }) => {
            api.delete(&format!("/api/v1/postmaster/{}", enc(&post)))
                .await?;
            outln!("deleted {post}");
        }
        None => {
            let rows: Vec<PostmasterView> = api
                .get(&format!("/api/v1/postmaster?limit={}", a.limit))
                .await?;
            outln!(
                "{:<17} {:<20} {:<30} {:<30} forward",
                "post",
                "received",
                "to",
                "from"
            );
            for r in &rows {
                let from = r.from.as_deref().unwrap_or("<>");
                let received = herald_telemetry::time::rfc3339_ms(r.received_at_ms)
                    .get(..19)
                    .map_or_else(|| "-".into(), str::to_string);
                outln!(
                    "{:<17} {:<20} {:<30} {:<30} {}",
                    r.post,
                    received,
                    r.to,
                    from,
                    r.forward
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
    let rows: Vec<BounceEvent> = api.get(&format!("/api/v1/bounces{q}")).await?;
    outln!(
        "{:<28} {:<13} {:<8} {:>5} {:<5} diagnostic",
        "member",
        "kind",
        "status",
        "score",
        "count"
    );
    for r in &rows {
        let who = match r.address.as_str() {
            "" => "(list reputation)",
            a => a,
        };
        outln!(
            "{:<28} {:<13} {:<8} {:>5} {:<5} {}",
            who,
            r.kind,
            s(r.status.as_deref()),
            json_number(r.score),
            if r.counted { "yes" } else { "no" },
            r.diagnostic
        );
    }
    Ok(())
}

/// A score as JSON writes it (`1.0`, not `1`): the column has always shown the wire's text.
fn json_number(score: f64) -> String {
    serde_json::to_string(&score).unwrap_or_else(|_| "-".into())
}

/// `herald member …`: one member's details, or add, remove, list and import members.
pub async fn member(api: &Api, cmd: MemberCommand) -> Result<()> {
    match cmd {
        MemberCommand::Show { list, address } => member_show(api, &list, &address).await?,
        MemberCommand::Add {
            list,
            address,
            name,
            fields,
        } => {
            let req = AddMember {
                address,
                name,
                fields: fields.into_iter().collect(),
            };
            let m: MemberView = api
                .post_json(&format!("/api/v1/lists/{}/members", enc(&list)), &req)
                .await?;
            outln!("added {} to {list} (member id {})", m.address, m.id);
        }
        MemberCommand::Rm { list, address } => {
            api.delete(&format!(
                "/api/v1/lists/{}/members/{}",
                enc(&list),
                enc(&address)
            ))
            .await?;
            outln!("removed {address} from {list}");
        }
        MemberCommand::Ls { list, limit } => member_ls(api, &list, limit).await?,
        MemberCommand::Import { list, file } => import(api, &list, &file).await?,
        MemberCommand::Enable { list, address } => {
            member_action(api, &list, &address, "enable").await?;
            outln!("enabled {address} on {list} (bounce score cleared)");
        }
        MemberCommand::Export { address } => {
            let data: herald_api_types::people::PersonExport = api
                .get(&format!("/api/v1/people/{}", enc(&address)))
                .await?;
            outln!("{}", serde_json::to_string_pretty(&data)?);
        }
        MemberCommand::Erase { address, yes } => member_erase(api, &address, yes).await?,
        MemberCommand::ResetBounces { list, address } => {
            member_action(api, &list, &address, "reset-bounces").await?;
            outln!("bounce score of {address} on {list} cleared");
        }
        MemberCommand::Set {
            list,
            address,
            settings,
        } => member_set(api, &list, &address, settings).await?,
    }
    Ok(())
}

/// `herald member ls`: a list's members, one line each.
async fn member_ls(api: &Api, list: &str, limit: usize) -> Result<()> {
    let ms: Vec<MemberView> = api
        .get(&format!(
            "/api/v1/lists/{}/members?limit={}",
            enc(list),
            limit.clamp(1, 10_000)
        ))
        .await?;
    for m in &ms {
        let status = match m.status {
            MemberStatus::Enabled => "enabled",
            MemberStatus::Disabled(_) => "disabled",
        };
        outln!(
            "{:<8} {:<40} {:<10} {}",
            m.id,
            m.address,
            status,
            m.display_name.as_deref().unwrap_or("")
        );
    }
    Ok(())
}

/// `herald member erase`: an address erased everywhere, only with `--yes`.
async fn member_erase(api: &Api, address: &str, yes: bool) -> Result<()> {
    if !yes {
        anyhow::bail!(
            "erasing {address} removes it from every list and the archive, for good: \
             run again with --yes"
        );
    }
    let e: herald_api_types::people::PersonErased = api
        .delete_typed(&format!("/api/v1/people/{}", enc(address)))
        .await?;
    outln!(
        "erased {address}: {} memberships, {} bounce events, {} suppression entries, \
         {} bans, {} archived posts; only a keyed hash is kept so it is not re-added",
        e.memberships,
        e.bounce_events,
        e.suppressions,
        e.bans,
        e.archived_posts
    );
    Ok(())
}

/// `herald member set`: the settings given, sent as one update.
async fn member_set(
    api: &Api,
    list: &str,
    address: &str,
    settings: Vec<MemberSetting>,
) -> Result<()> {
    let mut update = MemberUpdate::default();
    for s in settings {
        match s {
            MemberSetting::Delivery(m) => update.delivery = Some(m),
            MemberSetting::Moderated(on) => update.moderated = Some(on),
            MemberSetting::Language(l) => update.language = Some(l),
        }
    }
    let d: MemberDetail = api
        .patch_json(
            &format!("/api/v1/lists/{}/members/{}", enc(list), enc(address)),
            &update,
        )
        .await?;
    outln!(
        "{} on {list}: delivery {}, posts {}, language {}",
        d.member.address,
        d.delivery,
        if d.moderated {
            "moderated"
        } else {
            "not moderated"
        },
        d.language.as_deref().unwrap_or("the list's")
    );
    Ok(())
}

/// `herald digest …`.
#[derive(Debug, Subcommand)]
pub enum DigestCommand {
    /// Send the list's next digest now (if anything was archived since the last one).
    SendNow { list: String },
}

pub async fn digest(api: &Api, cmd: DigestCommand) -> Result<()> {
    match cmd {
        DigestCommand::SendNow { list } => {
            let d: herald_api_types::DigestSent = api
                .post_empty(&format!("/api/v1/lists/{}/digest/send-now", enc(&list)))
                .await?;
            if d.sent {
                outln!(
                    "{list}: digest vol {} issue {} sent ({} posts; {})",
                    d.volume,
                    d.issue,
                    d.posts,
                    d.formats.join(", ")
                );
            } else {
                outln!("{list}: nothing archived since the last digest; none sent");
            }
        }
    }
    Ok(())
}

/// `herald tls-report …`.
#[derive(Debug, Subcommand)]
pub enum TlsReportCommand {
    /// Send (again) the TLS reports (RFC 8460) of a day to every recipient domain that publishes
    /// a `_smtp._tls` record. The server sends each finished day's reports by itself; this is for
    /// a re-send or a look at today so far.
    Send {
        /// The UTC day, YYYY-MM-DD (default: yesterday).
        #[arg(long)]
        day: Option<String>,
    },
}

pub async fn tls_report(api: &Api, cmd: TlsReportCommand) -> Result<()> {
    match cmd {
        TlsReportCommand::Send { day } => {
            let path = match &day {
                Some(d) => format!("/api/v1/tls-report/send?day={}", enc(d)),
                None => "/api/v1/tls-report/send".to_string(),
            };
            let sent: Vec<herald_api_types::TlsReportSent> = api.post_empty(&path).await?;
            if sent.is_empty() {
                outln!("no sessions recorded that day: no TLS report to send");
            }
            for r in sent {
                outln!(
                    "{} {}: {} ({} ok, {} failed) {}",
                    r.day,
                    r.domain,
                    r.state,
                    r.successful,
                    r.failed,
                    r.detail
                );
            }
        }
    }
    Ok(())
}

/// `POST /api/v1/lists/<list>/members/<address>/<action>`: the answer is the member's details.
async fn member_action(api: &Api, list: &str, address: &str, action: &str) -> Result<MemberDetail> {
    api.post_empty(&format!(
        "/api/v1/lists/{}/members/{}/{action}",
        enc(list),
        enc(address)
    ))
    .await
}

pub async fn member_show(api: &Api, list: &str, address: &str) -> Result<()> {
    let v: MemberDetail = api
        .get(&format!(
            "/api/v1/lists/{}/members/{}/detail",
            enc(list),
            enc(address)
        ))
        .await?;
    let m = &v.member;
    let status = match &m.status {
        MemberStatus::Disabled(reason) => format!("disabled ({reason})"),
        MemberStatus::Enabled => "enabled".to_string(),
    };
    outln!("member:       {}", m.address);
    outln!("status:       {status}");
    outln!("delivery:     {}", v.delivery);
    outln!("bounce score: {}", v.bounce_score.map_or(0.0, |b| b.score));
    match &v.consent {
        Some(c) => outln!(
            "consent:      {} at {}{}",
            c.source,
            herald_telemetry::time::rfc3339_ms(c.at_ms),
            c.client
                .as_deref()
                .map(|who| format!(" by {who}"))
                .unwrap_or_default()
        ),
        None => outln!("consent:      not recorded"),
    }
    outln!("bounces:      {}", v.bounces.len());
    for b in &v.bounces {
        outln!(
            "  {} {:<13} {:<8} {}",
            b.at_ms,
            b.kind,
            s(b.status.as_deref()),
            b.diagnostic
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
    let req = SubscribeRequest { address: a.address };
    let r: SubscribeAnswer = api
        .post_json(&format!("/api/v1/lists/{}/{what}", enc(&a.list)), &req)
        .await?;
    outln!("{what} {}: {}", req.address, r.status);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_types::DeliveryMode;

    /// `herald member set` refuses what it does not know before anything is sent.
    #[test]
    fn member_settings_parse_and_refuse() {
        assert_eq!(
            parse_member_setting("delivery=digest-mime"),
            Ok(MemberSetting::Delivery(DeliveryMode::DigestMime))
        );
        assert_eq!(
            parse_member_setting("delivery=nomail"),
            Ok(MemberSetting::Delivery(DeliveryMode::Nomail))
        );
        assert_eq!(
            parse_member_setting("moderated=yes"),
            Ok(MemberSetting::Moderated(true))
        );
        assert_eq!(
            parse_member_setting("moderated=False"),
            Ok(MemberSetting::Moderated(false))
        );
        assert_eq!(
            parse_member_setting("language=de"),
            Ok(MemberSetting::Language("de".into()))
        );
        assert_eq!(
            parse_member_setting("language="),
            Ok(MemberSetting::Language(String::new()))
        );
        for bad in [
            "language=xx",
            "language=DE",
            "language=de\n",
            "moderated=",
            "moderated=maybe",
            "moderated=true\n",
            "delivery=digest",
            "delivery=",
            "delivery",
            "Delivery=regular",
            "name=x",
            "delivery=regular\n",
            "=regular",
        ] {
            assert!(parse_member_setting(bad).is_err(), "{bad:?}");
        }
    }
}
