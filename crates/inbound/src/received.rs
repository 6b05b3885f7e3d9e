//! The `Received:` trace header (RFC 5321 §4.4) prepended to every accepted message.
//!
//! Form: `Received: from <helo> ([<ip>])\r\n\tby <hostname> (Herald) with <ESMTP|SMTP|LMTP|…>\r\n\t
//! [for <rcpt>]; <RFC 5322 date, UTC>\r\n`. The `for` clause appears only for a single
//! recipient, so one list's header never reveals another's address.
//!
//! Invariant: the header is at most a few hundred octets, CRLF-terminated, every line under
//! 998 octets, and contains no bare CR or LF.
//!
//! SECURITY: every part is validated before it gets here: the HELO domain by the `smtp` parser
//! (domain or address literal, printable ASCII), the hostname by [`crate::InboundConfig`], the
//! recipient by [`herald_types::Address`] (UTF-8 only in an SMTPUTF8 transaction, whose
//! headers RFC 6532 allows to carry it), the IP by its type. Nothing peer-controlled can start
//! a new header line.

use herald_smtp::Envelope;
use jiff::fmt::rfc2822::DateTimePrinter;
use jiff::tz::TimeZone;
use jiff::Timestamp;
use std::net::{IpAddr, SocketAddr};

/// The header for `envelope`, received from `peer` by `hostname` at `received_at_ms`; `tls` is
/// the protocol version and cipher suite when the session was encrypted (RFC 3848: the
/// protocol becomes `ESMTPS`/`LMTPS`, and a comment names them, as Postfix writes it).
pub fn header(
    envelope: &Envelope,
    peer: SocketAddr,
    hostname: &str,
    received_at_ms: u64,
    tls: Option<&(String, String)>,
) -> String {
    let ip = match peer.ip().to_canonical() {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("IPv6:{v6}"),
    };
    let protocol = envelope.helo.verb.protocol();
    // RFC 3848 registers the "S" forms for ESMTP and LMTP only (STARTTLS needs EHLO/LHLO; a
    // HELO client over implicit TLS keeps "SMTP"). Version and cipher come from rustls'
    // own names: no peer-controlled text.
    let (protocol, using) = match tls {
        Some((version, cipher)) => (
            match protocol {
                "ESMTP" => "ESMTPS",
                "LMTP" => "LMTPS",
                p => p,
            },
            format!("\r\n\t(using {version} with cipher {cipher})"),
        ),
        None => (protocol, String::new()),
    };
    // RFC 6531 §3.7.3: a transaction with SMTPUTF8 is recorded as UTF8SMTP[S] / UTF8LMTP[S]
    // (HELO cannot carry the parameter).
    let utf8 = match (envelope.params.smtputf8, protocol) {
        (true, "ESMTP") => Some("UTF8SMTP"),
        (true, "ESMTPS") => Some("UTF8SMTPS"),
        (true, "LMTP") => Some("UTF8LMTP"),
        (true, "LMTPS") => Some("UTF8LMTPS"),
        _ => None,
    };
    let protocol = utf8.unwrap_or(protocol);
    let rcpt = match envelope.rcpts.as_slice() {
        [only] => format!("\r\n\tfor <{only}>"),
        _ => String::new(),
    };
    format!(
        "Received: from {helo} ([{ip}]){using}\r\n\tby {hostname} (Herald) with {protocol}{rcpt};\r\n\t{date}\r\n",
        helo = envelope.helo.domain,
        date = rfc5322_date(received_at_ms),
    )
}

/// `Thu, 1 Jan 1970 00:00:00 +0000` (RFC 5322 §3.3), always in UTC, written by jiff's RFC 2822
/// printer (the project's one date crate).
pub fn rfc5322_date(unix_ms: u64) -> String {
    let instant = i64::try_from(unix_ms)
        .ok()
        .and_then(|ms| Timestamp::from_millisecond(ms).ok())
        .unwrap_or(Timestamp::MAX);
    // A UTC zoned time prints as `+0000`; a bare timestamp would print `-0000` ("offset
    // unknown", RFC 5322 §3.3), which is not what a server that knows its clock writes.
    let utc = instant.to_zoned_datetime(TimeZone::UTC);
    // The printer refuses only years outside 1900..=9999 (RFC 5322's four digits); `unix_ms`
    // is after 1970 and clamped to jiff's last instant, so the fallback is never written.
    DateTimePrinter::new()
        .zoned_datetime_to_string(&utc)
        .unwrap_or_else(|_| EPOCH.to_string())
}

