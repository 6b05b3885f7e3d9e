//! Who really sent a post that reached Herald through an MTA in front of it (LMTP).
//!
//! Over LMTP the client Herald sees is that MTA, often 127.0.0.1; SPF against it would be a
//! false result. The MTA recorded the real client in the `Received:` field it prepended
//! (RFC 5321 §4.4): `from <helo> (<rdns> [<ip>])` (Postfix, Sendmail) or
//! `from <rdns> ([<ip>] helo=<helo>)` (Exim); mail-parser's `Received:` parser reads each one
//! ([`parse_field`]), replacing a hand-written one. [`relay_client`] reads those fields top-down, below
//! Herald's own, skipping hops from the operator's internal relays (a content filter that
//! re-injects over loopback adds one), and returns the first outside client.
//!
//! Trust: only fields written by our own hops are believed. The walk starts at the field the
//! LMTP client wrote, and goes further down only while the recorded client is an internal relay,
//! whose own field is then the next one. It stops at the first field it cannot read, so a forged
//! field further down is never reached by skipping.
//!
//! SECURITY: fields are poster-influenced text (the HELO, reverse DNS names). Parsing is bounded
//! (field length, hop count), never panics, and the HELO returned is printable ASCII without
//! spaces; an unreadable field yields `None` (no SPF), never a guess.

use crate::dkim::header_fields;
use mail_parser::parsers::MessageStream;
use mail_parser::{HeaderValue, Host};
use std::net::IpAddr;

/// Longest `Received:` field read; real ones are a few hundred octets.
const MAX_FIELD: usize = 4096;
/// Most hops walked below Herald's own field.
const MAX_HOPS: usize = 8;

/// The outside client of a post, as an internal relay recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayClient {
    pub ip: IpAddr,
    /// The client's HELO/EHLO name, or its address literal.
    pub helo: String,
}

/// An address block of internal relays, e.g. `127.0.0.0/8` or `::1/128`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpBlock {
    network: IpAddr,
    prefix: u8,
}

impl IpBlock {
    /// Parses `a.b.c.d/n`, `x::y/n` or a bare address (a single host).
    pub fn parse(s: &str) -> Result<IpBlock, String> {
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let network: IpAddr = addr
            .trim()
            .parse()
            .map_err(|_| format!("{s:?} is not an IP address or CIDR block"))?;
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => p
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|&p| p <= max)
                .ok_or_else(|| format!("{s:?}: the prefix length must be 0–{max}"))?,
        };
        Ok(IpBlock { network, prefix })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let (net, ip, bits) = match (self.network, ip.to_canonical()) {
            (IpAddr::V4(n), IpAddr::V4(i)) => (u32::from(n) as u128, u32::from(i) as u128, 32),
            (IpAddr::V6(n), IpAddr::V6(i)) => (u128::from(n), u128::from(i), 128),
            _ => return false,
        };
        let host_bits = bits - u32::from(self.prefix);
        if host_bits >= 128 {
            return true;
        }
        (net >> host_bits) == (ip >> host_bits)
    }
}

/// The outside client recorded in `message`'s `Received:` fields. `ours` is how many fields at
/// the top Herald itself wrote (1 for a message from its LMTP listener); the next field is the
/// LMTP client's. `internal` lists relays whose recorded clients are walked past.
pub fn relay_client(message: &[u8], ours: usize, internal: &[IpBlock]) -> Option<RelayClient> {
    let received = header_fields(message)
        .into_iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case("Received"))
        .skip(ours)
        .take(MAX_HOPS);
    for (_, raw) in received {
        let client = parse_field(raw)?;
        if !internal.iter().any(|b| b.contains(client.ip)) {
            return Some(client);
        }
    }
    None
}

