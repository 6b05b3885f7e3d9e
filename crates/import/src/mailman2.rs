//! Mailman 2.1: a list's directory (`lists/<name>/config.pck`, the pickled dict of the list's
//! attributes that `MailList.__save` writes) and its pipermail archive.
//!
//! Read without running anything (see `pickle`). What maps (Mailman attribute → Herald):
//! - `real_name` → `display_name`; `subject_prefix` (with `%(real_name)s` filled in, trimmed);
//!   `reply_goes_to_list` 0/1/2 → `reply_to` poster / list / `reply_to_address`;
//!   `max_message_size` (KB) → `max_message_bytes`; `generic_nonmember_action` 0 (accept) →
//!   `posting_policy = anyone`, else `members` (Herald holds non-member posts; reject/discard
//!   are reported); every member moderated (`default_member_moderation` and the Moderate bit
//!   on all) → `moderators` (an announcement list), and each member's Moderate bit → the
//!   member's `moderated` flag (posts held); `owner` and `moderator` → `moderators` (they
//!   get held-post notices), and each `owner` an account with the owner role; `ban_list` → the list's bans (same syntax: address or `^regex`);
//!   `subscribe_policy` 0/1 → `confirm`, 2/3 (approval) → `closed`; `digest_size_threshhold`,
//!   `digest_send_periodic`, `digest_volume_frequency` (yearly, monthly); `personalize`;
//!   `from_is_list` 1 → `from_rewrite = always`; `bounce_score_threshold`;
//!   `archive`/`archive_private` → the archive's privacy (none / private / public).
//! - Roster: `members` (regular) and `digest_members` (MIME digest, or plain with the
//!   DisableMime bit 8), the case-kept address when the value is a string; `usernames` → names;
//!   `delivery_status` BYUSER (2) → `nomail` (the member stopped mail themselves), BYADMIN (3),
//!   BYBOUNCE (4), UNKNOWN (1) → disabled with that reason; the obsolete DisableDelivery bit 1
//!   → `nomail`.
//! - What does not map is reported: other settings when they are not Mailman's defaults,
//!   `member_moderation_action` reject/discard (Herald holds), passwords, languages, topics.
//! - Archive: `archives/private/<name>.mbox/<name>.mbox` when present (the raw mail), else the
//!   monthly `archives/private/<name>/*.txt[.gz]` files pipermail keeps.
//!
//! SECURITY: `config.pck` is untrusted: checked opcode by opcode before it is decoded; every
//! string is decoded as UTF-8 (Latin-1 when it is not), every address parsed, every name and
//! field checked by the directory.

use crate::source::{Skip, SkipKind, Snapshot, SourceList, SourceMember};
use crate::ImportError;
use herald_archive::Privacy;
use herald_types::{Address, DeliveryMode};
use serde_json::{json, Value as Json};
use serde_pickle::{HashableValue as K, Value as V};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// `user_options` bits (Mailman 2.1 `Defaults.py`).
const DISABLE_DELIVERY: i64 = 1;
const DISABLE_MIME: i64 = 8;
const MODERATE: i64 = 128;
/// `delivery_status` codes (`MemberAdaptor.py`).
const UNKNOWN: i64 = 1;
const BYUSER: i64 = 2;
const BYADMIN: i64 = 3;
const BYBOUNCE: i64 = 4;

type Dict = BTreeMap<K, V>;

/// Where a Mailman 2 list is.
#[derive(Debug, Clone)]
pub struct Mailman2Source {
    /// `…/lists/<name>`.
    pub list_dir: PathBuf,
    /// The Herald list address; default `<name>@<host_name>`.
    pub address: Option<Address>,
    /// `…/archives/private`; default `<list_dir>/../../archives/private`.
    pub archives: Option<PathBuf>,
}

fn get<'a>(d: &'a Dict, key: &str) -> Option<&'a V> {
    d.get(&K::String(key.to_string()))
        .or_else(|| d.get(&K::Bytes(key.as_bytes().to_vec())))
}

