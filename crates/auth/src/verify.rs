//! Verifying incoming posts (SPF, DKIM, ARC, DMARC) once on arrival, and looking up a
//! domain's DMARC policy, through the server's configured nameservers.
//!
//! Place in the flow: the server's arrival check (`server::arrival`) calls
//! [`Authenticator::check_arrival`] once per list post and prepends the field it returns; at
//! render time fan-out reads it back (`crate::results`) for DMARC From rewriting and the ARC
//! hop. Tests use [`Authenticator::verify_dkim`] and [`Authenticator::verify_arc`] as the
//! independent verifier of our signatures and seals.
//!
//! Caching: DNS answers are cached by hickory's resolver cache, by TTL (positive and
//! negative), so a busy poster's domain costs one lookup per TTL.
//!
//! SECURITY: every input here is hostile (the post, its signatures, DNS records). mail-auth
//! parses them without panicking; a malformed DKIM-Signature or DMARC record yields a
//! `permerror`/`none` result, never an error that blocks the post. Lookups are bounded by
//! the resolver's `timeout × attempts`.

use mail_auth::common::auth_results::AsAuthResult;
use mail_auth::dmarc::verify::DmarcParameters;
use mail_auth::dmarc::Policy;
use mail_auth::hickory_resolver::config::{NameServerConfig, ResolverConfig, ResolverOpts};
use mail_auth::spf::verify::SpfParameters;
use mail_auth::{AuthenticatedMessage, AuthenticationResults, DkimResult, MessageAuthenticator};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// A domain's published DMARC policy (`p=`), as far as From rewriting is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DmarcPolicy {
    /// No record, `p=none`, or a record we could not read.
    None,
    Quarantine,
    Reject,
}

impl DmarcPolicy {
    /// The token we write in our Authentication-Results comment (`(p=REJECT)`).
    pub fn token(self) -> &'static str {
        match self {
            DmarcPolicy::None => "NONE",
            DmarcPolicy::Quarantine => "QUARANTINE",
            DmarcPolicy::Reject => "REJECT",
        }
    }

    /// Whether a list must not send mail From this domain with its modifications.
    pub fn needs_munging(self) -> bool {
        matches!(self, DmarcPolicy::Quarantine | DmarcPolicy::Reject)
    }
}

/// What the arrival check found.
#[derive(Debug, Clone)]
pub struct ArrivalVerdict {
    /// The `Authentication-Results: ...` field, CRLF-terminated, folded (mail-auth's layout:
    /// `<authserv-id>;\r\n\tdkim=...;\r\n\tspf=...;\r\n\tarc=...;\r\n\tdmarc=...`). `arc=` is
    /// always present: fan-out's ARC seal takes its cv from it. `spf=` only with a peer.
    pub auth_results: String,
    /// The DMARC policy of the From domain.
    pub from_policy: DmarcPolicy,
}

/// Whether one DKIM signature verified (tests and diagnostics).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DkimVerdict {
    pub domain: String,
    pub pass: bool,
    /// mail-auth's result, for messages.
    pub detail: String,
}

/// Why the authenticator could not be built.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("DNS resolver: {0}")]
    Resolver(String),
}

/// SPF/DKIM/DMARC/ARC verification with one resolver (and its cache).
pub struct Authenticator {
    inner: MessageAuthenticator,
    /// Our `authserv-id` (RFC 8601 §2.5): the host name in Authentication-Results.
    authserv_id: String,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("authserv_id", &self.authserv_id)
            .finish_non_exhaustive()
    }
}

impl Authenticator {
    /// Uses `nameservers` (UDP then TCP) with the given per-query timeout and attempts; none:
    /// the system's configuration (`/etc/resolv.conf`).
    pub fn new(
        nameservers: &[SocketAddr],
        timeout: Duration,
        attempts: usize,
        authserv_id: &str,
    ) -> Result<Authenticator, AuthError> {
        if nameservers.is_empty() {
            // No `[dns] nameservers`: the system's resolver, as delivery does.
            let inner = MessageAuthenticator::new_system_conf()
                .map_err(|e| AuthError::Resolver(e.to_string()))?;
            return Ok(Authenticator {
                inner,
                authserv_id: authserv_id.to_string(),
            });
        }
        let servers = nameservers
            .iter()
            .map(|addr| {
                let mut ns = NameServerConfig::udp_and_tcp(addr.ip());
                for c in &mut ns.connections {
                    c.port = addr.port();
                }
                ns
            })
            .collect();
        let mut opts = ResolverOpts::default();
        opts.timeout = timeout;
        opts.attempts = attempts.max(1);
        opts.cache_size = 4096;
        let inner = MessageAuthenticator::new(ResolverConfig::from_name_servers(servers), opts)
            .map_err(|e| AuthError::Resolver(e.to_string()))?;
        Ok(Authenticator {
            inner,
            authserv_id: authserv_id.to_string(),
        })
    }

    /// Our authserv-id.
    pub fn authserv_id(&self) -> &str {
        &self.authserv_id
    }

