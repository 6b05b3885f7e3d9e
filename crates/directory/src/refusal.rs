//! The plain data of bans and the suppression list (see `bans`, `suppression`), and why an
//! address is refused: a leaf, so `error` can name a [`Refusal`] without importing the modules
//! that store them.

use herald_types::{Address, ListId};
use serde::{Deserialize, Serialize};

/// One stored ban.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ban {
    pub id: i64,
    /// `None`: every list (global).
    pub list: Option<ListId>,
    /// As stored: an address or `@domain` normalized (lower case, ASCII domain), a regex as given.
    pub pattern: String,
    pub created_at_ms: u64,
}

/// Who put an address on the suppression list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SuppressionSource {
    /// An administrator (API, CLI).
    Operator,
    /// A feedback-loop (ARF) report: the member marked the list's mail as spam.
    Complaint,
    /// The person asked for their data to be erased.
    Erasure,
}

impl SuppressionSource {
    pub fn as_str(self) -> &'static str {
        match self {
            SuppressionSource::Operator => "operator",
            SuppressionSource::Complaint => "complaint",
            SuppressionSource::Erasure => "erasure",
        }
    }

    pub fn parse(s: &str) -> Option<SuppressionSource> {
        match s {
            "operator" => Some(SuppressionSource::Operator),
            "complaint" => Some(SuppressionSource::Complaint),
            "erasure" => Some(SuppressionSource::Erasure),
            _ => None,
        }
    }
}

/// One suppression-list entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Suppression {
    /// `None`: every list.
    pub list: Option<ListId>,
    pub address: Address,
    pub reason: String,
    pub source: SuppressionSource,
    pub at_ms: u64,
}

/// Why an address may not be added to a list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    Suppressed(Suppression),
    Banned(Ban),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scope = |l: Option<ListId>| {
            if l.is_some() {
                "this list's"
            } else {
                "the global"
            }
        };
        match self {
            Refusal::Suppressed(s) => write!(
                f,
                "it is on {} suppression list ({}: {})",
                scope(s.list),
                s.source.as_str(),
                s.reason
            ),
            Refusal::Banned(b) => write!(f, "it is banned by {} ban {}", scope(b.list), b.pattern),
        }
    }
}
