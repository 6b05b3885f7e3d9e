//! The posting decision for a list post from SMTP/LMTP: ban, loop and rate guards, the
//! content filter, the posting right, an aligned `From:` where the list requires one, and the
//! content rules — a list post, held for moderation with the reason, or refused. Apart from
//! the rest of the enqueue path because it is the list's policy, asked of the directory in one
//! blocking task and decided in a fixed order; nothing here writes member state.
//!
//! SECURITY: the post and its `From:` are untrusted. Only our own `Authentication-Results`
//! field (the arrival check removed forged ones) counts as proof of the `From:` domain; header
//! fields a content filter asks for are added below the trace fields.

use super::{Enqueuer, Origin};
use crate::error::EnqueueError;
use crate::rights::{posting_right, PostingRight};
use bytes::Bytes;
use herald_directory::DirectoryError;
use herald_spool::PostKind;
use herald_types::{Address, FilterVerdict, GuardAction, GuardTrip, List, MemberId};

impl Enqueuer {
    /// A list post if the sender may post (by the From header or the envelope sender), otherwise
    /// held for moderation. The content filter may add header fields to `body`. What the
    /// directory knows (ban, posting right, member-id snapshot) and the content rules are asked
    /// in one blocking task ([`Enqueuer::post_facts`]); the decisions are taken in the same
    /// order as ever: ban, guards, content filter, posting right, aligned `From:`, content rules.
    pub(super) async fn posting_kind(
        &self,
        list: &List,
        envelope_from: Option<Address>,
        origin: &Origin,
        body: &mut Bytes,
        from: Option<Address>,
    ) -> Result<Posting, EnqueueError> {
        // With require_aligned_from only the From: counts, and only if authentic (below): the
        // envelope sender and an unauthenticated From: are whatever the client typed.
        let aligned_only = list.settings.requires_aligned_from();
        let mut senders: Vec<Address> = from.iter().cloned().collect();
        if !aligned_only {
            senders.extend(envelope_from.iter().cloned());
        }
        let facts = self
            .post_facts(list, from.clone(), senders, body.clone())
            .await?;
        if let (Some(f), Some(ban)) = (&from, &facts.ban) {
            self.telemetry.metrics().count_list_guard(GuardTrip::Banned);
            tracing::info!(list = %list.address, from = %f, ban = ban.id,
                "post refused: the From: address is banned");
            return Err(EnqueueError::Banned {
                sender: f.clone(),
                list: list.address.clone(),
                ban: describe_ban(ban),
            });
        }
        let held = |reason: String| Posting {
            kind: PostKind::Held,
            hold_reason: Some(reason),
            max_member_id: facts.max_member_id,
        };
        if let Some(trip) = self.guard_trip(list, from.as_ref().or(envelope_from.as_ref()), body) {
            self.telemetry.metrics().count_list_guard(trip);
            tracing::info!(list = %list.address, guard = trip.word(),
                action = ?list.settings.guard_action, "list post stopped by a guard");
            return match list.settings.guard_action {
                GuardAction::Hold => Ok(held(trip.reason().to_string())),
                GuardAction::Reject => Err(EnqueueError::Guarded(trip)),
            };
        }
        // Before the posting authorization: spam from a non-member is refused outright rather
        // than filling the moderators' queue.
        if let Some(reason) = self.content_check(list, origin, body).await? {
            return Ok(held(reason));
        }
        let authentic = aligned_only
            && from
                .as_ref()
                .is_some_and(|f| from_is_authentic(body, f, self.arrival.authserv_id()));
        match facts.right {
            PostingRight::Allowed => {}
            PostingRight::Moderated => return Ok(held("the member's posts are moderated".into())),
            PostingRight::NotAllowed => {
                return Ok(held("the sender may not post to this list".into()))
            }
        }
        if aligned_only && !authentic {
            let trip = GuardTrip::Unauthenticated;
            self.telemetry.metrics().count_list_guard(trip);
            tracing::info!(list = %list.address, "member From: without a DMARC pass: unauthenticated sender");
            return match list.settings.guard_action {
                GuardAction::Hold => Ok(held(trip.reason().to_string())),
                GuardAction::Reject => Err(EnqueueError::Guarded(trip)),
            };
        }
        Ok(match facts.hold_reason.clone() {
            Some(r) => held(r),
            None => Posting {
                kind: PostKind::ListPost,
                hold_reason: None,
                max_member_id: facts.max_member_id,
            },
        })
    }

