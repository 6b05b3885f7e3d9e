//! The DANE certificate check (RFC 7672 §3, RFC 7671 §5) as a rustls [`ServerCertVerifier`]:
//! the handshake itself fails when no TLSA record authenticates the server, so nothing of the
//! session reaches an unauthenticated peer.
//!
//! * DANE-EE(3): the server's own certificate (selector 0) or public key (selector 1) must
//!   match. Names and validity dates are not checked (RFC 7672 §3.1.1): the DNSSEC-signed record
//!   is the authentication.
//! * DANE-TA(2): a certificate the server presents above its own (or, for `2 0 0`, the
//!   certificate in the record; for `2 1 0`, the key in the record, with the issuer name of the
//!   topmost certificate presented) is the trust anchor. The chain must verify to it (webpki:
//!   signatures, dates, key usage) and the server certificate must name the MX host (RFC 7672
//!   §3.2.2; the TLSA base domain is the MX host, since Herald follows no CNAMEs).
//!
//! The handshake signatures are checked with real crypto whatever matched, so the peer must
//! hold the private key of the certificate it presents.
//!
//! SECURITY: the certificates are hostile input, parsed by webpki; a certificate that does not
//! parse matches nothing (DANE-EE full-certificate records compare octets and need no parse).

use herald_routing::dane::tlsa::{Matching, Selector, Tlsa, TlsaSet, Usage};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, Der, ServerName, TrustAnchor, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, OtherError, SignatureScheme};
use std::sync::Arc;
use webpki::{EndEntityCert, KeyUsage};

/// Which record authenticated the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DaneMatch {
    /// A DANE-EE record matched the server's certificate or key.
    EndEntity(Tlsa),
    /// A DANE-TA record named the trust anchor the chain verified to.
    TrustAnchor(Tlsa),
}

/// Why the server could not be authenticated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DaneError {
    #[error("no certificate presented")]
    NoCertificate,
    /// No record matched; for DANE-TA the last chain or name failure is said too.
    #[error("no TLSA record matches the server's certificate chain{}", .0.as_deref().map(|w| format!(" ({w})")).unwrap_or_default())]
    NoMatch(Option<String>),
}

/// Authenticates a server by its TLSA records.
#[derive(Debug)]
pub struct DaneVerifier {
    tlsa: Arc<TlsaSet>,
    algs: WebPkiSupportedAlgorithms,
}

impl DaneVerifier {
    pub fn new(tlsa: Arc<TlsaSet>, algs: WebPkiSupportedAlgorithms) -> DaneVerifier {
        DaneVerifier { tlsa, algs }
    }

    /// The check itself: `chain` is what the server presented (its certificate first), `name`
    /// the MX host name.
    pub fn check(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        name: &ServerName<'_>,
        now: UnixTime,
    ) -> Result<DaneMatch, DaneError> {
        // Parsed once, lazily: full-certificate DANE-EE records compare octets and need no
        // parse, so an unparsable certificate can still be pinned (RFC 7671 §5.1).
        let leaf = EndEntityCert::try_from(end_entity).ok();
        let leaf_spki = leaf.as_ref().map(|c| c.subject_public_key_info());
        let mut why = None;
        for record in self.tlsa.records() {
            match record.usage {
                Usage::DaneEe => {
                    let selected = match record.selector {
                        Selector::Cert => Some(end_entity.as_ref()),
                        Selector::Spki => leaf_spki.as_ref().map(|s| s.as_ref()),
                    };
                    if selected.is_some_and(|s| record.matches(s)) {
                        return Ok(DaneMatch::EndEntity(record.clone()));
                    }
                }
                Usage::DaneTa => {
                    let Some(leaf) = &leaf else {
                        why = Some("the server certificate does not parse".to_string());
                        continue;
                    };
                    match self.check_ta(record, leaf, intermediates, name, now) {
                        Ok(true) => return Ok(DaneMatch::TrustAnchor(record.clone())),
                        Ok(false) => {}
                        Err(e) => why = Some(e),
                    }
                }
            }
        }
        Err(DaneError::NoMatch(why))
    }

