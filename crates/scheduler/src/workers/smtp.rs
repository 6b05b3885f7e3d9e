//! The real connector: the worker's [`Connector`] seam implemented with the SMTP client
//! (`herald_smtp_client::Connection`: pipelining, STARTTLS, MTA-STS enforcement, DANE). The one
//! file of the workers that speaks the client crate's types, so the client can move crates with
//! one file's imports changed.
//!
//! Classification stays here because it reads the client's error kinds: a 421 or rate-limit
//! reply before the first transaction is a throttle, a reply that trickles past the first pass's
//! patience is a tarpit (the slow lane's, not a failure), a refused or silent host is a host
//! failure ([`fail_kind`]); a session that breaks with a 421 or a dropped connection (not at QUIT) is a
//! throttling signal for the batch.
//!
//! SECURITY: everything read here comes from remote SMTP servers; the client crate bounds every
//! step with its lane's timeouts and sizes, and only typed replies and outcomes cross the seam.

use super::connector::{
    BoxFuture, BreakStage, Connect, ConnectFailure, Connector, CopyResult, OnReply, Opened,
    OutCopy, Sent, Session, SessionBreak, SessionNotes, SessionTls,
};
use super::WorkerPlan;
use crate::classify::classify;
use crate::messages::{ConnectTimings, FailKind, HostFailure, HostKey, Target, TlsFailure};
use herald_routing::mta_sts::Mode;
use herald_routing::{DaneRoute, HostDane, StsRoute};
use herald_smtp_client::{
    ClientConfig, Connection, OutgoingCopy, SessionError, SessionErrorKind, Stage, TlsError,
};
use herald_types::{DaneNote, DeferralKind, LaneKind, MtaStsNote};
use herald_types::{EnhancedStatus, Reply, TlsPolicy, TlsPolicyKind, TlsResultType};
use std::sync::Arc;

/// Opens SMTP connections with the lane's client settings.
pub struct SmtpConnector {
    /// First-pass (fast lane) client settings.
    pub client: Arc<ClientConfig>,
    /// Slow-lane client settings (RFC 5321 timeouts).
    pub slow_client: Arc<ClientConfig>,
    /// The egress pools: a plan with a pool leases one of its source addresses for
    /// the connection's life.
    pub egress: Option<herald_egress::Egress>,
}

impl Connector for SmtpConnector {
    fn connect<'a>(&'a self, plan: &'a WorkerPlan) -> BoxFuture<'a, Connect> {
        Box::pin(self.open(plan))
    }
}

impl SmtpConnector {
    async fn open(&self, plan: &WorkerPlan) -> Connect {
        let cfg = match plan.lane {
            LaneKind::Fast => &self.client,
            LaneKind::Slow => &self.slow_client,
        };
        let sts = plan.sts.as_deref();
        let dane = plan.dane.as_deref();
        let lease = self.lease(plan, cfg).await?;
        let source = lease.as_ref().map(herald_egress::Lease::source);
        let (conn, host, failed) = connect_any(&plan.targets, cfg, sts, dane, source).await?;
        let t = conn.timings();
        let notes = SessionNotes {
            source,
            relay: format!("{}[{}]:{}", host.name, host.addr, cfg.port),
            tls: tls_summary(conn.tls_info()),
            mta_sts: sts_note(sts, &plan.dest, &host, conn.tls_info()),
            dane: dane.map(|r| dane_note(r, &host.name)),
            tls_report: Some(session_tls(sts, dane, &host, conn.tls_info())),
        };
        Ok(Opened {
            session: Box::new(SmtpSession(conn, lease)),
            host,
            failed,
            timings: ConnectTimings {
                connect: t.connect,
                banner: t.banner,
            },
            notes,
        })
    }
}