fn bytes_text(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) => s.to_string(),
        // Mailman 2 stores byte strings in the list's charset, Latin-1 for most.
        Err(_) => b.iter().map(|&c| char::from(c)).collect(),
    }
}

fn text(v: &V) -> Option<String> {
    match v {
        V::String(s) => Some(s.clone()),
        V::Bytes(b) => Some(bytes_text(b)),
        _ => None,
    }
}

fn key_text(k: &K) -> Option<String> {
    match k {
        K::String(s) => Some(s.clone()),
        K::Bytes(b) => Some(bytes_text(b)),
        _ => None,
    }
}

fn int(v: &V) -> Option<i64> {
    match v {
        V::I64(i) => Some(*i),
        V::Bool(b) => Some(i64::from(*b)),
        V::F64(f) if f.is_finite() => Some(*f as i64),
        _ => None,
    }
}

fn float(v: &V) -> Option<f64> {
    match v {
        V::F64(f) => Some(*f),
        other => int(other).map(|i| i as f64),
    }
}

fn texts(v: Option<&V>) -> Vec<String> {
    match v {
        Some(V::List(items)) | Some(V::Tuple(items)) => items.iter().filter_map(text).collect(),
        _ => Vec::new(),
    }
}

fn dict<'a>(d: &'a Dict, key: &str) -> Option<&'a Dict> {
    match get(d, key) {
        Some(V::Dict(m)) => Some(m),
        _ => None,
    }
}

/// Reads the list at `src`.
pub fn read(src: &Mailman2Source) -> Result<Snapshot, ImportError> {
    let pck = src.list_dir.join("config.pck");
    let bytes = std::fs::read(&pck).map_err(ImportError::read(&pck))?;
    let value = crate::pickle::load(&bytes).map_err(|reason| ImportError::Pickle {
        path: pck.clone(),
        reason,
    })?;
    let V::Dict(d) = value else {
        return Err(ImportError::Pickle {
            path: pck,
            reason: "not a dict of list attributes (what Mailman 2.1 writes)".into(),
        });
    };
    let name = src
        .list_dir
        .file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    let address = match &src.address {
        Some(a) => a.clone(),
        None => {
            let host = get(&d, "host_name").and_then(text).unwrap_or_default();
            Address::parse(&format!("{name}@{host}")).map_err(|e| {
                ImportError::Usage(format!(
                    "{name}@{host} (list name @ host_name) is not an address ({e}); give --address"
                ))
            })?
        }
    };
    let mut snap = Snapshot {
        source: format!("Mailman 2 list {}", src.list_dir.display()),
        ..Snapshot::default()
    };
    let mut list = SourceList::new(address);
    let moderated = roster(&d, &mut list, &mut snap.skipped);
    settings(&d, &mut list, moderated, &mut snap.skipped);
    if let Some(a) = &src.archives {
        // Named by the operator: missing is a mistake, said before anything is written.
        std::fs::read_dir(a).map_err(ImportError::read(a))?;
    }
    let archives = src.archives.clone().unwrap_or_else(|| {
        src.list_dir
            .join("..")
            .join("..")
            .join("archives")
            .join("private")
    });
    list.archive = archive_files(&archives, &name)?;
    snap.lists.push(list);
    Ok(snap)
}

/// Members moderated / all members, for the posting policy.
struct Moderated {
    count: usize,
    of: usize,
}

