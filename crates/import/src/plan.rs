//! The plan: what an import would change, computed against the directory as it is now. A dry
//! run prints it; `--apply` hands it to [`crate::apply`]. Because it is computed from the
//! directory each time, a second run of the same import plans nothing, and a run after an
//! interrupted one plans exactly what the first did not get to (see `apply`).
//!
//! What it decides, per list: create or update (which setting keys change), which bans and
//! suppressions are new, and per member add / update / unchanged / skipped. A member is skipped
//! when Herald would refuse it (the directory's own suppression and ban check, the one every
//! subscribe path uses, plus the suppressions and bans this import brings), when the directory
//! would refuse its name or fields, or when its address appeared earlier in the source.
//!
//! Limits: the existing members of a list are held as a compact fingerprint per address
//! (about 80 bytes), so planning against a list of a million members stays near 100 MB.

use crate::ledger::Ledger;
use crate::source::{Skip, SkipKind, Snapshot, SourceMember, SourceSuppression};
use crate::ImportError;
use herald_directory::{member_problem, BanPatterns, Directory, ImportMember, NewMember};
use herald_types::{Address, DeliveryMode, ListId, ListSettings, MemberId};
use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::path::PathBuf;

/// Members read per page when fingerprinting a list.
const SCAN_PAGE: usize = 10_000;

/// What becomes of a list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListAction {
    Create,
    /// Existing; these setting keys change.
    Update(Vec<String>),
    Same,
}

/// The changes for one list.
#[derive(Debug)]
pub struct ListPlan {
    pub address: Address,
    pub existing: Option<ListId>,
    pub action: ListAction,
    /// The list's settings after the import.
    pub settings: ListSettings,
    pub bans: Vec<String>,
    pub suppressions: Vec<SourceSuppression>,
    /// Members to add or update, in source order.
    pub members: Vec<ImportMember>,
    pub added: u64,
    pub updated: u64,
    pub unchanged: u64,
    /// Archive files not imported by an earlier run.
    pub archive: Vec<PathBuf>,
    /// Set when it differs from the archive's current privacy.
    pub archive_privacy: Option<herald_archive::Privacy>,
    /// Held posts to bring over still held (the CLI hands them to the running server and
    /// drops those it already holds).
    pub held: Vec<crate::source::HeldPost>,
    /// Owners to give the owner role (the CLI, which holds the accounts store, drops those
    /// who have it already and applies the rest).
    pub owners: Vec<Address>,
}

/// Everything an import would change.
#[derive(Debug)]
pub struct Plan {
    pub source: String,
    /// See [`Snapshot::consent_as_given`].
    pub consent_as_given: bool,
    pub lists: Vec<ListPlan>,
    pub global_bans: Vec<String>,
    pub global_suppressions: Vec<SourceSuppression>,
    pub skipped: Vec<Skip>,
}

impl Plan {
    /// Member writes (adds and updates) over every list: what the progress bar counts.
    pub fn member_writes(&self) -> u64 {
        self.lists.iter().map(|l| l.members.len() as u64).sum()
    }

    /// True when applying would change nothing.
    pub fn is_empty(&self) -> bool {
        self.global_bans.is_empty()
            && self.global_suppressions.is_empty()
            && self.lists.iter().all(|l| {
                l.action == ListAction::Same
                    && l.bans.is_empty()
                    && l.suppressions.is_empty()
                    && l.members.is_empty()
                    && l.archive.is_empty()
                    && l.archive_privacy.is_none()
                    && l.held.is_empty()
                    && l.owners.is_empty()
            })
    }

