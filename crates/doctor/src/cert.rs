//! The TLS certificate `[tls] cert_file` names: it parses, names the HELO host, is not near
//! its expiry, and its chain is in order (leaf first, each issued by the next).

use crate::{Finding, Severity};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use std::path::Path;
use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};

/// Fewer days than this before expiry is a warning (renewal usually runs at 30).
const WARN_DAYS: i64 = 14;

pub fn check(path: &Path, host: &str, now: jiff::Timestamp) -> Vec<Finding> {
    let subject = path.display().to_string();
    let certs: Vec<CertificateDer<'static>> = match CertificateDer::pem_file_iter(path) {
        Ok(iter) => match iter.collect::<Result<Vec<_>, _>>() {
            Ok(c) if !c.is_empty() => c,
            Ok(_) => {
                return vec![Finding::new(
                    Severity::Error,
                    "tls",
                    subject,
                    "no certificate in the file",
                )]
            }
            Err(e) => {
                return vec![Finding::new(
                    Severity::Error,
                    "tls",
                    subject,
                    format!("not PEM certificates: {e}"),
                )]
            }
        },
        Err(e) => {
            return vec![Finding::new(
                Severity::Error,
                "tls",
                subject,
                format!("cannot read: {e}"),
            )]
        }
    };
    let mut parsed = Vec::new();
    for (i, der) in certs.iter().enumerate() {
        match X509Certificate::from_der(der.as_ref()) {
            Ok((_, cert)) => parsed.push(cert),
            Err(e) => {
                return vec![Finding::new(
                    Severity::Error,
                    "tls",
                    subject,
                    format!("certificate {} does not parse: {e}", i + 1),
                )]
            }
        }
    }
    let mut out = Vec::new();
    let leaf = &parsed[0];
    let names = dns_names(leaf);
    let host = host.to_ascii_lowercase();
    out.push(if names.iter().any(|n| name_matches(n, &host)) {
        Finding::new(Severity::Ok, "tls", &subject, format!("names {host}"))
    } else {
        Finding::new(
            Severity::Error,
            "tls",
            &subject,
            format!(
                "does not name {host} (it names {}): senders that check names refuse it",
                if names.is_empty() {
                    "nothing".to_string()
                } else {
                    names.join(", ")
                }
            ),
        )
    });
    let not_after = leaf.validity().not_after.timestamp();
    let days = (not_after - now.as_second()).div_euclid(86_400);
    out.push(if days < 0 {
        Finding::new(
            Severity::Error,
            "tls",
            &subject,
            format!("expired {} days ago", -days),
        )
    } else if days < WARN_DAYS {
        Finding::new(
            Severity::Warn,
            "tls",
            &subject,
            format!("expires in {days} days: renew it, then `systemctl reload herald` (SIGHUP)"),
        )
    } else {
        Finding::new(
            Severity::Ok,
            "tls",
            &subject,
            format!("valid for {days} more days"),
        )
    });
    let chain_ok = parsed
        .windows(2)
        .all(|pair| pair[0].issuer() == pair[1].subject());
    if !chain_ok {
        out.push(Finding::new(
            Severity::Error,
            "tls",
            &subject,
            "the chain is out of order: each certificate must be followed by its issuer",
        ));
    } else if parsed.len() == 1 && leaf.issuer() == leaf.subject() {
        out.push(Finding::new(
            Severity::Warn,
            "tls",
            &subject,
            "self-signed: senders encrypt to it but cannot authenticate it (MTA-STS and DANE-TA need a CA)",
        ));
    } else if parsed.len() == 1 {
        out.push(Finding::new(
            Severity::Warn,
            "tls",
            &subject,
            "no intermediate certificates in the file: senders without them cannot build the chain",
        ));
    }
    out
}

fn dns_names(cert: &X509Certificate<'_>) -> Vec<String> {
    let mut names = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for n in &san.value.general_names {
            if let GeneralName::DNSName(d) = n {
                names.push(d.to_ascii_lowercase());
            }
        }
    }
    names
}

/// RFC 6125 §6.4.3: a wildcard only as the whole left-most label.
fn name_matches(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix("*.") {
        Some(rest) => host
            .split_once('.')
            .is_some_and(|(first, tail)| !first.is_empty() && tail == rest),
        None => pattern == host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_cert(dir: &Path, names: &[&str], days: i64) -> std::path::PathBuf {
        let mut params =
            rcgen::CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .expect("params");
        let now = rcgen::date_time_ymd(2026, 1, 1);
        params.not_before = now;
        params.not_after = now + time_days(days);
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = params.self_signed(&key).expect("cert");
        let path = dir.join(format!("{}-{days}.pem", names.first().unwrap_or(&"none")));
        std::fs::write(&path, cert.pem()).expect("write");
        path
    }

    fn time_days(d: i64) -> std::time::Duration {
        std::time::Duration::from_secs(d.unsigned_abs() * 86_400)
    }

    fn at_2026() -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_767_225_600).expect("ts") // 2026-01-01
    }

    #[test]
    fn names_expiry_and_garbage() {
        let dir = tempfile::tempdir().expect("tmp");
        let good = write_cert(dir.path(), &["mail.example.org"], 90);
        let f = check(&good, "mail.example.org", at_2026());
        assert_eq!(f[0].severity, Severity::Ok, "{f:?}");
        assert!(
            f[1].message.contains("90 more days") || f[1].message.contains("89 more days"),
            "{f:?}"
        );
        let wrong = check(&good, "other.example.org", at_2026());
        assert_eq!(wrong[0].severity, Severity::Error);
        let soon = write_cert(dir.path(), &["*.example.org"], 5);
        let f = check(&soon, "mail.example.org", at_2026());
        assert_eq!(f[0].severity, Severity::Ok, "wildcard: {f:?}");
        assert_eq!(f[1].severity, Severity::Warn);
        let f = check(&soon, "a.b.example.org", at_2026());
        assert_eq!(
            f[0].severity,
            Severity::Error,
            "a wildcard covers one label"
        );
        let later = jiff::Timestamp::from_second(1_767_225_600 + 30 * 86_400).expect("ts");
        assert_eq!(
            check(&soon, "mail.example.org", later)[1].severity,
            Severity::Error
        );
        let junk = dir.path().join("junk.pem");
        std::fs::write(
            &junk,
            "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n",
        )
        .expect("write");
        assert_eq!(check(&junk, "x", at_2026())[0].severity, Severity::Error);
        std::fs::write(&junk, vec![0xffu8; 4096]).expect("write");
        assert_eq!(check(&junk, "x", at_2026())[0].severity, Severity::Error);
        assert_eq!(
            check(&dir.path().join("missing"), "x", at_2026())[0].severity,
            Severity::Error
        );
    }
}