impl SmtpConnector {
    /// A source address of the plan's egress pool, held for the connection. While
    /// every source is at its connection limit this waits up to the lane's command timeout;
    /// a pool at its warm-up cap (or unknown here) fails the attempt as a local deferral,
    /// charged to no host.
    async fn lease(
        &self,
        plan: &WorkerPlan,
        cfg: &ClientConfig,
    ) -> Result<Option<herald_egress::Lease>, ConnectFailure> {
        let (Some(egress), Some(pool)) = (&self.egress, plan.egress_pool.as_deref()) else {
            return Ok(None);
        };
        let today = herald_egress::utc_day(herald_types::unix_ms_now());
        match egress.acquire(pool, today, cfg.command_timeout).await {
            Ok(lease) => Ok(Some(lease)),
            Err(refusal) => {
                let (status, kind) = match refusal {
                    herald_egress::Refusal::UnknownPool(_) => {
                        (EnhancedStatus::new(4, 3, 5), DeferralKind::Other)
                    }
                    _ => (EnhancedStatus::new(4, 4, 5), DeferralKind::Throttle),
                };
                tracing::info!(dest = %plan.dest, pool, reason = %refusal.text(), "no egress source for a connection");
                Err(ConnectFailure {
                    failed: Vec::new(),
                    reply: Reply::new(451, Some(status), refusal.text()),
                    dane_failed: false,
                    local: Some(kind),
                })
            }
        }
    }
}

/// An open SMTP client connection as a [`Session`], with the egress source it holds.
struct SmtpSession(Connection, Option<herald_egress::Lease>);

impl Session for SmtpSession {
    fn send<'a>(
        &'a mut self,
        copies: &'a [OutCopy<'a>],
        on_reply: &'a mut OnReply<'a>,
    ) -> BoxFuture<'a, Sent> {
        Box::pin(async move {
            let mut out: Vec<OutgoingCopy<'_>> = copies
                .iter()
                .map(|c| OutgoingCopy::new(c.return_path, c.rcpt, c.body).with_dsn(c.dsn))
                .collect();
            let result = self.0.send_reporting(&mut out, on_reply).await;
            let copies = out
                .into_iter()
                .map(|c| CopyResult {
                    outcome: c.outcome,
                    xdelay: c.xdelay,
                })
                .collect();
            Sent {
                copies,
                broke: result.err().map(|e| session_break(&e)),
            }
        })
    }

    fn is_reusable(&self) -> bool {
        self.0.is_reusable()
    }

    fn peer_closed(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(self.0.peer_closed())
    }

    fn reserve(&mut self, want: usize) -> usize {
        match &mut self.1 {
            Some(lease) => lease.reserve(want, herald_egress::utc_day(herald_types::unix_ms_now())),
            None => want,
        }
    }

    fn unreserve(&mut self, n: usize) {
        if let Some(lease) = &mut self.1 {
            lease.unreserve(n);
        }
    }

    fn quit(self: Box<Self>) -> BoxFuture<'static, ()> {
        // The lease goes with the future: the source counts as busy until the QUIT is done.
        let SmtpSession(conn, lease) = *self;
        Box::pin(async move {
            conn.quit().await;
            drop(lease);
        })
    }
}

/// A broken session: its reply for copies left without one, and whether it was a drop or a 421
/// (both throttling signals for the destination's budget).
fn session_break(e: &SessionError) -> SessionBreak {
    let dropped = matches!(
        e.kind(),
        SessionErrorKind::ServerClosed | SessionErrorKind::Io(_)
    );
    let throttled = matches!(e.kind(), SessionErrorKind::Rejected(r) if classify(r) == DeferralKind::Throttle)
        || (dropped && e.stage() != Stage::Quit);
    let stage = match (e.kind(), e.stage()) {
        (SessionErrorKind::Rejected(r), Stage::Mail) if r.code == 421 => BreakStage::Mail,
        // Dropped inside a transaction (a server may also close for too many errors: the
        // RCPT and DATA pipelined after a refused MAIL count as such at many).
        (_, Stage::Mail | Stage::Rcpt | Stage::Data | Stage::DataEnd) if dropped => {
            BreakStage::Body
        }
        _ => BreakStage::Other,
    };
    SessionBreak {
        reply: e.synthetic_reply(),
        throttled,
        stage,
        tarpit: e.is_tarpit(),
    }
}

/// The delivery log's `tls=`: `TLSv1.3/verified`, `TLSv1.3/unverified` or `none` (plaintext).
fn tls_summary(info: Option<&herald_smtp_client::TlsInfo>) -> String {
    match info {
        Some(t) if t.verified => format!("{}/verified", t.version),
        Some(t) => format!("{}/unverified", t.version),
        None => "none".to_string(),
    }
}