fn roster(d: &Dict, list: &mut SourceList, skipped: &mut Vec<Skip>) -> Moderated {
    let empty = Dict::new();
    let names = dict(d, "usernames").unwrap_or(&empty);
    let options = dict(d, "user_options").unwrap_or(&empty);
    let status = dict(d, "delivery_status").unwrap_or(&empty);
    let mut moderated = Moderated { count: 0, of: 0 };
    for (roster, digest) in [("members", false), ("digest_members", true)] {
        let Some(ms) = dict(d, roster) else { continue };
        for (k, v) in ms {
            let Some(key) = key_text(k) else {
                skipped.push(Skip::new(
                    SkipKind::InvalidData,
                    format!("{roster} entry"),
                    "key is not text",
                ));
                continue;
            };
            // The value is 0, or the address with its case kept (`OldStyleMemberships`).
            let spelled = text(v).unwrap_or_else(|| key.clone());
            let origin = format!("{roster}[{key:?}]");
            let address = match Address::parse(&spelled) {
                Ok(a) => a,
                Err(e) => {
                    skipped.push(Skip::new(
                        SkipKind::InvalidAddress,
                        origin,
                        format!("{spelled:?}: {e}"),
                    ));
                    continue;
                }
            };
            let opts = options.get(k).and_then(int).unwrap_or(0);
            let mut m = SourceMember::new(address, origin);
            m.display_name = names.get(k).and_then(text).filter(|n| !n.trim().is_empty());
            m.delivery = match (digest, opts & DISABLE_MIME != 0) {
                (false, _) => DeliveryMode::Regular,
                (true, false) => DeliveryMode::DigestMime,
                (true, true) => DeliveryMode::DigestPlain,
            };
            if opts & DISABLE_DELIVERY != 0 {
                m.delivery = DeliveryMode::Nomail;
            }
            let st = match status.get(k) {
                Some(V::Tuple(t)) | Some(V::List(t)) => t.first().and_then(int).unwrap_or(0),
                _ => 0,
            };
            match st {
                BYUSER => m.delivery = DeliveryMode::Nomail,
                BYADMIN => m.disabled = Some("disabled by the administrator in Mailman".into()),
                BYBOUNCE => m.disabled = Some("disabled by bounces in Mailman".into()),
                UNKNOWN => m.disabled = Some("disabled in Mailman (reason unknown)".into()),
                _ => {}
            }
            moderated.of += 1;
            if opts & MODERATE != 0 {
                moderated.count += 1;
                m.moderated = true;
            }
            list.members.push(m);
        }
    }
    for (attr, why) in [
        (
            "passwords",
            "Herald members have no passwords (they manage their subscription by signed links)",
        ),
        ("language", "Herald has no per-member language"),
        ("topics_userinterest", "Herald has no topics"),
    ] {
        if dict(d, attr).is_some_and(|m| !m.is_empty()) {
            skipped.push(Skip::new(SkipKind::Unmapped, format!("member {attr}"), why));
        }
    }
    moderated
}

