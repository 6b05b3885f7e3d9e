//! Posting rights: may this sender's post go to the members? Enqueue's rule, applied to what
//! the directory knows of the sender ([`herald_directory::PostingState`]).
//!
//! The rule: a list moderator ([`List::is_moderator`]) always may; an enabled member flagged
//! `moderated` is held whatever the policy (as Mailman does); otherwise the list's posting
//! policy decides (`members`: an enabled member; `moderators`: nobody else; `anyone`).
//!
//! SECURITY: `sender` is an envelope or `From:` address, sender-controlled; it is only
//! compared, and the directory binds it as a parameter.

use herald_directory::{DirectoryError, PostingState};
use herald_types::{Address, List, PostingPolicy};

/// What the rule says about a sender's post to a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostingRight {
    /// The post goes to the members (after the content checks).
    Allowed,
    /// The sender is a member whose posts are moderated: held for a moderator.
    Moderated,
    /// The list's posting policy does not let this sender post: held for a moderator.
    NotAllowed,
}

/// The posting right of `sender` on `list`. `member` reads the sender's membership (`None`:
/// not a member); it is not called for a moderator, whose right needs no lookup.
pub fn posting_right(
    list: &List,
    sender: &Address,
    member: impl FnOnce() -> Result<Option<PostingState>, DirectoryError>,
) -> Result<PostingRight, DirectoryError> {
    if list.is_moderator(sender) {
        return Ok(PostingRight::Allowed);
    }
    let member = member()?;
    let enabled_member = member.is_some_and(|m| m.enabled);
    if member.is_some_and(|m| m.enabled && m.moderated) {
        return Ok(PostingRight::Moderated);
    }
    let allowed = match list.settings.posting_policy {
        PostingPolicy::Anyone => true,
        PostingPolicy::Moderators => false,
        PostingPolicy::Members => enabled_member,
    };
    Ok(if allowed {
        PostingRight::Allowed
    } else {
        PostingRight::NotAllowed
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_types::{ListId, ListSettings};

    fn addr(s: &str) -> Address {
        Address::parse(s).expect("address")
    }

    fn list(policy: PostingPolicy) -> List {
        List {
            id: ListId(1),
            address: addr("l@x.example"),
            settings: ListSettings {
                moderators: vec![addr("Mod@x.example")],
                posting_policy: policy,
                ..Default::default()
            },
            created_at_ms: 0,
        }
    }

    const ENABLED: Option<PostingState> = Some(PostingState {
        enabled: true,
        moderated: false,
    });
    const MODERATED: Option<PostingState> = Some(PostingState {
        enabled: true,
        moderated: true,
    });
    const DISABLED: Option<PostingState> = Some(PostingState {
        enabled: false,
        moderated: false,
    });

    fn right(policy: PostingPolicy, who: &str, member: Option<PostingState>) -> PostingRight {
        posting_right(&list(policy), &addr(who), || Ok(member)).expect("right")
    }

    #[test]
    fn members_policy() {
        use PostingRight::*;
        let p = PostingPolicy::Members;
        assert_eq!(right(p, "m@x.example", ENABLED), Allowed);
        assert_eq!(right(p, "m@x.example", MODERATED), Moderated);
        assert_eq!(right(p, "off@x.example", DISABLED), NotAllowed);
        assert_eq!(right(p, "s@y.example", None), NotAllowed);
        assert_eq!(right(p, "mod@x.example", None), Allowed);
    }

    #[test]
    fn moderators_and_anyone_policies() {
        use PostingRight::*;
        let p = PostingPolicy::Moderators;
        assert_eq!(right(p, "MOD@x.example", None), Allowed);
        assert_eq!(right(p, "m@x.example", MODERATED), Moderated);
        assert_eq!(right(p, "m@x.example", ENABLED), NotAllowed);
        let p = PostingPolicy::Anyone;
        assert_eq!(right(p, "s@y.example", None), Allowed);
        assert_eq!(right(p, "m@x.example", MODERATED), Moderated);
        // A disabled member's flag does not hold them: they post as anyone may.
        let off = Some(PostingState {
            enabled: false,
            moderated: true,
        });
        assert_eq!(right(p, "off@x.example", off), Allowed);
    }

    #[test]
    fn a_moderator_is_never_held_and_never_looked_up() {
        let list = list(PostingPolicy::Members);
        let r = posting_right(&list, &addr("mod@X.example"), || {
            panic!("a moderator needs no lookup")
        });
        assert_eq!(r.expect("right"), PostingRight::Allowed);
    }
}
