//! SIGHUP reloads what can change without a restart, tried as an operator
//! does it on the real binary: certbot renews the certificate and the DKIM key is rotated in
//! the config file, then `kill -HUP`. New TLS handshakes present the new certificate while a
//! connection opened before keeps working; the next post's copies are signed with the new
//! selector; a changed `[scheduler]` is named in the log as waiting for a restart; a broken
//! renewal leaves the working certificate in place.

use crate::support;

use herald_sim::{Profile, World};
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::json;
use std::io::BufRead;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::binary::{herald_bin, BinaryServer};
use support::*;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

const HOST: &str = "herald.test";
const LIST: &str = "reload@lists.test";
const MEMBER: &str = "m0@d0.test";

fn new_cert(dir: &Path) -> CertificateDer<'static> {
    let key = rcgen::generate_simple_self_signed(vec![HOST.to_string()]).expect("rcgen");
    std::fs::write(dir.join("cert.pem"), key.cert.pem()).expect("write cert");
    std::fs::write(dir.join("key.pem"), key.key_pair.serialize_pem()).expect("write key");
    key.cert.der().clone()
}

fn connector(trusted: &CertificateDer<'static>) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(trusted.clone()).expect("trust");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    TlsConnector::from(Arc::new(config))
}

type Tls = BufReader<tokio_rustls::client::TlsStream<TcpStream>>;

async fn line(io: &mut (impl AsyncBufReadExt + Unpin)) -> String {
    let mut all = String::new();
    loop {
        let mut l = String::new();
        tokio::time::timeout(Duration::from_secs(10), io.read_line(&mut l))
            .await
            .expect("reply in time")
            .expect("read");
        all.push_str(&l);
        if l.len() < 4 || l.as_bytes()[3] != b'-' {
            return all;
        }
    }
}

/// STARTTLS trusting only `trusted`: the session, or the handshake's error.
async fn starttls(addr: SocketAddr, trusted: &CertificateDer<'static>) -> Result<Tls, String> {
    let mut plain = BufReader::new(TcpStream::connect(addr).await.expect("connect"));
    assert!(line(&mut plain).await.starts_with("220"));
    plain
        .get_mut()
        .write_all(b"EHLO c.test\r\n")
        .await
        .expect("w");
    line(&mut plain).await;
    plain.get_mut().write_all(b"STARTTLS\r\n").await.expect("w");
    assert!(line(&mut plain).await.starts_with("220"));
    let name = ServerName::try_from(HOST).expect("name");
    connector(trusted)
        .connect(name, plain.into_inner())
        .await
        .map(BufReader::new)
        .map_err(|e| e.to_string())
}

async fn noop(tls: &mut Tls) -> String {
    tls.get_mut().write_all(b"NOOP\r\n").await.expect("w");
    line(tls).await
}

fn config_extra(dir: &Path, selector: &str, key: &str, tick_ms: u32) -> String {
    format!(
        "[tls]\ncert_file = \"{d}/cert.pem\"\nkey_file = \"{d}/key.pem\"\n\
         [dkim.\"lists.test\"]\nselector = \"{selector}\"\nkey_file = \"{d}/{key}\"\n\
         algorithm = \"ed25519\"\n[scheduler]\ntick_ms = {tick_ms}\n",
        d = dir.display()
    )
}