fn settings(d: &Dict, list: &mut SourceList, moderated: Moderated, skipped: &mut Vec<Skip>) {
    let s = &mut list.settings;
    let label = list.address.to_string();
    let mut unmapped = |attr: &str, why: &str| {
        skipped.push(Skip::new(
            SkipKind::Unmapped,
            format!("setting {attr} of {label}"),
            why,
        ));
    };
    if let Some(code) = get(d, "preferred_language").and_then(text) {
        match crate::source::shipped_language(&code) {
            Ok(lang) => {
                s.insert("language".into(), json!(lang));
            }
            Err(why) => unmapped("preferred_language", &why),
        }
    }
    let real_name = get(d, "real_name").and_then(text).unwrap_or_default();
    if !real_name.is_empty() {
        s.insert("display_name".into(), json!(real_name));
    }
    if let Some(p) = get(d, "subject_prefix").and_then(text) {
        let p = p.replace("%(real_name)s", &real_name);
        let p = p.trim();
        s.insert(
            "subject_prefix".into(),
            if p.is_empty() { Json::Null } else { json!(p) },
        );
        if p.contains("%(") || p.contains("%d") {
            unmapped(
                "subject_prefix",
                "Mailman's post-number substitution has no Herald equivalent; it is kept as text",
            );
        }
    }
    match get(d, "reply_goes_to_list").and_then(int) {
        Some(1) => { s.insert("reply_to".into(), json!({"kind": "list"})); }
        Some(2) => match get(d, "reply_to_address").and_then(text).map(|a| Address::parse(a.trim())) {
            Some(Ok(a)) => { s.insert("reply_to".into(), json!({"kind": "explicit", "address": a.to_string()})); }
            _ => unmapped("reply_to_address", "reply_goes_to_list is 2 but reply_to_address is not an address; replies go to the poster"),
        },
        Some(_) => { s.insert("reply_to".into(), json!({"kind": "poster"})); }
        None => {}
    }
    if let Some(kb) = get(d, "max_message_size").and_then(int) {
        s.insert(
            "max_message_bytes".into(),
            json!(u64::try_from(kb).unwrap_or(0).saturating_mul(1024)),
        );
    }
    let everyone_moderated = moderated.of > 0 && moderated.count == moderated.of;
    let policy = match get(d, "generic_nonmember_action").and_then(int) {
        _ if everyone_moderated => "moderators",
        Some(0) => "anyone",
        Some(action) => {
            if action >= 2 {
                unmapped("generic_nonmember_action", "Mailman rejects or discards non-member posts; Herald holds them for a moderator");
            }
            "members"
        }
        None => "members",
    };
    s.insert("posting_policy".into(), json!(policy));
    // Flagged members keep their flag in Herald (their posts are held); Mailman can also
    // reject (1) or discard (2) them, which Herald does not: it holds.
    if moderated.count > 0
        && get(d, "member_moderation_action")
            .and_then(int)
            .is_some_and(|a| a != 0)
    {
        unmapped("member_moderation_action", &format!("Mailman rejects or discards the posts of its {} moderated members; Herald holds them for a moderator", moderated.count));
    }
    let mut mods: Vec<String> = Vec::new();
    for a in texts(get(d, "owner"))
        .into_iter()
        .chain(texts(get(d, "moderator")))
    {
        match Address::parse(a.trim()) {
            Ok(a) => {
                let a = a.to_string();
                if !mods.contains(&a) {
                    mods.push(a);
                }
            }
            Err(e) => unmapped("owner/moderator", &format!("{a:?} is not an address: {e}")),
        }
    }
    s.insert("moderators".into(), json!(mods));
    // Owners keep their role: an owner account each (see `SourceList::owners`).
    list.owners = texts(get(d, "owner"))
        .iter()
        .filter_map(|a| Address::parse(a.trim()).ok())
        .collect();
    list.bans = texts(get(d, "ban_list"));
    match get(d, "subscribe_policy").and_then(int) {
        Some(0) | Some(1) => {
            s.insert("subscription".into(), json!("confirm"));
        }
        Some(_) => {
            s.insert("subscription".into(), json!("closed"));
            unmapped("subscribe_policy", "Mailman asks a moderator to approve each subscription; Herald has no approval step, so the list is closed (administrators add members)");
        }
        None => {}
    }
    if let Some(kb) = get(d, "digest_size_threshhold").and_then(int) {
        s.insert(
            "digest_size_threshold_kb".into(),
            json!(u32::try_from(kb).unwrap_or(0)),
        );
    }
    if let Some(p) = get(d, "digest_send_periodic").and_then(int) {
        s.insert(
            "digest_schedule".into(),
            json!(if p != 0 { "daily" } else { "none" }),
        );
    }
    match get(d, "digest_volume_frequency").and_then(int) {
        Some(0) => { s.insert("digest_volume_frequency".into(), json!("yearly")); }
        Some(1) => { s.insert("digest_volume_frequency".into(), json!("monthly")); }
        Some(_) => unmapped("digest_volume_frequency", "Herald starts digest volumes yearly or monthly, not quarterly, weekly or daily; yearly kept"),
        None => {}
    }
    if get(d, "digestable").and_then(int) == Some(0) {
        unmapped(
            "digestable",
            "Herald lists always offer digests; members choose their delivery mode",
        );
    }
    if let Some(p) = get(d, "personalize").and_then(int) {
        s.insert("personalize".into(), json!(p != 0));
    }
    if let Some(w) = get(d, "send_welcome_msg").and_then(int) {
        s.insert("send_welcome".into(), json!(w != 0));
    }
    // Mailman prepends welcome_msg to its standard welcome, as Herald does with its own.
    if let Some(w) = get(d, "welcome_msg")
        .and_then(text)
        .filter(|w| !w.trim().is_empty())
    {
        if w.contains("%(") {
            unmapped(
                "welcome_msg",
                "Mailman's welcome text uses Python %-substitutions; set welcome_message by hand",
            );
        } else {
            s.insert("welcome_message".into(), json!(w.replace("\r\n", "\n")));
        }
    }
    if let Some(f) = get(d, "from_is_list").and_then(int) {
        s.insert(
            "from_rewrite".into(),
            json!(if f == 1 { "always" } else { "when_needed" }),
        );
        if f == 2 {
            unmapped("from_is_list", "wrapping posts in a message/rfc822 has no Herald equivalent; From is rewritten when DMARC needs it");
        }
    }
    if let Some(t) = get(d, "bounce_score_threshold").and_then(float) {
        if t.is_finite() && t >= 0.0 {
            s.insert("bounce_threshold".into(), json!(t.round() as u32));
        }
    }
    list.archive_privacy = match (
        get(d, "archive").and_then(int),
        get(d, "archive_private").and_then(int),
    ) {
        (Some(0), _) => Some(Privacy::None),
        (Some(_), Some(0)) => Some(Privacy::Public),
        (Some(_), _) => Some(Privacy::Private),
        (None, _) => None,
    };
    for (attr, why) in NOT_MAPPED {
        if is_set(get(d, attr)) {
            unmapped(attr, why);
        }
    }
}

