//! What each kind of generated mail says: subject and text of the confirmation request, the
//! request reply, the held-post and moderator notices, the rejection and the disabled-member
//! notice. Pure functions of their inputs (no clock, no randomness, no I/O), so the golden
//! tests in `mail.rs` show the exact bytes of every kind; the runners supply tokens and dates.
//!
//! SECURITY: the subjects are fixed texts with addresses and tokens; the only text from a
//! stranger is a held post's subject, quoted in the moderator's notice body after the caller
//! dropped its control characters.

use herald_types::token::Action;
use herald_types::{verp, Address, List, PostId};

/// The subject and plain text (LF line ends; the builder writes CRLF) of one message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    pub subject: String,
    pub text: String,
}

/// To the sender of a held post: it waits for a moderator.
pub fn held(list: &Address, reason: &str, expiry_days: u32) -> Notice {
    Notice {
        subject: "Your message is held for moderation".into(),
        text: format!(
            "Your message to {list} is held for a moderator ({reason}).\n\
             You will not hear again unless it is approved; it expires after {expiry_days} days.\n"
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
pub fn moderation(post: &HeldPost<'_>, approve: &str, reject: &str) -> Notice {
    let request = verp::request_address(post.list);
    Notice {
        subject: format!("approve {approve}"),
        text: format!(
            "A post to {list} from {poster} is held for moderation ({reason}).\n\
             Its subject: {subject}\n\
             Held post: {id}\n\
             \n\
             To approve it, reply to this message (keep the subject).\n\
             To reject it, send a mail to {request} with this subject:\n\
             \n\
             \x20 reject {reject}\n\
             \n\
             Nobody acting, it expires after {days} days.\n",
            list = post.list,
            poster = post.poster,
            reason = post.reason,
            subject = post.subject,
            id = post.id,
            days = post.expiry_days,
        ),
    }
}

/// To the sender of a post a moderator rejected.
pub fn rejected(list: &Address) -> Notice {
    Notice {
        subject: "Your message was rejected".into(),
        text: format!(
            "Your message to {list} was rejected by a moderator and will not be distributed.\n"
        ),
    }
}

/// Most characters of a moderator's reason quoted in [`rejected_because`].
pub const MAX_REJECT_REASON_CHARS: usize = 500;

/// [`rejected`] with the moderator's reason: one paragraph, control characters (line breaks
/// too) turned into spaces, at most [`MAX_REJECT_REASON_CHARS`] characters.
pub fn rejected_because(list: &Address, reason: &str) -> Notice {
    let why: String = reason
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_REJECT_REASON_CHARS)
        .collect();
    let mut n = rejected(list);
    n.text
        .push_str(&format!("\nThe moderator's reason:\n\n  {}\n", why.trim()));
    n
}

/// The double opt-in confirmation: the token in the subject (a reply confirms) and the link.
pub fn confirmation(
    action: Action,
    who: &Address,
    list: &Address,
    token: &str,
    url: &str,
) -> Notice {
    Notice {
        subject: format!("confirm {token}"),
        text: format!(
            "Somebody (probably you) asked to {verb} {who} {prep} the list {list}.\n\n\
             To confirm, open this link:\n\n  {url}\n\n\
             or simply reply to this message (keep the subject).\n\n\
             If you did not ask for this, ignore this message: nothing changes.\n",
            verb = action.verb(),
            prep = match action {
                Action::Subscribe => "to",
                Action::Unsubscribe => "from",
                Action::Delivery(_) => "on",
            },
        ),
    }
}

/// The welcome to a new member: the list's own text (placeholders filled; see
/// `ListSettings::welcome_message`) or a greeting, then how to post, leave and manage the
/// subscription (`base`: the public URL of Herald's web pages).
pub fn welcome(list: &List, who: &Address, base: &str) -> Notice {
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
        None => format!("Welcome to the {name} mailing list."),
    };
    let request = verp::request_address(&list.address);
    let address = &list.address;
    Notice {
        subject: format!("Welcome to {name}"),
        text: format!(
            "{own}\n\n             You ({who}) are now a member of {address}.\n             To post, write to {address}.\n             To leave, send a mail to {request} with the subject 'unsubscribe', or use the\n             unsubscribe link at the foot of any post.\n             To see and change your subscriptions (name, digests, no mail), ask for a link at\n             \n  {base}/manage\n"
        ),
    }
}

/// The link to a member's own subscriptions page (`url`), asked for on the public page.
pub fn manage_link(who: &Address, url: &str, hours: u64) -> Notice {
    Notice {
        subject: "your subscriptions".to_string(),
        text: format!(
            "Somebody (probably you) asked for a link to manage the subscriptions of {who}.\n\n\
             Open this link within {hours} hours to see your lists, change your name or delivery\n\
             (single posts, digests, no mail) or unsubscribe:\n\n  {url}\n\n\
             If you did not ask for this, ignore this message: nothing changes.\n"
        ),
    }
}

/// The answer to request mail (`text`: what was done, or the help).
pub fn request_reply(list: &Address, text: String) -> Notice {
    Notice {
        subject: format!("Re: your request to {list}"),
        text,
    }
}

/// To a member bounce handling disabled: why, and how to come back.
pub fn disabled(list: &Address, who: &Address, reason: &str) -> Notice {
    let request = verp::request_address(list);
    Notice {
        subject: format!("Your subscription to {list} is disabled"),
        text: format!(
            "Mail from the list {list} to {who} has been bouncing, so your subscription is now\n\
             disabled: you will not receive posts.\n\
             \n\
             Why: {reason}\n\
             \n\
             To receive the list again, send a mail to {request} with the subject\n\
             'subscribe' and confirm the answer.\n"
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
        let n = rejected_because(&list, "off topic\r\nBcc: x@evil.test\u{0}");
        assert!(
            n.text.ends_with("  off topic  Bcc: x@evil.test\n"),
            "{:?}",
            n.text
        );
        assert_eq!(n.subject, rejected(&list).subject);
        let long = rejected_because(&list, &"x".repeat(10_000));
        assert!(long.text.len() < rejected(&list).text.len() + MAX_REJECT_REASON_CHARS + 40);
    }
}
