//! Inbound TLS end to end over real sockets: STARTTLS on the SMTP listener (RFC 3207) with a
//! certificate generated here, the CVE-2011-0411 defence (plaintext pipelined after STARTTLS is
//! ignored), and the implicit-TLS submission listener (RFC 8314). Posts sent over TLS are
//! spooled and fanned out to the simulated world.

use crate::support;

use herald_sim::{Profile, World};
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::json;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use support::*;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

const LIST: &str = "tls@lists.test";
const MEMBERS: usize = 6;
const DOMAINS: usize = 2;
const HOST: &str = "herald.test";

/// Writes a self-signed certificate for `herald.test` into `dir`; returns its DER form.
fn write_cert(dir: &Path) -> CertificateDer<'static> {
    let key = rcgen::generate_simple_self_signed(vec![HOST.to_string()]).expect("rcgen");
    std::fs::write(dir.join("cert.pem"), key.cert.pem()).expect("write cert");
    std::fs::write(dir.join("key.pem"), key.key_pair.serialize_pem()).expect("write key");
    key.cert.der().clone()
}

fn connector(cert: &CertificateDer<'static>) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.clone()).expect("trust the test cert");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    TlsConnector::from(Arc::new(config))
}

/// A line-oriented SMTP client over any stream.
struct Client<S> {
    io: BufReader<S>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Client<S> {
    fn new(stream: S) -> Client<S> {
        Client {
            io: BufReader::new(stream),
        }
    }

    /// Reads one reply; returns all its lines joined with `\n`.
    async fn reply(&mut self) -> String {
        let mut all = String::new();
        loop {
            let mut line = String::new();
            let n = tokio::time::timeout(Duration::from_secs(10), self.io.read_line(&mut line))
                .await
                .expect("reply within 10 s")
                .expect("read");
            if n == 0 {
                all.push_str("<closed>");
                return all;
            }
            all.push_str(line.trim_end());
            if line.as_bytes().get(3) != Some(&b'-') {
                return all;
            }
            all.push('\n');
        }
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.io.get_mut().write_all(bytes).await.expect("write");
        self.io.get_mut().flush().await.expect("flush");
    }

    async fn cmd(&mut self, line: &str) -> String {
        self.send(format!("{line}\r\n").as_bytes()).await;
        self.reply().await
    }

    /// MAIL, RCPT, DATA and the message; returns the final reply.
    async fn post(&mut self, subject: &str) -> String {
        assert!(self
            .cmd("MAIL FROM:<poster@outside.test>")
            .await
            .starts_with("250"));
        let rcpt = self.cmd(&format!("RCPT TO:<{LIST}>")).await;
        assert!(rcpt.starts_with("250"), "{rcpt}");
        assert!(self.cmd("DATA").await.starts_with("354"));
        let msg = format!(
            "From: Poster <poster@outside.test>\r\nTo: {LIST}\r\nSubject: {subject}\r\n\
             Message-ID: <{}@outside.test>\r\n\r\nSent over TLS.\r\n.\r\n",
            subject.replace(' ', "-")
        );
        self.send(msg.as_bytes()).await;
        self.reply().await
    }
}

async fn starttls(
    addr: SocketAddr,
    cert: &CertificateDer<'static>,
    after_starttls: &[u8],
) -> Client<tokio_rustls::client::TlsStream<TcpStream>> {
    let mut plain = Client::new(TcpStream::connect(addr).await.expect("connect"));
    assert!(plain.reply().await.starts_with("220"));
    let ehlo = plain.cmd("EHLO client.outside.test").await;
    assert!(ehlo.lines().any(|l| l == "250 STARTTLS"), "{ehlo}");
    // STARTTLS with (possibly) injected plaintext in the same write.
    let mut line = b"STARTTLS\r\n".to_vec();
    line.extend_from_slice(after_starttls);
    plain.send(&line).await;
    let ready = plain.reply().await;
    assert_eq!(ready, "220 2.0.0 Ready to start TLS");
    let tcp = plain.io.into_inner();
    let name = ServerName::try_from(HOST).expect("name");
    let tls = connector(cert)
        .connect(name, tcp)
        .await
        .expect("TLS handshake with the trusted test certificate");
    let (_, conn) = tls.get_ref();
    assert!(conn.protocol_version().is_some());
    Client::new(tls)
}

async fn setup(
    submissions: bool,
) -> (
    World,
    TestServer,
    tempfile::TempDir,
    CertificateDer<'static>,
) {
    let world = World::start(world_config(&vec![Profile::Normal; DOMAINS], true))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let cert = write_cert(dir.path());
    let mut config = server_config(&world, dir.path().join("data"));
    config.tls.cert_file = Some(dir.path().join("cert.pem"));
    config.tls.key_file = Some(dir.path().join("key.pem"));
    if submissions {
        // A free port: bind, note it, release it for the server.
        let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("probe");
        config.listen.submissions = Some(probe.local_addr().expect("addr"));
    }
    let server = TestServer::start(config).await;
    create_list(&server.api, LIST, json!({"posting_policy": "anyone"})).await;
    let (status, report) = http_bytes(
        &format!("{}/api/v1/lists/{LIST}/import", server.api),
        members_csv(MEMBERS, DOMAINS).into_bytes(),
    )
    .await;
    assert_eq!(status, 200, "{report}");
    (world, server, dir, cert)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starttls_session_posts_and_fans_out() {
    let (world, server, _dir, cert) = setup(false).await;
    let mut tls = starttls(server.smtp, &cert, b"").await;
    // RFC 3207 §4.2: the session starts over; STARTTLS is not offered again.
    assert!(tls
        .cmd("MAIL FROM:<a@outside.test>")
        .await
        .starts_with("503"));
    let ehlo = tls.cmd("EHLO client.outside.test").await;
    assert!(
        ehlo.starts_with("250") && !ehlo.contains("STARTTLS"),
        "{ehlo}"
    );
    assert!(tls.cmd("STARTTLS").await.starts_with("502"));
    let reply = tls.post("over starttls").await;
    let post = queued_id(&reply);
    assert_eq!(tls.cmd("QUIT").await.split(' ').next(), Some("221"));

    let p = wait_complete(&server.api, &post, Duration::from_secs(60)).await;
    assert_eq!(p.delivered, MEMBERS as u64, "{p:?}");
    let snap = world.recorder().snapshot();
    assert_eq!(snap.accepted, MEMBERS as u64);
    // The trace header says the post arrived encrypted (RFC 3848) and how.
    let copy = snap.copies[0].message.as_deref().expect("kept");
    let copy = String::from_utf8_lossy(copy);
    assert!(
        copy.contains("\r\n\tby herald.test (Herald) with ESMTPS\r\n")
            && copy.contains("(using TLSv1.3 with cipher TLS13_"),
        "{copy}"
    );

    // LMTP never offers STARTTLS.
    let mut lmtp = Client::new(TcpStream::connect(server.lmtp).await.expect("lmtp"));
    assert!(lmtp.reply().await.starts_with("220"));
    assert!(!lmtp.cmd("LHLO client.test").await.contains("STARTTLS"));
    assert!(lmtp.cmd("STARTTLS").await.starts_with("502"));
    server.stop().await;
    world.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_pipelined_after_starttls_is_ignored() {
    let (world, server, _dir, cert) = setup(false).await;
    // A man in the middle appends a whole transaction after STARTTLS (CVE-2011-0411).
    let injected = format!(
        "MAIL FROM:<evil@outside.test>\r\nRCPT TO:<{LIST}>\r\nDATA\r\nSubject: injected\r\n\r\nx\r\n.\r\n"
    );
    let mut tls = starttls(server.smtp, &cert, injected.as_bytes()).await;
    // Nothing of it survived: the first reply over TLS answers our EHLO, and there is no
    // transaction in progress.
    let ehlo = tls.cmd("EHLO client.outside.test").await;
    assert!(ehlo.starts_with("250-"), "{ehlo}");
    assert!(tls.cmd("RCPT TO:<x@lists.test>").await.starts_with("503"));
    assert!(tls.cmd("DATA").await.starts_with("503"));
    tls.cmd("QUIT").await;
    // Had the server answered the injected commands in plaintext, the handshake would have
    // failed on them; a wrongly accepted post would be known to the server until fanned out.
    wait_settled(&server.api, Duration::from_secs(30)).await;
    let status: herald_api_types::Status = get_view(&format!("{}/api/v1/status", server.api)).await;
    assert!(status.posts.is_empty(), "{:?}", status.posts);
    assert_eq!(world.recorder().snapshot().accepted, 0);
    server.stop().await;
    world.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn implicit_tls_submission_listener() {
    let (world, server, _dir, cert) = setup(true).await;
    let addr = server_submissions(&server);
    let tcp = TcpStream::connect(addr).await.expect("connect submissions");
    let tls = connector(&cert)
        .connect(ServerName::try_from(HOST).expect("name"), tcp)
        .await
        .expect("implicit TLS handshake");
    let mut c = Client::new(tls);
    let banner = c.reply().await;
    assert!(banner.starts_with("220 herald.test ESMTP"), "{banner}");
    let ehlo = c.cmd("EHLO client.outside.test").await;
    assert!(
        ehlo.starts_with("250") && !ehlo.contains("STARTTLS"),
        "{ehlo}"
    );
    let post = queued_id(&c.post("over implicit tls").await);
    c.cmd("QUIT").await;
    let p = wait_complete(&server.api, &post, Duration::from_secs(60)).await;
    assert_eq!(p.delivered, MEMBERS as u64, "{p:?}");

    // A plaintext client on the implicit-TLS port gets no SMTP banner.
    let mut plain = Client::new(TcpStream::connect(addr).await.expect("connect"));
    plain.send(b"EHLO plain.test\r\n").await;
    assert!(!plain.reply().await.starts_with("220"));
    server.stop().await;
    world.shutdown().await;
}

fn server_submissions(server: &TestServer) -> SocketAddr {
    server.submissions.expect("submissions listener configured")
}

/// Reads the delivery log once the server has stopped (it flushes the log on the way out).
fn delivery_log(data_dir: &Path) -> String {
    std::fs::read_to_string(data_dir.join("log/delivery.log")).expect("delivery log")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivery_log_records_outbound_tls() {
    // d0.test's MX offers STARTTLS with a self-signed certificate; d1.test's does not.
    let mut wc = world_config(&vec![Profile::Normal; DOMAINS], false);
    wc.domains[0].starttls = true;
    let world = World::start(wc).await.expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let data_dir = dir.path().to_path_buf();
    let server = TestServer::start(server_config(&world, data_dir.clone())).await;
    create_list(&server.api, LIST, json!({"posting_policy": "anyone"})).await;
    let (status, report) = http_bytes(
        &format!("{}/api/v1/lists/{LIST}/import", server.api),
        members_csv(MEMBERS, DOMAINS).into_bytes(),
    )
    .await;
    assert_eq!(status, 200, "{report}");
    let (mut smtp, _) = Smtp::connect(server.smtp).await;
    smtp.cmd("EHLO client.outside.test").await;
    let reply = smtp
        .send_mail(
            "poster@outside.test",
            &[LIST],
            b"From: <poster@outside.test>\r\nSubject: tls log\r\n\r\nhello\r\n",
        )
        .await;
    let post = queued_id(&reply);
    let p = wait_complete(&server.api, &post, Duration::from_secs(60)).await;
    assert_eq!(p.delivered, MEMBERS as u64, "{p:?}");
    server.stop().await;

    let log = delivery_log(&data_dir);
    let attempts: Vec<&str> = log.lines().filter(|l| l.contains(" to=<")).collect();
    assert_eq!(attempts.len(), MEMBERS, "{log}");
    for line in attempts {
        if line.contains("@d0.test>") {
            assert!(
                line.contains(", tls=TLSv1.3/unverified")
                    || line.contains(", tls=TLSv1.2/unverified"),
                "self-signed STARTTLS receiver: {line}"
            );
        } else {
            assert!(line.ends_with(", tls=none"), "plaintext receiver: {line}");
        }
    }
    world.shutdown().await;
}

/// The world's receiver certificate as a PEM trust anchor file.
fn world_ca_file(world: &World, dir: &Path) -> std::path::PathBuf {
    use base64::Engine;
    let der = world.tls_certificate_der().expect("a STARTTLS receiver");
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut pem = String::from("-----BEGIN CERTIFICATE-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        pem.push_str(std::str::from_utf8(chunk).expect("base64 is ASCII"));
        pem.push('\n');
    }
    pem.push_str("-----END CERTIFICATE-----\n");
    let path = dir.join("world-ca.pem");
    std::fs::write(&path, pem).expect("write ca");
    path
}

/// Posts one message through plain SMTP; returns the post id.
async fn post_plain(server: &TestServer) -> String {
    create_list(&server.api, LIST, json!({"posting_policy": "anyone"})).await;
    let (status, report) = http_bytes(
        &format!("{}/api/v1/lists/{LIST}/import", server.api),
        members_csv(MEMBERS, DOMAINS).into_bytes(),
    )
    .await;
    assert_eq!(status, 200, "{report}");
    let (mut smtp, _) = Smtp::connect(server.smtp).await;
    smtp.cmd("EHLO client.outside.test").await;
    let reply = smtp
        .send_mail(
            "poster@outside.test",
            &[LIST],
            b"From: <poster@outside.test>\r\nSubject: policy\r\n\r\nhello\r\n",
        )
        .await;
    queued_id(&reply)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn required_verified_tls_defers_an_unverifiable_destination() {
    // d0.test: STARTTLS with a self-signed certificate, under a required+verify rule.
    let mut wc = world_config(&vec![Profile::Normal; DOMAINS], false);
    wc.domains[0].starttls = true;
    let world = World::start(wc).await.expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let data_dir = dir.path().to_path_buf();
    let mut config = server_config(&world, data_dir.clone());
    config.delivery.tls_policy = vec![herald_routing::TlsPolicyRule {
        mx_suffix: "d0.test".into(),
        mode: herald_routing::TlsMode::Required,
        verify: true,
    }];
    let server = TestServer::start(config).await;
    let post = post_plain(&server).await;
    // d1.test's copies go out; d0.test's are deferred again and again (retries every ~1 s).
    let started = std::time::Instant::now();
    loop {
        let p = post_progress(&server.api, &post).await;
        let half = p.as_ref().filter(|p| p.delivered == (MEMBERS / 2) as u64);
        if let Some(p) = half.filter(|_| started.elapsed() > Duration::from_secs(3)) {
            assert!(!p.complete, "{p:?}");
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{p:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    server.stop().await;
    let snap = world.recorder().snapshot();
    assert_eq!(snap.accepted, (MEMBERS / 2) as u64);
    for i in (0..MEMBERS).step_by(2) {
        let addr = format!("m{i}@d0.test");
        assert!(snap.copies_for(&addr).is_empty(), "{addr} got a copy");
    }
    let log = delivery_log(&data_dir);
    let d0: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("@d0.test>") && l.contains(" to=<"))
        .collect();
    assert!(!d0.is_empty(), "{log}");
    for line in d0 {
        assert!(line.contains("status=deferred"), "{line}");
        assert!(line.contains("4.7.5"), "{line}");
        assert!(line.contains("verified certificate"), "{line}");
    }
    world.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn required_verified_tls_delivers_when_the_certificate_verifies() {
    let mut wc = world_config(&vec![Profile::Normal; DOMAINS], false);
    wc.domains[0].starttls = true;
    let world = World::start(wc).await.expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let data_dir = dir.path().join("data");
    let mut config = server_config(&world, data_dir.clone());
    config.delivery.tls_ca_file = Some(world_ca_file(&world, dir.path()));
    config.delivery.tls_policy = vec![herald_routing::TlsPolicyRule {
        mx_suffix: "d0.test".into(),
        mode: herald_routing::TlsMode::Required,
        verify: true,
    }];
    let server = TestServer::start(config).await;
    let post = post_plain(&server).await;
    let p = wait_complete(&server.api, &post, Duration::from_secs(60)).await;
    assert_eq!(p.delivered, MEMBERS as u64, "{p:?}");
    server.stop().await;
    let log = delivery_log(&data_dir);
    let d0: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("@d0.test>") && l.contains(" to=<"))
        .collect();
    assert_eq!(d0.len(), MEMBERS / 2, "{log}");
    for line in d0 {
        assert!(line.contains("/verified"), "{line}");
    }
    world.shutdown().await;
}

/// TLS everywhere: with every receiver on TLS under the world's CA, Herald verifies the
/// certificates against the exported CA and resumes sessions on later connections to the same
/// host (the world counts full and resumed handshakes); every copy arrives once, over TLS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_sessions_resume_across_connections_to_a_host() {
    const COPIES: usize = 8;
    let mut wc = world_config(&[Profile::Normal], false);
    wc.domains[0].starttls = true;
    wc.receiver.tls_ca = true;
    let world = World::start(wc).await.expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, world.tls_ca_pem().expect("the world's CA")).expect("write ca");
    let data_dir = dir.path().join("data");
    let mut config = server_config(&world, data_dir.clone());
    config.delivery.tls_ca_file = Some(ca);
    // One connection at a time and two copies on each: four connections to the one host, one
    // after the other, so the second and later can resume the first's session.
    config.scheduler.max_connections_per_destination = 1;
    config.scheduler.max_messages_per_connection = 2;
    let server = TestServer::start(config).await;
    create_list(&server.api, LIST, json!({"posting_policy": "anyone"})).await;
    let (status, report) = http_bytes(
        &format!("{}/api/v1/lists/{LIST}/import", server.api),
        members_csv(COPIES, 1).into_bytes(),
    )
    .await;
    assert_eq!(status, 200, "{report}");
    let (mut smtp, _) = Smtp::connect(server.smtp).await;
    smtp.cmd("EHLO client.outside.test").await;
    let reply = smtp
        .send_mail(
            "poster@outside.test",
            &[LIST],
            b"From: <poster@outside.test>\r\nSubject: resume\r\n\r\nhello\r\n",
        )
        .await;
    let post = queued_id(&reply);
    let p = wait_complete(&server.api, &post, Duration::from_secs(60)).await;
    assert_eq!(p.delivered, COPIES as u64, "{p:?}");
    server.stop().await;

    let snap = world.recorder().snapshot();
    assert_eq!(snap.accepted, COPIES as u64, "every copy once");
    assert_eq!(snap.duplicates, 0);
    for i in 0..COPIES {
        let copies = snap.copies_for(&format!("m{i}@d0.test"));
        assert_eq!(copies.len(), 1, "m{i}: {copies:?}");
        assert!(copies[0].tls, "m{i} over TLS");
    }
    let (full, resumed) = world.recorder().tls_handshakes();
    assert!(full >= 1, "the first connection's handshake is full");
    assert!(
        resumed >= 1,
        "later connections resume: full {full}, resumed {resumed}"
    );
    // Every connection's handshake is one or the other (a handshake cut short counts as neither).
    assert!(full + resumed <= snap.hosts["mx.d0.test"].connections);
    let log = delivery_log(&data_dir);
    let attempts: Vec<&str> = log.lines().filter(|l| l.contains(" to=<")).collect();
    assert_eq!(attempts.len(), COPIES, "{log}");
    for line in attempts {
        assert!(
            line.contains("/verified"),
            "CA-issued certificate verifies: {line}"
        );
    }
    world.shutdown().await;
}
