//! The arrival check: a post's SPF, DKIM, ARC and DMARC results, taken once when it reaches
//! the list and written at its top as our own `Authentication-Results` field (RFC 8601).
//!
//! Place in the flow: the enqueue path calls [`ArrivalCheck::stamp`] for list posts from SMTP,
//! LMTP and HTTP injection before anything else reads them (moderation included, so a held
//! post carries its results to the moderator and, once approved, to fan-out). Fan-out reads
//! the field back to decide From rewriting (the From domain's DMARC policy) and the ARC hop.
//!
//! Why on arrival: DNS answers are only fresh now, the SMTP client is still waiting (a lookup
//! problem costs the poster a little latency, not the fan-out), and every later stage reads
//! one field instead of asking DNS again.
//!
//! SPF over LMTP: the client Herald sees is the MTA in front of it, so SPF is checked against
//! the client that MTA recorded in its `Received:` field (`herald_auth::received`), or not at
//! all when that field cannot be read or `[auth] lmtp_client_from_received` is off.
//!
//! Failure: the check never refuses or loses a post. It is bounded by `timeout`; when that
//! passes, the field records `temperror` (fan-out then rewrites From to be safe).
//!
//! SECURITY: posts are hostile. Any incoming `Authentication-Results` carrying our
//! authserv-id is removed first (RFC 8601 §5), so the only such field a stored post has is
//! ours; the verification itself (mail-auth) never panics on malformed signatures or records.

use bytes::Bytes;
use herald_auth::received::{relay_client, IpBlock};
use herald_auth::Authenticator;
use std::net::IpAddr;
use std::time::Duration;

/// Where a post came from, for SPF. `mail_from` is the envelope sender, empty for the null
/// reverse path.
pub enum Source<'a> {
    /// An SMTP client: SPF checks its address and HELO name.
    Smtp {
        ip: IpAddr,
        helo: &'a str,
        mail_from: &'a str,
    },
    /// The MTA in front of Herald, over LMTP: the real client is in its `Received:` field.
    Lmtp { mail_from: &'a str },
    /// Injected over HTTP by an administrator: no client, no SPF.
    Injected,
}

/// How LMTP posts find their real client.
#[derive(Debug, Clone)]
pub enum LmtpClients {
    /// From the `Received:` field of the MTA in front, walking past these internal relays.
    FromReceived(Vec<IpBlock>),
    /// Not at all: LMTP posts get no SPF result.
    Unknown,
}

pub struct ArrivalCheck {
    /// `None`: checking is off (`[auth] verify_arrivals = false`); forged fields are still
    /// removed.
    auth: Option<Authenticator>,
    authserv_id: String,
    timeout: Duration,
    lmtp_clients: LmtpClients,
}

impl std::fmt::Debug for ArrivalCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArrivalCheck")
            .field("enabled", &self.auth.is_some())
            .field("authserv_id", &self.authserv_id)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl ArrivalCheck {
    /// Our host name as written in our `Authentication-Results` (the server's `hostname`); the
    /// enqueue path also uses it as the right side of Message-IDs it adds.
    pub fn authserv_id(&self) -> &str {
        &self.authserv_id
    }

    pub fn new(
        auth: Option<Authenticator>,
        authserv_id: &str,
        timeout: Duration,
        lmtp_clients: LmtpClients,
    ) -> Self {
        ArrivalCheck {
            auth,
            authserv_id: authserv_id.to_string(),
            timeout,
            lmtp_clients,
        }
    }

    /// Removes forged fields with our authserv-id and prepends our results.
    pub async fn stamp(&self, body: Bytes, source: Source<'_>) -> Bytes {
        let body = match herald_auth::results::strip_ours(&body, &self.authserv_id) {
            std::borrow::Cow::Borrowed(_) => body,
            std::borrow::Cow::Owned(stripped) => {
                tracing::info!(
                    authserv_id = %self.authserv_id,
                    "removed an incoming Authentication-Results field claiming to be ours"
                );
                Bytes::from(stripped)
            }
        };
        let Some(auth) = &self.auth else {
            return body;
        };
        let relayed;
        let (ip, helo, mail_from) = match source {
            Source::Smtp {
                ip,
                helo,
                mail_from,
            } => (Some(ip), helo, mail_from),
            Source::Lmtp { mail_from } => {
                // One field at the top is ours: the inbound listener prepends it.
                relayed = match &self.lmtp_clients {
                    LmtpClients::FromReceived(internal) => relay_client(&body, 1, internal),
                    LmtpClients::Unknown => None,
                };
                if relayed.is_none() {
                    tracing::debug!("LMTP post without a readable Received field: no SPF");
                }
                match &relayed {
                    Some(c) => (Some(c.ip), c.helo.as_str(), mail_from),
                    None => (None, "", mail_from),
                }
            }
            Source::Injected => (None, "", ""),
        };
        let check = auth.check_arrival(&body, ip, helo, mail_from);
        let field = match tokio::time::timeout(self.timeout, check).await {
            Ok(verdict) => verdict.auth_results,
            Err(_) => {
                tracing::warn!(timeout = ?self.timeout, "arrival authentication check timed out");
                format!(
                    "Authentication-Results: {};\r\n\tdkim=temperror (timed out);\r\n\tdmarc=temperror (timed out)\r\n",
                    self.authserv_id
                )
            }
        };
        let mut out = Vec::with_capacity(field.len() + body.len());
        out.extend_from_slice(field.as_bytes());
        out.extend_from_slice(&body);
        Bytes::from(out)
    }
}
