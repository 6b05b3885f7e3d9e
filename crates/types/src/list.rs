//! The list domain model: a list and its members, as the directory stores them and fan-out uses
//! them. Plain data; the directory crate persists it and validates it on the way in.

use crate::{Address, ListId, MemberId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// RFC 2919 list-label: the list's local part as a dot-atom (a quoted local part has its
/// quotes dropped and other non-atext characters replaced by '-'). One definition, because
/// fan-out writes `List-Id` with it, the archive stores it, and the loop guard recognises our
/// own `List-Id` coming back by it: if they disagreed, a loop would pass the guard.
pub fn list_id_label(local: &str) -> String {
    local
        .trim_matches('"')
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "!#$%&'*+-/=^_`{|}~.".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// Who may post to a list without moderation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PostingPolicy {
    /// Enabled members and moderators (the default for discussion lists).
    #[default]
    Members,
    /// Anybody (an open list).
    Anyone,
    /// Moderators only (announcement lists).
    Moderators,
}

/// Where replies to a list post go.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case", tag = "kind", content = "address")]
pub enum ReplyToPolicy {
    /// Leave Reply-To as the poster sent it.
    #[default]
    Poster,
    /// Reply-To: the list address.
    List,
    /// Reply-To: a fixed address.
    Explicit(Address),
}

/// When a copy's From is replaced by the list address (Mailman 3's "munge from"): a list that
/// re-sends a post From a `p=reject` domain with its own changes fails DMARC at receivers
/// (RFC 7489 §3.1: neither the poster's broken signature nor our SPF aligns with that From).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FromRewrite {
    /// When the poster's domain publishes DMARC `p=reject` or `p=quarantine` (or its policy
    /// could not be looked up: a DNS hiccup must not get a whole fan-out rejected).
    #[default]
    WhenNeeded,
    /// Every post (lists that want one sending identity).
    Always,
    /// Never (the operator accepts that copies of posts from strict domains may be refused).
    Never,
}

/// What becomes of the poster's own `DKIM-Signature` fields in the copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PosterDkim {
    /// Kept as they arrived. They rarely survive a list (personalized To, Subject prefix,
    /// footer), and a broken signature counts as no signature (RFC 6376 §6.3).
    Keep,
    /// Renamed to `X-Original-DKIM-Signature` when From is rewritten, kept otherwise: after
    /// rewriting, the signature is for a domain that is no longer the author's and only adds
    /// a `dkim=fail` some filters score; the renamed field keeps it for forensics.
    #[default]
    RenameWhenRewritten,
    /// Removed from every copy (the ARC set carries the arrival result instead).
    Remove,
}