/// The client of one raw `Received:` field (name included), if its `from` clause names one.
///
/// mail-parser reads the field (its `Received:` grammar knows the Postfix, Sendmail and Exim
/// forms, comments and address literals); this function adds what Herald requires before it
/// believes a hop: a field of bounded length, a client address in the `from` clause, and a
/// HELO that is printable ASCII without spaces.
pub fn parse_field(raw: &[u8]) -> Option<RelayClient> {
    if raw.len() > MAX_FIELD {
        return None;
    }
    let colon = raw.iter().position(|&b| b == b':')?;
    let value = &raw[colon + 1..];
    // mail-parser reads on past an unclosed `[` or `(`; a damaged field is not guessed at.
    if !balanced(value, b'[', b']') || !balanced(value, b'(', b')') {
        return None;
    }
    let HeaderValue::Received(received) = MessageStream::new(value).parse_received() else {
        return None;
    };
    // `from [192.0.2.1] (…)`: the client sent no name, so mail-parser records the literal as
    // the `from` host rather than as `from_ip`.
    let ip = match (received.from_ip(), received.from()) {
        (Some(ip), _) => ip.to_canonical(),
        (None, Some(Host::IpAddr(ip))) => ip.to_canonical(),
        _ => return None,
    };
    // Exim writes the HELO in the comment (`helo=`); elsewhere it is the first word after
    // `from`. A `from` clause that opens with the comment (no name, no literal) has no HELO.
    let helo = match (received.helo(), received.from()) {
        (Some(helo), _) => host_text(helo),
        (None, Some(from)) => host_text(from),
        (None, None) => return None,
    };
    let printable =
        |s: &str| !s.is_empty() && s.len() <= 255 && s.bytes().all(|b| b.is_ascii_graphic());
    printable(&helo).then_some(RelayClient { ip, helo })
}

/// True when every `open` is closed, in order.
fn balanced(value: &[u8], open: u8, close: u8) -> bool {
    let mut depth = 0usize;
    for &b in value {
        if b == open {
            depth += 1;
        } else if b == close {
            match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => return false,
            }
        }
    }
    depth == 0
}

