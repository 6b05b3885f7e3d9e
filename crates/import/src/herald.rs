//! Herald's own export format (`herald export herald <dir>`, `herald import herald <dir>`),
//! documented in `docs/export-format.md`: a `manifest.json` (format name, version, lists with
//! their settings, bans and suppressions, global bans and suppressions) and one JSON Lines file
//! of members per list under `members/`, and the list's archive as mboxrd under `archive/` when
//! there is one. Moving out is as easy as moving in, and the round trip (export → import into
//! a fresh server → export) gives the same files.
//!
//! Invariants: lists in address order, members in id order, map keys sorted, no timestamps of
//! the export itself, so two exports of the same directory are byte-identical. A manifest of a
//! newer [`FORMAT_VERSION`] is refused with a message saying to upgrade, never half-read.
//!
//! SECURITY: an export read back is untrusted: every address is parsed, every member passes
//! the directory's checks, file names come from the manifest only after they are checked to be
//! plain names inside the export directory (no `..`, no absolute path).

use crate::source::{Skip, SkipKind, Snapshot, SourceList, SourceMember, SourceSuppression};
use crate::ImportError;
use herald_directory::{Consent, Directory, SuppressionSource};
use herald_types::{Address, DeliveryMode, ListSettings, MemberId, MemberStatus};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};

/// The format name in every manifest.
pub const FORMAT: &str = "herald-export";
/// The version this Herald writes and the newest it reads.
pub const FORMAT_VERSION: u32 = 1;
/// Largest manifest read, in bytes (members live in their own files).
pub const MAX_MANIFEST_BYTES: u64 = 64 * 1024 * 1024;
/// Longest member line read, in bytes.
pub const MAX_MEMBER_LINE_BYTES: usize = 256 * 1024;