/// The settings an administrator chooses for a list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct ListSettings {
    /// Shown in List-Id and in From rewriting ("Poster via <display name>").
    pub display_name: String,
    pub posting_policy: PostingPolicy,
    /// e.g. `[announce]`; added to Subject once (not again on replies).
    pub subject_prefix: Option<String>,
    pub reply_to: ReplyToPolicy,
    /// Footer appended to each copy. Placeholders: `{{name}}`, `{{email}}`,
    /// `{{unsubscribe_url}}`, `{{list_name}}`, `{{list_address}}` and any member custom field.
    pub footer: Option<String>,
    /// Full personalization: each copy gets `To:` addressed to its member, and the footer is
    /// filled per member. When off, copies still get a per-member VERP return path and
    /// unsubscribe link (those are required for bounce handling and RFC 8058).
    pub personalize: bool,
    /// Addresses allowed to post under [`PostingPolicy::Moderators`] and to moderate.
    pub moderators: Vec<Address>,
    /// Largest post accepted for this list, in bytes (0: the server-wide limit).
    pub max_message_bytes: u64,
    /// A copy not delivered within this many seconds is given up (default 5 days).
    pub max_age_secs: u64,
    /// Bounce score at which a member is disabled (hard bounce 1 point, soft 0.5, a copy that
    /// expired after `max_age_secs` 0.5 as its own kind `expired`; at most one
    /// increment per day). 0 never disables.
    pub bounce_threshold: u32,
    /// A bounce score with no new counted bounce for this many days starts again from zero.
    pub bounce_stale_days: u32,
    /// Mail a member when bounce handling disables them.
    pub bounce_notify: bool,
    /// Who may join: anyone with double opt-in, or only an administrator.
    pub subscription: SubscriptionPolicy,
    /// Held posts nobody approved or rejected are discarded after this many days.
    pub held_expiry_days: u32,
    /// Content types a post may carry (e.g. `text/plain`, `image/*`); empty allows any type.
    /// A post with another part is held for moderation.
    pub allowed_content_types: Vec<String>,
    /// Hold posts with executable attachments (.exe, .bat, .js, … or application/x-msdownload).
    pub hold_executables: bool,
    /// DMARC-aware From rewriting.
    pub from_rewrite: FromRewrite,
    /// The poster's DKIM-Signature fields in copies.
    pub poster_dkim: PosterDkim,
    /// What a post that trips a loop or auto-reply guard (or the post rate) gets: held for
    /// moderation (default) or refused with `550 5.7.1`.
    pub guard_action: crate::GuardAction,
    /// Most posts one sender may make to the list per hour (0: no limit); the next are
    /// treated per `guard_action`. Counted per server process, reset by a restart.
    pub max_posts_per_hour: u32,
    /// Posting rights by authenticated identity: a member or moderator `From:`
    /// counts only when the arrival check found DMARC passing for its domain (aligned SPF or
    /// DKIM), and the envelope sender no longer counts; otherwise the post is held with the
    /// reason "unauthenticated sender" (or refused, per `guard_action`). `None`: on for
    /// `members` and `moderators` lists, since a forged member `From:` is
    /// as easy as a forged moderator's (see [`ListSettings::requires_aligned_from`]).
    pub require_aligned_from: Option<bool>,
    /// Digest members: a digest is sent as soon as the posts archived since the
    /// last one pass this many kilobytes (0: no size trigger, the schedule only).
    pub digest_size_threshold_kb: u32,
    /// Digest members: when a digest of whatever accumulated is sent regardless of size.
    pub digest_schedule: DigestSchedule,
    /// When the digest volume number goes up (its issue number then starts again at 1).
    pub digest_volume_frequency: DigestVolumeFrequency,
    /// What a member's feedback-loop complaint (an ARF report) does:
    /// unsubscribe them (default) or only disable them; either way the address goes on this
    /// list's suppression list with the report's reason.
    pub complaint_action: ComplaintAction,
    /// Mail a welcome to each new member when their subscription is confirmed (Mailman's
    /// `send_welcome_message`). Off by default. `herald import … --send-welcome` sends it to
    /// the members an import adds, whatever this says.
    pub send_welcome: bool,
    /// The welcome's own text, above the standard part (how to unsubscribe and manage the
    /// subscription); `None`: a one-line greeting. Placeholders: `{{list_name}}`,
    /// `{{list_address}}`, `{{email}}`.
    pub welcome_message: Option<String>,
    /// Mail a goodbye to a member who leaves by a confirmed unsubscribe (by mail, by the
    /// confirmation link; Mailman's `send_goodbye_message`). Off by default. Never after a
    /// one-click unsubscribe (RFC 8058: a mailbox provider acting for the member; a mail back
    /// would be unwanted) nor after an administrator's removal.
    pub send_goodbye: bool,
    /// The language of the mail Herald writes for this list (confirmations, welcome, held and
    /// bounce notices, request replies): a code `herald_i18n::LANGUAGES` ships (`en`, `de`).
    pub language: String,
    /// The egress pool (`[[delivery.egress_pool]]`) this list's copies leave from;
    /// `None`: the pool chosen by destination, else the default pool. A pool not configured on
    /// a node makes the copies wait there (deferred), never leave from another address.
    pub egress_pool: Option<String>,
}

/// When a list's digest is sent even below its size threshold (Mailman's
/// `digest_send_periodic`). Counted from the last digest sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DigestSchedule {
    #[default]
    Daily,
    Weekly,
    /// Only by size or `herald digest send-now`.
    None,
}

/// When a new digest volume starts (Mailman's `digest_volume_frequency`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DigestVolumeFrequency {
    /// A new volume in each new calendar year (UTC).
    #[default]
    Yearly,
    /// A new volume in each new calendar month (UTC).
    Monthly,
    /// Volume 1 for ever; issues keep counting.
    Never,
}

/// See [`ListSettings::complaint_action`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ComplaintAction {
    #[default]
    Unsubscribe,
    Disable,
}

impl ListSettings {
    /// Whether posting rights need an authenticated `From:` (never for `anyone` lists, where
    /// nobody's identity matters).
    pub fn requires_aligned_from(&self) -> bool {
        match (self.posting_policy, self.require_aligned_from) {
            (PostingPolicy::Anyone, _) => false,
            (_, Some(on)) => on,
            (PostingPolicy::Moderators | PostingPolicy::Members, None) => true,
        }
    }
}

