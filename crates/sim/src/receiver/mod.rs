//! Scripted SMTP receivers: one listener per MX host, each on its own loopback address and the
//! world's SMTP port, behaving as its profile says (see [`crate::Profile`]).
//!
//! Profiles that shape the connection are handled here: `refused` binds nothing, so the kernel
//! refuses connections; `hung` accepts and holds connections without a byte (up to
//! [`MAX_HUNG_CONNECTIONS`], then stops accepting so further connects wait in the backlog).
//! Everything else is per command, in the `session` module.
//!
//! `rate_limited` hosts with the same budget name share one [`RateBucket`], made here at start:
//! the provider's limit holds over all its MX hosts and connections.
//!
//! Bounds: at most `max_sessions_per_host` sessions per host, or a `tarpit`'s own
//! `max_sessions` when lower (more get `421 4.3.2` at once);
//! sessions of a host live in a `JoinSet` owned by its listener task, so stopping the listener
//! stops them all.
//!
//! SECURITY: listeners bind only 127.0.0.0/8 addresses other than 127.0.0.1 (checked by the
//! config and again here).

mod data;
mod reply;
mod session;
mod tls;

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::debug;

pub use session::{MAX_COMMAND_LINE, MAX_ERRORS};

use crate::config::{HostSpec, Profile, ReceiverSettings};
use crate::{ensure_loopback, Recorder, SimError};
use tls::TlsSetup;

/// Most connections a hung host holds open before it stops accepting.
pub const MAX_HUNG_CONNECTIONS: usize = 256;
/// Attempts at finding a port free on every receiver address when asked for port 0.
const PORT_ATTEMPTS: usize = 16;

/// Greylist table: (sender, lower-cased recipient) → first attempt.
type Greylist = HashMap<(Box<str>, Box<str>), Instant>;
/// Recipients seen per host by `drop_first_attempt`; when full the set is cleared (those
/// recipients are dropped once more — harmless, senders retry).
const MAX_SEEN_RECIPIENTS: usize = 1_000_000;

/// A token bucket shared by every host of one rate budget: `rate` tokens a second, at most a
/// second's worth stored.
pub(crate) struct RateBucket {
    rate: f64,
    /// Tokens and when they were counted. A std mutex: one arithmetic step under it.
    state: Mutex<(f64, Instant)>,
}

impl RateBucket {
    fn new(per_sec: u32) -> RateBucket {
        let rate = f64::from(per_sec.max(1));
        RateBucket {
            rate,
            state: Mutex::new((rate, Instant::now())),
        }
    }

    /// Takes one token; false when the budget is spent.
    pub(crate) fn take(&self) -> bool {
        let now = Instant::now();
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let elapsed = now.saturating_duration_since(s.1).as_secs_f64();
        s.0 = (s.0 + elapsed * self.rate).min(self.rate);
        s.1 = now;
        if s.0 < 1.0 {
            return false;
        }
        s.0 -= 1.0;
        true
    }
}

/// What all sessions of one host share.
pub(crate) struct HostState {
    spec: HostSpec,
    name: Arc<str>,
    settings: ReceiverSettings,
    recorder: Recorder,
    /// The host's STARTTLS acceptor, when it offers STARTTLS.
    tls: Option<tokio_rustls::TlsAcceptor>,
    banner: String,
    helo: String,
    ehlo_plain: String,
    ehlo_tls: String,
    /// A std mutex: held only for one map lookup, never across an `.await`.
    greylist: Mutex<Greylist>,
    /// Start of the current one-minute window and copies accepted in it (throttle).
    minute: Mutex<(Instant, u32)>,
    /// Messages seen, for MIME sampling.
    mime_counter: AtomicU64,
    /// The shared rate budget (`rate_limited`).
    rate: Option<Arc<RateBucket>>,
    /// Recipients whose first attempt was dropped (`drop_first_attempt`). A std mutex: one
    /// set operation under it.
    seen: Mutex<std::collections::HashSet<Box<str>>>,
    sessions: Arc<Semaphore>,
}