    /// Everything the directory and the content rules say about a list post from SMTP, in one
    /// blocking task (each `spawn_blocking` is a round trip through the blocking pool: a
    /// thread wake-up each way): the ban on its `From:` (the envelope sender's was checked at
    /// RCPT), the most permissive posting right over `senders`, the member-id snapshot, and
    /// the content rules' hold reason (a MIME parse of the whole post). A banned post skips
    /// the rest.
    async fn post_facts(
        &self,
        list: &List,
        from: Option<Address>,
        senders: Vec<Address>,
        body: Bytes,
    ) -> Result<PostFacts, EnqueueError> {
        let (dir, list) = (self.directory.clone(), list.clone());
        let facts = tokio::task::spawn_blocking(move || {
            let ban = match &from {
                Some(f) => dir.ban_for(Some(list.id), f)?,
                None => None,
            };
            if ban.is_some() {
                return Ok::<_, DirectoryError>(PostFacts {
                    ban,
                    right: PostingRight::NotAllowed,
                    max_member_id: MemberId(0),
                    hold_reason: None,
                });
            }
            // The most permissive answer over the candidate senders wins: a post whose From:
            // is an allowed member goes through even if the envelope sender is moderated, and
            // vice versa.
            let mut right = PostingRight::NotAllowed;
            for s in &senders {
                match posting_right(&list, s, || dir.posting_state(list.id, s))? {
                    PostingRight::Allowed => {
                        right = PostingRight::Allowed;
                        break;
                    }
                    PostingRight::Moderated => right = PostingRight::Moderated,
                    PostingRight::NotAllowed => {}
                }
            }
            Ok(PostFacts {
                ban: None,
                right,
                max_member_id: dir.max_member_id(list.id)?,
                hold_reason: crate::policy::hold_reason(&list.settings, &body),
            })
        })
        .await??;
        Ok(facts)
    }
}

/// What [`Enqueuer::post_facts`] found.
struct PostFacts {
    ban: Option<herald_directory::Ban>,
    right: PostingRight,
    max_member_id: MemberId,
    hold_reason: Option<String>,
}

/// How a list's mail is spooled: its kind, why it is held, and its member-id snapshot.
pub(super) struct Posting {
    pub(super) kind: PostKind,
    pub(super) hold_reason: Option<String>,
    pub(super) max_member_id: MemberId,
}

impl Enqueuer {
    /// The content filter's verdict on a list post from SMTP/LMTP: `None`
    /// to go on (with rspamd's `X-Spam` fields added when configured), rspamd's reason to
    /// hold it, or [`EnqueueError::ContentRejected`] (`550 5.7.1` at the end of DATA). A filter
    /// that cannot answer holds the post: never lost, never waved through.
    async fn content_check(
        &self,
        list: &List,
        origin: &Origin,
        body: &mut Bytes,
    ) -> Result<Option<String>, EnqueueError> {
        let (
            Some(filter),
            Origin::Smtp {
                envelope_from,
                peer,
                helo,
                ..
            },
        ) = (&self.content_filter, origin)
        else {
            return Ok(None);
        };
        let req = herald_content_filter::CheckRequest {
            ip: *peer,
            helo: (!helo.is_empty()).then(|| helo.clone()),
            mail_from: envelope_from.as_ref().map(ToString::to_string),
            rcpts: vec![list.address.to_string()],
            queue_id: format!("{:016x}", rand::random::<u64>()),
        };
        let d = filter.check(&req, body.clone()).await;
        let elapsed_ms = u64::try_from(d.elapsed.as_millis()).unwrap_or(u64::MAX);
        self.telemetry
            .metrics()
            .count_content_filter(d.verdict, elapsed_ms);
        match d.verdict {
            FilterVerdict::Failed => tracing::warn!(list = %list.address, queue_id = %req.queue_id,
                elapsed_ms, reason = %d.reason, "content filter failed: post held"),
            v => tracing::info!(list = %list.address, queue_id = %req.queue_id, verdict = v.word(),
                elapsed_ms, reason = %d.reason, "content filter"),
        }
        match d.verdict {
            FilterVerdict::Accept => {
                if !d.headers.is_empty() {
                    *body = append_header_fields(body, d.headers.as_bytes());
                }
                Ok(None)
            }
            FilterVerdict::Hold | FilterVerdict::Failed => Ok(Some(d.reason)),
            FilterVerdict::Reject => Err(EnqueueError::ContentRejected { reason: d.reason }),
        }
    }

