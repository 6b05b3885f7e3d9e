//! herald-fanout: a post is parsed once and rendered once into a [`Template`] of byte segments;
//! each member's copy is spliced from it at send time.
//!
//! Place in the flow: the scheduler takes a spooled post, calls [`render`] once with the list
//! and its [`ListContext`], then for each member (expanded in pages) a delivery worker calls
//! [`Template::splice`] into a reused buffer just before writing DATA, and
//! [`Template::return_path`] for MAIL FROM. No rendered copy outlives its SMTP transaction.
//!
//! Why: Mailman deep-copied the message object per member and re-generated it, so a 100×
//! larger post cost 20× more per copy (seeds/004). Here a copy costs one pass of memcpy over
//! the static ranges plus a handful of small writes (To, unsubscribe URL, footer values) and
//! one HMAC for the unsubscribe token.
//!
//! Invariants: a spliced copy is the exact SMTP DATA payload: CRLF line endings only,
//! dot-stuffed, without the terminating ".\r\n"; its MIME structure is valid (the `mime`
//! module decides where the footer goes: appended, inserted as a part, or wrapped).
//!
//! Limits: header block ≤ [`MAX_HEADER_BYTES`]; display names ≤ 128 characters; footer values
//! ≤ 1,024 bytes and cut so that no footer line exceeds 998 octets; base URLs ≤
//! [`MAX_URL_BYTES`] with no spaces, controls, quotes or angle brackets.
//!
//! SECURITY: posts and member data are untrusted. Posts are copied, not re-interpreted, except
//! for the few fields fan-out rewrites; member data goes only through the sanitizers in
//! `encode` (no CR/LF/control characters can reach a header or break a body line); the
//! unsubscribe link carries an HMAC token keyed by the list secret.

mod arc;
mod dmarc;
mod encode;
mod error;
mod footer;
mod headers;
mod message;
mod mime;
mod sign;
mod template;
mod token;

pub use error::FanoutError;
pub use message::MAX_HEADER_BYTES;
pub use sign::{CopyAuth, Stamp};
pub use template::{Template, TemplateShell};
pub use token::{unsubscribe_token, unsubscribe_url, verify_unsubscribe_token};

pub use herald_auth::DkimKeys;
use herald_types::{Address, List};

/// Longest unsubscribe base URL or archive URL accepted in a [`ListContext`].
pub const MAX_URL_BYTES: usize = 256;
/// Budget for the base URL plus the percent-encoded list address: with the largest member
/// address and the token, the `List-Unsubscribe` line then stays under 998 octets.
const MAX_URL_PREFIX_BYTES: usize = 480;

/// See [`ListContext::archived_at`]. A function rather than a table because privacy lives in the
/// archive's own database and may change while the server runs.
pub type ArchivedAt = std::sync::Arc<dyn Fn(&Address, &str) -> Option<ArchivePage> + Send + Sync>;

/// Where a public list's archive shows a post (and the list's archive), as URLs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchivePage {
    /// The post's page: `Archived-At`.
    pub message: String,
    /// The list's archive: `List-Archive` when no `archive_url` is configured.
    pub list: String,
}

/// List-wide values fan-out needs besides the list itself (from the server configuration).
#[derive(Clone)]
pub struct ListContext {
    /// e.g. `https://lists.example.org`; the URL is `{base}/unsubscribe/{list}/{member}/{token}`.
    pub unsubscribe_base_url: String,
    /// Advertised in `List-Archive` when set.
    pub archive_url: Option<String>,
    /// The web archive's page of a post, when its list's archive is public (RFC 5064
    /// `Archived-At` in every copy): called once per post with the list and the post's
    /// Message-ID; `None` for lists whose archive is not public.
    pub archived_at: Option<ArchivedAt>,
    /// HMAC key for unsubscribe tokens (and for unpredictable MIME boundaries).
    pub secret: Vec<u8>,
    /// DKIM keys by list domain; a list whose domain has one gets every copy signed.
    pub dkim: DkimKeys,
    /// Our `authserv-id` (RFC 8601 §2.5, the server's host name): the one
    /// `Authentication-Results` field of a stored post that fan-out trusts is the topmost one
    /// carrying it, written by the server on arrival (DMARC policy of the From domain, ARC
    /// chain result). Fields with other ids are the poster's or a relay's and are ignored.
    pub authserv_id: String,
}

impl std::fmt::Debug for ListContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret: contexts end up in logs through error reports.
        f.debug_struct("ListContext")
            .field("unsubscribe_base_url", &self.unsubscribe_base_url)
            .field("archive_url", &self.archive_url)
            .field("dkim", &self.dkim)
            .field("authserv_id", &self.authserv_id)
            .finish_non_exhaustive()
    }
}

