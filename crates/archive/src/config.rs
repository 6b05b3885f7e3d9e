//! `[archive]`: whether the server archives list posts, the privacy of lists nobody set one
//! for, and the writer's bounds.

use crate::store::Privacy;
use serde::Deserialize;

/// The `[archive]` section.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ArchiveSection {
    /// Archive list posts as they are fanned out (off: no archive writer runs at all).
    pub enabled: bool,
    /// Privacy of a list nobody set one for (`herald archive privacy`): `private` keeps the
    /// history from the first post but publishes nothing; `none` keeps nothing.
    pub default_privacy: Privacy,
    /// Posts waiting for the archive writer at most; beyond it the hand-over to the writer
    /// waits (fan-out of posts already handed over does not).
    pub queue_capacity: usize,
    /// Posts stored per transaction (one fsync) at most.
    pub batch_max: usize,
    /// Largest message archived (bytes), by the server and by `herald archive import`.
    pub max_message_bytes: usize,
}

impl Default for ArchiveSection {
    fn default() -> Self {
        ArchiveSection {
            enabled: true,
            default_privacy: Privacy::Private,
            queue_capacity: 1024,
            batch_max: 256,
            max_message_bytes: 32 * 1024 * 1024,
        }
    }
}