/// Settings Herald has no equivalent for, reported when the list sets them.
const NOT_MAPPED: &[(&str, &str)] = &[
    ("description", "Herald lists have no description"),
    ("info", "Herald lists have no info page text"),
    ("msg_header", "Mailman's header text uses Python %-substitutions; set a Herald footer by hand"),
    ("msg_footer", "Mailman's footer uses Python %-substitutions (%(real_name)s, …), not Herald's {{placeholders}}; set the footer by hand"),
    ("goodbye_msg", "Herald sends no goodbye message"),
    ("accept_these_nonmembers", "Herald has no non-member allow list; add them as moderators or members"),
    ("hold_these_nonmembers", "Herald holds every non-member post already"),
    ("reject_these_nonmembers", "Herald has no non-member reject list; ban the addresses instead"),
    ("discard_these_nonmembers", "Herald has no non-member discard list; ban the addresses instead"),
    ("header_filter_rules", "Herald has no header filter rules"),
    ("topics_enabled", "Herald has no topics"),
    ("filter_content", "Herald's content filter is allowed_content_types; set it by hand"),
    ("acceptable_aliases", "Herald has no acceptable aliases"),
    ("umbrella_list", "Herald has no umbrella lists"),
    ("autorespond_postings", "Herald sends no auto-responses"),
];

fn is_set(v: Option<&V>) -> bool {
    match v {
        None | Some(V::None) => false,
        Some(V::Bool(b)) => *b,
        Some(V::I64(i)) => *i != 0,
        Some(V::String(s)) => !s.trim().is_empty(),
        Some(V::Bytes(b)) => !b.iter().all(u8::is_ascii_whitespace),
        Some(V::List(l)) | Some(V::Tuple(l)) => !l.is_empty(),
        Some(V::Dict(m)) => !m.is_empty(),
        Some(_) => true,
    }
}

/// The raw mbox when pipermail kept one, else the monthly files in name order.
fn archive_files(archives: &Path, name: &str) -> Result<Vec<PathBuf>, ImportError> {
    let mbox = archives
        .join(format!("{name}.mbox"))
        .join(format!("{name}.mbox"));
    if mbox.is_file() {
        return Ok(vec![mbox]);
    }
    let dir = archives.join(name);
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let mut files = Vec::new();
    for e in std::fs::read_dir(&dir).map_err(ImportError::read(&dir))? {
        let p = e.map_err(ImportError::read(&dir))?.path();
        let n = p
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        if p.is_file() && (n.ends_with(".txt") || n.ends_with(".txt.gz")) {
            files.push(p);
        }
    }
    files.sort();
    Ok(files)
}