/// Renders `raw_post` (RFC 5322 bytes as received) for `list`. Called once per post.
pub fn render(list: &List, ctx: &ListContext, raw_post: &[u8]) -> Result<Template, FanoutError> {
    let url_prefix = check_context(ctx, &list.address)?;
    let msg = message::normalize(raw_post);
    let post = message::split(&msg)?;
    let footer_text = list
        .settings
        .footer
        .as_deref()
        .filter(|f| !f.trim().is_empty());
    let (plan, edits) = mime::plan(&post, &msg, footer_text, &ctx.secret)?;
    let arrival = dmarc::arrival_results(&post, &ctx.authserv_id);
    let from = dmarc::plan(&post, list, arrival.as_ref());
    let mut b = template::Builder::new(msg.len());
    headers::write(&mut b, &post, list, ctx, &edits, &url_prefix, from.as_ref());
    b.push(b"\r\n");
    b.mark_body();
    let pieces = footer_text
        .map(|t| footer::parse(t, &list_name(list), &list.address.to_string()))
        .unwrap_or_default();
    mime::write_body(&mut b, &plan, &post, &pieces);
    Ok(b.finish(template::TemplateParts {
        list: list.address.clone(),
        personalize: list.settings.personalize,
        mac: token::keyed_mac(&ctx.secret),
        url_prefix,
        signer: ctx.dkim.get(list.address.domain()),
        arc: arc::hop(&post, &ctx.authserv_id),
        null_return_path: false,
    }))
}

/// A template that sends `raw` unchanged (CRLF line endings, dot-stuffed) to every recipient:
/// for mail Herald writes itself (confirmations, notices), which carries no list headers,
/// footer or unsubscribe link. The return path is still the list's VERP bounce address, so a
/// bouncing confirmation is recognized (and counts against nobody who is not a member). It is
/// DKIM-signed with the list domain's key like every other copy.
pub fn verbatim(list: &Address, ctx: &ListContext, raw: &[u8]) -> Template {
    let msg = message::normalize(raw);
    let mut b = template::Builder::new(msg.len());
    // The body starts after the first empty line: DKIM's body hash covers what follows it
    // (without the mark, the signer would hash an empty body and every receiver would see
    // `body hash did not verify`).
    match msg.windows(4).position(|w| w == b"\r\n\r\n") {
        Some(at) => {
            b.push(&msg[..at + 4]);
            b.mark_body();
            b.push(&msg[at + 4..]);
        }
        None => {
            b.push(&msg);
            b.mark_body();
        }
    }
    if !msg.ends_with(b"\r\n") {
        b.push(b"\r\n");
    }
    b.finish(template::TemplateParts {
        list: list.clone(),
        personalize: false,
        mac: token::keyed_mac(&ctx.secret),
        url_prefix: Vec::new(),
        signer: ctx.dkim.get(list.domain()),
        arc: None,
        null_return_path: false,
    })
}

/// `{{list_name}}`: the display name, or the list's local part when it has none.
fn list_name(list: &List) -> String {
    let name = encode::clean_line(&list.settings.display_name);
    if name.is_empty() {
        list.address.local().to_string()
    } else {
        name
    }
}

const BAD_BASE_URL: &str =
    "unsubscribe_base_url must be an http(s) URL of at most 256 printable ASCII bytes without <>\"";
const BAD_ARCHIVE_URL: &str =
    "archive_url must be an http(s) URL of at most 256 printable ASCII bytes without <>\"";

/// Checks the URLs that go into headers and returns the shared unsubscribe URL prefix.
fn check_context(ctx: &ListContext, list: &Address) -> Result<Vec<u8>, FanoutError> {
    check_url(&ctx.unsubscribe_base_url, BAD_BASE_URL)?;
    if let Some(archive) = &ctx.archive_url {
        check_url(archive, BAD_ARCHIVE_URL)?;
    }
    let prefix = token::url_prefix(&ctx.unsubscribe_base_url, list);
    if prefix.len() > MAX_URL_PREFIX_BYTES {
        return Err(FanoutError::InvalidContext(
            "unsubscribe_base_url plus the list address is too long for a List-Unsubscribe line",
        ));
    }
    Ok(prefix)
}

/// An http(s) URL that is safe inside `<...>` in a header; `error` names the setting.
fn check_url(url: &str, error: &'static str) -> Result<(), FanoutError> {
    let scheme_ok = url.starts_with("https://") || url.starts_with("http://");
    let chars_ok = url
        .bytes()
        .all(|b| b.is_ascii_graphic() && !b"<>\"".contains(&b));
    if !scheme_ok || !chars_ok || url.len() > MAX_URL_BYTES {
        return Err(FanoutError::InvalidContext(error));
    }
    Ok(())
}
