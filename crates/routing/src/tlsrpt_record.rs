//! The TLS reporting policy record (RFC 8460 §3; used by `herald-tlsrpt` to send reports and by
//! `herald doctor` to check a list domain's own record): the TXT record at `_smtp._tls.<domain>`,
//! `v=TLSRPTv1; rua=mailto:reports@example.com,https://reports.example.com/tlsrpt`.
//!
//! Hand-written: the grammar is one `v=` field then `;`-separated `key=value` fields, of which
//! only `rua` (a comma-separated list of URIs) is defined; no crate parses it.
//!
//! SECURITY: the record is published by the recipient domain, i.e. anyone; it decides where
//! Herald sends a report about its own sessions. Only `mailto:` with one valid address and
//! `https:` URLs with a host are kept, at most [`MAX_RUA`] of them, from a record of at most
//! [`MAX_RECORD_LEN`] octets. A domain cannot make Herald send anything but its own report.

use herald_types::Address;

/// Longest record accepted (TXT strings concatenated).
pub const MAX_RECORD_LEN: usize = 2048;
/// Report destinations kept per record (the rest are ignored, as a receiver should not make
/// one report into a mail bomb).
pub const MAX_RUA: usize = 4;

/// Where a report goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rua {
    Mailto(Address),
    Https(String),
}

/// Why a record was not usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("record is longer than {MAX_RECORD_LEN} octets")]
    TooLong,
    #[error("record does not start with v=TLSRPTv1")]
    Version,
    #[error("record has no rua field")]
    NoRua,
    #[error("record has no usable rua destination (mailto: or https:)")]
    NoUsableRua,
    #[error("record has more than one rua field")]
    DuplicateRua,
}

/// Parses one record. Unknown fields are ignored (RFC 8460 §3: extensions).
pub fn parse(record: &str) -> Result<Vec<Rua>, RecordError> {
    if record.len() > MAX_RECORD_LEN {
        return Err(RecordError::TooLong);
    }
    let mut fields = record.split(';').map(|f| f.trim_matches([' ', '\t']));
    let version = fields.next().unwrap_or("");
    if version != "v=TLSRPTv1" {
        return Err(RecordError::Version);
    }
    let mut rua = None;
    for field in fields {
        let Some((key, value)) = field.split_once('=') else {
            continue;
        };
        if key.trim_matches([' ', '\t']) != "rua" {
            continue;
        }
        if rua.is_some() {
            return Err(RecordError::DuplicateRua);
        }
        rua = Some(value.trim_matches([' ', '\t']).to_string());
    }
    let rua = rua.ok_or(RecordError::NoRua)?;
    let kept: Vec<Rua> = rua
        .split(',')
        .filter_map(|u| uri(u.trim_matches([' ', '\t'])))
        .take(MAX_RUA)
        .collect();
    if kept.is_empty() {
        return Err(RecordError::NoUsableRua);
    }
    Ok(kept)
}

/// The record among a domain's TXT strings: exactly one must start with `v=TLSRPTv1` (RFC 8460
/// §3: several such records mean none applies).
pub fn select<'a>(txts: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let mut found = txts.into_iter().filter(|t| t.starts_with("v=TLSRPTv1"));
    let first = found.next()?;
    found.next().is_none().then_some(first)
}

fn uri(u: &str) -> Option<Rua> {
    let lower = u.get(..8).map(str::to_ascii_lowercase).unwrap_or_default();
    if lower.starts_with("mailto:") {
        let addr = percent_decode(&u[7..])?;
        // One address, no query (`?subject=`): we write our own message.
        if addr.contains([',', '?']) {
            return None;
        }
        return Address::parse(&addr).ok().map(Rua::Mailto);
    }
    if lower == "https://" {
        let url = reqwest::Url::parse(u).ok()?;
        if url.host_str().is_none_or(str::is_empty) || u.chars().any(|c| c.is_control()) {
            return None;
        }
        return Some(Rua::Https(url.to_string()));
    }
    None
}

/// `%40` → `@` (RFC 3986 percent-encoding, as mailto: URIs may use). None on a broken escape
/// or a result that is not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_mailto_and_https() {
        let r = parse("v=TLSRPTv1; rua=mailto:tls%40reports.example,https://r.example:8443/v1")
            .unwrap();
        assert_eq!(
            r,
            vec![
                Rua::Mailto(Address::parse("tls@reports.example").unwrap()),
                Rua::Https("https://r.example:8443/v1".into()),
            ]
        );
        assert_eq!(
            parse("v=TLSRPTv1;rua=mailto:a@b.example;ext=1")
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn hostile_records_are_refused_or_trimmed() {
        assert_eq!(
            parse("v=TLSRPTv2; rua=mailto:a@b.example"),
            Err(RecordError::Version)
        );
        assert_eq!(parse("rua=mailto:a@b.example"), Err(RecordError::Version));
        assert_eq!(parse("v=TLSRPTv1"), Err(RecordError::NoRua));
        assert_eq!(
            parse("v=TLSRPTv1; rua=ftp://x, http://plain.example/"),
            Err(RecordError::NoUsableRua)
        );
        assert_eq!(
            parse("v=TLSRPTv1; rua=mailto:a@b.example; rua=mailto:c@d.example"),
            Err(RecordError::DuplicateRua)
        );
        assert_eq!(
            parse(&"v=TLSRPTv1; rua=".repeat(500)),
            Err(RecordError::TooLong)
        );
        // Header injection, several addresses in one mailto, a query, broken escapes.
        assert_eq!(
            parse("v=TLSRPTv1; rua=mailto:a@b.example%0d%0aBcc:x@y.example"),
            Err(RecordError::NoUsableRua)
        );
        assert_eq!(
            parse("v=TLSRPTv1; rua=mailto:a@b.example%2cc@d.example"),
            Err(RecordError::NoUsableRua)
        );
        assert_eq!(
            parse("v=TLSRPTv1; rua=mailto:a@b.example?subject=x"),
            Err(RecordError::NoUsableRua)
        );
        assert_eq!(
            parse("v=TLSRPTv1; rua=mailto:a%zz@b.example"),
            Err(RecordError::NoUsableRua)
        );
        assert_eq!(
            parse("v=TLSRPTv1; rua=https://"),
            Err(RecordError::NoUsableRua)
        );
        // Many destinations: only the first few.
        let many = (0..50)
            .map(|i| format!("mailto:r{i}@b.example"))
            .collect::<Vec<_>>()
            .join(",");
        assert_eq!(
            parse(&format!("v=TLSRPTv1; rua={many}")).unwrap().len(),
            MAX_RUA
        );
        assert!(parse("v=TLSRPTv1; rua=mailto:\u{0}@b.example").is_err());
    }

    #[test]
    fn exactly_one_record_applies() {
        assert_eq!(
            select(["spf", "v=TLSRPTv1; rua=mailto:a@b.example"]),
            Some("v=TLSRPTv1; rua=mailto:a@b.example")
        );
        assert_eq!(select(["v=TLSRPTv1; a", "v=TLSRPTv1; b"]), None);
        assert_eq!(select(["x"]), None);
    }
}
