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
