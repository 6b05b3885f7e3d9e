//! Trust anchors for verified TLS: a PEM file named by `delivery.tls_ca_file`, else the system
//! bundle at its usual paths. Shared by the MTA-STS policy fetch (which must verify, RFC 8461
//! §3.3) and the SMTP client (which records whether a certificate would have verified), so both
//! trust exactly the same roots.
//!
//! SECURITY: the PEM file is operator input; unparsable certificates in it are skipped, and an
//! empty result is an error rather than a store that trusts nothing silently.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::RootCertStore;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where distributions keep the system trust bundle, tried in order when no file is configured.
const SYSTEM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
    "/etc/ssl/ca-bundle.pem",
];

/// A client configuration that verifies the server's certificate chain and name against the
/// trust anchors (`ca_file`, else the system bundle), as the MTA-STS policy fetch must (RFC 8461
/// §3.3). Err names why no anchors could be loaded.
pub fn verifying_config(ca_file: Option<&Path>) -> Result<Arc<rustls::ClientConfig>, String> {
    let roots = load_roots(ca_file)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

pub fn load_roots(ca_file: Option<&Path>) -> Result<Arc<RootCertStore>, String> {
    let candidates: Vec<PathBuf> = match ca_file {
        Some(p) => vec![p.to_path_buf()],
        None => SYSTEM_BUNDLES.iter().map(PathBuf::from).collect(),
    };
    for path in candidates {
        let Ok(certs) = CertificateDer::pem_file_iter(&path) else {
            continue;
        };
        let mut roots = RootCertStore::empty();
        roots.add_parsable_certificates(certs.filter_map(Result::ok));
        if !roots.is_empty() {
            return Ok(Arc::new(roots));
        }
    }
    Err("no trust anchors configured".to_string())
}