    /// The plan as lines for a person (the dry run's output).
    pub fn describe(&self) -> Vec<String> {
        let mut out = vec![format!("import from {}", self.source)];
        for b in &self.global_bans {
            out.push(format!("  add global ban {b}"));
        }
        for s in &self.global_suppressions {
            out.push(format!(
                "  suppress {} on every list ({})",
                s.address, s.reason
            ));
        }
        for l in &self.lists {
            let what = match &l.action {
                ListAction::Create => "create list".to_string(),
                ListAction::Update(keys) => format!("update list settings ({})", keys.join(", ")),
                ListAction::Same => "list unchanged".to_string(),
            };
            out.push(format!("{}: {what}", l.address));
            out.push(format!(
                "  members: {} to add, {} to update, {} unchanged",
                l.added, l.updated, l.unchanged
            ));
            for b in &l.bans {
                out.push(format!("  add ban {b}"));
            }
            for s in &l.suppressions {
                out.push(format!("  suppress {} ({})", s.address, s.reason));
            }
            for f in &l.archive {
                out.push(format!("  archive: import {}", f.display()));
            }
            if let Some(p) = l.archive_privacy {
                out.push(format!("  archive privacy: {}", p.as_str()));
            }
            for o in &l.owners {
                out.push(format!("  owner {o}: an account with the owner role"));
            }
            for h in &l.held {
                out.push(format!(
                    "  held post {} from {}: bring over still held ({})",
                    h.id,
                    h.from
                        .as_ref()
                        .map_or("<>".to_string(), ToString::to_string),
                    h.reason
                ));
            }
        }
        out
    }
}

/// What a member looks like now, reduced to what an import compares.
#[derive(Debug, Clone, Copy)]
struct Existing {
    look: u64,
    delivery: DeliveryMode,
    moderated: bool,
    enabled: bool,
}

fn look(name: &Option<String>, fields: &BTreeMap<String, String>) -> u64 {
    let mut h = DefaultHasher::new();
    name.hash(&mut h);
    fields.hash(&mut h);
    h.finish()
}

/// Computes the plan for `snap` against `dir` (and the archive at `archive`, for privacy).
pub fn compute(
    dir: &Directory,
    archive: Option<&herald_archive::Archive>,
    ledger: &Ledger,
    snap: Snapshot,
) -> Result<Plan, ImportError> {
    check_inputs(&snap)?;
    let mut skipped = snap.skipped;
    let existing_global_bans: HashSet<String> =
        dir.bans(None)?.into_iter().map(|b| b.pattern).collect();
    let global_bans = new_bans(
        &snap.global_bans,
        &existing_global_bans,
        "global",
        &mut skipped,
    );
    let global_new_bans = BanPatterns::compile(&global_bans)?;
    let global_suppressions = new_suppressions(dir, None, snap.global_suppressions)?;
    let mut global_suppressed: HashSet<String> = global_suppressions
        .iter()
        .map(|s| s.address.to_string().to_ascii_lowercase())
        .collect();
    global_suppressed.shrink_to_fit();
    let mut lists = Vec::new();
    for sl in snap.lists {
        let current = dir.list_by_address(&sl.address)?;
        let base = current
            .as_ref()
            .map(|l| l.settings.clone())
            .unwrap_or_default();
        let (settings, changed) = merge_settings(&sl.address, &base, &sl.settings)?;
        let action = match (&current, changed.is_empty()) {
            (None, _) => ListAction::Create,
            (Some(_), true) => ListAction::Same,
            (Some(_), false) => ListAction::Update(changed),
        };
        let existing_id = current.as_ref().map(|l| l.id);
        let known_bans: HashSet<String> = match existing_id {
            Some(id) => dir.bans(Some(id))?.into_iter().map(|b| b.pattern).collect(),
            None => HashSet::new(),
        };
        let label = sl.address.to_string();
        let bans = new_bans(&sl.bans, &known_bans, &label, &mut skipped);
        let list_new_bans = BanPatterns::compile(&bans)?;
        let suppressions = match existing_id {
            Some(id) => new_suppressions(dir, Some(id), sl.suppressions)?,
            None => sl.suppressions,
        };
        let mut suppressed = global_suppressed.clone();
        suppressed.extend(
            suppressions
                .iter()
                .map(|s| s.address.to_string().to_ascii_lowercase()),
        );
        let refusals = Refusals {
            dir,
            list: existing_id,
            suppressed: &suppressed,
            bans: [&global_new_bans, &list_new_bans],
        };
        let existing = match existing_id {
            Some(id) => fingerprint(dir, id)?,
            None => HashMap::new(),
        };
        let mut lp = ListPlan {
            address: sl.address.clone(),
            existing: existing_id,
            action,
            settings,
            bans,
            suppressions,
            members: Vec::new(),
            added: 0,
            updated: 0,
            unchanged: 0,
            archive: sl
                .archive
                .into_iter()
                .filter(|f| !ledger.archived(&label, f))
                .collect(),
            archive_privacy: None,
            held: sl.held,
            owners: sl.owners,
        };
        plan_members(&mut lp, sl.members, &existing, &refusals, &mut skipped)?;
        if let (Some(p), Some(a)) = (sl.archive_privacy, archive) {
            if a.privacy(&label.to_lowercase())? != p {
                lp.archive_privacy = Some(p);
            }
        } else if let Some(p) = sl.archive_privacy {
            lp.archive_privacy = Some(p);
        }
        lists.push(lp);
    }
    Ok(Plan {
        source: snap.source,
        consent_as_given: snap.consent_as_given,
        lists,
        global_bans,
        global_suppressions,
        skipped,
    })
}

