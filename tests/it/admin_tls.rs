//! HTTPS on the admin/API listener, end to end. A test CA (rcgen) signs a
//! certificate for 127.0.0.1; the server serves its API with it (`http.tls_cert_file`), the
//! `herald` binary talks to it with `--ca-file` and the admin token; without the CA the CLI
//! refuses the server (the certificate is checked, not ignored), and plain HTTP to the port
//! gets no API answer. The peer address still reaches the handlers over TLS (the confirmation
//! handler extracts it: without it the answer would be a 500, not the "not valid" page). All
//! on loopback.

use crate::support;

use herald_sim::{Profile, World};
use std::path::Path;
use support::*;

const TOKEN: &str = "admin-token-0123456789abcdef";

/// A CA and a leaf certificate for 127.0.0.1 signed by it, as PEM files in `dir`.
fn test_ca(dir: &Path) {
    let ca_key = rcgen::KeyPair::generate().expect("ca key");
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "Herald test CA");
    let ca = ca_params.self_signed(&ca_key).expect("ca");
    let leaf_key = rcgen::KeyPair::generate().expect("leaf key");
    let leaf_params =
        rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).expect("leaf params");
    let leaf = leaf_params
        .signed_by(&leaf_key, &ca, &ca_key)
        .expect("leaf");
    std::fs::write(dir.join("ca.pem"), ca.pem()).expect("write ca");
    std::fs::write(dir.join("cert.pem"), leaf.pem()).expect("write cert");
    std::fs::write(dir.join("key.pem"), leaf_key.serialize_pem()).expect("write key");
}

/// Runs the `herald` binary; (success, stdout, stderr).
fn herald(args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(args)
        .env("HERALD_ADMIN_TOKEN", TOKEN)
        .env_remove("HERALD_SERVER")
        .env_remove("HERALD_CA_FILE")
        .output()
        .expect("run herald");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_administers_over_https_with_a_ca_file() {
    let world = World::start(world_config(&[Profile::Normal], false))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    test_ca(dir.path());
    let mut config = server_config(&world, dir.path().join("data"));
    config.http.admin_token = TOKEN.into();
    config.http.tls_cert_file = Some(dir.path().join("cert.pem"));
    config.http.tls_key_file = Some(dir.path().join("key.pem"));
    let server = start_tls(config, &dir.path().join("ca.pem")).await;
    let https = format!("https://{}", server.http);
    let ca = dir.path().join("ca.pem");
    let ca = ca.to_str().expect("utf-8 path");

    // The CLI with the CA: creates a list and reads it back over HTTPS.
    let (ok, out, err) = herald(&[
        "--server",
        &https,
        "--ca-file",
        ca,
        "list",
        "create",
        "dev@lists.test",
    ]);
    assert!(ok, "list create over https: {out} {err}");
    let (ok, out, err) = herald(&["--server", &https, "--ca-file", ca, "list", "ls"]);
    assert!(
        ok && out.contains("dev@lists.test"),
        "list ls over https: {out} {err}"
    );

    // Without the CA the server's certificate is not trusted: a clear failure, no request.
    let (ok, out, err) = herald(&["--server", &https, "status"]);
    assert!(!ok, "an unknown CA must be refused: {out}");
    assert!(err.starts_with("herald: "), "one error line: {err}");

    // A CA file that is not PEM is a clear error naming the option.
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "not a certificate").expect("write");
    let (ok, _, err) = herald(&[
        "--server",
        &https,
        "--ca-file",
        junk.to_str().expect("utf-8"),
        "status",
    ]);
    assert!(!ok && err.contains("--ca-file"), "{err}");

    // The public confirmation route answers over TLS with the peer address available.
    let pem = std::fs::read(dir.path().join("ca.pem")).expect("ca");
    let client = reqwest::Client::builder()
        .use_rustls_tls()
        .add_root_certificate(reqwest::Certificate::from_pem(&pem).expect("pem"))
        .build()
        .expect("client");
    let r = client
        .post(format!("{https}/confirm/not-a-token"))
        .send()
        .await
        .expect("confirm over https");
    assert_eq!(r.status().as_u16(), 403);

    // Plain HTTP to the TLS port gets no API answer.
    let plain = reqwest::Client::new()
        .get(format!("http://{}/api/v1/status", server.http))
        .bearer_auth(TOKEN)
        .send()
        .await;
    assert!(
        plain.as_ref().map_or(true, |r| !r.status().is_success()),
        "plain HTTP must not be served: {plain:?}"
    );
    server.stop().await;
    world.shutdown().await;
}

/// `TestServer::start` waits for `/healthz` over plain HTTP; this waits over HTTPS, trusting
/// the test CA.
async fn start_tls(mut config: herald_server::Config, ca: &Path) -> TlsServer {
    let listeners = herald_server::Listeners::bind_ephemeral()
        .await
        .expect("bind");
    let (smtp, lmtp, http) = listeners.addrs().expect("addrs");
    config.listen.smtp = smtp;
    config.listen.lmtp = lmtp;
    config.listen.http = http;
    // In-process, like `TestServer`: the test process keeps its user.
    config.server.allow_root = true;
    let shutdown = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(herald_server::run(config, listeners, shutdown.clone()));
    let pem = std::fs::read(ca).expect("ca");
    let client = reqwest::Client::builder()
        .use_rustls_tls()
        .add_root_certificate(reqwest::Certificate::from_pem(&pem).expect("pem"))
        .build()
        .expect("client");
    let start = std::time::Instant::now();
    loop {
        if let Ok(r) = client.get(format!("https://{http}/healthz")).send().await {
            assert!(r.status().is_success());
            break;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "no HTTPS healthz"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    TlsServer {
        http,
        shutdown,
        task,
    }
}

struct TlsServer {
    http: std::net::SocketAddr,
    shutdown: tokio_util::sync::CancellationToken,
    task: tokio::task::JoinHandle<Result<(), herald_server::ServerError>>,
}

impl TlsServer {
    async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(std::time::Duration::from_secs(60), self.task)
            .await
            .expect("stops")
            .expect("task")
            .expect("ran cleanly");
    }
}