impl HostState {
    fn new(
        spec: HostSpec,
        settings: ReceiverSettings,
        recorder: Recorder,
        tls: Option<tokio_rustls::TlsAcceptor>,
        rate: Option<Arc<RateBucket>>,
    ) -> HostState {
        let name = spec.name.clone();
        let ehlo = |starttls: bool| {
            let mut s = format!(
                "250-{name}\r\n250-PIPELINING\r\n250-8BITMIME\r\n250-SIZE {}\r\n",
                settings.max_message_bytes
            );
            if starttls {
                s.push_str("250-STARTTLS\r\n");
            }
            if spec.extensions.smtputf8 {
                s.push_str("250-SMTPUTF8\r\n");
            }
            if spec.extensions.dsn {
                s.push_str("250-DSN\r\n");
            }
            s.push_str("250 ENHANCEDSTATUSCODES\r\n");
            s
        };
        HostState {
            banner: format!("220 {name} ESMTP herald-sim\r\n"),
            helo: format!("250 {name}\r\n"),
            ehlo_plain: ehlo(tls.is_some()),
            ehlo_tls: ehlo(false),
            name: Arc::from(name.as_str()),
            sessions: Arc::new(Semaphore::new(max_sessions(&spec.profile, &settings))),
            spec,
            settings,
            recorder,
            tls,
            greylist: Mutex::new(HashMap::new()),
            minute: Mutex::new((Instant::now(), 0)),
            mime_counter: AtomicU64::new(0),
            rate,
            seen: Mutex::new(std::collections::HashSet::new()),
        }
    }

    /// `drop_first_attempt`: true when any of `rcpts` is seen for the first time (all are
    /// remembered from now on).
    fn first_attempt(&self, rcpts: &[Box<str>]) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.len() + rcpts.len() > MAX_SEEN_RECIPIENTS {
            seen.clear();
        }
        let mut first = false;
        for r in rcpts {
            first |= seen.insert(r.to_ascii_lowercase().into_boxed_str());
        }
        first
    }

    fn idle_timeout(&self) -> Duration {
        Duration::from_secs(self.settings.idle_timeout_secs)
    }

    fn lock_greylist(&self) -> MutexGuard<'_, Greylist> {
        self.greylist.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes one copy's slot in the current minute; false when the minute's quota is used.
    fn take_minute_slot(&self, max: u32) -> bool {
        let now = Instant::now();
        let mut m = self.minute.lock().unwrap_or_else(|p| p.into_inner());
        if now.duration_since(m.0) >= Duration::from_secs(60) {
            *m = (now, 0);
        }
        if m.1 >= max {
            return false;
        }
        m.1 += 1;
        true
    }
}

/// Sessions a host serves at once: the world's limit, or a tarpit's own when lower.
fn max_sessions(profile: &Profile, settings: &ReceiverSettings) -> usize {
    match profile {
        Profile::Tarpit {
            max_sessions: Some(n),
            ..
        } => (*n as usize).clamp(1, settings.max_sessions_per_host.max(1)),
        _ => settings.max_sessions_per_host,
    }
}

/// The running receivers of a world.
pub(crate) struct Receivers {
    pub port: u16,
    pub certificate_der: Option<Vec<u8>>,
    /// The certificate's SubjectPublicKeyInfo, for TLSA records computed at start.
    pub spki_der: Option<Vec<u8>>,
    /// The CA certificate (PEM) when the world's CA issued the receivers' certificates.
    pub ca_pem: Option<String>,
    tasks: JoinSet<()>,
}

impl Receivers {
    /// Binds every non-refused host on `port` (0: one port free on all of them) and starts
    /// serving.
    pub async fn start(
        hosts: &[HostSpec],
        port: u16,
        settings: &ReceiverSettings,
        recorder: &Recorder,
    ) -> Result<Receivers, SimError> {
        for h in hosts {
            ensure_loopback(IpAddr::V4(h.addr))?;
        }
        let tls_names: Vec<String> = hosts
            .iter()
            .filter(|h| h.starttls)
            .map(|h| h.name.clone())
            .collect();
        let tls = match tls_names.is_empty() {
            true => None,
            false => Some(TlsSetup::new(tls_names, settings.tls_ca)?),
        };
        let (port, listeners) = bind_all(hosts, port).await?;
        let mut tasks = JoinSet::new();
        let mut buckets: HashMap<String, Arc<RateBucket>> = HashMap::new();
        for (spec, listener) in listeners {
            let host_tls = match (&tls, spec.starttls) {
                (Some(t), true) => t.acceptor(&spec.name),
                _ => None,
            };
            let hung = spec.profile == Profile::Hung;
            let rate = match &spec.profile {
                Profile::RateLimited {
                    budget,
                    msgs_per_sec,
                    ..
                } => Some(
                    buckets
                        .entry(budget.clone())
                        .or_insert_with(|| Arc::new(RateBucket::new(*msgs_per_sec)))
                        .clone(),
                ),
                _ => None,
            };
            let state = HostState::new(spec, settings.clone(), recorder.clone(), host_tls, rate);
            let state = Arc::new(state);
            if hung {
                tasks.spawn(hold_connections(listener, state));
            } else {
                tasks.spawn(accept_loop(listener, state));
            }
        }
        let (certificate_der, spki_der, ca_pem) = match tls {
            Some(t) => (Some(t.certificate_der), Some(t.spki_der), t.ca_pem),
            None => (None, None, None),
        };
        Ok(Receivers {
            port,
            certificate_der,
            spki_der,
            ca_pem,
            tasks,
        })
    }