/// A HELO name as sent, or an address literal as the client wrote it (`[192.0.2.1]`).
fn host_text(host: &Host<'_>) -> String {
    match host {
        Host::Name(name) => name.to_string(),
        Host::IpAddr(IpAddr::V4(ip)) => format!("[{ip}]"),
        Host::IpAddr(IpAddr::V6(ip)) => format!("[IPv6:{ip}]"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(ip: &str, helo: &str) -> Option<RelayClient> {
        Some(RelayClient {
            ip: ip.parse().expect("ip"),
            helo: helo.into(),
        })
    }

    #[test]
    fn reads_the_common_mta_forms() {
        let cases = [
            // Postfix: HELO, then (rdns [ip]).
            ("Received: from mail.example.com (mail.example.com [192.0.2.1])\r\n\tby mx.lists.test (Postfix) with ESMTPS id 4AB; Sat, 21 Nov 2026 07:00:00 +0000\r\n", client("192.0.2.1", "mail.example.com")),
            // Postfix without reverse DNS; HELO differs.
            ("Received: from helo.example (unknown [198.51.100.7])\r\n\tby mx (Postfix) with ESMTP id 1\r\n", client("198.51.100.7", "helo.example")),
            // Exim: rdns, then ([ip] helo=...).
            ("Received: from rdns.example.net ([203.0.113.9] helo=smtp.example.net)\r\n\tby mx with esmtps (Exim 4.96)\r\n", client("203.0.113.9", "smtp.example.net")),
            // Exim without reverse DNS.
            ("Received: from [203.0.113.9] (helo=smtp.example.net)\r\n\tby mx with esmtp\r\n", client("203.0.113.9", "smtp.example.net")),
            // IPv6 literal, and our own form.
            ("Received: from v6.example ([IPv6:2001:db8::25])\r\n\tby h (Herald) with ESMTP;\r\n\tdate\r\n", client("2001:db8::25", "v6.example")),
            // A v4-mapped address reads as v4.
            ("Received: from x.example (x [IPv6:::ffff:192.0.2.8]) by mx\r\n", client("192.0.2.8", "x.example")),
        ];
        for (field, want) in cases {
            assert_eq!(parse_field(field.as_bytes()), want, "{field}");
        }
    }

    #[test]
    fn hostile_or_unreadable_fields_give_nothing() {
        let long = format!(
            "Received: from a.example ({} [192.0.2.1]) by mx\r\n",
            "x".repeat(5000)
        );
        let helo_too_long = format!(
            "Received: from {}.example (x [192.0.2.1]) by mx\r\n",
            "a".repeat(300)
        );
        let cases = [
            "Received: by mx (Postfix, from userid 1000) id 4AB\r\n",
            "Received: from a.example by mx\r\n",
            "Received: from a.example (rdns [300.1.1.1]) by mx\r\n",
            "Received: from a.example (rdns [192.0.2.1) by mx\r\n",
            "Received: from (rdns [192.0.2.1]) by mx\r\n",
            "Received: from\r\n",
            "Received:\r\n",
            "Received: from \u{7f}bad (x [192.0.2.1]) by mx\r\n",
            // The address must be in the from clause, not in the by clause.
            "Received: from a.example by mx ([192.0.2.1])\r\n",
            long.as_str(),
            // Brackets and comments that do not close (or close first) are damage, not data.
            "Received: from a.example ((rdns [192.0.2.1]) by mx\r\n",
            "Received: from a.example (rdns [192.0.2.1]]) by mx\r\n",
            "Received: from a.example) (rdns [192.0.2.1]) by mx\r\n",
            // A HELO longer than a domain name can be.
            helo_too_long.as_str(),
            // A HELO that is not ASCII.
            "Received: from h\u{e9}llo.example (x [192.0.2.1]) by mx\r\n",
        ];
        for field in cases {
            assert_eq!(parse_field(field.as_bytes()), None, "{field:?}");
        }
        // Arbitrary bytes never panic.
        for seed in 0u32..2000 {
            let bytes: Vec<u8> = (0..(seed % 97))
                .map(|i| (seed.wrapping_mul(2_654_435_761).rotate_left(i) & 0xff) as u8)
                .collect();
            let mut field = b"Received: from ".to_vec();
            field.extend_from_slice(&bytes);
            let _ = parse_field(&field);
        }
    }

    #[test]
    fn walks_past_ours_and_internal_hops_only() {
        let msg = b"Received: from mx.lists.test ([127.0.0.1])\r\n\tby lists.test (Herald) with LMTP; d\r\n\
Received: from localhost (localhost [127.0.0.1])\r\n\tby mx.lists.test (Postfix) with ESMTP id 2; d\r\n\
Received: from mail.example.com (mail.example.com [192.0.2.1])\r\n\tby mx.lists.test (Postfix) with ESMTPS id 1; d\r\n\
Received: from forged.example (forged [198.51.100.66]) by mail.example.com; d\r\n\
Subject: hi\r\n\r\nbody\r\n";
        let loopback = [IpBlock::parse("127.0.0.0/8").expect("cidr")];
        assert_eq!(
            relay_client(msg, 1, &loopback),
            client("192.0.2.1", "mail.example.com")
        );
        // Without the internal block, the content filter's hop is the client.
        assert_eq!(relay_client(msg, 1, &[]), client("127.0.0.1", "localhost"));
        // An unreadable field stops the walk: nothing below it is believed.
        let broken = b"Received: ours\r\nReceived: by mx (Postfix, from userid 0)\r\n\
Received: from forged.example (f [198.51.100.66]) by x\r\n\r\n";
        assert_eq!(relay_client(broken, 1, &loopback), None);
        // No fields at all, or only ours.
        assert_eq!(relay_client(b"Subject: x\r\n\r\n", 1, &loopback), None);
        assert_eq!(relay_client(&msg[..msg.len() / 8], 1, &loopback), None);
    }

    #[test]
    fn ip_blocks_parse_strictly_and_match() {
        let b = IpBlock::parse("192.0.2.0/24").expect("v4");
        assert!(b.contains("192.0.2.200".parse().expect("ip")));
        assert!(!b.contains("192.0.3.1".parse().expect("ip")));
        assert!(b.contains("::ffff:192.0.2.9".parse().expect("ip")));
        let v6 = IpBlock::parse("::1").expect("host");
        assert!(v6.contains("::1".parse().expect("ip")));
        assert!(!v6.contains("::2".parse().expect("ip")));
        assert!(IpBlock::parse("0.0.0.0/0")
            .expect("all")
            .contains("8.8.8.8".parse().expect("ip")));
        assert!(IpBlock::parse("::/0")
            .expect("all v6")
            .contains("2001:db8::1".parse().expect("ip")));
        for bad in [
            "",
            "x",
            "192.0.2.0/33",
            "::/129",
            "192.0.2.0/-1",
            "192.0.2.0/",
            "1.2.3/8",
        ] {
            assert!(IpBlock::parse(bad).is_err(), "{bad:?}");
        }
    }
}
