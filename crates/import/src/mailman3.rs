//! Mailman 3: lists, members, roles, bans, header matches and held posts read over Mailman
//! core's REST API (`/3.1`, the API Postorius and HyperKitty use; `src/mailman/rest/` in
//! Mailman 3.3: `lists.py`, `listconf.py`, `members.py`, `preferences.py`, `bans.py`,
//! `header_matches.py`, `post_moderation.py`).
//!
//! What maps (list config key → Herald setting): `display_name`; `subject_prefix` (trimmed);
//! `reply_goes_to_list` `no_munging` / `point_to_list` / `explicit_header[_only]` →
//! `reply_to` poster / list / `reply_to_address`; `max_message_size` (KB) →
//! `max_message_bytes`; `default_nonmember_action` `accept` → `posting_policy = anyone`;
//! `default_member_action` `hold`/`reject`/`discard` → `moderators` (an announcement list),
//! else `members`; owners and moderators (roster roles) → `moderators`, and
//! each owner an account with the owner role; `subscription_policy`
//! `open`/`confirm` → `confirm`, `moderate`/`confirm_then_moderate` → `closed`;
//! `digest_size_threshold`, `digest_send_periodic`, `digest_volume_frequency` (yearly,
//! monthly); `personalize` `none` → off, else on; `dmarc_mitigate_action` `munge_from` →
//! `from_rewrite` `when_needed` (`always` with `dmarc_mitigate_unconditionally`),
//! `no_mitigation` → `never`; `bounce_score_threshold`; `archive_policy` → archive privacy.
//! Members: `delivery_mode` `regular` / `mime_digests` / `plaintext_digests` (and
//! `summary_digests`, reported) with the member's `delivery_status` preference `by_user` →
//! `nomail`, `by_moderator` / `by_bounces` / `unknown` → disabled with that reason; the
//! display name; `moderation_action` `hold` / `reject` / `discard` → the member's `moderated`
//! flag (Herald holds; reject and discard are reported). Bans (list and global) → bans. What
//! does not map is reported: other settings when set, and header matches. Held posts (`/held`) come with
//! the snapshot; `herald import` hands them to the running server, which holds them again.
//!
//! SECURITY: the REST API is the operator's own Mailman, reached with its admin credentials
//! over plain HTTP (Mailman binds it to localhost by default); its answers are still parsed as
//! untrusted JSON with a size limit per answer, every address parsed, every name checked by
//! the directory; a held post's text goes through Herald's enqueue path like any post.

use crate::source::{HeldPost, Skip, SkipKind, Snapshot, SourceList, SourceMember};
use crate::ImportError;
use herald_archive::Privacy;
use herald_types::{Address, DeliveryMode};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::path::PathBuf;

/// Largest REST answer read, in bytes.
pub const MAX_ANSWER_BYTES: usize = 64 * 1024 * 1024;
/// Members per roster page.
const PAGE: usize = 500;

/// Where the Mailman 3 site is and what to read.
#[derive(Debug, Clone)]
pub struct Mailman3Source {
    /// The REST API's base, e.g. `http://127.0.0.1:8001` (the `/3.1` is added).
    pub url: String,
    pub user: String,
    pub password: String,
    /// Only these lists (posting address or list id); all when empty.
    pub lists: Vec<String>,
    /// An mbox (HyperKitty's export or the list's own) for the archive; one list only.
    pub archive: Option<PathBuf>,
}

#[derive(Deserialize)]
struct Page<T> {
    #[serde(default = "Vec::new")]
    entries: Vec<T>,
    /// How many items the whole collection holds (every page says it): what was read is
    /// compared with it.
    #[serde(default)]
    total_size: Option<usize>,
}

#[derive(Deserialize)]
struct ListEntry {
    list_id: String,
    fqdn_listname: String,
}

#[derive(Deserialize)]
struct MemberEntry {
    email: String,
    #[serde(default)]
    display_name: Option<String>,
    #[serde(default)]
    delivery_mode: Option<String>,
    #[serde(default)]
    moderation_action: Option<String>,
    #[serde(default)]
    self_link: String,
}

#[derive(Deserialize)]
struct Prefs {
    #[serde(default)]
    delivery_status: Option<String>,
}