/// How the destination's MTA-STS policy applies to copies sent over this connection. Under a
/// testing policy, a connection that enforcement would have refused (host outside the policy,
/// TLS missing or unverified) is logged here and counted per copy (`testing-failed`).
fn sts_note(
    sts: Option<&StsRoute>,
    dest: &str,
    host: &HostKey,
    tls: Option<&herald_smtp_client::TlsInfo>,
) -> Option<MtaStsNote> {
    let sts = sts?;
    if sts.mode == Mode::Enforce {
        // connect_with refused anything else.
        return Some(MtaStsNote::Enforce);
    }
    let verified = tls.is_some_and(|t| t.verified);
    if sts.satisfied_by(&host.name, verified) {
        return Some(MtaStsNote::Testing);
    }
    let why = match tls {
        _ if !sts.satisfied_by(&host.name, true) => "MX host not in the policy".to_string(),
        None => "no TLS".to_string(),
        Some(t) => format!(
            "certificate not verified: {}",
            t.verify_error.as_deref().unwrap_or("unknown reason")
        ),
    };
    tracing::warn!(%dest, host = %host.name, reason = %why, "MTA-STS testing policy: enforcement would refuse this connection");
    Some(MtaStsNote::TestingFailed)
}

/// What DANE concluded for a connection to `host` that succeeded: a host with usable records
/// was authenticated by them (`connect_dane` refuses anything else).
fn dane_note(route: &DaneRoute, host: &str) -> DaneNote {
    match route.host(host) {
        HostDane::Required(_) => DaneNote::Verified,
        HostDane::NoRecords => DaneNote::None,
        HostDane::Insecure => DaneNote::Insecure,
        // Not kept in a route; named for totality.
        HostDane::Failed(_) => DaneNote::Failed,
    }
}

/// The policy that applies to a connection to `host` (RFC 8460 `policy-type`): DANE when the
/// host has usable TLSA records, else the domain's MTA-STS policy, else none.
fn applied_policy(sts: Option<&StsRoute>, dane: Option<&DaneRoute>, host: &str) -> TlsPolicy {
    if let Some(tlsa) = dane.and_then(|r| r.tlsa_for(host)) {
        return TlsPolicy {
            kind: TlsPolicyKind::Tlsa,
            strings: tlsa.presentation().into(),
        };
    }
    match sts {
        Some(r) => TlsPolicy {
            kind: TlsPolicyKind::Sts,
            strings: r.policy_lines.clone(),
        },
        None => TlsPolicy::none(),
    }
}

/// What TLS reporting records about a session that opened: success when TLS is what the policy
/// demands (an enforced policy or DANE allowed nothing else; opportunistic TLS needs TLS, of any
/// verification), otherwise the failure a testing policy or a plaintext session comes to.
fn session_tls(
    sts: Option<&StsRoute>,
    dane: Option<&DaneRoute>,
    host: &HostKey,
    tls: Option<&herald_smtp_client::TlsInfo>,
) -> SessionTls {
    let policy = applied_policy(sts, dane, &host.name);
    let failure = match (policy.kind, tls) {
        (_, None) => Some((
            TlsResultType::StarttlsNotSupported,
            "the MX host does not offer STARTTLS".to_string(),
        )),
        (TlsPolicyKind::Sts, Some(t)) => match sts {
            Some(r) if !r.satisfied_by(&host.name, true) => Some((
                TlsResultType::ValidationFailure,
                "MX host not in the MTA-STS policy".to_string(),
            )),
            _ if !t.verified => {
                let why = t
                    .verify_error
                    .clone()
                    .unwrap_or_else(|| "unverified".into());
                Some((TlsResultType::for_unverified(&why), why))
            }
            _ => None,
        },
        (TlsPolicyKind::Tlsa | TlsPolicyKind::NoPolicyFound, Some(_)) => None,
    };
    SessionTls { policy, failure }
}