/// Every file the import will read later (the archives) exists and opens, checked before the
/// plan is printed or anything is written: a missing archive must not be found only after
/// lists, members and bans went in.
fn check_inputs(snap: &Snapshot) -> Result<(), ImportError> {
    for path in snap.lists.iter().flat_map(|l| &l.archive) {
        let (files, _) = herald_archive::import::plan(path)?;
        for f in files {
            std::fs::File::open(&f).map_err(ImportError::read(&f))?;
        }
    }
    Ok(())
}

/// The bans not stored yet; an unusable pattern is a skip.
fn new_bans(
    patterns: &[String],
    known: &HashSet<String>,
    scope: &str,
    skipped: &mut Vec<Skip>,
) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for p in patterns {
        match herald_directory::normalize_ban_pattern(p) {
            Ok(text) if known.contains(&text) || out.contains(&text) => {}
            Ok(text) => out.push(text),
            Err(e) => skipped.push(Skip::new(
                SkipKind::InvalidData,
                format!("ban {p:?} ({scope})"),
                e.to_string(),
            )),
        }
    }
    out
}

fn new_suppressions(
    dir: &Directory,
    list: Option<ListId>,
    all: Vec<SourceSuppression>,
) -> Result<Vec<SourceSuppression>, ImportError> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    for s in all {
        let key = s.address.to_string().to_ascii_lowercase();
        if !seen.insert(key) {
            continue;
        }
        let have = dir.suppression_for(list, &s.address)?;
        if have.is_some_and(|h| h.list == list) {
            continue;
        }
        out.push(s);
    }
    Ok(out)
}

/// The settings after applying `patch` to `base`, and the keys that change.
fn merge_settings(
    list: &Address,
    base: &ListSettings,
    patch: &serde_json::Map<String, serde_json::Value>,
) -> Result<(ListSettings, Vec<String>), ImportError> {
    let bad =
        |e: serde_json::Error| ImportError::format(format!("settings of {list}"), e.to_string());
    let mut value = serde_json::to_value(base).map_err(bad)?;
    let mut changed = Vec::new();
    if let serde_json::Value::Object(obj) = &mut value {
        for (k, v) in patch {
            if obj.get(k) != Some(v) {
                changed.push(k.clone());
                obj.insert(k.clone(), v.clone());
            }
        }
    }
    let merged: ListSettings = serde_json::from_value(value).map_err(bad)?;
    Ok((merged, changed))
}

/// Every member of `list` as a fingerprint, keyed by lower-cased address.
fn fingerprint(dir: &Directory, list: ListId) -> Result<HashMap<String, Existing>, ImportError> {
    let mut out = HashMap::new();
    let mut after = MemberId(0);
    loop {
        let page = dir.members_with_options(list, after, SCAN_PAGE)?;
        let Some((last, _)) = page.last() else {
            break;
        };
        after = last.id;
        for (m, options) in page {
            let e = Existing {
                look: look(&m.display_name, &m.fields),
                delivery: options.delivery,
                moderated: options.moderated,
                enabled: m.status.is_enabled(),
            };
            out.insert(m.address.to_string().to_ascii_lowercase(), e);
        }
    }
    Ok(out)
}