#[derive(Deserialize)]
struct BanEntry {
    email: String,
}

#[derive(Deserialize)]
struct HeaderMatch {
    header: String,
    pattern: String,
    #[serde(default)]
    action: Option<String>,
}

#[derive(Deserialize)]
struct Held {
    request_id: u64,
    #[serde(default)]
    msg: String,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    subject: Option<String>,
    #[serde(default)]
    sender: Option<String>,
    #[serde(default)]
    message_id: Option<String>,
}

struct Rest {
    http: reqwest::Client,
    base: String,
    user: String,
    password: String,
}

impl Rest {
    async fn get<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<T, ImportError> {
        let url = if path.starts_with("http") {
            path.to_string()
        } else {
            format!("{}/3.1/{path}", self.base)
        };
        let bad = |reason: String| ImportError::format(format!("Mailman REST {url}"), reason);
        let resp = self
            .http
            .get(&url)
            .basic_auth(&self.user, Some(&self.password))
            .send()
            .await
            .map_err(|e| bad(e.to_string()))?;
        let status = resp.status();
        if !status.is_success() {
            return Err(bad(format!("answered {status}")));
        }
        if resp.content_length().unwrap_or(0) > MAX_ANSWER_BYTES as u64 {
            return Err(bad(format!("answer larger than {MAX_ANSWER_BYTES} bytes")));
        }
        let mut body = Vec::new();
        let mut resp = resp;
        while let Some(chunk) = resp.chunk().await.map_err(|e| bad(e.to_string()))? {
            if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(bad(format!("answer larger than {MAX_ANSWER_BYTES} bytes")));
            }
            body.extend_from_slice(&chunk);
        }
        serde_json::from_slice(&body).map_err(|e| bad(format!("not the JSON Mailman writes: {e}")))
    }

    /// Every item of a paged collection, checked against the total Mailman reports: a page
    /// that came back short (an error answered as an empty page, a proxy cutting answers) or
    /// a roster that changed while it was read fails the import before anything is written,
    /// instead of importing part of it as if it were all.
    async fn all<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<Vec<T>, ImportError> {
        let mut out = Vec::new();
        let sep = if path.contains('?') { '&' } else { '?' };
        let mut reported = None;
        for page in 1.. {
            let p: Page<T> = self
                .get(&format!("{path}{sep}count={PAGE}&page={page}"))
                .await?;
            let n = p.entries.len();
            out.extend(p.entries);
            let total = *reported.get_or_insert(p.total_size);
            if n < PAGE || total.is_some_and(|t| out.len() >= t) {
                break;
            }
        }
        if let Some(total) = reported.flatten() {
            if out.len() != total {
                return Err(ImportError::Incomplete {
                    what: format!("Mailman REST {}/3.1/{path}", self.base),
                    reported: total as u64,
                    read: out.len() as u64,
                });
            }
        }
        Ok(out)
    }
}

/// Reads the lists of the Mailman 3 site at `src`.
pub async fn read(src: &Mailman3Source) -> Result<Snapshot, ImportError> {
    let rest = Rest {
        http: reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(60))
            .build()
            .map_err(|e| ImportError::Usage(format!("HTTP client: {e}")))?,
        base: src.url.trim_end_matches('/').to_string(),
        user: src.user.clone(),
        password: src.password.clone(),
    };
    let mut snap = Snapshot {
        source: format!("Mailman 3 at {}", rest.base),
        ..Snapshot::default()
    };
    let lists: Vec<ListEntry> = rest.all("lists").await?;
    let wanted: Vec<&ListEntry> = lists
        .iter()
        .filter(|l| {
            src.lists.is_empty()
                || src.lists.iter().any(|w| {
                    w.eq_ignore_ascii_case(&l.fqdn_listname) || w.eq_ignore_ascii_case(&l.list_id)
                })
        })
        .collect();
    for w in &src.lists {
        if !wanted
            .iter()
            .any(|l| w.eq_ignore_ascii_case(&l.fqdn_listname) || w.eq_ignore_ascii_case(&l.list_id))
        {
            return Err(ImportError::Usage(format!("Mailman has no list {w}")));
        }
    }
    if src.archive.is_some() && wanted.len() != 1 {
        return Err(ImportError::Usage(
            "--archive needs exactly one --list".into(),
        ));
    }
    // Every input is checked before anything is read at length or written.
    if let Some(a) = &src.archive {
        herald_archive::import::plan(a)?;
    }
    let global: Vec<BanEntry> = rest.all("bans").await?;
    snap.global_bans = global.into_iter().map(|b| b.email).collect();
    for l in wanted {
        let list = read_list(&rest, l, src, &mut snap.skipped).await?;
        snap.lists.push(list);
    }
    Ok(snap)
}