    /// One DANE-TA record: Ok(true) when a trust anchor it names leads to a chain that verifies
    /// and names the host, Ok(false) when it names none of the candidates, Err(why) when it
    /// names one but the chain or the name fails.
    fn check_ta(
        &self,
        record: &Tlsa,
        leaf: &EndEntityCert<'_>,
        intermediates: &[CertificateDer<'_>],
        name: &ServerName<'_>,
        now: UnixTime,
    ) -> Result<bool, String> {
        let mut anchors: Vec<TrustAnchor<'_>> = Vec::new();
        for cert in intermediates {
            let Ok(parsed) = EndEntityCert::try_from(cert) else {
                continue;
            };
            let spki;
            let selected: &[u8] = match record.selector {
                Selector::Cert => cert.as_ref(),
                Selector::Spki => {
                    spki = parsed.subject_public_key_info();
                    spki.as_ref()
                }
            };
            if record.matches(selected) {
                if let Ok(anchor) = webpki::anchor_from_trusted_cert(cert) {
                    anchors.push(anchor.to_owned());
                }
            }
        }
        if record.matching == Matching::Full {
            anchors.extend(self.anchor_from_record(record, leaf, intermediates));
        }
        if anchors.is_empty() {
            return Ok(false);
        }
        leaf.verify_for_usage(
            self.algs.all,
            &anchors,
            intermediates,
            now,
            KeyUsage::server_auth(),
            None,
            None,
        )
        .map_err(|e| format!("chain to the DANE-TA anchor: {e}"))?;
        leaf.verify_is_valid_for_subject_name(name)
            .map_err(|e| format!("certificate does not name the MX host: {e}"))?;
        Ok(true)
    }

    /// A trust anchor published in full in the record itself (`2 0 0`: a certificate; `2 1 0`:
    /// a key, which takes the issuer name of the topmost certificate presented as its subject,
    /// since the server need not send a certificate for it — RFC 7671 §5.2.3).
    fn anchor_from_record(
        &self,
        record: &Tlsa,
        leaf: &EndEntityCert<'_>,
        intermediates: &[CertificateDer<'_>],
    ) -> Option<TrustAnchor<'static>> {
        match record.selector {
            Selector::Cert => {
                let der = CertificateDer::from(&*record.data);
                webpki::anchor_from_trusted_cert(&der)
                    .ok()
                    .map(|a| a.to_owned())
            }
            Selector::Spki => {
                let spki = der_sequence_content(&record.data)?;
                let top = intermediates
                    .last()
                    .and_then(|c| EndEntityCert::try_from(c).ok().map(|c| c.issuer().to_vec()));
                let issuer = top.unwrap_or_else(|| leaf.issuer().to_vec());
                Some(TrustAnchor {
                    subject: Der::from(issuer),
                    subject_public_key_info: Der::from(spki.to_vec()),
                    name_constraints: None,
                })
            }
        }
    }
}

/// The content of a DER SEQUENCE (tag 0x30, definite length) that spans all of `der`; None
/// for anything else. webpki's trust anchors hold the SPKI without its outer tag.
fn der_sequence_content(der: &[u8]) -> Option<&[u8]> {
    let (&tag, rest) = der.split_first()?;
    let (&first, rest) = rest.split_first()?;
    if tag != 0x30 {
        return None;
    }
    let (len, rest) = match first {
        0..=0x7f => (usize::from(first), rest),
        0x81..=0x84 => {
            let n = usize::from(first & 0x7f);
            let (octets, rest) = (rest.get(..n)?, rest.get(n..)?);
            let len = octets
                .iter()
                .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
            (len, rest)
        }
        _ => return None,
    };
    (rest.len() == len).then_some(rest)
}

impl ServerCertVerifier for DaneVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.check(end_entity, intermediates, server_name, now) {
            Ok(matched) => {
                tracing::debug!(host = ?server_name, ?matched, "DANE authenticated the server");
                Ok(ServerCertVerified::assertion())
            }
            Err(e) => Err(rustls::Error::InvalidCertificate(CertificateError::Other(
                OtherError(Arc::new(e)),
            ))),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs.supported_schemes()
    }
}

/// The DER SubjectPublicKeyInfo of a certificate (what selector 1 matches), None when the
/// certificate does not parse. For tools and tests that publish TLSA records.
pub fn spki_of(cert_der: &[u8]) -> Option<Vec<u8>> {
    let der = rustls::pki_types::CertificateDer::from(cert_der);
    let cert = webpki::EndEntityCert::try_from(&der).ok()?;
    Some(cert.subject_public_key_info().as_ref().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn der_sequence_content_needs_one_whole_sequence() {
        assert_eq!(der_sequence_content(&[0x30, 2, 1, 2]), Some(&[1u8, 2][..]));
        assert_eq!(der_sequence_content(&[0x30, 0x81, 1, 9]), Some(&[9u8][..]));
        assert_eq!(der_sequence_content(&[0x30, 3, 1, 2]), None, "short");
        assert_eq!(der_sequence_content(&[0x30, 1, 1, 2]), None, "trailing");
        assert_eq!(der_sequence_content(&[0x31, 1, 1]), None, "a SET");
        assert_eq!(der_sequence_content(&[0x30, 0x80]), None, "indefinite");
        assert_eq!(der_sequence_content(&[0x30]), None);
        assert_eq!(der_sequence_content(&[]), None);
    }
}