    /// The loop / auto-reply guard a post from SMTP trips, else its sender's post rate. A
    /// post that trips a header guard is not counted against the rate.
    fn guard_trip(&self, list: &List, sender: Option<&Address>, body: &[u8]) -> Option<GuardTrip> {
        if let Some(trip) = herald_guard::inspect(body, &list.address) {
            return Some(trip);
        }
        let sender = sender.map_or_else(|| "<>".to_string(), ToString::to_string);
        let now = herald_types::unix_ms_now();
        let max = list.settings.max_posts_per_hour;
        (!self.post_rate.admit(list.id, &sender, max, now)).then_some(GuardTrip::PostRate)
    }
}

/// Whether our arrival results in `body` (the `Authentication-Results` field with our
/// authserv-id; the arrival check removed any forged one first) say DMARC passed for `from`'s
/// domain: aligned SPF or DKIM (RFC 7489 §4.2). No field (checking off) means no.
fn from_is_authentic(body: &[u8], from: &Address, authserv_id: &str) -> bool {
    let Some(msg) = mail_parser::MessageParser::new().parse_headers(body) else {
        return false;
    };
    let ours = msg.headers().iter().find_map(|h| {
        if !h
            .name
            .as_str()
            .eq_ignore_ascii_case("Authentication-Results")
        {
            return None;
        }
        let value = msg
            .raw_message()
            .get(h.offset_start as usize..h.offset_end as usize)?;
        let id = herald_auth::results::authserv_id_of(value)?;
        id.eq_ignore_ascii_case(authserv_id.as_bytes())
            .then(|| herald_auth::results::parse_ours(value, authserv_id))?
    });
    ours.is_some_and(|r| {
        r.dmarc.as_deref() == Some("pass")
            && r.dmarc_domain
                .as_deref()
                .is_some_and(|d| d.eq_ignore_ascii_case(from.domain()))
    })
}

/// `body` with `fields` (CRLF-ended header lines) at the end of its header section: below
/// the trace fields (`Received:`, our `Authentication-Results:`), which stay on top as RFC 5321
/// §4.4 wants and as the lists stage reads them (the client of a held post's notice).
fn append_header_fields(body: &[u8], fields: &[u8]) -> Bytes {
    let at = match body.windows(4).position(|w| w == b"\r\n\r\n") {
        Some(end) => end + 2,
        // A header section with no body: the fields go after its last line.
        None if body.ends_with(b"\r\n") => body.len(),
        None => return Bytes::copy_from_slice(body),
    };
    let mut out = Vec::with_capacity(body.len() + fields.len());
    out.extend_from_slice(&body[..at]);
    out.extend_from_slice(fields);
    out.extend_from_slice(&body[at..]);
    Bytes::from(out)
}

/// A ban as the SMTP reply names it: its scope and pattern, cut so the reply line stays short.
fn describe_ban(ban: &herald_directory::Ban) -> String {
    let scope = if ban.list.is_some() {
        "list ban"
    } else {
        "global ban"
    };
    let pattern: String = ban.pattern.chars().take(100).collect();
    format!("{scope} {pattern}")
}

/// The reply to a banned envelope sender at RCPT.
pub(crate) fn banned_reply(
    sender: &Address,
    list: &Address,
    ban: &herald_directory::Ban,
) -> herald_types::Reply {
    herald_smtp::replies::sender_banned(sender, list, &describe_ban(ban))
}
#[cfg(test)]
mod tests {
    use super::append_header_fields;

    #[test]
    fn spam_fields_go_below_the_trace_fields() {
        let f = b"X-Spam: Yes\r\n";
        let post = b"Received: from a\r\nSubject: s\r\n\r\nbody\r\n\r\nmore\r\n";
        assert_eq!(
            &append_header_fields(post, f)[..],
            &b"Received: from a\r\nSubject: s\r\nX-Spam: Yes\r\n\r\nbody\r\n\r\nmore\r\n"[..]
        );
        assert_eq!(
            &append_header_fields(b"Subject: s\r\n", f)[..],
            &b"Subject: s\r\nX-Spam: Yes\r\n"[..]
        );
        // Not a header section Herald could extend: left as it is.
        assert_eq!(&append_header_fields(b"junk", f)[..], &b"junk"[..]);
    }
}