/// Who may join a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SubscriptionPolicy {
    /// Anyone, by mail or HTTP, after confirming a signed, expiring link (double opt-in).
    #[default]
    Confirm,
    /// Administrators add members; subscribe requests are refused.
    Closed,
}

impl Default for ListSettings {
    fn default() -> Self {
        ListSettings {
            display_name: String::new(),
            posting_policy: PostingPolicy::default(),
            subject_prefix: None,
            reply_to: ReplyToPolicy::default(),
            footer: None,
            personalize: true,
            moderators: Vec::new(),
            max_message_bytes: 0,
            max_age_secs: 5 * 24 * 3600,
            bounce_threshold: 5,
            bounce_stale_days: 30,
            bounce_notify: false,
            subscription: SubscriptionPolicy::Confirm,
            held_expiry_days: 14,
            allowed_content_types: Vec::new(),
            hold_executables: true,
            from_rewrite: FromRewrite::default(),
            poster_dkim: PosterDkim::default(),
            guard_action: crate::GuardAction::default(),
            max_posts_per_hour: 0,
            require_aligned_from: None,
            digest_size_threshold_kb: 30,
            digest_schedule: DigestSchedule::default(),
            digest_volume_frequency: DigestVolumeFrequency::default(),
            complaint_action: ComplaintAction::default(),
            send_welcome: false,
            welcome_message: None,
            send_goodbye: false,
            language: "en".into(),
            egress_pool: None,
        }
    }
}

/// A list as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct List {
    pub id: ListId,
    /// The posting address, e.g. `announce@lists.example.org`. Its `-bounces` and `-request`
    /// forms are derived from it (see [`crate::verp`]).
    pub address: Address,
    pub settings: ListSettings,
    pub created_at_ms: u64,
}

impl List {
    /// Whether `who` is one of the list's moderators: allowed to post under any policy and to
    /// approve or reject held posts, by mail or on the web. Addresses compare by
    /// [`Address::same_mailbox`], the rule that makes two members one, so every door agrees.
    pub fn is_moderator(&self, who: &Address) -> bool {
        self.settings.moderators.iter().any(|m| m.same_mailbox(who))
    }
}

/// A member bounce handling has just disabled: the bounce stage reports it, the lists stage
/// tells the member and the owner. Here, in the vocabulary, so neither stage imports the other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DisabledMember {
    pub list: ListId,
    pub address: Address,
}

/// Whether a member receives posts.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case", tag = "state", content = "reason")]
pub enum MemberStatus {
    #[default]
    Enabled,
    /// Not receiving posts; the reason says why (e.g. "bounce score 5.0", "admin").
    Disabled(String),
}

impl MemberStatus {
    pub fn is_enabled(&self) -> bool {
        matches!(self, MemberStatus::Enabled)
    }
}

/// How a member receives the list (Mailman's delivery modes). Stored per member
/// by the directory; fan-out sends single posts to `Regular` members only, and a digest post to
/// the members of its own digest mode only. `Nomail` stays a member (counts, may post, gets
/// confirmations and notices) but receives no list mail: holidays.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Default,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum DeliveryMode {
    #[default]
    Regular,
    /// RFC 2046 `multipart/digest`, each post a `message/rfc822` part.
    DigestMime,
    /// RFC 1153 plain-text digest.
    DigestPlain,
    Nomail,
}

impl DeliveryMode {
    /// Every mode, in the order the CLI and docs list them.
    pub const ALL: [DeliveryMode; 4] = [
        DeliveryMode::Regular,
        DeliveryMode::DigestMime,
        DeliveryMode::DigestPlain,
        DeliveryMode::Nomail,
    ];

    /// The stored and wire word (`regular`, `digest-mime`, `digest-plain`, `nomail`).
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryMode::Regular => "regular",
            DeliveryMode::DigestMime => "digest-mime",
            DeliveryMode::DigestPlain => "digest-plain",
            DeliveryMode::Nomail => "nomail",
        }
    }

    /// The mode named by `word` (exact, lowercase: the stored form); `None` for anything else.
    pub fn parse(word: &str) -> Option<DeliveryMode> {
        DeliveryMode::ALL.into_iter().find(|m| m.as_str() == word)
    }

    /// True for the two digest modes.
    pub fn is_digest(self) -> bool {
        matches!(self, DeliveryMode::DigestMime | DeliveryMode::DigestPlain)
    }

    /// `Regular` (the default) is left out of serialized spool records.
    pub fn is_regular(&self) -> bool {
        *self == DeliveryMode::Regular
    }
}

