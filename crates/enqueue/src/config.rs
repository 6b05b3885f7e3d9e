//! The server's `[auth]` table: whether and how each arriving post is authenticated (SPF,
//! DKIM, ARC, DMARC) before it is enqueued. The results decide DMARC From rewriting and are
//! carried to receivers in the ARC set. Every key has a default and unknown keys are refused.

use crate::arrival::{ArrivalCheck, LmtpClients};
use herald_auth::received::IpBlock;
use herald_auth::Authenticator;
use serde::Deserialize;
use std::net::SocketAddr;
use std::time::Duration;

/// Authentication of arriving posts (`[auth]`).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthSection {
    /// Check SPF, DKIM, ARC and DMARC of each list post once on arrival (through `[dns]`).
    /// Off: lists with `from_rewrite = "when_needed"` never rewrite, and no ARC set is added.
    pub verify_arrivals: bool,
    /// Longest the check may take; past it the post is stored with `temperror` results.
    pub arrival_timeout_secs: u64,
    /// Over LMTP, check SPF against the client the MTA in front recorded in its `Received:`
    /// field. Off: LMTP posts get no SPF result (DKIM and DMARC are still checked).
    pub lmtp_client_from_received: bool,
    /// Relays whose recorded clients are walked past to the outside one: a content filter
    /// re-injecting over loopback adds such a hop. Addresses or CIDR blocks.
    pub internal_relays: Vec<String>,
}

impl Default for AuthSection {
    fn default() -> Self {
        AuthSection {
            verify_arrivals: true,
            arrival_timeout_secs: 10,
            lmtp_client_from_received: true,
            internal_relays: vec!["127.0.0.0/8".into(), "::1".into()],
        }
    }
}

/// Why the arrival check could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ArrivalSetupError {
    /// The resolver the check queries could not be built from `[dns]`.
    #[error("{0}")]
    Resolver(herald_auth::AuthError),
    /// An `internal_relays` entry is not an address or CIDR block; names the entry.
    #[error("{0}")]
    Relays(String),
}

impl AuthSection {
    /// The arrival check this section asks for, querying `nameservers` (the system's resolver
    /// when empty) as `[dns]` says, and stamping results as `authserv_id`.
    pub fn arrival_check(
        &self,
        nameservers: &[SocketAddr],
        dns_timeout: Duration,
        dns_attempts: usize,
        authserv_id: &str,
    ) -> Result<ArrivalCheck, ArrivalSetupError> {
        let auth = if self.verify_arrivals {
            let auth = Authenticator::new(nameservers, dns_timeout, dns_attempts, authserv_id)
                .map_err(ArrivalSetupError::Resolver)?;
            Some(auth)
        } else {
            None
        };
        let lmtp_clients = self.lmtp_clients().map_err(ArrivalSetupError::Relays)?;
        Ok(ArrivalCheck::new(
            auth,
            authserv_id,
            Duration::from_secs(self.arrival_timeout_secs),
            lmtp_clients,
        ))
    }

    /// Checked when the server's configuration is loaded; each error names its key.
    pub fn check(&self) -> Result<(), String> {
        if self.arrival_timeout_secs == 0 || self.arrival_timeout_secs > 300 {
            return Err("auth.arrival_timeout_secs: must be between 1 and 300".into());
        }
        if self.internal_relays.len() > 64 {
            return Err("auth.internal_relays: at most 64 entries".into());
        }
        self.lmtp_clients().map(|_| ())
    }

    /// How LMTP posts find their real client; errors name the bad `internal_relays` entry.
    pub fn lmtp_clients(&self) -> Result<LmtpClients, String> {
        if !self.lmtp_client_from_received {
            return Ok(LmtpClients::Unknown);
        }
        let blocks = self
            .internal_relays
            .iter()
            .enumerate()
            .map(|(i, r)| IpBlock::parse(r).map_err(|e| format!("auth.internal_relays[{i}]: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(LmtpClients::FromReceived(blocks))
    }
}

/// The complaints address (`[complaints]`): where feedback-loop reports may
/// be sent besides each list's `-bounces` address.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ComplaintsSection {
    /// Local part accepted at every list domain, e.g. `complaints` for
    /// `complaints@lists.example.org` (the address to register with providers' feedback
    /// loops). Empty (default): off. A list of that name keeps its address.
    pub local_part: String,
}