    /// Verifies every DKIM-Signature of `raw` (a message in CRLF form, not dot-stuffed).
    pub async fn verify_dkim(&self, raw: &[u8]) -> Vec<DkimVerdict> {
        let Some(msg) = AuthenticatedMessage::parse(raw) else {
            return Vec::new();
        };
        self.inner
            .verify_dkim(&msg)
            .await
            .iter()
            .map(|o| DkimVerdict {
                domain: o.signature().map(|s| s.d.clone()).unwrap_or_default(),
                pass: *o.result() == DkimResult::Pass,
                detail: format!("{:?}", o.result()),
            })
            .collect()
    }

    /// Verifies the ARC chain of `raw`: `Ok(())` when it passes, else mail-auth's result.
    pub async fn verify_arc(&self, raw: &[u8]) -> Result<(), String> {
        let Some(msg) = AuthenticatedMessage::parse(raw) else {
            return Err("not a message".into());
        };
        let out = self.inner.verify_arc(&msg).await;
        match out.result() {
            DkimResult::Pass => Ok(()),
            other => Err(format!("{other:?}")),
        }
    }

    /// The SPF result (RFC 7208) a receiver computes for mail from `sender` sent by `ip` with
    /// HELO `helo`, in its RFC 8601 word (`pass`, `fail`, `softfail`, `neutral`, `none`,
    /// `temperror`, `permerror`): `herald doctor` asks it for each egress address.
    pub async fn spf_result(&self, ip: IpAddr, helo: &str, sender: &str) -> String {
        let out = self
            .inner
            .verify_spf(SpfParameters::verify_mail_from(
                ip,
                helo,
                &self.authserv_id,
                sender,
            ))
            .await;
        match out.result() {
            mail_auth::SpfResult::Pass => "pass",
            mail_auth::SpfResult::Fail => "fail",
            mail_auth::SpfResult::SoftFail => "softfail",
            mail_auth::SpfResult::Neutral => "neutral",
            mail_auth::SpfResult::TempError => "temperror",
            mail_auth::SpfResult::PermError => "permerror",
            mail_auth::SpfResult::None => "none",
        }
        .to_string()
    }

    /// Checks a post on arrival. `peer`/`helo`/`mail_from` are absent for posts injected over
    /// HTTP (SPF is then `none`). Never fails: DNS trouble becomes `temperror` results.
    pub async fn check_arrival(
        &self,
        raw: &[u8],
        peer: Option<IpAddr>,
        helo: &str,
        mail_from: &str,
    ) -> ArrivalVerdict {
        let Some(msg) = AuthenticatedMessage::parse(raw) else {
            return ArrivalVerdict {
                auth_results: format!(
                    "Authentication-Results: {}; none (not a message)\r\n",
                    self.authserv_id
                ),
                from_policy: DmarcPolicy::None,
            };
        };
        let dkim = self.inner.verify_dkim(&msg).await;
        let arc = self.inner.verify_arc(&msg).await;
        let from = msg.from().to_string();
        let mail_from_domain = mail_from
            .rsplit_once('@')
            .map_or(helo, |(_, d)| d)
            .to_string();
        let mut results =
            AuthenticationResults::new(&self.authserv_id).with_dkim_results(&dkim, &from);
        let spf = match peer {
            Some(ip) => {
                let spf = self
                    .inner
                    .verify_spf(SpfParameters::verify_mail_from(
                        ip,
                        helo,
                        &self.authserv_id,
                        mail_from,
                    ))
                    .await;
                results = results
                    .with_spf_mailfrom_result(&spf, ip, mail_from, helo)
                    .with_arc_result(&arc, ip);
                Some(spf)
            }
            None => None,
        };
        let mut text = results.to_string();
        if dkim.is_empty() {
            // mail-auth writes nothing for an unsigned post; say so (RFC 8601 §2.7.1), so the
            // ARC-Authentication-Results receivers read shows DKIM was looked at.
            text.push_str(";\r\n\tdkim=none");
        }
        if peer.is_none() {
            // mail-auth's `with_arc_result` needs the peer's IP (for `smtp.remote-ip`). Fan-out
            // reads `arc=` to decide the ARC seal's cv, so it is always written: here in the
            // same layout, without the IP.
            text.push_str(";\r\n\tarc=");
            arc.result().as_auth_result(&mut text);
        }
        let spf = spf.unwrap_or_else(|| mail_auth::SpfOutput::new(mail_from_domain.clone()));
        let dmarc = self
            .inner
            .verify_dmarc(DmarcParameters::new(&msg, &dkim, &mail_from_domain, &spf))
            .await;
        let from_policy = match dmarc.policy() {
            Policy::Reject => DmarcPolicy::Reject,
            Policy::Quarantine => DmarcPolicy::Quarantine,
            Policy::None | Policy::Unspecified => DmarcPolicy::None,
        };
        // An empty authserv-id renders just the `;\r\n\tdmarc=...` part, in mail-auth's format.
        text.push_str(
            &AuthenticationResults::new("")
                .with_dmarc_result(&dmarc)
                .to_string(),
        );
        ArrivalVerdict {
            // mail-auth's Display is the value only; the verdict carries the whole field.
            auth_results: format!("Authentication-Results: {text}\r\n"),
            from_policy,
        }
    }
}