/// The TLS failure of a connection attempt, as TLS reporting names it; `None` when the attempt
/// failed for another reason (refused, silent, a local configuration error).
fn tls_failure(
    e: &SessionError,
    sts: Option<&StsRoute>,
    dane: Option<&DaneRoute>,
    host: &str,
) -> Option<TlsFailure> {
    let SessionErrorKind::Tls(te) = e.kind() else {
        return None;
    };
    let mut policy = applied_policy(sts, dane, host);
    let result = match te {
        TlsError::MtaSts(inner) => {
            policy = applied_policy(sts, None, host);
            tls_result(inner)?
        }
        TlsError::Dane(inner) => match **inner {
            TlsError::NotOffered | TlsError::Refused(_) => TlsResultType::StarttlsNotSupported,
            _ => TlsResultType::ValidationFailure,
        },
        other => tls_result(other)?,
    };
    Some(TlsFailure { policy, result })
}

/// The RFC 8460 result type of a TLS error (`None`: our own configuration, not the peer's).
fn tls_result(e: &TlsError) -> Option<TlsResultType> {
    Some(match e {
        TlsError::NotOffered | TlsError::Refused(_) => TlsResultType::StarttlsNotSupported,
        TlsError::NotVerified(why) => TlsResultType::for_unverified(why),
        TlsError::Handshake(io) => match io.to_string() {
            s if s.contains("certificate") => TlsResultType::for_unverified(&s),
            _ => TlsResultType::ValidationFailure,
        },
        TlsError::NotAuthenticated(_) => TlsResultType::ValidationFailure,
        TlsError::MtaSts(inner) | TlsError::Dane(inner) => return tls_result(inner),
        TlsError::Config(_) => return None,
    })
}

/// Tries each planned target in order; the first that answers wins. `sts`: an `enforce` policy
/// of the domains is enforced (verified TLS or nothing); `dane`: hosts with usable TLSA records
/// are reached with DANE-authenticated TLS or not at all.
async fn connect_any(
    targets: &[Target],
    cfg: &ClientConfig,
    sts: Option<&StsRoute>,
    dane: Option<&DaneRoute>,
    source: Option<std::net::IpAddr>,
) -> Result<(Connection, HostKey, Vec<HostFailure>), ConnectFailure> {
    let enforce = sts.is_some_and(|r| r.mode == Mode::Enforce);
    let mut failed = Vec::new();
    let mut dane_failed = false;
    let mut last = Reply::new(
        451,
        Some(EnhancedStatus::new(4, 4, 1)),
        "no MX host is reachable now",
    );
    for t in targets {
        let attempt = match dane.and_then(|r| r.tlsa_for(&t.key.name)) {
            Some(tlsa) => {
                Connection::connect_dane_from(source, t.addr, &t.key.name, cfg, tlsa).await
            }
            None => Connection::connect_from(source, t.addr, &t.key.name, cfg, enforce).await,
        };
        match attempt {
            Ok(conn) => return Ok((conn, t.key.clone(), failed)),
            Err(e) => {
                dane_failed |= matches!(e.kind(), SessionErrorKind::Tls(TlsError::Dane(_)));
                last = e.synthetic_reply();
                tracing::debug!(host = %t.key.name, addr = %t.key.addr, probe = t.probe, error = %e, "connect failed");
                let kind = fail_kind(&e);
                failed.push(HostFailure {
                    key: t.key.clone(),
                    kind,
                    reason: last.text.clone(),
                    tls: tls_failure(&e, sts, dane, &t.key.name),
                });
                if matches!(kind, FailKind::Local(_)) {
                    // The next host would meet the same shortage: stop here.
                    break;
                }
            }
        }
    }
    Err(ConnectFailure {
        failed,
        reply: last,
        dane_failed,
        local: None,
    })
}

/// How a failed connection attempt counts: a 421 (or a rate-limit reply) before the first
/// transaction is the host saying "not so fast", not the host being down.
fn fail_kind(e: &SessionError) -> FailKind {
    if let SessionErrorKind::Rejected(r) = e.kind() {
        if classify(r) == DeferralKind::Throttle {
            return FailKind::Throttle;
        }
    }
    if let Some(shortage) = e.local_resource() {
        FailKind::Local(shortage)
    } else if e.is_tarpit() {
        FailKind::Tarpit
    } else if e.is_host_problem() {
        FailKind::Host
    } else {
        FailKind::Other
    }
}
