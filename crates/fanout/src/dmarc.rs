//! DMARC-aware From handling, decided once per post at render time (Mailman 3's "munge from").
//!
//! A list changes what it forwards (Subject prefix, footer, personalized To), so the poster's
//! DKIM signature breaks, and our SPF and DKIM are for the list domain: a copy From a domain
//! that publishes `p=reject` or `p=quarantine` fails DMARC at the receiver (RFC 7489 §3.1,
//! §6.6.2). Rewriting From to `"Poster via List" <list address>` makes the list the author
//! domain, which our DKIM signature aligns with; Reply-To (or Cc) keeps replies going to the
//! poster.
//!
//! The policy comes from our own `Authentication-Results` field written on arrival
//! (`herald_auth::results`): no DNS at render time, and one lookup per post, cached by TTL.
//!
//! SECURITY: the From field is the poster's. Its display name is decoded by mail-parser and
//! reaches the copy only through `encode::clean_line` and `write_phrase` (no CR/LF/controls,
//! quoted or encoded); the original value is copied to Reply-To/Cc byte-for-byte, as the
//! poster's own field, which cannot start a new field (inbound and `message::split` refuse
//! header lines that are not fields).

use crate::encode::{clean_line, write_phrase, Folder};
use crate::message::{Field, Post};
use herald_auth::results::{parse_ours, ArrivalResults};
use herald_types::{FromRewrite, List};
use mail_parser::MessageParser;

/// How a post's From is rewritten for every copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FromRewritePlan {
    /// The whole new `From:` field, CRLF-terminated.
    pub from_field: Vec<u8>,
    /// The poster's From value (after the colon, folding kept, no final CRLF), for Reply-To
    /// or Cc; `None` when it holds no readable address (nothing to reply to).
    pub original_value: Option<Vec<u8>>,
}

/// The topmost `Authentication-Results` field with our authserv-id (see module docs).
pub(crate) fn arrival_results(post: &Post<'_>, authserv_id: &str) -> Option<ArrivalResults> {
    let field = crate::arc::trusted_auth_results(post, authserv_id)?;
    parse_ours(field.value, authserv_id)
}

/// Decides whether `post` is rewritten for `list`; `None` keeps the poster's From.
pub(crate) fn plan(
    post: &Post<'_>,
    list: &List,
    arrival: Option<&ArrivalResults>,
) -> Option<FromRewritePlan> {
    let from = post.first("From")?;
    let (name, email) = from_parts(from);
    let rewrite = match list.settings.from_rewrite {
        FromRewrite::Never => false,
        FromRewrite::Always => true,
        FromRewrite::WhenNeeded => {
            let domain = email.rsplit_once('@').map(|(_, d)| d.to_ascii_lowercase());
            let own_domain = domain.as_deref() == Some(list.address.domain());
            !own_domain && arrival.is_some_and(|a| needs_rewrite(a, domain.as_deref()))
        }
    };
    if !rewrite {
        return None;
    }
    let list_name = match clean_line(&list.settings.display_name) {
        n if n.is_empty() => list.address.local().to_string(),
        n => n,
    };
    let display = match (name.is_empty(), email.contains('@')) {
        (false, _) => format!("{name} via {list_name}"),
        (true, true) => format!("{email} via {list_name}"),
        (true, false) => list_name,
    };
    let mut from_field = Vec::with_capacity(128);
    let mut f = Folder::new(&mut from_field, "From");
    write_phrase(&mut f, &clean_line(&display), false);
    f.token(&[b"<", list.address.to_string().as_bytes(), b">"]);
    f.finish();
    Some(FromRewritePlan {
        from_field,
        original_value: email.contains('@').then(|| trim_value(from.value).to_vec()),
    })
}

/// Reject or quarantine for the From domain, or a policy we could not learn (temperror): a DNS
/// hiccup on arrival must not get every copy of the post refused.
fn needs_rewrite(a: &ArrivalResults, from_domain: Option<&str>) -> bool {
    // The recorded result must be about this From (it is, unless the post had several Froms
    // or none parseable: then be safe and rewrite when the recorded policy says so).
    let same = match (a.dmarc_domain.as_deref(), from_domain) {
        (Some(d), Some(f)) => d == f,
        _ => true,
    };
    same && (a.dmarc_policy.needs_munging() || a.dmarc_unknown())
}

/// The display name and address of the first From mailbox (empty strings when unreadable).
fn from_parts(from: &Field<'_>) -> (String, String) {
    let parsed = MessageParser::new().parse_headers(from.raw);
    let Some(msg) = parsed.as_ref() else {
        return (String::new(), String::new());
    };
    let first = msg.from().and_then(|a| a.first());
    first.map_or((String::new(), String::new()), |a| {
        (
            clean_line(a.name().unwrap_or_default()),
            clean_line(a.address().unwrap_or_default()),
        )
    })
}

/// A field value without its leading whitespace and final CRLF (folding inside is kept).
pub(crate) fn trim_value(value: &[u8]) -> &[u8] {
    let start = value
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t'))
        .unwrap_or(value.len());
    let mut end = value.len();
    while end > start && matches!(value[end - 1], b'\r' | b'\n' | b' ' | b'\t') {
        end -= 1;
    }
    &value[start..end]
}
