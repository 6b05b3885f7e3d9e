//! Fetching a policy: `GET https://mta-sts.<domain>/.well-known/mta-sts.txt` (RFC 8461 §3.3),
//! by reqwest (hyper underneath), the HTTP client already linked into the binary. It replaced a
//! hand-written HTTP/1.1 client: the framing (Content-Length, chunked, close-delimited), header
//! syntax and conflicting-framing checks are hyper's; the rules RFC 8461 adds are kept here.
//!
//! How the client is set up ([`Fetcher::new`]), once per server:
//! * the policy host is resolved by Herald's resolver ([`PolicyHostResolver`], the configured
//!   `[dns]` servers and hickory's cache), never by the system's getaddrinfo; at most
//!   [`MAX_ADDRS`] addresses are tried, in the resolver's order;
//! * TLS is rustls (ring) with exactly the trust anchors of [`crate::trust`] (`tls_ca_file`, else
//!   the system bundle): the certificate must verify for `mta-sts.<domain>`;
//! * HTTPS only, HTTP/1.1 only, no redirects followed, no proxy, no idle connection kept.
//!
//! Rules checked on the response ([`check_head`], [`read_body`]): status `200` only (a `3xx` is
//! an error, not followed); a Content-Type, when present, must be `text/plain`; a
//! Transfer-Encoding, when present, must be `chunked` alone; the body is read chunk by chunk and
//! refused as soon as it passes [`MAX_BODY_BYTES`] (a declared Content-Length above it is
//! refused before any body is read). The body must be UTF-8 and is parsed by [`super::policy`].
//!
//! Limits: the whole fetch — address lookup, connects, handshake, request, response — is bounded
//! by one timeout ([`Fetcher::fetch`]); the body by [`MAX_BODY_BYTES`]; the header block by
//! hyper's own bounds (at most 100 fields, a read buffer of about 400 KiB) — larger than the old
//! client's 16 KiB, still bounded, and reached only after the certificate verified.
//!
//! SECURITY: the server is hostile until its certificate verifies, and its response stays
//! untrusted input after that (a compromised or misconfigured web server is still one).

use super::policy::{self, Policy, PolicyError};
use crate::resolve::{fqdn, lookup_addrs};
use hickory_resolver::TokioResolver;
use reqwest::header::{HeaderMap, ACCEPT, CONTENT_TYPE, TRANSFER_ENCODING};
use std::error::Error as StdError;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Largest policy body accepted (RFC 8461 gives no limit; real policies are a few hundred bytes).
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// Most addresses of the policy host tried.
pub const MAX_ADDRS: usize = 4;

/// Why no policy could be fetched.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("no trust anchors for the policy host's certificate: {0}")]
    NoTrustAnchors(String),
    #[error("cannot set up the HTTPS client: {0}")]
    ClientSetup(String),
    #[error("{host} is not a valid host name")]
    BadName { host: String },
    #[error("cannot resolve {host}: {detail}")]
    Dns { host: String, detail: String },
    #[error("{host} has no address")]
    NoAddress { host: String },
    #[error("cannot connect to {host}: {detail}")]
    Connect { host: String, detail: String },
    #[error("TLS with {host} failed: {source}")]
    Tls { host: String, source: rustls::Error },
    #[error("fetch from {host} timed out after {secs:.1} s")]
    Timeout { host: String, secs: f64 },
    #[error(
        "response from {host}: status {code} (only 200 is accepted; redirects are not followed)"
    )]
    Status { host: String, code: u16 },
    #[error("response from {host}: content type {value:?} is not text/plain")]
    ContentType { host: String, value: String },
    #[error("response from {host}: unsupported transfer coding")]
    TransferCoding { host: String },
    #[error("response from {host}: body longer than {MAX_BODY_BYTES} octets")]
    BodyTooLarge { host: String },
    #[error("response from {host}: {detail}")]
    Response { host: String, detail: String },
    #[error("policy from {host} is not UTF-8 text")]
    NotText { host: String },
    #[error("policy from {host} is invalid: {source}")]
    Policy { host: String, source: PolicyError },
}

impl FetchError {
    /// True when the policy host answered over verified TLS but its response broke a rule
    /// (status, content type, framing, size, policy syntax): the host, not the path to it, is
    /// at fault.
    pub fn is_bad_response(&self) -> bool {
        matches!(
            self,
            FetchError::Status { .. }
                | FetchError::ContentType { .. }
                | FetchError::TransferCoding { .. }
                | FetchError::BodyTooLarge { .. }
                | FetchError::Response { .. }
                | FetchError::NotText { .. }
                | FetchError::Policy { .. }
        )
    }
}

