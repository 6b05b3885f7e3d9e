//! What happened to one recipient of one copy. Outcomes are data: the spool records them, the
//! bounce stage scores them and telemetry counts them; nothing downstream parses log text.

use crate::Reply;
use serde::{Deserialize, Serialize};

/// The result of one delivery attempt for one recipient.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RcptOutcome {
    /// The receiving server accepted the copy (2xx after DATA).
    Delivered(Reply),
    /// Try again later: a 4xx reply, or a connection/timeout problem described by a synthetic
    /// reply (code 451 with the reason in its text).
    Deferred(Reply),
    /// Given up: a 5xx reply, or a synthetic 5xx for problems that retrying cannot fix
    /// (null MX, no such domain, expiry).
    Failed(Reply),
}

impl RcptOutcome {
    pub fn reply(&self) -> &Reply {
        match self {
            RcptOutcome::Delivered(r) | RcptOutcome::Deferred(r) | RcptOutcome::Failed(r) => r,
        }
    }

    /// Final outcomes end the recipient's life in the spool; deferred ones do not.
    pub fn is_final(&self) -> bool {
        !matches!(self, RcptOutcome::Deferred(_))
    }

    /// The word used in the delivery log's `status=` field.
    pub fn status_word(&self) -> &'static str {
        match self {
            RcptOutcome::Delivered(_) => "sent",
            RcptOutcome::Deferred(_) => "deferred",
            RcptOutcome::Failed(_) => "bounced",
        }
    }
}
