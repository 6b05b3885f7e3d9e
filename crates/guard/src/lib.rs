//! Guards on list posts: a post that a machine wrote, that is bulk or list
//! mail, that is one of this list's own copies coming back, that is a vacation reply, or whose
//! sender has passed the list's hourly post limit is stopped before fan-out. On a
//! `reply_to = list` list a member's out-of-office reply would otherwise reach every member,
//! and two lists subscribed to each other would loop.
//!
//! Place in the flow: a library. The enqueue path calls [`inspect`] and [`PostRate::admit`] on
//! every list post arriving over SMTP/LMTP, before the posting authorization, and acts on the
//! [`GuardTrip`] per the list's `guard_action` (hold or reject) and counts it in `/metrics`.
//! Mail from administrators and approved held posts are not inspected.
//!
//! Why a header check of our own rather than the bounce classifier's: that one reads
//! *bounces*, where a subject containing "vacation" or "absence" is a fair sign; on a list post
//! it is a person's topic. Here only header marks and the subject *prefixes* MUAs put on
//! automatic replies count.
//!
//! SECURITY: the post is untrusted. mail-parser reads the header (never panics, bounded by the
//! message size the SMTP layer already enforced); only field values are compared here, nothing
//! is copied out.

mod notice_rate;
mod rate;

pub use herald_types::GuardTrip;
pub use notice_rate::{NoticeLimits, NoticeRate, NoticeTo};
pub use rate::{PostRate, MAX_TRACKED_SENDERS};

use herald_types::{list_id_label, Address};
use mail_parser::MessageParser;

/// Subject prefixes of automatic replies (Outlook/Exchange in several languages, Gmail,
/// Thunderbird's vacation filter, Zimbra). Compared case-insensitively at the start only.
const AUTO_REPLY_SUBJECT_PREFIXES: &[&str] = &[
    "auto:",
    "automatic reply:",
    "autoreply:",
    "auto-reply:",
    "auto reply:",
    "out of office:",
    "out of office reply:",
    "out of the office:",
    "abwesend:",
    "automatische antwort:",
    "réponse automatique :",
    "réponse automatique:",
    "respuesta automática:",
    "risposta automatica:",
    "automatisch antwoord:",
];

/// The first guard `header` trips for a post to `list`, or `None`. `header` may be the whole
/// message; only its header block is read.
pub fn inspect(header: &[u8], list: &Address) -> Option<GuardTrip> {
    let msg = MessageParser::new().parse_headers(header)?;
    let raw = |name: &str| msg.header_raw(name).map(|v| v.trim().to_ascii_lowercase());
    // RFC 3834 §5: `no` (with optional parameters) is the only value a person's mail carries.
    if let Some(v) = raw("Auto-Submitted") {
        let keyword = v.split(';').next().unwrap_or("").trim();
        if keyword != "no" {
            return Some(GuardTrip::AutoSubmitted);
        }
    }
    if is_own_copy(&msg, list) {
        return Some(GuardTrip::Loop);
    }
    let precedence = raw("Precedence");
    if precedence.as_deref() == Some("auto_reply")
        || raw("X-Autoreply").is_some()
        || raw("X-Autorespond").is_some()
        || raw("X-Auto-Response-Suppress").is_some_and(|v| v.contains("oof"))
        || msg.subject().is_some_and(is_auto_reply_subject)
    {
        return Some(GuardTrip::AutoReply);
    }
    if precedence.is_some_and(|p| matches!(p.as_str(), "bulk" | "junk" | "list")) {
        return Some(GuardTrip::Precedence);
    }
    None
}

/// True when a subject starts the way automatic replies start.
pub fn is_auto_reply_subject(subject: &str) -> bool {
    let s = subject.trim_start().to_lowercase();
    AUTO_REPLY_SUBJECT_PREFIXES.iter().any(|p| s.starts_with(p))
}