async fn read_list(
    rest: &Rest,
    l: &ListEntry,
    src: &Mailman3Source,
    skipped: &mut Vec<Skip>,
) -> Result<SourceList, ImportError> {
    let address = Address::parse(&l.fqdn_listname)
        .map_err(|e| ImportError::format("Mailman list", format!("{:?}: {e}", l.fqdn_listname)))?;
    let mut list = SourceList::new(address);
    let id = &l.list_id;
    let config: Map<String, Value> = rest.get(&format!("lists/{id}/config")).await?;
    let owners: Vec<MemberEntry> = rest.all(&format!("lists/{id}/roster/owner")).await?;
    let moderators: Vec<MemberEntry> = rest.all(&format!("lists/{id}/roster/moderator")).await?;
    let label = l.fqdn_listname.clone();
    let mut unmapped = |what: &str, why: String| {
        skipped.push(Skip::new(
            SkipKind::Unmapped,
            format!("{what} of {label}"),
            why,
        ));
    };
    settings(&config, &mut list, &mut unmapped);
    let mut mods = Vec::new();
    for m in owners.iter().chain(moderators.iter()) {
        match Address::parse(&m.email) {
            Ok(a) if !mods.contains(&json!(a.to_string())) => mods.push(json!(a.to_string())),
            Ok(_) => {}
            Err(e) => unmapped(
                "owner/moderator",
                format!("{:?} is not an address: {e}", m.email),
            ),
        }
    }
    // Owners keep their role: an owner account each (see `SourceList::owners`).
    list.owners = owners
        .iter()
        .filter_map(|m| Address::parse(&m.email).ok())
        .collect();
    list.settings
        .insert("moderators".into(), Value::Array(mods));
    let bans: Vec<BanEntry> = rest.all(&format!("lists/{id}/bans")).await?;
    list.bans = bans.into_iter().map(|b| b.email).collect();
    let matches: Page<HeaderMatch> = rest.get(&format!("lists/{id}/header-matches")).await?;
    for h in matches.entries {
        unmapped(
            "header match",
            format!(
                "{}: {} → {}: Herald has no header filters",
                h.header,
                h.pattern,
                h.action.as_deref().unwrap_or("default action")
            ),
        );
    }
    let members: Vec<MemberEntry> = rest.all(&format!("lists/{id}/roster/member")).await?;
    let mut not_held = 0usize;
    for m in members {
        if m.moderation_action
            .as_deref()
            .is_some_and(|a| a == "reject" || a == "discard")
        {
            not_held += 1;
        }
        if let Some(sm) = member(rest, m, &mut unmapped).await? {
            list.members.push(sm);
        }
    }
    if not_held > 0 {
        unmapped("member moderation", format!("{not_held} members' posts are rejected or discarded in Mailman; Herald holds them for a moderator (the member is flagged moderated)"));
    }
    let held: Page<Held> = rest.get(&format!("lists/{id}/held")).await?;
    for h in held.entries {
        list.held.push(HeldPost {
            id: format!(
                "{} (Mailman request {})",
                h.subject.as_deref().unwrap_or(""),
                h.request_id
            ),
            from: h.sender.as_deref().and_then(|a| Address::parse(a).ok()),
            reason: format!(
                "held in Mailman: {}",
                h.reason.as_deref().unwrap_or("no reason given")
            ),
            message_id: h.message_id.map(|m| {
                m.trim()
                    .trim_start_matches('<')
                    .trim_end_matches('>')
                    .to_string()
            }),
            raw: h.msg.into_bytes(),
        });
    }
    if let Some(a) = &src.archive {
        list.archive.push(a.clone());
    }
    Ok(list)
}

