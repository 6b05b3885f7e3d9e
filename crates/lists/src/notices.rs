//! What each kind of generated mail says: subject and text of the confirmation request, the
//! request reply, the held-post and moderator notices, the rejection and the disabled-member
//! notice. Pure functions of their inputs (no clock, no randomness, no I/O), so the golden
//! tests in `mail.rs` show the exact bytes of every kind; the runners supply tokens and dates.
//!
//! The words come from the message catalogue of the recipient's language — the member's own,
//! else the list's — or from the list's own wording of that message (`herald_i18n::Words`);
//! the command words a reply must keep (`confirm`, `approve`, `reject`) are not
//! translated, because the request parser reads them.
//!
//! SECURITY: the subjects are fixed texts with addresses and tokens; the only text from a
//! stranger is a held post's subject, quoted in the moderator's notice body after the caller
//! dropped its control characters.

use herald_i18n::Words;
use herald_types::token::Action;
use herald_types::{verp, Address, DeliveryMode, List, PostId};

/// The subject and plain text (LF line ends; the builder writes CRLF) of one message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    pub subject: String,
    pub text: String,
}

/// A catalogue message (or the list's own wording of it) as a notice's text: Fluent trims the
/// final line end, mail keeps one.
fn text(w: &Words<'_>, id: &str, args: &[(&str, &str)]) -> String {
    let mut t = w.text(id, args);
    t.push('\n');
    t
}

/// To the sender of a held post: it waits for a moderator.
pub fn held(w: &Words<'_>, list: &Address, reason: &str, expiry_days: u32) -> Notice {
    let (list, days) = (list.to_string(), expiry_days.to_string());
    Notice {
        subject: w.text("held-subject", &[]),
        text: text(
            w,
            "held-text",
            &[("list", &list), ("reason", reason), ("days", &days)],
        ),
    }
}

/// A held post as its moderators' notice describes it.
pub struct HeldPost<'a> {
    pub list: &'a Address,
    /// The envelope sender, `<>` for the null sender.
    pub poster: &'a str,
    pub reason: &'a str,
    /// The post's subject, control characters already dropped.
    pub subject: &'a str,
    pub id: PostId,
    pub expiry_days: u32,
}

/// To each moderator: the approve token in the subject (a reply approves), the reject token in
/// the body.
pub fn moderation(w: &Words<'_>, post: &HeldPost<'_>, approve: &str, reject: &str) -> Notice {
    let request = verp::request_address(post.list).to_string();
    let (list, id, days) = (
        post.list.to_string(),
        post.id.to_string(),
        post.expiry_days.to_string(),
    );
    Notice {
        subject: format!("approve {approve}"),
        text: text(
            w,
            "moderation-text",
            &[
                ("list", &list),
                ("poster", post.poster),
                ("reason", post.reason),
                ("subject", post.subject),
                ("id", &id),
                ("request", &request),
                ("token", reject),
                ("days", &days),
            ],
        ),
    }
}

/// To the sender of a post a moderator rejected.
pub fn rejected(w: &Words<'_>, list: &Address) -> Notice {
    let list = list.to_string();
    Notice {
        subject: w.text("rejected-subject", &[]),
        text: text(w, "rejected-text", &[("list", &list)]),
    }
}

/// Most characters of a moderator's reason quoted in [`rejected_because`].
pub const MAX_REJECT_REASON_CHARS: usize = 500;

/// [`rejected`] with the moderator's reason: one paragraph, control characters (line breaks
/// too) turned into spaces, at most [`MAX_REJECT_REASON_CHARS`] characters.
pub fn rejected_because(w: &Words<'_>, list: &Address, reason: &str) -> Notice {
    let why: String = reason
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_REJECT_REASON_CHARS)
        .collect();
    let mut n = rejected(w, list);
    let intro = w.text("rejected-reason", &[]);
    n.text.push_str(&format!("\n{intro}\n\n  {}\n", why.trim()));
    n
}

