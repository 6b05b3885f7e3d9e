//! STARTTLS: offered hosts complete a handshake with a client that accepts any certificate
//! (opportunistic TLS, as MTAs do it), and mail sent after it is recorded as received over TLS.

#![allow(clippy::unwrap_used)]

mod common;

use common::{message, mx, start, Client};
use herald_sim::Profile;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use std::net::Ipv4Addr;
use std::sync::Arc;

/// Accepts any certificate: opportunistic STARTTLS does not verify.
#[derive(Debug)]
struct AcceptAny(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AcceptAny {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }
    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[tokio::test]
async fn starttls_handshake_and_mail_over_tls() {
    let addr = Ipv4Addr::new(127, 1, 9, 20);
    let world = start("tls.example", addr, Profile::Normal, true).await;
    assert!(world.tls_certificate_der().is_some());
    let mut c = Client::connect(mx(&world, addr)).await;
    let ehlo = c.greet().await;
    assert!(ehlo.contains("STARTTLS"), "{ehlo}");
    c.expect("STARTTLS\r\n", 220).await;

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AcceptAny(provider)))
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let name = ServerName::try_from("mx.tls.example").unwrap();
    let tls = connector.connect(name, c.into_inner()).await.unwrap();
    let mut c = Client::new(tls);
    let ehlo = c.expect("EHLO client.example\r\n", 250).await;
    assert!(!ehlo.contains("STARTTLS"), "not offered twice: {ehlo}");
    c.expect("STARTTLS\r\n", 502).await;
    let m = message("tls@l", "secret");
    let codes = c.transaction("a@b.example", "x@tls.example", &m).await;
    assert_eq!(codes, [250, 250, 354, 250]);
    c.expect("QUIT\r\n", 221).await;
    let snap = world.recorder().snapshot();
    assert!(snap.copies[0].tls);
    world.shutdown().await;
}

#[tokio::test]
async fn plaintext_pipelined_after_starttls_is_discarded() {
    let addr = Ipv4Addr::new(127, 1, 9, 21);
    let world = start("inject.example", addr, Profile::Normal, true).await;
    let mut c = Client::connect(mx(&world, addr)).await;
    c.greet().await;
    // An attacker's command smuggled behind STARTTLS must not run inside the TLS session.
    c.expect("STARTTLS\r\nRSET\r\n", 220).await;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AcceptAny(provider)))
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let name = ServerName::try_from("mx.inject.example").unwrap();
    let tls = connector.connect(name, c.into_inner()).await.unwrap();
    let mut c = Client::new(tls);
    // The first reply inside TLS answers our NOOP, not the smuggled RSET.
    let text = c.expect("NOOP\r\n", 250).await;
    assert!(text.contains("2.0.0 Ok"), "{text}");
    world.shutdown().await;
}

/// One STARTTLS session with `connector` to the host at `addr` named `name`, a copy sent over
/// it; returns whether rustls resumed a session.
async fn tls_session(
    world: &herald_sim::World,
    addr: Ipv4Addr,
    name: &'static str,
    connector: &tokio_rustls::TlsConnector,
    rcpt: &str,
) -> bool {
    let mut c = Client::connect(mx(world, addr)).await;
    c.greet().await;
    c.expect("STARTTLS\r\n", 220).await;
    let tls = connector
        .connect(ServerName::try_from(name).unwrap(), c.into_inner())
        .await
        .unwrap();
    let resumed = tls.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
    let mut c = Client::new(tls);
    c.expect("EHLO client.example\r\n", 250).await;
    let codes = c
        .transaction("a@b.example", rcpt, &message("ca@l", "hi"))
        .await;
    assert_eq!(codes, [250, 250, 354, 250]);
    c.expect("QUIT\r\n", 221).await;
    resumed
}

#[tokio::test]
async fn ca_issued_certificate_verifies_and_sessions_resume() {
    let addr = Ipv4Addr::new(127, 1, 9, 22);
    let mut cfg = common::world_config("ca.example", addr, Profile::Normal, true);
    cfg.receiver.tls_ca = true;
    let world = herald_sim::World::start(cfg).await.unwrap();
    let pem = world.tls_ca_pem().expect("the world's CA").to_string();

    // A client that trusts only the world's CA verifies the host's certificate by its name.
    let mut roots = rustls::RootCertStore::empty();
    let ca = rustls::pki_types::pem::PemObject::from_pem_slice(pem.as_bytes()).unwrap();
    roots.add(ca).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let first = tls_session(&world, addr, "mx.ca.example", &connector, "x@ca.example").await;
    let second = tls_session(&world, addr, "mx.ca.example", &connector, "y@ca.example").await;
    assert!(!first, "nothing to resume on the first connection");
    assert!(
        second,
        "the second connection resumes with the server's ticket"
    );
    let snap = world.recorder().snapshot();
    let host = &snap.hosts["mx.ca.example"];
    assert_eq!((host.tls_full, host.tls_resumed), (1, 1));
    assert_eq!(world.recorder().tls_handshakes(), (1, 1));
    assert_eq!(snap.copies.len(), 2);
    assert!(snap.copies.iter().all(|c| c.tls));

    // The certificate is for the host's own name: another name does not verify.
    let mut c = Client::connect(mx(&world, addr)).await;
    c.greet().await;
    c.expect("STARTTLS\r\n", 220).await;
    let wrong = ServerName::try_from("mx.other.example").unwrap();
    assert!(connector.connect(wrong, c.into_inner()).await.is_err());
    world.shutdown().await;
}