/// Our `List-Id` (as fan-out writes it: `<label.domain>`) or an `X-Loop` naming the list
/// address: a copy of this list came back (possibly through another list).
fn is_own_copy(msg: &mail_parser::Message<'_>, list: &Address) -> bool {
    let id = format!("<{}.{}>", list_id_label(list.local()), list.domain()).to_ascii_lowercase();
    let address = list.to_string().to_ascii_lowercase();
    msg.headers().iter().any(|h| {
        let name = h.name.as_str();
        let value = || {
            let (start, end) = (h.offset_start as usize, h.offset_end as usize);
            let bytes = msg.raw_message().get(start..end).unwrap_or_default();
            String::from_utf8_lossy(bytes).to_ascii_lowercase()
        };
        (name.eq_ignore_ascii_case("List-Id") && value().contains(&id))
            || (name.eq_ignore_ascii_case("X-Loop") && value().contains(&address))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list() -> Address {
        Address::parse("dev@lists.test").expect("address")
    }

    fn trip(header: &str) -> Option<GuardTrip> {
        inspect(format!("{header}\r\n\r\nbody\r\n").as_bytes(), &list())
    }

    #[test]
    fn a_persons_post_passes() {
        assert_eq!(
            trip("From: a@x.test\r\nSubject: Vacation plans for the team"),
            None
        );
        assert_eq!(trip("From: a@x.test\r\nAuto-Submitted: no"), None);
        assert_eq!(
            trip("From: a@x.test\r\nAuto-Submitted: No ; comment=x"),
            None
        );
        assert_eq!(trip("From: a@x.test\r\nPrecedence: first-class"), None);
        assert_eq!(trip("List-Id: Other <dev.lists.other>"), None);
        assert_eq!(trip("X-Loop: devops@lists.test.example"), None);
    }

    #[test]
    fn machine_bulk_and_vacation_mail_trips() {
        use GuardTrip::*;
        for (header, want) in [
            ("Auto-Submitted: auto-replied", AutoSubmitted),
            ("AUTO-SUBMITTED:   Auto-Generated", AutoSubmitted),
            ("Auto-Submitted: ", AutoSubmitted),
            ("Precedence: bulk", Precedence),
            ("Precedence: JUNK", Precedence),
            ("Precedence: list", Precedence),
            ("Precedence: auto_reply", AutoReply),
            ("X-Autoreply: yes", AutoReply),
            ("X-Autorespond: x", AutoReply),
            ("X-Auto-Response-Suppress: OOF, AutoReply", AutoReply),
            ("Subject: Out of Office: re: hi", AutoReply),
            ("Subject: =?utf-8?q?Automatische_Antwort=3A_x?=", AutoReply),
            ("Subject: Automatic reply: release", AutoReply),
            ("List-Id: Dev <dev.lists.test>", Loop),
            ("List-Id: <DEV.Lists.Test>", Loop),
            ("X-Loop: dev@lists.test", Loop),
        ] {
            assert_eq!(trip(header), Some(want), "{header}");
        }
    }

    /// Hostile header blocks: nothing panics, and garbage is not taken for a mark.
    #[test]
    fn hostile_headers() {
        for evil in [
            &b""[..],
            b"\r\n\r\n",
            b"Auto-Submitted",
            b"Auto-Submitted:\r\n no\r\n\r\n",
            b"\xff\xfe: \x00\r\nPrecedence:\xff\r\n\r\n",
            b"List-Id: <dev.lists.test\r\n\r\n",
            b"Subject: =?utf-8?b?!!!?=\r\n\r\n",
        ] {
            let _ = inspect(evil, &list());
        }
        let long = format!("Subject: {}\r\n\r\n", "x".repeat(100_000));
        assert_eq!(inspect(long.as_bytes(), &list()), None);
        // A folded `no` is still `no`.
        assert_eq!(trip("Auto-Submitted:\r\n no"), None);
    }
}
