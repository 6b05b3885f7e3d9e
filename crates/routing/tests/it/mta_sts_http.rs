//! The MTA-STS policy fetch against hostile HTTPS responses, byte for byte, on 127.0.0.1: a
//! TLS server (certificate from a test CA the fetch trusts) that answers every request with a
//! scripted response — written in steps with pauses, ended with or without a TLS close_notify —
//! and the simulator's DNS naming the policy host. Every bound and rule of RFC 8461 §3.3 the
//! fetch enforces is exercised here: status 200 only, no redirect followed, `text/plain` only,
//! body size (declared, chunked, close-delimited), framing, the header block, and the timeout
//! on a slow body. (These were the hand-written HTTP/1.1 client's unit tests; the client is now
//! reqwest, so they run against the real thing.)

use herald_routing::mta_sts::{FetchError, LookupProblem, PolicySource};
use herald_routing::{MtaSts, MtaStsConfig, MxResolver, ResolverConfig, StsLookup};
use herald_sim::pki::TestCa;
use herald_sim::{DnsServer, Zone};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

const DOMAIN: &str = "raw.test";
const POLICY_HOST: &str = "mta-sts.raw.test";
const ENFORCE: &str = "version: STSv1\r\nmode: enforce\r\nmx: *.raw.test\r\nmax_age: 86400\r\n";

/// A fetch timeout no well-formed answer on loopback needs (an unoptimized build parsing 64 Ki
/// one-octet chunks on a loaded machine takes a while): only the slow-body test runs out of time.
const GENEROUS: Duration = Duration::from_secs(10);

/// One write of the scripted response, after a pause.
#[derive(Clone)]
struct Step {
    pause: Duration,
    bytes: Vec<u8>,
}

/// How the server ends the connection after the script.
#[derive(Clone, Copy, PartialEq)]
enum End {
    /// TLS close_notify, then close: a clean end of a close-delimited body.
    CloseNotify,
    /// Drop the TCP connection without close_notify: the body may have been cut short.
    Cut,
}

/// A DNS server naming the policy host, a scripted TLS server, and the CA file to trust.
struct Net {
    _dns: DnsServer,
    resolver: MxResolver,
    ca: TestCa,
    ca_file: PathBuf,
    _dir: tempfile::TempDir,
}

impl Net {
    async fn start() -> Net {
        let ca = TestCa::new("Herald raw test CA").unwrap();
        let mut zone = Zone::new();
        zone.add_a(POLICY_HOST, Ipv4Addr::LOCALHOST);
        zone.add_txt(&format!("_mta-sts.{DOMAIN}"), "v=STSv1; id=1");
        let dns = DnsServer::start(SocketAddr::from(([127, 0, 0, 1], 0)), zone)
            .await
            .unwrap();
        let resolver = MxResolver::new(&ResolverConfig {
            nameservers: vec![dns.local_addr()],
            timeout_ms: 500,
            attempts: 1,
        })
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, ca.pem()).unwrap();
        Net {
            _dns: dns,
            resolver,
            ca,
            ca_file,
            _dir: dir,
        }
    }

    /// Serves `script` to every connection; returns the port and the count of requests read.
    async fn serve(&self, script: Vec<Step>, end: End) -> (u16, Arc<AtomicUsize>) {
        let cert = self.ca.issue(&[POLICY_HOST.to_string()]).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(cert.chain, cert.key)
            .unwrap();
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(AtomicUsize::new(0));
        let counter = requests.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, script, counter) =
                    (acceptor.clone(), script.clone(), counter.clone());
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let mut request = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match tls.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    }
                    counter.fetch_add(1, Ordering::SeqCst);
                    for step in script {
                        tokio::time::sleep(step.pause).await;
                        if tls.write_all(&step.bytes).await.is_err() {
                            return;
                        }
                        let _ = tls.flush().await;
                    }
                    if end == End::CloseNotify {
                        let _ = tls.shutdown().await;
                    }
                });
            }
        });
        (port, requests)
    }

    /// One lookup against a server answering `bytes` at once (then close_notify).
    async fn lookup_raw(&self, bytes: &[u8]) -> StsLookup {
        self.lookup_script(vec![now(bytes)], End::CloseNotify, GENEROUS)
            .await
            .0
    }

    async fn lookup_script(
        &self,
        script: Vec<Step>,
        end: End,
        fetch_timeout: Duration,
    ) -> (StsLookup, usize, Duration) {
        let (port, requests) = self.serve(script, end).await;
        let cfg = MtaStsConfig {
            https_port: port,
            fetch_timeout,
            ..MtaStsConfig::default()
        };
        let sts = MtaSts::new(&cfg, &self.resolver, Some(&self.ca_file), None);
        let started = Instant::now();
        let lookup = sts.lookup(DOMAIN).await;
        (lookup, requests.load(Ordering::SeqCst), started.elapsed())
    }
}