const EPOCH: &str = "Thu, 1 Jan 1970 00:00:00 +0000";

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use herald_smtp::{Helo, HeloVerb, MailParams, Mode};
    use herald_types::Address;

    #[test]
    fn formats_dates() {
        assert_eq!(rfc5322_date(0), "Thu, 1 Jan 1970 00:00:00 +0000");
        assert_eq!(
            rfc5322_date(951_782_400_000),
            "Tue, 29 Feb 2000 00:00:00 +0000"
        );
        assert_eq!(
            rfc5322_date(1_700_000_000_999),
            "Tue, 14 Nov 2023 22:13:20 +0000"
        );
        assert_eq!(
            rfc5322_date(4_102_444_799_000),
            "Thu, 31 Dec 2099 23:59:59 +0000"
        );
        // Past the calendar's end: clamped, never a panic.
        assert!(rfc5322_date(u64::MAX).contains(" Dec 9999 "));
        assert_eq!(rfc5322_date(0), EPOCH);
    }

    fn envelope(rcpts: &[&str]) -> Envelope {
        Envelope {
            mode: Mode::Smtp,
            helo: Helo {
                verb: HeloVerb::Ehlo,
                domain: "client.example".into(),
            },
            mail_from: None,
            rcpts: rcpts.iter().map(|r| Address::parse(r).unwrap()).collect(),
            rcpt_params: Vec::new(),
            params: MailParams::default(),
            body: Bytes::new(),
        }
    }

    #[test]
    fn names_the_single_recipient_only() {
        let peer: SocketAddr = "192.0.2.7:2525".parse().unwrap();
        assert_eq!(
            header(&envelope(&["list@l.example"]), peer, "mx.example", 0, None),
            "Received: from client.example ([192.0.2.7])\r\n\tby mx.example (Herald) with ESMTP\r\n\tfor <list@l.example>;\r\n\tThu, 1 Jan 1970 00:00:00 +0000\r\n"
        );
        let two = header(
            &envelope(&["a@l.example", "b@l.example"]),
            peer,
            "mx.example",
            0,
            None,
        );
        assert!(!two.contains("for <"));
        let v6: SocketAddr = "[2001:db8::1]:25".parse().unwrap();
        assert!(header(&envelope(&[]), v6, "mx.example", 0, None).contains("([IPv6:2001:db8::1])"));
        let mapped: SocketAddr = "[::ffff:192.0.2.7]:25".parse().unwrap();
        assert!(header(&envelope(&[]), mapped, "mx.example", 0, None).contains("([192.0.2.7])"));
    }

    #[test]
    fn tls_sessions_say_esmtps_and_name_the_cipher() {
        let peer: SocketAddr = "192.0.2.7:2525".parse().unwrap();
        let tls = (
            "TLSv1.3".to_string(),
            "TLS13_AES_256_GCM_SHA384".to_string(),
        );
        assert_eq!(
            header(&envelope(&["list@l.example"]), peer, "mx.example", 0, Some(&tls)),
            "Received: from client.example ([192.0.2.7])\r\n\t(using TLSv1.3 with cipher TLS13_AES_256_GCM_SHA384)\r\n\tby mx.example (Herald) with ESMTPS\r\n\tfor <list@l.example>;\r\n\tThu, 1 Jan 1970 00:00:00 +0000\r\n"
        );
    }

    #[test]
    fn smtputf8_sessions_say_utf8smtp() {
        let peer: SocketAddr = "192.0.2.7:2525".parse().unwrap();
        let mut env = envelope(&["jörg@münchen.example"]);
        env.params.smtputf8 = true;
        let h = header(&env, peer, "mx.example", 0, None);
        assert!(
            h.contains("with UTF8SMTP\r\n\tfor <jörg@xn--mnchen-3ya.example>;"),
            "{h}"
        );
        let tls = ("TLSv1.3".to_string(), "X".to_string());
        assert!(header(&env, peer, "mx.example", 0, Some(&tls)).contains("with UTF8SMTPS\r\n"));
    }
}
