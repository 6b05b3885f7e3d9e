//! The enqueue boundary's one error type, with the classifiers its callers need: the SMTP
//! handler asks [`EnqueueError::smtp_reply`], the HTTP API [`EnqueueError::is_transient`].
//! Nothing matches on the texts.

use herald_directory::DirectoryError;
use herald_smtp::replies;
use herald_spool::SpoolError;
use herald_types::{Address, GuardTrip, Reply};

/// Why a message could not be enqueued.
#[derive(Debug, thiserror::Error)]
pub enum EnqueueError {
    #[error("the message is larger than the list allows ({limit} bytes)")]
    TooBig { limit: u64 },
    #[error("no such list: {0}")]
    NoSuchList(Address),
    #[error("directory: {0}")]
    Directory(#[from] DirectoryError),
    #[error("spool: {0}")]
    Spool(#[from] SpoolError),
    #[error("internal task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    /// A list guard stopped the post and the list's `guard_action` is `reject`.
    #[error("refused by a list guard: {}", .0.reason())]
    Guarded(GuardTrip),
    /// The content filter (rspamd) said reject; `reason` names rspamd's
    /// action, score and symbols for the log. The peer gets the generic `550 5.7.1`.
    #[error("refused by the content filter: {reason}")]
    ContentRejected { reason: String },
    /// A header field with raw 8-bit bytes in a post without SMTPUTF8 that cannot be encoded
    /// (`eight_bit.rs`).
    #[error("8-bit header without SMTPUTF8: {0}")]
    EightBitHeader(crate::eight_bit::EightBitRefusal),
    /// Another node of the cluster is accepting the same post (its Message-ID) right now and
    /// has not recorded it in time: the sender should retry, and is then answered as for a
    /// retry of that post.
    #[error("the same Message-ID is being accepted by another node")]
    ClaimedElsewhere,
    /// The post's `From:` matches a ban; `ban` describes it for the reply.
    #[error("{sender} is banned from {list} ({ban})")]
    Banned {
        sender: Address,
        list: Address,
        ban: String,
    },
}

impl EnqueueError {
    /// Worth a retry by the sender (4xx) rather than a refusal (5xx).
    pub fn is_transient(&self) -> bool {
        !matches!(
            self,
            EnqueueError::TooBig { .. }
                | EnqueueError::NoSuchList(_)
                | EnqueueError::Guarded(_)
                | EnqueueError::Banned { .. }
                | EnqueueError::ContentRejected { .. }
                | EnqueueError::EightBitHeader(_)
        )
    }

    /// The spool cannot store mail now (a full disk): the sender should keep it and retry.
    pub fn is_storage_shortage(&self) -> bool {
        matches!(self, EnqueueError::Spool(e) if e.is_storage_shortage())
    }

    /// The reply an SMTP/LMTP peer gets for this error. Generic text: internal details stay in
    /// the log.
    pub fn smtp_reply(&self) -> Reply {
        match self {
            EnqueueError::TooBig { limit } => replies::too_big_for_list(*limit),
            EnqueueError::NoSuchList(list) => replies::no_such_list(list),
            EnqueueError::Guarded(trip) => replies::guard_refused(trip.reason()),
            EnqueueError::Banned { sender, list, ban } => replies::sender_banned(sender, list, ban),
            EnqueueError::ContentRejected { .. } => replies::CONTENT_REJECTED.reply(),
            EnqueueError::EightBitHeader(crate::eight_bit::EightBitRefusal::NonAsciiAddress {
                ..
            }) => replies::NEEDS_SMTPUTF8.reply(),
            EnqueueError::EightBitHeader(_) => replies::HEADER_NEEDS_SMTPUTF8.reply(),
            e if e.is_storage_shortage() => replies::INSUFFICIENT_STORAGE.reply(),
            _ => replies::LOCAL_ERROR.reply(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_the_smtp_constants() {
        let big = EnqueueError::TooBig { limit: 10 };
        assert!(replies::MESSAGE_TOO_BIG.matches(&big.smtp_reply()));
        assert!(!big.is_transient());
        let task = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(async { tokio::spawn(async { panic!("boom") }).await });
        let Err(join) = task else {
            panic!("the task panicked")
        };
        let failed = EnqueueError::Task(join);
        assert!(replies::LOCAL_ERROR.matches(&failed.smtp_reply()));
        assert!(failed.is_transient());
        let list = Address::parse("dev@l.test").expect("address");
        assert!(replies::NO_SUCH_RECIPIENT.matches(&EnqueueError::NoSuchList(list).smtp_reply()));
        let guarded = EnqueueError::Guarded(herald_types::GuardTrip::AutoReply);
        assert!(replies::GUARD_REFUSED.matches(&guarded.smtp_reply()));
        assert!(!guarded.is_transient());
        let spam = EnqueueError::ContentRejected {
            reason: "content filter (rspamd): reject, score 15.00 (GTUBE)".into(),
        };
        let reply = spam.smtp_reply();
        assert!(replies::CONTENT_REJECTED.matches(&reply));
        assert!(
            !reply.to_string().contains("GTUBE"),
            "symbols stay in the log"
        );
        assert!(!spam.is_transient());
    }
}
