//! The vocabulary of the limits on mail Herald sends on others' behalf:
//! which kind of notice, and which limit stopped one. The guard crate decides, the lists stage
//! acts, telemetry counts, all in these words (STYLE rule 17: verdicts are data, never text).

/// A kind of mail the lists stage writes to an address somebody else may have named: a forged
/// `subscribe` names a victim, a forged envelope sender receives a held-post notice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NoticeKind {
    /// A double opt-in confirmation request (subscribe / unsubscribe).
    Confirmation,
    /// To the sender of a held post: it waits for a moderator.
    Held,
    /// The answer to request mail (help, a confirm's result, a moderator's command).
    RequestReply,
    /// To the sender of a post a moderator rejected.
    Rejected,
    /// To a member that bounce handling disabled.
    Disabled,
    /// To a new member: the list's welcome (`send_welcome`, or an import's `--send-welcome`).
    Welcome,
    /// To a member who left by a confirmed unsubscribe: the list's goodbye (`send_goodbye`).
    Goodbye,
}

impl NoticeKind {
    /// Every kind, in [`NoticeKind::index`] order.
    pub const ALL: [NoticeKind; 7] = [
        NoticeKind::Confirmation,
        NoticeKind::Held,
        NoticeKind::RequestReply,
        NoticeKind::Rejected,
        NoticeKind::Disabled,
        NoticeKind::Welcome,
        NoticeKind::Goodbye,
    ];

    /// Position in [`NoticeKind::ALL`].
    pub fn index(self) -> usize {
        match self {
            NoticeKind::Confirmation => 0,
            NoticeKind::Held => 1,
            NoticeKind::RequestReply => 2,
            NoticeKind::Rejected => 3,
            NoticeKind::Disabled => 4,
            NoticeKind::Welcome => 5,
            NoticeKind::Goodbye => 6,
        }
    }

    /// The word in logs and the metric label.
    pub fn word(self) -> &'static str {
        match self {
            NoticeKind::Confirmation => "confirmation",
            NoticeKind::Held => "held",
            NoticeKind::RequestReply => "request_reply",
            NoticeKind::Rejected => "rejected",
            NoticeKind::Disabled => "disabled",
            NoticeKind::Welcome => "welcome",
            NoticeKind::Goodbye => "goodbye",
        }
    }
}

/// The limit a notice was over (it is dropped, never queued).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NoticeLimit {
    /// Too many of this kind to the same address in the kind's window.
    Recipient,
    /// Too many caused by the same client (SMTP peer or HTTP client) in the hour.
    Client,
    /// Too many from the same list in the hour.
    List,
    /// Too many from the whole server in the hour.
    Global,
    /// The counting table was full of live windows: refused rather than sent uncounted.
    Full,
}

impl NoticeLimit {
    /// Every limit, in [`NoticeLimit::index`] order.
    pub const ALL: [NoticeLimit; 5] = [
        NoticeLimit::Recipient,
        NoticeLimit::Client,
        NoticeLimit::List,
        NoticeLimit::Global,
        NoticeLimit::Full,
    ];

    /// Position in [`NoticeLimit::ALL`].
    pub fn index(self) -> usize {
        match self {
            NoticeLimit::Recipient => 0,
            NoticeLimit::Client => 1,
            NoticeLimit::List => 2,
            NoticeLimit::Global => 3,
            NoticeLimit::Full => 4,
        }
    }

    /// The word in logs and the metric label.
    pub fn word(self) -> &'static str {
        match self {
            NoticeLimit::Recipient => "recipient",
            NoticeLimit::Client => "client",
            NoticeLimit::List => "list",
            NoticeLimit::Global => "global",
            NoticeLimit::Full => "table_full",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexes_follow_all() {
        for (i, k) in NoticeKind::ALL.iter().enumerate() {
            assert_eq!(k.index(), i);
        }
        for (i, l) in NoticeLimit::ALL.iter().enumerate() {
            assert_eq!(l.index(), i);
        }
    }
}