/// Why Herald would refuse an address on this list: the directory's check and the
/// suppressions and bans this import brings.
struct Refusals<'a> {
    dir: &'a Directory,
    list: Option<ListId>,
    suppressed: &'a HashSet<String>,
    bans: [&'a BanPatterns; 2],
}

impl Refusals<'_> {
    fn check(&self, a: &Address, key: &str) -> Result<Option<Skip>, ImportError> {
        let item = format!("member {a}");
        if self.suppressed.contains(key) {
            return Ok(Some(Skip::new(
                SkipKind::Suppressed,
                item,
                "it is on a suppression list this import brings",
            )));
        }
        for b in self.bans {
            if let Some(p) = b.find(a) {
                return Ok(Some(Skip::new(
                    SkipKind::Banned,
                    item,
                    format!("it is banned by {p}, which this import brings"),
                )));
            }
        }
        let refusal = match self.list {
            Some(id) => self.dir.refusal(id, a)?,
            None => match self.dir.suppression_for(None, a)? {
                Some(s) => Some(herald_directory::Refusal::Suppressed(s)),
                None => self
                    .dir
                    .ban_for(None, a)?
                    .map(herald_directory::Refusal::Banned),
            },
        };
        Ok(refusal.map(|r| {
            let kind = match r {
                herald_directory::Refusal::Suppressed(_) => SkipKind::Suppressed,
                herald_directory::Refusal::Banned(_) => SkipKind::Banned,
            };
            Skip::new(kind, item, r.to_string())
        }))
    }
}

fn plan_members(
    lp: &mut ListPlan,
    members: Vec<SourceMember>,
    existing: &HashMap<String, Existing>,
    refusals: &Refusals<'_>,
    skipped: &mut Vec<Skip>,
) -> Result<(), ImportError> {
    // Where each address was first seen, for the duplicate's report line.
    let mut seen: HashMap<String, String> = HashMap::new();
    let list = lp.address.to_string();
    let item = |a: &Address, origin: &str| format!("member {a} ({origin}) of {list}");
    for m in members {
        let key = m.address.to_string().to_ascii_lowercase();
        if let Some(first) = seen.get(&key) {
            skipped.push(Skip::new(
                SkipKind::Duplicate,
                item(&m.address, &m.origin),
                format!("the address appeared already ({first}); the first is kept"),
            ));
            continue;
        }
        if let Some(mut s) = refusals.check(&m.address, &key)? {
            s.item = item(&m.address, &m.origin);
            skipped.push(s);
            seen.insert(key, m.origin);
            continue;
        }
        let new = NewMember {
            address: m.address,
            display_name: m.display_name,
            fields: m.fields,
        };
        if let Some(why) = member_problem(&new) {
            skipped.push(Skip::new(
                SkipKind::InvalidData,
                item(&new.address, &m.origin),
                why,
            ));
            seen.insert(key, m.origin);
            continue;
        }
        let change = match existing.get(&key) {
            None => Some(true),
            Some(e) => {
                let same = e.look == look(&new.display_name, &new.fields)
                    && e.delivery == m.delivery
                    && e.moderated == m.moderated
                    && (m.disabled.is_none() || !e.enabled);
                (!same).then_some(false)
            }
        };
        seen.insert(key, m.origin);
        match change {
            Some(true) => lp.added += 1,
            Some(false) => lp.updated += 1,
            None => {
                lp.unchanged += 1;
                continue;
            }
        }
        lp.members.push(ImportMember {
            member: new,
            delivery: m.delivery,
            moderated: m.moderated,
            disabled: m.disabled,
            consent: m.consent,
        });
    }
    Ok(())
}