/// The double opt-in confirmation: the token in the subject (a reply confirms) and the link.
pub fn confirmation(
    w: &Words<'_>,
    action: Action,
    who: &Address,
    list: &Address,
    token: &str,
    url: &str,
) -> Notice {
    let action = match action {
        Action::Subscribe => "subscribe",
        Action::Unsubscribe => "unsubscribe",
        Action::Delivery(m) => match m {
            DeliveryMode::Regular => "regular",
            DeliveryMode::DigestMime => "digest-mime",
            DeliveryMode::DigestPlain => "digest-plain",
            DeliveryMode::Nomail => "nomail",
        },
    };
    let (who, list) = (who.to_string(), list.to_string());
    Notice {
        subject: format!("confirm {token}"),
        text: text(
            w,
            "confirmation-text",
            &[
                ("action", action),
                ("who", &who),
                ("list", &list),
                ("url", url),
            ],
        ),
    }
}

/// The welcome to a new member: the list's own text (placeholders filled; see
/// `ListSettings::welcome_message`) or a greeting, then how to post, leave and manage the
/// subscription (`base`: the public URL of Herald's web pages).
pub fn welcome(w: &Words<'_>, list: &List, who: &Address, base: &str) -> Notice {
    let name = if list.settings.display_name.is_empty() {
        list.address.to_string()
    } else {
        list.settings.display_name.clone()
    };
    let own = match &list.settings.welcome_message {
        Some(text) => text
            .replace("{{list_name}}", &name)
            .replace("{{list_address}}", &list.address.to_string())
            .replace("{{email}}", &who.to_string()),
        None => w.text("welcome-greeting", &[("name", &name)]),
    };
    let request = verp::request_address(&list.address).to_string();
    let (address, who, manage) = (
        list.address.to_string(),
        who.to_string(),
        format!("{base}/manage"),
    );
    let standard = text(
        w,
        "welcome-text",
        &[
            ("who", &who),
            ("list", &address),
            ("request", &request),
            ("manage", &manage),
        ],
    );
    Notice {
        subject: w.text("welcome-subject", &[("name", &name)]),
        text: format!("{own}\n\n{standard}"),
    }
}

/// To a member who left by a confirmed unsubscribe: they are off the list, and how to come back.
pub fn goodbye(w: &Words<'_>, list: &Address, who: &Address) -> Notice {
    let request = verp::request_address(list).to_string();
    let (list, who) = (list.to_string(), who.to_string());
    Notice {
        subject: w.text("goodbye-subject", &[("list", &list)]),
        text: text(
            w,
            "goodbye-text",
            &[("who", &who), ("list", &list), ("request", &request)],
        ),
    }
}

/// The link to a member's own subscriptions page (`url`), asked for on the public page.
pub fn manage_link(w: &Words<'_>, who: &Address, url: &str, hours: u64) -> Notice {
    let (who, hours) = (who.to_string(), hours.to_string());
    Notice {
        subject: w.text("manage-subject", &[]),
        text: text(
            w,
            "manage-text",
            &[("who", &who), ("url", url), ("hours", &hours)],
        ),
    }
}

/// The answer to request mail (`text`: what was done, or the help).
pub fn request_reply(w: &Words<'_>, list: &Address, text: String) -> Notice {
    let list = list.to_string();
    Notice {
        subject: w.text("request-reply-subject", &[("list", &list)]),
        text,
    }
}

/// To a member bounce handling disabled: why, and how to come back.
pub fn disabled(w: &Words<'_>, list: &Address, who: &Address, reason: &str) -> Notice {
    let request = verp::request_address(list).to_string();
    let (list, who) = (list.to_string(), who.to_string());
    Notice {
        subject: w.text("disabled-subject", &[("list", &list)]),
        text: text(
            w,
            "disabled-text",
            &[
                ("list", &list),
                ("who", &who),
                ("reason", reason),
                ("request", &request),
            ],
        ),
    }
}

#[cfg(test)]
mod reason_tests {
    use super::*;

    /// A moderator's reason cannot add lines (or headers) to the notice, and is bounded.
    #[test]
    fn a_reject_reason_is_one_bounded_paragraph() {
        let list = Address::parse("dev@lists.test").expect("address");
        let n = rejected_because(
            &Words::shipped("en"),
            &list,
            "off topic\r\nBcc: x@evil.test\u{0}",
        );
        assert!(
            n.text.ends_with("  off topic  Bcc: x@evil.test\n"),
            "{:?}",
            n.text
        );
        assert_eq!(n.subject, rejected(&Words::shipped("en"), &list).subject);
        let long = rejected_because(&Words::shipped("en"), &list, &"x".repeat(10_000));
        assert!(
            long.text.len()
                < rejected(&Words::shipped("en"), &list).text.len() + MAX_REJECT_REASON_CHARS + 40
        );
    }
}