fn now(bytes: &[u8]) -> Step {
    Step {
        pause: Duration::ZERO,
        bytes: bytes.to_vec(),
    }
}

fn fetch_error(l: &StsLookup) -> &FetchError {
    assert_eq!(l.source, PolicySource::None, "{:?}", l.problem);
    match &l.problem {
        Some(LookupProblem::Fetch(e)) => e,
        other => panic!("expected a fetch problem, got {other:?}"),
    }
}

fn with_length(head: &str, body: &str) -> Vec<u8> {
    format!("{head}Content-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
}

#[tokio::test]
async fn content_length_and_a_charset_are_read_and_a_short_body_is_refused() {
    let net = Net::start().await;
    let ok = with_length(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\n",
        ENFORCE,
    );
    let l = net.lookup_raw(&ok).await;
    assert_eq!(l.source, PolicySource::Fetched, "{:?}", l.problem);
    // One octet short of its Content-Length, then closed: truncated, never a policy.
    let l = net.lookup_raw(&ok[..ok.len() - 1]).await;
    let e = fetch_error(&l);
    assert!(matches!(e, FetchError::Response { .. }), "{e}");
}

#[tokio::test]
async fn chunked_bodies_with_extensions_and_trailers_are_read() {
    let net = Net::start().await;
    let (a, b) = ENFORCE.split_at(10);
    let r = format!(
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{:x};x=y\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\nX-T: 1\r\n\r\n",
        a.len(),
        b.len()
    );
    let l = net.lookup_raw(r.as_bytes()).await;
    assert_eq!(l.source, PolicySource::Fetched, "{:?}", l.problem);
}

#[tokio::test]
async fn a_close_delimited_body_needs_a_clean_end() {
    let net = Net::start().await;
    let r = format!("HTTP/1.0 200 OK\r\n\r\n{ENFORCE}");
    let (l, _, _) = net
        .lookup_script(vec![now(r.as_bytes())], End::CloseNotify, GENEROUS)
        .await;
    assert_eq!(l.source, PolicySource::Fetched, "{:?}", l.problem);
    // Without close_notify the body may have been cut by an attacker on the path.
    let (l, _, _) = net
        .lookup_script(vec![now(r.as_bytes())], End::Cut, GENEROUS)
        .await;
    let e = fetch_error(&l);
    assert!(e.is_bad_response(), "{e}");
}

#[tokio::test]
async fn other_statuses_are_refused_and_redirects_not_followed() {
    let net = Net::start().await;
    for (r, code) in [
        (
            "HTTP/1.1 301 Moved\r\nLocation: /.well-known/mta-sts.txt\r\nContent-Length: 0\r\n\r\n",
            301,
        ),
        (
            "HTTP/1.1 302 Found\r\nLocation: https://mta-sts.raw.test/.well-known/mta-sts.txt\r\nContent-Length: 0\r\n\r\n",
            302,
        ),
        ("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", 404),
        ("HTTP/1.1 204 No Content\r\n\r\n", 204),
    ] {
        let (l, requests, _) = net
            .lookup_script(vec![now(r.as_bytes())], End::CloseNotify, GENEROUS)
            .await;
        let e = fetch_error(&l);
        assert!(
            matches!(e, FetchError::Status { code: c, .. } if *c == code),
            "{r}: {e}"
        );
        assert_eq!(requests, 1, "{r}: a redirect was followed");
    }
    for garbage in ["HTTP/2 200\r\n\r\n", "garbage\r\n\r\n"] {
        let l = net.lookup_raw(garbage.as_bytes()).await;
        let e = fetch_error(&l);
        assert!(matches!(e, FetchError::Response { .. }), "{garbage}: {e}");
    }
}

#[tokio::test]
async fn a_wrong_content_type_is_refused() {
    let net = Net::start().await;
    for media in ["text/html", "application/octet-stream", "text/plainx"] {
        let r = with_length(
            &format!("HTTP/1.1 200 OK\r\nContent-Type: {media}\r\n"),
            ENFORCE,
        );
        let l = net.lookup_raw(&r).await;
        let e = fetch_error(&l);
        assert!(
            matches!(e, FetchError::ContentType { value, .. } if value == media),
            "{media}: {e}"
        );
    }
}

#[tokio::test]
async fn ambiguous_framing_is_refused() {
    let net = Net::start().await;
    let cases: [&[u8]; 6] = [
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\n folded: x\r\n\r\n",
    ];
    for r in cases {
        let l = net.lookup_raw(r).await;
        let e = fetch_error(&l);
        assert!(e.is_bad_response(), "{}: {e}", String::from_utf8_lossy(r));
    }
    let l = net
        .lookup_raw(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n")
        .await;
    assert!(matches!(fetch_error(&l), FetchError::TransferCoding { .. }));
}

#[tokio::test]
async fn oversized_bodies_are_refused_however_they_are_framed() {
    let net = Net::start().await;
    let max = herald_routing::mta_sts::fetch::MAX_BODY_BYTES;
    // Declared too long: refused before any body is read.
    let declared = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", max + 1);
    // Close-delimited and longer than the limit.
    let mut close = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
    close.resize(close.len() + max + 1, b'a');
    // Chunked: one huge chunk, and many one-octet chunks (the limit counts the body, not
    // the chunks).
    let mut huge = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    huge.extend_from_slice(format!("{:x}\r\n", max + 1).as_bytes());
    huge.resize(huge.len() + max + 1, b'a');
    huge.extend_from_slice(b"\r\n0\r\n\r\n");
    let mut tiny = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..=max {
        tiny.extend_from_slice(b"1\r\na\r\n");
    }
    tiny.extend_from_slice(b"0\r\n\r\n");
    for (what, r) in [
        ("declared", declared.into_bytes()),
        ("close-delimited", close),
        ("one chunk", huge),
        ("tiny chunks", tiny),
    ] {
        let l = net.lookup_raw(&r).await;
        let e = fetch_error(&l);
        assert!(matches!(e, FetchError::BodyTooLarge { .. }), "{what}: {e}");
    }
}

#[tokio::test]
async fn the_header_block_is_bounded() {
    let net = Net::start().await;
    let mut many = b"HTTP/1.1 200 OK\r\n".to_vec();
    for i in 0..=100 {
        many.extend_from_slice(format!("X-{i}: y\r\n").as_bytes());
    }
    many.extend_from_slice(b"Content-Length: 0\r\n\r\n");
    let mut huge = b"HTTP/1.1 200 OK\r\nX-Pad: ".to_vec();
    huge.resize(huge.len() + 1024 * 1024, b'a');
    huge.extend_from_slice(b"\r\nContent-Length: 0\r\n\r\n");
    for (what, r) in [("101 fields", many), ("1 MiB header", huge)] {
        let l = net.lookup_raw(&r).await;
        let e = fetch_error(&l);
        assert!(matches!(e, FetchError::Response { .. }), "{what}: {e}");
    }
}

#[tokio::test]
async fn a_slow_body_is_cut_off_by_the_fetch_timeout() {
    let net = Net::start().await;
    // The head at once, promising a policy; the body an octet every 100 ms, never finished in
    // the 800 ms the fetch may take.
    let mut script = vec![now(format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n",
        ENFORCE.len()
    )
    .as_bytes())];
    script.extend(ENFORCE.bytes().map(|b| Step {
        pause: Duration::from_millis(100),
        bytes: vec![b],
    }));
    let (l, _, took) = net
        .lookup_script(script, End::CloseNotify, Duration::from_millis(800))
        .await;
    let e = fetch_error(&l);
    assert!(matches!(e, FetchError::Timeout { .. }), "{e}");
    assert!(took < Duration::from_secs(2), "took {took:?}");
}