/// Fetches policies over HTTPS. Built once; the client (and its rustls configuration) is shared.
pub(crate) struct Fetcher {
    /// Err: why no client could be built (every fetch then fails with it).
    client: Result<reqwest::Client, NoClient>,
    port: u16,
    timeout: Duration,
}

impl Fetcher {
    /// A fetcher resolving policy hosts with `resolver`, trusting `ca_file` (else the system
    /// bundle), connecting to `port`, each fetch bounded by `timeout`.
    pub fn new(
        resolver: TokioResolver,
        ca_file: Option<&Path>,
        port: u16,
        timeout: Duration,
    ) -> Fetcher {
        Fetcher {
            client: build_client(resolver, ca_file, port),
            port,
            timeout,
        }
    }

    /// The policy of `domain` (lower case, valid), fetched within the timeout.
    pub async fn fetch(&self, domain: &str) -> Result<Policy, FetchError> {
        let host = format!("mta-sts.{domain}");
        match tokio::time::timeout(self.timeout, self.fetch_inner(&host)).await {
            Ok(result) => result,
            Err(_elapsed) => Err(FetchError::Timeout {
                host,
                secs: self.timeout.as_secs_f64(),
            }),
        }
    }

    async fn fetch_inner(&self, host: &str) -> Result<Policy, FetchError> {
        let client = match &self.client {
            Ok(client) => client,
            Err(NoClient::NoTrustAnchors(why)) => {
                return Err(FetchError::NoTrustAnchors(why.clone()))
            }
            Err(NoClient::Setup(why)) => return Err(FetchError::ClientSetup(why.clone())),
        };
        let bad_name = || FetchError::BadName { host: host.into() };
        fqdn(host).ok_or_else(bad_name)?;
        let url = reqwest::Url::parse(&format!(
            "https://{host}:{}/.well-known/mta-sts.txt",
            self.port
        ))
        .map_err(|_| bad_name())?;
        let response = client
            .get(url)
            .header(ACCEPT, "text/plain")
            .send()
            .await
            .map_err(|e| request_error(host, &e))?;
        check_head(host, response.status().as_u16(), response.headers())?;
        if response
            .content_length()
            .is_some_and(|n| n > MAX_BODY_BYTES as u64)
        {
            return Err(FetchError::BodyTooLarge { host: host.into() });
        }
        let body = read_body(host, response).await?;
        let text =
            String::from_utf8(body).map_err(|_| FetchError::NotText { host: host.into() })?;
        policy::parse(&text).map_err(|source| FetchError::Policy {
            host: host.into(),
            source,
        })
    }
}

/// The client every fetch shares. Err names why it could not be built.
fn build_client(
    resolver: TokioResolver,
    ca_file: Option<&Path>,
    port: u16,
) -> Result<reqwest::Client, NoClient> {
    let tls = crate::trust::verifying_config(ca_file).map_err(NoClient::NoTrustAnchors)?;
    reqwest::Client::builder()
        // A rustls::ClientConfig by value: reqwest downcasts it (an Arc would be ignored).
        .use_preconfigured_tls(rustls::ClientConfig::clone(&tls))
        .dns_resolver(Arc::new(PolicyHostResolver { resolver, port }))
        .https_only(true)
        .http1_only()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .pool_max_idle_per_host(0)
        // No reqwest timeout: `Fetcher::fetch` bounds the whole fetch with one tokio timeout,
        // so that running out of time is always `FetchError::Timeout`.
        .user_agent("herald")
        .build()
        .map_err(|e| NoClient::Setup(chain(&e)))
}

/// Why [`build_client`] failed, kept to be reported by every fetch.
#[derive(Debug)]
enum NoClient {
    NoTrustAnchors(String),
    Setup(String),
}