#[derive(Debug, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    pub version: u32,
    pub lists: Vec<ExportedList>,
    #[serde(default)]
    pub global_bans: Vec<String>,
    #[serde(default)]
    pub global_suppressions: Vec<ExportedSuppression>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct ExportedList {
    pub address: String,
    pub settings: ListSettings,
    /// Relative path of the members file.
    pub members: String,
    pub member_count: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive_privacy: Option<herald_archive::Privacy>,
    #[serde(default)]
    pub bans: Vec<String>,
    #[serde(default)]
    pub suppressions: Vec<ExportedSuppression>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct ExportedSuppression {
    pub address: String,
    pub reason: String,
    pub source: SuppressionSource,
    pub at_ms: u64,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct ExportedMember {
    pub address: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub fields: BTreeMap<String, String>,
    #[serde(default)]
    pub delivery: DeliveryMode,
    /// The member's posts are held for a moderator.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub moderated: bool,
    /// The reason, when the member is disabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consent: Option<Consent>,
}

/// What an export wrote.
#[derive(Debug, Default)]
pub struct Exported {
    pub lists: u64,
    pub members: u64,
    pub archived_messages: u64,
    /// Members left out because their address is suppressed (they receive nothing, and an
    /// import never re-adds a suppressed address; the suppression itself is exported).
    pub suppressed_members: u64,
}

fn suppressions(
    d: &Directory,
    list: Option<herald_types::ListId>,
) -> Result<Vec<ExportedSuppression>, ImportError> {
    let mut out: Vec<ExportedSuppression> = d
        .suppressions(list, herald_directory::MAX_SUPPRESSION_LISTING)?
        .into_iter()
        .map(|s| ExportedSuppression {
            address: s.address.to_string(),
            reason: s.reason,
            source: s.source,
            at_ms: s.at_ms,
        })
        .collect();
    out.sort_by(|a, b| a.address.cmp(&b.address));
    Ok(out)
}

/// Writes the directory (and the archive at `archive_db`, if it exists) into `out`, which
/// must be empty or absent.
pub fn export(d: &Directory, archive_db: &Path, out: &Path) -> Result<Exported, ImportError> {
    if out.exists()
        && std::fs::read_dir(out)
            .map_err(ImportError::read(out))?
            .next()
            .is_some()
    {
        return Err(ImportError::Usage(format!(
            "{} is not empty; export into a new directory",
            out.display()
        )));
    }
    std::fs::create_dir_all(out.join("members")).map_err(ImportError::write(out))?;
    let archive = if archive_db.exists() {
        Some(herald_archive::Archive::open(archive_db)?)
    } else {
        None
    };
    let mut lists = d.lists()?;
    lists.sort_by_key(|l| l.address.to_string().to_lowercase());
    let mut done = Exported::default();
    let mut manifest = Manifest {
        format: FORMAT.into(),
        version: FORMAT_VERSION,
        lists: Vec::new(),
        global_bans: d.bans(None)?.into_iter().map(|b| b.pattern).collect(),
        global_suppressions: suppressions(d, None)?,
    };
    for (n, l) in lists.into_iter().enumerate() {
        let name = format!("members/{:04}.jsonl", n + 1);
        let count = export_members(d, l.id, &out.join(&name), &mut done)?;
        let key = l.address.to_string().to_lowercase();
        let (mut archive_file, mut privacy) = (None, None);
        if let Some(a) = &archive {
            privacy = Some(a.privacy(&key)?);
            let file = format!("archive/{:04}.mbox", n + 1);
            let n = export_archive(a, &key, &out.join(&file))?;
            if n > 0 {
                archive_file = Some(file);
                done.archived_messages += n;
            }
        }
        manifest.lists.push(ExportedList {
            address: l.address.to_string(),
            settings: l.settings,
            members: name,
            member_count: count,
            archive: archive_file,
            archive_privacy: privacy,
            bans: d.bans(Some(l.id))?.into_iter().map(|b| b.pattern).collect(),
            suppressions: suppressions(d, Some(l.id))?,
        });
        done.lists += 1;
        done.members += count;
    }
    let path = out.join("manifest.json");
    let mut bytes = serde_json::to_vec_pretty(&manifest)
        .map_err(|e| ImportError::format("manifest", e.to_string()))?;
    bytes.push(b'\n');
    std::fs::write(&path, bytes).map_err(ImportError::write(&path))?;
    Ok(done)
}

fn export_members(
    d: &Directory,
    list: herald_types::ListId,
    path: &Path,
    done: &mut Exported,
) -> Result<u64, ImportError> {
    let file = std::fs::File::create(path).map_err(ImportError::write(path))?;
    let mut w = BufWriter::new(file);
    let mut after = MemberId(0);
    let mut n = 0;
    loop {
        let page = d.members_with_options(list, after, 10_000)?;
        let Some((last, _)) = page.last() else {
            break;
        };
        after = last.id;
        for (m, options) in page {
            if d.suppression_for(Some(list), &m.address)?.is_some() {
                done.suppressed_members += 1;
                continue;
            }
            let line = ExportedMember {
                consent: d.member_consent(list, &m.address)?,
                address: m.address.to_string(),
                display_name: m.display_name,
                fields: m.fields,
                delivery: options.delivery,
                moderated: options.moderated,
                disabled: match m.status {
                    MemberStatus::Enabled => None,
                    MemberStatus::Disabled(r) => Some(r),
                },
            };
            serde_json::to_writer(&mut w, &line)
                .map_err(|e| ImportError::format("member", e.to_string()))?;
            w.write_all(b"\n").map_err(ImportError::write(path))?;
            n += 1;
        }
    }
    w.flush().map_err(ImportError::write(path))?;
    Ok(n)
}

fn export_archive(
    a: &herald_archive::Archive,
    list: &str,
    path: &Path,
) -> Result<u64, ImportError> {
    let mut buf = Vec::new();
    let n = herald_archive::import::export(a, list, 0, i64::MAX, &mut buf)?;
    if n > 0 {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(ImportError::write(dir))?;
        }
        std::fs::write(path, buf).map_err(ImportError::write(path))?;
    }
    Ok(n)
}

/// A manifest's relative file name, checked to stay inside the export directory.
fn inside(dir: &Path, name: &str) -> Result<PathBuf, ImportError> {
    let p = Path::new(name);
    let plain = p
        .components()
        .all(|c| matches!(c, std::path::Component::Normal(_)));
    if !plain || name.is_empty() {
        return Err(ImportError::format(
            "manifest.json",
            format!("file name {name:?} leaves the export directory"),
        ));
    }
    Ok(dir.join(p))
}

/// Reads the export in `dir`.
pub fn read(dir: &Path) -> Result<Snapshot, ImportError> {
    let path = dir.join("manifest.json");
    let len = std::fs::metadata(&path)
        .map_err(ImportError::read(&path))?
        .len();
    if len > MAX_MANIFEST_BYTES {
        return Err(ImportError::format(
            path.display().to_string(),
            format!("larger than {MAX_MANIFEST_BYTES} bytes"),
        ));
    }
    let bytes = std::fs::read(&path).map_err(ImportError::read(&path))?;
    // The version first, on its own: a newer format may not parse as this one.
    #[derive(Deserialize)]
    struct Head {
        format: String,
        version: u32,
    }
    let what = path.display().to_string();
    let head: Head =
        serde_json::from_slice(&bytes).map_err(|e| ImportError::format(&what, e.to_string()))?;
    if head.format != FORMAT {
        return Err(ImportError::format(
            &what,
            format!("format is {:?}, not {FORMAT:?}", head.format),
        ));
    }
    if head.version > FORMAT_VERSION {
        return Err(ImportError::TooNew {
            what,
            found: head.version,
            supported: FORMAT_VERSION,
        });
    }
    let manifest: Manifest =
        serde_json::from_slice(&bytes).map_err(|e| ImportError::format(&what, e.to_string()))?;
    let mut snap = Snapshot {
        source: format!("Herald export {}", dir.display()),
        global_bans: manifest.global_bans,
        consent_as_given: true,
        ..Snapshot::default()
    };
    snap.global_suppressions = suppressions_in(manifest.global_suppressions, &mut snap.skipped);
    for l in manifest.lists {
        let address = Address::parse(&l.address)
            .map_err(|e| ImportError::format(&what, format!("list {:?}: {e}", l.address)))?;
        let mut sl = SourceList::new(address);
        match serde_json::to_value(&l.settings) {
            Ok(serde_json::Value::Object(map)) => sl.settings = map,
            _ => return Err(ImportError::format(&what, "settings are not an object")),
        }
        sl.bans = l.bans;
        sl.suppressions = suppressions_in(l.suppressions, &mut snap.skipped);
        sl.archive_privacy = l.archive_privacy;
        if let Some(a) = &l.archive {
            sl.archive.push(inside(dir, a)?);
        }
        let members = inside(dir, &l.members)?;
        let read = read_members(&members, &mut sl, &mut snap.skipped)?;
        // The manifest's own count: a members file cut short (a copy that stopped early) is
        // refused rather than imported as the whole list.
        if read != l.member_count {
            return Err(ImportError::Incomplete {
                what: format!("{} (members of {})", members.display(), l.address),
                reported: l.member_count,
                read,
            });
        }
        snap.lists.push(sl);
    }
    Ok(snap)
}

fn suppressions_in(
    all: Vec<ExportedSuppression>,
    skipped: &mut Vec<Skip>,
) -> Vec<SourceSuppression> {
    let mut out = Vec::new();
    for s in all {
        match Address::parse(&s.address) {
            Ok(address) => out.push(SourceSuppression {
                address,
                reason: s.reason,
                source: s.source,
                at_ms: s.at_ms,
            }),
            Err(e) => skipped.push(Skip::new(
                SkipKind::InvalidAddress,
                format!("suppression {:?}", s.address),
                e.to_string(),
            )),
        }
    }
    out
}

/// Reads the members file into `sl`; the number of member lines it holds (those skipped as
/// unreadable included).
fn read_members(
    path: &Path,
    sl: &mut SourceList,
    skipped: &mut Vec<Skip>,
) -> Result<u64, ImportError> {
    let file = std::fs::File::open(path).map_err(ImportError::read(path))?;
    let mut r = std::io::BufReader::new(file);
    let mut line = Vec::new();
    let (mut n, mut lines) = (0u64, 0u64);
    loop {
        line.clear();
        n += 1;
        let got = (&mut r)
            .take(MAX_MEMBER_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut line)
            .map_err(ImportError::read(path))?;
        if got == 0 {
            break;
        }
        let item = format!("{} line {n}", path.display());
        if line.len() > MAX_MEMBER_LINE_BYTES {
            return Err(ImportError::format(
                item,
                format!("longer than {MAX_MEMBER_LINE_BYTES} bytes"),
            ));
        }
        let text = String::from_utf8_lossy(&line);
        if text.trim().is_empty() {
            continue;
        }
        lines += 1;
        let m: ExportedMember = match serde_json::from_str(text.trim_end()) {
            Ok(m) => m,
            Err(e) => {
                skipped.push(Skip::new(SkipKind::InvalidData, item, e.to_string()));
                continue;
            }
        };
        let address = match Address::parse(&m.address) {
            Ok(a) => a,
            Err(e) => {
                skipped.push(Skip::new(
                    SkipKind::InvalidAddress,
                    item,
                    format!("{:?}: {e}", m.address),
                ));
                continue;
            }
        };
        let mut sm = SourceMember::new(address, format!("line {n}"));
        sm.display_name = m.display_name;
        sm.fields = m.fields;
        sm.delivery = m.delivery;
        sm.moderated = m.moderated;
        sm.disabled = m.disabled;
        sm.consent = m.consent;
        sl.members.push(sm);
    }
    Ok(lines)
}

use std::io::Read as _;