    /// Stops every listener and session and waits until their sockets are closed.
    pub async fn shutdown(mut self) {
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
    }
}

/// Binds a listener for each host that listens. With `port` 0 the first bind picks a port and
/// the rest follow; if that port is taken on another address, everything is retried.
async fn bind_all(
    hosts: &[HostSpec],
    port: u16,
) -> Result<(u16, Vec<(HostSpec, TcpListener)>), SimError> {
    let listening: Vec<&HostSpec> = hosts
        .iter()
        .filter(|h| h.profile != Profile::Refused)
        .collect();
    let mut last_err = None;
    for _ in 0..PORT_ATTEMPTS {
        match try_bind_all(hosts, &listening, port).await {
            Ok(bound) => return Ok(bound),
            Err(e) if port == 0 => last_err = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last_err.unwrap_or_else(|| SimError::Bind {
        what: "SMTP receivers",
        addr: SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
        source: std::io::Error::other("no port free on every receiver address"),
    }))
}

async fn try_bind_all(
    hosts: &[HostSpec],
    listening: &[&HostSpec],
    port: u16,
) -> Result<(u16, Vec<(HostSpec, TcpListener)>), SimError> {
    let mut port = port;
    if port == 0 && listening.is_empty() {
        // Nothing listens, but the world still needs a port number to publish: borrow one
        // from the kernel on a refused host's own address.
        if let Some(h) = hosts.first() {
            port = bind_one(h.addr, 0)
                .await?
                .local_addr()
                .map_or(0, |a| a.port());
        }
    }
    let mut out = Vec::with_capacity(listening.len());
    for h in listening {
        let listener = bind_one(h.addr, port).await?;
        if port == 0 {
            port = listener.local_addr().map_or(0, |a| a.port());
        }
        out.push(((*h).clone(), listener));
    }
    Ok((port, out))
}

async fn bind_one(addr: Ipv4Addr, port: u16) -> Result<TcpListener, SimError> {
    let sa = SocketAddr::from((addr, port));
    TcpListener::bind(sa)
        .await
        .map_err(|source| SimError::Bind {
            what: "SMTP receiver",
            addr: sa,
            source,
        })
}

async fn accept_loop(listener: TcpListener, host: Arc<HostState>) {
    let mut sessions = JoinSet::new();
    loop {
        while sessions.try_join_next().is_some() {}
        let (stream, peer) = match listener.accept().await {
            Ok((s, a)) => (s, a.ip()),
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                debug!(host = %host.name, error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        host.recorder.count(&host.name, |c| c.connections += 1);
        // Replies are batched by the session; Nagle would only add latency to each batch.
        let _ = stream.set_nodelay(true);
        // Open connections per client address, until the session's task ends.
        let open = crate::recorder::PeerGuard::new(&host.recorder, peer);
        match host.sessions.clone().try_acquire_owned() {
            Ok(permit) => {
                let host = host.clone();
                sessions.spawn(async move {
                    session::run(host, stream, open).await;
                    drop(permit);
                });
            }
            Err(_) => {
                host.recorder.count(&host.name, |c| c.busy += 1);
                sessions.spawn(async move {
                    turn_away(stream).await;
                    drop(open);
                });
            }
        }
    }
}

async fn turn_away(mut stream: TcpStream) {
    let _ = stream.write_all(reply::BUSY.line.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// The hung profile: accept, count, and hold; never read or write.
async fn hold_connections(listener: TcpListener, host: Arc<HostState>) {
    let mut held = Vec::new();
    while held.len() < MAX_HUNG_CONNECTIONS {
        match listener.accept().await {
            Ok((stream, _)) => {
                host.recorder.count(&host.name, |c| c.connections += 1);
                held.push(stream);
            }
            Err(e) => {
                debug!(host = %host.name, error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    // Full: stop accepting; new connections wait in the backlog, as with a host that is down.
    std::future::pending::<()>().await;
}