async fn member(
    rest: &Rest,
    m: MemberEntry,
    unmapped: &mut impl FnMut(&str, String),
) -> Result<Option<SourceMember>, ImportError> {
    let origin = format!("member {}", m.email);
    let address = match Address::parse(&m.email) {
        Ok(a) => a,
        Err(e) => {
            unmapped(&origin, format!("not an address: {e}"));
            return Ok(None);
        }
    };
    let mut sm = SourceMember::new(address, origin.clone());
    sm.display_name = m.display_name.filter(|n| !n.trim().is_empty());
    // Mailman 3's own action for this member: `hold`, `reject` and `discard` all become
    // Herald's flag (posts held); `accept` and `defer` (the list's default) leave it off.
    sm.moderated = matches!(
        m.moderation_action.as_deref(),
        Some("hold" | "reject" | "discard")
    );
    sm.delivery = match m.delivery_mode.as_deref() {
        Some("mime_digests") => DeliveryMode::DigestMime,
        Some("plaintext_digests") => DeliveryMode::DigestPlain,
        Some("summary_digests") => {
            unmapped(
                &origin,
                "summary digests: Herald has MIME and plain digests; plain given".into(),
            );
            DeliveryMode::DigestPlain
        }
        _ => DeliveryMode::Regular,
    };
    let prefs: Prefs = rest.get(&format!("{}/preferences", m.self_link)).await?;
    match prefs.delivery_status.as_deref() {
        Some("by_user") => sm.delivery = DeliveryMode::Nomail,
        Some("by_moderator") => sm.disabled = Some("disabled by a moderator in Mailman".into()),
        Some("by_bounces") => sm.disabled = Some("disabled by bounces in Mailman".into()),
        Some("unknown") => sm.disabled = Some("disabled in Mailman (reason unknown)".into()),
        _ => {}
    }
    Ok(Some(sm))
}

fn text<'a>(c: &'a Map<String, Value>, k: &str) -> Option<&'a str> {
    c.get(k).and_then(Value::as_str)
}

