//! What a source system says, in Herald's words: a [`Snapshot`] of lists (their settings as a
//! patch of Herald setting keys), members (delivery mode, status, name, fields), bans,
//! suppressions, archive files, and every item the reader could not bring over ([`Skip`]).
//! Each source module (`listmonk`, `mailman2`, `mailman3`, `herald`) builds one; the engine
//! (`plan`, `apply`) never knows which source it came from.

use herald_directory::{Consent, SuppressionSource};
use herald_types::{Address, DeliveryMode};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Everything one import brings.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// What was read, for the report ("listmonk export subscribers.csv").
    pub source: String,
    pub lists: Vec<SourceList>,
    /// Bans for every list (Mailman 3's global bans).
    pub global_bans: Vec<String>,
    /// Suppressions for every list (listmonk's blocklist, a Herald export's global entries).
    pub global_suppressions: Vec<SourceSuppression>,
    /// What the reader could not bring over, with the reason.
    pub skipped: Vec<Skip>,
    /// Members carry their own consent records (a Herald export): one without a record gets
    /// none, rather than an "import" record the original never had.
    pub consent_as_given: bool,
}

/// One list as the source has it.
#[derive(Debug)]
pub struct SourceList {
    pub address: Address,
    /// Herald `ListSettings` keys (JSON) the source sets; every other setting keeps its value
    /// (an existing list) or Herald's default (a new one).
    pub settings: Map<String, Value>,
    pub members: Vec<SourceMember>,
    pub bans: Vec<String>,
    pub suppressions: Vec<SourceSuppression>,
    /// Mailbox files or directories for the archive importer, in order.
    pub archive: Vec<PathBuf>,
    /// The archive's privacy (`public`, `members`, `private`, `none`), when the source says.
    pub archive_privacy: Option<herald_archive::Privacy>,
    /// Posts waiting for a moderator in the source; brought over still held (through the
    /// running server, which owns held posts: see `herald import`).
    pub held: Vec<HeldPost>,
    /// The list's owners: each gets a Herald account (no password: they sign in by a mailed
    /// link) with the owner role on the list. They are also among the `moderators` setting, so
    /// held-post notices reach them as Mailman's did.
    pub owners: Vec<Address>,
}

/// A post held for moderation in the source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldPost {
    /// The source's id for it (Mailman's request id), for the report.
    pub id: String,
    pub from: Option<Address>,
    /// Why the source held it, as moderators will read it in Herald.
    pub reason: String,
    pub message_id: Option<String>,
    pub raw: Vec<u8>,
}

impl SourceList {
    pub fn new(address: Address) -> SourceList {
        SourceList {
            address,
            settings: Map::new(),
            members: Vec::new(),
            bans: Vec::new(),
            suppressions: Vec::new(),
            archive: Vec::new(),
            archive_privacy: None,
            held: Vec::new(),
            owners: Vec::new(),
        }
    }
}

/// One member as the source has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceMember {
    pub address: Address,
    pub display_name: Option<String>,
    pub fields: BTreeMap<String, String>,
    pub delivery: DeliveryMode,
    /// The member's posts are held for a moderator in the source.
    pub moderated: bool,
    /// `Some(reason)`: not receiving mail in the source (Herald disables it too).
    pub disabled: Option<String>,
    /// The consent the source recorded (Herald exports only).
    pub consent: Option<Consent>,
    /// Where it was read ("line 7", "members[3]"), for the report.
    pub origin: String,
}

impl SourceMember {
    pub fn new(address: Address, origin: impl Into<String>) -> SourceMember {
        SourceMember {
            address,
            display_name: None,
            fields: BTreeMap::new(),
            delivery: DeliveryMode::Regular,
            moderated: false,
            disabled: None,
            consent: None,
            origin: origin.into(),
        }
    }
}

/// One suppression-list entry as the source has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceSuppression {
    pub address: Address,
    pub reason: String,
    pub source: SuppressionSource,
    /// When it was suppressed there (Unix ms); the import time when the source does not say.
    pub at_ms: u64,
}

/// Why an item was not brought over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SkipKind {
    /// The address is on a suppression list (Herald's, or one the import brings).
    Suppressed,
    /// The address matches a ban.
    Banned,
    /// Not a usable mail address.
    InvalidAddress,
    /// A row or value the source's format does not allow, or the directory refuses.
    InvalidData,
    /// The same address again; the first occurrence is kept.
    Duplicate,
    /// A setting or flag with no Herald equivalent.
    Unmapped,
}

impl SkipKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SkipKind::Suppressed => "suppressed",
            SkipKind::Banned => "banned",
            SkipKind::InvalidAddress => "invalid address",
            SkipKind::InvalidData => "invalid data",
            SkipKind::Duplicate => "duplicate",
            SkipKind::Unmapped => "no Herald equivalent",
        }
    }
}

/// One item not brought over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skip {
    pub kind: SkipKind,
    /// What it was ("member a@b (line 7)", "setting digest_is_default of dev@l").
    pub item: String,
    pub reason: String,
}

impl Skip {
    pub fn new(kind: SkipKind, item: impl Into<String>, reason: impl Into<String>) -> Skip {
        Skip {
            kind,
            item: item.into(),
            reason: reason.into(),
        }
    }
}

/// A Mailman language code (`de`, `pt_BR`, `de-AT`) as the list `language` Herald ships for
/// it: the primary subtag when Herald ships that language, else why not (the list stays in
/// Herald's default language and the import report says so).
pub(crate) fn shipped_language(code: &str) -> Result<&'static str, String> {
    let primary = code
        .split(['_', '-'])
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    herald_i18n::LANGUAGES
        .iter()
        .map(|(c, _)| *c)
        .find(|c| *c == primary)
        .ok_or_else(|| {
            let shipped: Vec<&str> = herald_i18n::LANGUAGES.iter().map(|(c, _)| *c).collect();
            format!(
                "{code:?}: Herald ships {}; the list's mail stays in {}",
                shipped.join(", "),
                herald_i18n::DEFAULT
            )
        })
}

#[cfg(test)]
mod tests {
    use super::shipped_language;

    #[test]
    fn a_mailman_language_code_maps_to_a_shipped_language_or_is_reported() {
        assert_eq!(shipped_language("de"), Ok("de"));
        assert_eq!(shipped_language("de_AT"), Ok("de"));
        assert_eq!(shipped_language("DE-de"), Ok("de"));
        assert_eq!(shipped_language("en"), Ok("en"));
        for hostile in ["", "_", "pt_BR", "xx", "de\u{0}", "../../etc", "e\u{301}n"] {
            let why = shipped_language(hostile).expect_err(hostile);
            assert!(why.contains("Herald ships en, de"), "{why}");
        }
    }
}