/// Status `200` only (RFC 8461 §3.3: redirects are not followed), `text/plain` when a type is
/// given, and no transfer coding but `chunked` (a policy server has no reason for more).
fn check_head(host: &str, status: u16, headers: &HeaderMap) -> Result<(), FetchError> {
    if status != 200 {
        return Err(FetchError::Status {
            host: host.into(),
            code: status,
        });
    }
    if let Some(value) = headers.get(CONTENT_TYPE) {
        let text = value.to_str().unwrap_or("");
        let media = text
            .split(';')
            .next()
            .unwrap_or("")
            .trim_matches([' ', '\t']);
        if !media.eq_ignore_ascii_case("text/plain") {
            return Err(FetchError::ContentType {
                host: host.into(),
                value: text.chars().take(64).collect(),
            });
        }
    }
    for value in headers.get_all(TRANSFER_ENCODING) {
        if !value
            .to_str()
            .is_ok_and(|v| v.trim().eq_ignore_ascii_case("chunked"))
        {
            return Err(FetchError::TransferCoding { host: host.into() });
        }
    }
    Ok(())
}

/// Reads the body chunk by chunk, refusing it as soon as it passes [`MAX_BODY_BYTES`].
async fn read_body(host: &str, mut response: reqwest::Response) -> Result<Vec<u8>, FetchError> {
    let mut body = Vec::with_capacity(4096);
    loop {
        let chunk = response.chunk().await.map_err(|e| FetchError::Response {
            host: host.into(),
            detail: chain(&e),
        })?;
        let Some(chunk) = chunk else {
            return Ok(body);
        };
        if body.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(FetchError::BodyTooLarge { host: host.into() });
        }
        body.extend_from_slice(&chunk);
    }
}

/// Types a failed request by what is inside reqwest's error (downcasts, never its text): our
/// resolver's failure, rustls' verdict, or a connection or protocol failure.
fn request_error(host: &str, e: &reqwest::Error) -> FetchError {
    if let Some(lookup) = find::<HostLookupError>(e) {
        return match lookup {
            HostLookupError::BadName => FetchError::BadName { host: host.into() },
            HostLookupError::NoAddress => FetchError::NoAddress { host: host.into() },
            HostLookupError::Dns(detail) => FetchError::Dns {
                host: host.into(),
                detail: detail.clone(),
            },
        };
    }
    if let Some(tls) = find::<rustls::Error>(e) {
        return FetchError::Tls {
            host: host.into(),
            source: tls.clone(),
        };
    }
    let detail = chain(e);
    if e.is_connect() {
        FetchError::Connect {
            host: host.into(),
            detail,
        }
    } else {
        FetchError::Response {
            host: host.into(),
            detail,
        }
    }
}

/// The first error of type `T` in `e`'s source chain. `io::Error` hides the error it wraps from
/// `source()` (it returns the wrapped error's own source), so each one is opened explicitly.
fn find<'a, T: StdError + 'static>(e: &'a (dyn StdError + 'static)) -> Option<&'a T> {
    let mut next: Option<&'a (dyn StdError + 'static)> = Some(e);
    while let Some(err) = next {
        if let Some(found) = err.downcast_ref::<T>() {
            return Some(found);
        }
        let inner = err
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .map(|inner| inner as &(dyn StdError + 'static));
        if let Some(found) = inner.and_then(|i| i.downcast_ref::<T>()) {
            return Some(found);
        }
        next = inner.or_else(|| err.source());
    }
    None
}

/// An error and its sources, for the log (reqwest's own text omits the cause).
fn chain(e: &(dyn StdError + 'static)) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(err) = next {
        text.push_str(": ");
        text.push_str(&err.to_string());
        next = err.source();
    }
    text
}

/// Why the policy host's addresses could not be had (carried through reqwest to
/// [`request_error`]).
#[derive(Debug, thiserror::Error)]
enum HostLookupError {
    #[error("not a valid host name")]
    BadName,
    #[error("no address")]
    NoAddress,
    #[error("{0}")]
    Dns(String),
}

/// reqwest's DNS for the policy host: Herald's resolver, so the configured `[dns]` servers (the
/// simulated Internet's in tests) and hickory's cache answer, as they do for MX hosts.
struct PolicyHostResolver {
    resolver: TokioResolver,
    port: u16,
}

impl reqwest::dns::Resolve for PolicyHostResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let resolver = self.resolver.clone();
        let port = self.port;
        let host = name.as_str().to_string();
        Box::pin(async move {
            let name = fqdn(&host).ok_or(HostLookupError::BadName)?;
            let ips = lookup_addrs(&resolver, name)
                .await
                .map_err(|f| HostLookupError::Dns(f.describe()))?;
            if ips.is_empty() {
                return Err(HostLookupError::NoAddress.into());
            }
            let addrs: Vec<SocketAddr> = ips
                .into_iter()
                .take(MAX_ADDRS)
                .map(|ip| SocketAddr::new(ip, port))
                .collect();
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}