fn settings(
    c: &Map<String, Value>,
    list: &mut SourceList,
    unmapped: &mut impl FnMut(&str, String),
) {
    let s = &mut list.settings;
    if let Some(n) = text(c, "display_name") {
        s.insert("display_name".into(), json!(n));
    }
    if let Some(code) = text(c, "preferred_language") {
        match crate::source::shipped_language(code) {
            Ok(lang) => {
                s.insert("language".into(), json!(lang));
            }
            Err(why) => unmapped("setting preferred_language", why),
        }
    }
    if let Some(p) = text(c, "subject_prefix") {
        let p = p.trim();
        s.insert(
            "subject_prefix".into(),
            if p.is_empty() { Value::Null } else { json!(p) },
        );
    }
    match text(c, "reply_goes_to_list") {
        Some("point_to_list") => {
            s.insert("reply_to".into(), json!({"kind": "list"}));
        }
        Some("explicit_header") | Some("explicit_header_only") => {
            match text(c, "reply_to_address").map(Address::parse) {
                Some(Ok(a)) => {
                    s.insert(
                        "reply_to".into(),
                        json!({"kind": "explicit", "address": a.to_string()}),
                    );
                }
                _ => unmapped(
                    "setting reply_to_address",
                    "not an address; replies go to the poster".into(),
                ),
            }
        }
        Some(_) => {
            s.insert("reply_to".into(), json!({"kind": "poster"}));
        }
        None => {}
    }
    if let Some(kb) = c.get("max_message_size").and_then(Value::as_u64) {
        s.insert("max_message_bytes".into(), json!(kb.saturating_mul(1024)));
    }
    let member_action = text(c, "default_member_action").unwrap_or("defer");
    let nonmember_action = text(c, "default_nonmember_action").unwrap_or("hold");
    let policy = if matches!(member_action, "hold" | "reject" | "discard") {
        if member_action != "hold" {
            unmapped(
                "setting default_member_action",
                format!("{member_action}: Herald holds members' posts on a moderators-only list"),
            );
        }
        "moderators"
    } else if nonmember_action == "accept" {
        "anyone"
    } else {
        if matches!(nonmember_action, "reject" | "discard") {
            unmapped(
                "setting default_nonmember_action",
                format!("{nonmember_action}: Herald holds non-member posts for a moderator"),
            );
        }
        "members"
    };
    s.insert("posting_policy".into(), json!(policy));
    match text(c, "subscription_policy") {
        Some("open") | Some("confirm") => {
            s.insert("subscription".into(), json!("confirm"));
        }
        Some(p) => {
            s.insert("subscription".into(), json!("closed"));
            unmapped("setting subscription_policy", format!("{p}: Herald has no moderator approval of subscriptions; the list is closed (administrators add members)"));
        }
        None => {}
    }
    if let Some(kb) = c.get("digest_size_threshold").and_then(Value::as_f64) {
        s.insert(
            "digest_size_threshold_kb".into(),
            json!(kb.max(0.0).round() as u32),
        );
    }
    if let Some(p) = c.get("digest_send_periodic").and_then(Value::as_bool) {
        s.insert(
            "digest_schedule".into(),
            json!(if p { "daily" } else { "none" }),
        );
    }
    match text(c, "digest_volume_frequency") {
        Some(f @ ("yearly" | "monthly")) => {
            s.insert("digest_volume_frequency".into(), json!(f));
        }
        Some(f) => unmapped(
            "setting digest_volume_frequency",
            format!("{f}: Herald starts digest volumes yearly or monthly; yearly kept"),
        ),
        None => {}
    }
    if c.get("digests_enabled").and_then(Value::as_bool) == Some(false) {
        unmapped(
            "setting digests_enabled",
            "Herald lists always offer digests; members choose".into(),
        );
    }
    if let Some(p) = text(c, "personalize") {
        s.insert("personalize".into(), json!(p != "none"));
    }
    // Mailman 3 keeps the welcome's text in its template store (not in the list's config),
    // so only the switch comes over; Herald's default greeting stands in for the text.
    if let Some(w) = c.get("send_welcome_message").and_then(Value::as_bool) {
        s.insert("send_welcome".into(), json!(w));
    }
    match (text(c, "dmarc_mitigate_action"), c.get("dmarc_mitigate_unconditionally").and_then(Value::as_bool)) {
        (Some("munge_from"), Some(true)) => { s.insert("from_rewrite".into(), json!("always")); }
        (Some("munge_from"), _) => { s.insert("from_rewrite".into(), json!("when_needed")); }
        (Some("no_mitigation"), _) | (None, _) => {}
        (Some(other), _) => unmapped("setting dmarc_mitigate_action", format!("{other}: Herald rewrites From when DMARC needs it (its default) and never wraps, rejects or discards")),
    }
    if let Some(t) = c.get("bounce_score_threshold").and_then(Value::as_u64) {
        s.insert(
            "bounce_threshold".into(),
            json!(u32::try_from(t).unwrap_or(u32::MAX)),
        );
    }
    list.archive_privacy = match text(c, "archive_policy") {
        Some("never") => Some(Privacy::None),
        Some("private") => Some(Privacy::Private),
        Some("public") => Some(Privacy::Public),
        _ => None,
    };
    for (k, why) in [
        ("description", "Herald lists have no description"),
        ("info", "Herald lists have no info text"),
        (
            "accept_these_nonmembers",
            "Herald has no non-member allow list",
        ),
        (
            "hold_these_nonmembers",
            "Herald holds every non-member post already",
        ),
        (
            "reject_these_nonmembers",
            "Herald has no non-member reject list; ban the addresses",
        ),
        (
            "discard_these_nonmembers",
            "Herald has no non-member discard list; ban the addresses",
        ),
        ("acceptable_aliases", "Herald has no acceptable aliases"),
        (
            "filter_content",
            "Herald's content filter is allowed_content_types; set it by hand",
        ),
    ] {
        let set = match c.get(k) {
            Some(Value::String(v)) => !v.trim().is_empty(),
            Some(Value::Array(v)) => !v.is_empty(),
            Some(Value::Bool(b)) => *b,
            _ => false,
        };
        if set {
            unmapped(&format!("setting {k}"), why.into());
        }
    }
}