async fn wait_log(lines: &Mutex<Vec<String>>, needle: &str) -> String {
    let started = Instant::now();
    loop {
        if let Some(l) = lines
            .lock()
            .expect("lock")
            .iter()
            .find(|l| l.contains(needle))
        {
            return l.clone();
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no log line with {needle:?}: {:?}",
            lines.lock().expect("lock")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Posts and returns the `s=` of the member's new copy's DKIM-Signature.
async fn post_and_selector(server: &BinaryServer, world: &World, n: u32) -> String {
    let (mut smtp, _) = Smtp::connect(server.smtp).await;
    smtp.cmd("EHLO client.test").await;
    let msg = format!(
        "From: p@outside.test\r\nTo: {LIST}\r\nSubject: post {n}\r\nMessage-ID: <reload-{n}@outside.test>\r\n\r\nHi.\r\n"
    );
    let reply = smtp
        .send_mail("p@outside.test", &[LIST], msg.as_bytes())
        .await;
    assert!(reply.starts_with("250"), "{reply}");
    let id = format!("<reload-{n}@outside.test>");
    let started = Instant::now();
    loop {
        let snap = world.recorder().snapshot();
        let copy = snap
            .copies_for(MEMBER)
            .into_iter()
            .find(|c| c.message_id.as_deref() == Some(id.as_str()))
            .and_then(|c| c.message.clone());
        if let Some(body) = copy {
            let text = String::from_utf8_lossy(&body).to_string();
            let sig = text
                .split("\r\n")
                .skip_while(|l| !l.starts_with("DKIM-Signature:"))
                .take_while(|l| l.starts_with("DKIM-Signature:") || l.starts_with([' ', '\t']))
                .collect::<String>();
            let selector = sig
                .split(';')
                .find_map(|t| t.trim().strip_prefix("s=").map(str::to_string))
                .unwrap_or_else(|| panic!("no s= in {sig:?}"));
            return selector;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "copy {n} not delivered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_picks_up_a_renewed_certificate_and_a_rotated_dkim_key() {
    let world = World::start(world_config(&[Profile::Normal], true))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let old_cert = new_cert(dir.path());
    for file in ["k1.pem", "k2.pem"] {
        let k = herald_auth::dkim::generate(herald_auth::DkimAlgorithm::Ed25519).expect("key");
        std::fs::write(dir.path().join(file), k.private_pem).expect("write key");
    }
    let server = BinaryServer::configure(
        dir.path(),
        &dir.path().join("data"),
        &world,
        &config_extra(dir.path(), "s1", "k1.pem", 50),
    );
    let mut child = std::process::Command::new(herald_bin())
        .args(["serve", "--config"])
        .arg(&server.config)
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = lines.clone();
    let stderr = child.stderr.take().expect("stderr");
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            sink.lock().expect("lock").push(l);
        }
    });
    wait_healthy(&server.api).await;
    create_list(&server.api, LIST, json!({"posting_policy": "anyone"})).await;
    let (status, r) = http(
        "POST",
        &format!("{}/api/v1/lists/{LIST}/members", server.api),
        Some(json!({"address": MEMBER})),
    )
    .await;
    assert!(status == 200 || status == 201, "{r}");
    assert_eq!(post_and_selector(&server, &world, 1).await, "s1");
    let mut before = starttls(server.smtp, &old_cert)
        .await
        .expect("the first certificate");

    // Renewal and rotation on disk, one section that cannot change live, then SIGHUP.
    let new = new_cert(dir.path());
    std::fs::write(&server.config, {
        let text = std::fs::read_to_string(&server.config).expect("read config");
        text.replace(
            &config_extra(dir.path(), "s1", "k1.pem", 50),
            &config_extra(dir.path(), "s2", "k2.pem", 60),
        )
    })
    .expect("rewrite config");
    let hup = |pid: u32| {
        std::process::Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()
            .expect("kill -HUP")
    };
    hup(child.id());
    wait_log(&lines, "SIGHUP: certificate reloaded").await;
    wait_log(&lines, "SIGHUP: DKIM keys reloaded").await;
    let pending = wait_log(&lines, "applied only at the next restart").await;
    assert!(pending.contains("scheduler"), "{pending}");
    assert!(
        !pending.contains("dkim") && !pending.contains("tls"),
        "{pending}"
    );

    assert!(
        noop(&mut before).await.starts_with("250"),
        "the open TLS session survives"
    );
    starttls(server.smtp, &new)
        .await
        .expect("new handshakes present the renewed certificate");
    assert!(
        starttls(server.smtp, &old_cert).await.is_err(),
        "the old certificate is no longer presented"
    );
    assert_eq!(post_and_selector(&server, &world, 2).await, "s2");

    // Shaping rules are live too: a new rule for the member's MX moves its destination (known
    // from the posts above) to the rule's budget, and delivery goes on under it.
    std::fs::write(&server.config, {
        let mut text = std::fs::read_to_string(&server.config).expect("read config");
        text.push_str(
            "[[scheduler.shaping]]\nname = \"sim\"\nmx_suffixes = [\"d0.test\"]\nmax_connections = 3\n",
        );
        text
    })
    .expect("rewrite config");
    hup(child.id());
    let replaced = wait_log(&lines, "shaping rules replaced").await;
    // The log may be coloured: compare its text without escape sequences.
    let mut parts = replaced.split('\u{1b}');
    let mut plain = parts.next().unwrap_or("").to_string();
    for part in parts {
        plain.push_str(part.split_once('m').map_or(part, |(_, rest)| rest));
    }
    assert!(plain.contains("destinations_moved=1"), "{replaced}");
    assert_eq!(post_and_selector(&server, &world, 3).await, "s2");

    // A broken renewal (half-written file) keeps the working certificate.
    std::fs::write(
        dir.path().join("cert.pem"),
        "-----BEGIN CERTIFICATE-----\ntrunc",
    )
    .expect("w");
    hup(child.id());
    wait_log(&lines, "SIGHUP: certificate not reloaded").await;
    starttls(server.smtp, &new)
        .await
        .expect("still the renewed certificate after a failed reload");

    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
    world.shutdown().await;
}