impl std::fmt::Display for DeliveryMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A member as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub id: MemberId,
    pub list_id: ListId,
    pub address: Address,
    /// Display name as given; fan-out sanitizes and RFC 2047-encodes it before use in headers.
    pub display_name: Option<String>,
    pub status: MemberStatus,
    /// Free-form fields for footer templates (`{{field}}`).
    pub fields: BTreeMap<String, String>,
}

#[cfg(test)]
mod list_id_label_tests {
    use super::{list_id_label, DeliveryMode};

    #[test]
    fn delivery_mode_words_round_trip_and_refuse_others() {
        for m in DeliveryMode::ALL {
            assert_eq!(DeliveryMode::parse(m.as_str()), Some(m));
            let json = serde_json::to_string(&m).expect("json");
            assert_eq!(json, format!("\"{}\"", m.as_str()));
        }
        for bad in [
            "",
            "Regular",
            "digest",
            "digest_mime",
            "nomail ",
            "regular\n",
        ] {
            assert_eq!(DeliveryMode::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn list_id_label_is_a_dot_atom() {
        assert_eq!(list_id_label("announce"), "announce");
        assert_eq!(list_id_label("\"a b\""), "a-b");
        assert_eq!(list_id_label("dev.team+x"), "dev.team+x");
        assert_eq!(list_id_label("\"a\r\nb<>\""), "a--b--");
    }
}

#[cfg(test)]
mod aligned_from_tests {
    use super::{ListSettings, PostingPolicy};

    /// Unset, an authenticated `From:` is required wherever identity decides
    /// posting rights (members and moderators lists), never on open lists; set, it wins.
    #[test]
    fn require_aligned_from_defaults_by_posting_policy() {
        let with = |posting_policy, require_aligned_from| ListSettings {
            posting_policy,
            require_aligned_from,
            ..ListSettings::default()
        };
        assert!(
            ListSettings::default().requires_aligned_from(),
            "members is the default"
        );
        assert!(with(PostingPolicy::Members, None).requires_aligned_from());
        assert!(with(PostingPolicy::Moderators, None).requires_aligned_from());
        assert!(!with(PostingPolicy::Anyone, None).requires_aligned_from());
        assert!(!with(PostingPolicy::Members, Some(false)).requires_aligned_from());
        assert!(!with(PostingPolicy::Anyone, Some(true)).requires_aligned_from());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list_moderated_by(moderators: &[&str]) -> List {
        List {
            id: ListId(1),
            address: Address::parse("team@lists.example").expect("list address"),
            settings: ListSettings {
                moderators: moderators
                    .iter()
                    .map(|m| Address::parse(m).expect("moderator"))
                    .collect(),
                ..ListSettings::default()
            },
            created_at_ms: 0,
        }
    }

    fn is_moderator(list: &List, who: &str) -> bool {
        list.is_moderator(&Address::parse(who).expect("address"))
    }

    #[test]
    fn ascii_letters_of_a_moderator_compare_without_case() {
        let list = list_moderated_by(&["Ann.Lee@Example.ORG"]);
        assert!(is_moderator(&list, "ann.lee@example.org"));
        assert!(is_moderator(&list, "ANN.LEE@EXAMPLE.org"));
        assert!(!is_moderator(&list, "ann.le@example.org"));
        assert!(!is_moderator(&list, "ann.lee@example.net"));
    }

    #[test]
    fn utf8_local_parts_fold_ascii_only_as_members_do() {
        let list = list_moderated_by(&["Jörg@münchen.example"]);
        // ASCII letters fold; the domain is one A-label whichever form was typed.
        assert!(is_moderator(&list, "jörg@xn--mnchen-3ya.example"));
        assert!(is_moderator(&list, "JöRG@MÜNCHEN.example"));
        // NFD spelling is the same mailbox (stored in NFC).
        assert!(is_moderator(&list, "Jo\u{308}rg@münchen.example"));
        // A non-ASCII letter in another case is another mailbox, as for members.
        assert!(!is_moderator(&list, "JÖRG@münchen.example"));
        assert!(!is_moderator(&list, "jorg@münchen.example"));
    }

    #[test]
    fn a_list_without_moderators_has_none() {
        assert!(!is_moderator(&list_moderated_by(&[]), "ann@example.org"));
    }
}
