//! Identifiers. Plain integers wrapped in types so a post id can never be passed where a member id
//! is expected.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A spooled post. Assigned by the spool; monotonically increasing within one spool directory.
/// Displayed as 16 hex digits so log lines align and ids sort as text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PostId(pub u64);

impl fmt::Display for PostId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016X}", self.0)
    }
}

impl std::str::FromStr for PostId {
    type Err = std::num::ParseIntError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        u64::from_str_radix(s, 16).map(PostId)
    }
}

/// A list, as stored in the directory (SQLite rowid).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ListId(pub i64);

impl ListId {
    /// No list: server mail such as postmaster's (RFC 5321 §4.5.1). Directory ids are SQLite
    /// rowids, which start at 1, so no list ever has this id.
    pub const NONE: ListId = ListId(0);
}

impl fmt::Display for ListId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A member of a list (directory rowid). Ids only grow, so "members with id <= N" is a stable
/// snapshot of who was on the list when a post arrived: fan-out and crash recovery rely on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct MemberId(pub i64);

impl fmt::Display for MemberId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn post_id_round_trips_through_text() {
        let id = PostId(0x1234_abcd);
        assert_eq!(id.to_string(), "000000001234ABCD");
        assert_eq!("000000001234ABCD".parse::<PostId>().ok(), Some(id));
        assert!("not-hex".parse::<PostId>().is_err());
    }
}
