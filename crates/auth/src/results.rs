//! Our own `Authentication-Results` field (RFC 8601): written once on arrival, read again at
//! render time to decide From rewriting (DMARC policy) and the ARC hop (chain result).
//!
//! Trust: a field is ours only if its authserv-id equals the server's host name. The server
//! strips every incoming field carrying that id before it prepends its own (RFC 8601 §5), so
//! the topmost field with our id in a stored post is the one we wrote.
//!
//! SECURITY: the fields come from posts and are hostile until stripped. Parsing never panics,
//! bounds nothing it does not own (it walks the given bytes once) and treats anything it cannot
//! read as absent.

use crate::verify::DmarcPolicy;
use std::borrow::Cow;

/// What our arrival check recorded, as far as fan-out is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArrivalResults {
    /// The unfolded value after the field name (`authserv-id; dkim=...; ...`): the payload of
    /// an `ARC-Authentication-Results` field for this hop.
    pub payload: String,
    /// `dmarc=` result (`pass`, `fail`, `none`, `temperror`, `permerror`), if recorded.
    pub dmarc: Option<String>,
    /// `header.from=` of the DMARC result: the domain the policy is for.
    pub dmarc_domain: Option<String>,
    /// `policy.dmarc=` of the DMARC result.
    pub dmarc_policy: DmarcPolicy,
    /// `arc=` result of the incoming chain (`pass`, `fail`, `none`), if recorded.
    pub arc: Option<String>,
}

impl ArrivalResults {
    /// Whether the policy lookup itself failed transiently: the policy is then unknown.
    pub fn dmarc_unknown(&self) -> bool {
        self.dmarc.as_deref() == Some("temperror")
    }
}

/// Parses the value of an `Authentication-Results` field (the bytes after the colon) and
/// returns it if its authserv-id is `authserv_id`.
pub fn parse_ours(value: &[u8], authserv_id: &str) -> Option<ArrivalResults> {
    let text = std::str::from_utf8(value).ok()?;
    let unfolded: String = text
        .split(['\r', '\n'])
        .map(|l| l.trim_matches([' ', '\t']))
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let parts = split_resinfo(&unfolded);
    let mut parts = parts.into_iter();
    // authserv-id [version]
    let id = parts.next()?;
    let id = id.split_whitespace().next()?;
    if !id.eq_ignore_ascii_case(authserv_id) {
        return None;
    }
    let mut out = ArrivalResults {
        payload: unfolded.clone(),
        dmarc: None,
        dmarc_domain: None,
        dmarc_policy: DmarcPolicy::None,
        arc: None,
    };
    for resinfo in parts {
        let mut tokens = resinfo.split_whitespace();
        let Some((method, result)) = tokens.next().and_then(|t| t.split_once('=')) else {
            continue;
        };
        let result = result.to_ascii_lowercase();
        match method.to_ascii_lowercase().as_str() {
            // The first result of a method is the one that counts (we write one of each).
            "dmarc" if out.dmarc.is_none() => {
                out.dmarc = Some(result);
                for t in tokens {
                    match t.split_once('=') {
                        Some((p, v)) if p.eq_ignore_ascii_case("header.from") => {
                            out.dmarc_domain = Some(v.trim_matches('"').to_ascii_lowercase());
                        }
                        Some((p, v)) if p.eq_ignore_ascii_case("policy.dmarc") => {
                            out.dmarc_policy = match v.to_ascii_lowercase().as_str() {
                                "reject" => DmarcPolicy::Reject,
                                "quarantine" => DmarcPolicy::Quarantine,
                                _ => DmarcPolicy::None,
                            };
                        }
                        _ => {}
                    }
                }
            }
            "arc" if out.arc.is_none() => out.arc = Some(result),
            _ => {}
        }
    }
    Some(out)
}

/// Splits on `;` outside comments and quoted strings, dropping comments (RFC 8601 §2.2 allows
/// CFWS anywhere; mail-auth writes reasons as comments, which may hold any text).
fn split_resinfo(s: &str) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut depth = 0usize;
    let mut quoted = false;
    let mut escaped = false;
    for c in s.chars() {
        let Some(cur) = parts.last_mut() else { break };
        if escaped {
            escaped = false;
            if depth == 0 {
                cur.push(c);
            }
            continue;
        }
        match c {
            '\\' if quoted || depth > 0 => escaped = true,
            '"' if depth == 0 => {
                quoted = !quoted;
                cur.push(c);
            }
            '(' if !quoted => depth += 1,
            ')' if !quoted && depth > 0 => depth -= 1,
            ';' if !quoted && depth == 0 => parts.push(String::new()),
            _ if depth == 0 => cur.push(c),
            _ => {}
        }
    }
    parts
        .into_iter()
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

/// Removes every `Authentication-Results` field whose authserv-id is `authserv_id` from the
/// header of `message` (RFC 8601 §5: a forged field claiming to be ours must not reach the
/// stage that trusts ours). Borrows when there is none, which is the normal case.
pub fn strip_ours<'a>(message: &'a [u8], authserv_id: &str) -> Cow<'a, [u8]> {
    let header_end = message
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(message.len(), |i| i + 2);
    let mut forged = Vec::new();
    let mut start = 0;
    while start < header_end {
        let end = field_end(message, start, header_end);
        let raw = &message[start..end];
        const NAME: &[u8] = b"authentication-results";
        if raw.len() > NAME.len() && raw[..NAME.len()].eq_ignore_ascii_case(NAME) {
            let rest = &raw[NAME.len()..];
            let after_ws = rest
                .iter()
                .position(|b| !matches!(b, b' ' | b'\t'))
                .unwrap_or(rest.len());
            if rest.get(after_ws) == Some(&b':')
                && parse_ours(&rest[after_ws + 1..], authserv_id).is_some()
            {
                forged.push(start..end);
            }
        }
        start = end;
    }
    if forged.is_empty() {
        return Cow::Borrowed(message);
    }
    let mut out = Vec::with_capacity(message.len());
    let mut at = 0;
    for r in forged {
        out.extend_from_slice(&message[at..r.start]);
        at = r.end;
    }
    out.extend_from_slice(&message[at..]);
    Cow::Owned(out)
}

/// End of the field starting at `start`: past its CRLF and every continuation line.
fn field_end(message: &[u8], start: usize, limit: usize) -> usize {
    let mut end = start;
    loop {
        match message[end..limit].windows(2).position(|w| w == b"\r\n") {
            Some(i) => end += i + 2,
            None => return limit,
        }
        if end >= limit || !matches!(message.get(end), Some(b' ' | b'\t')) {
            return end;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OURS: &str = " herald.test;\r\n\tdkim=pass header.d=poster.example header.s=s1;\r\n\tspf=pass (sender is authorized; fine) smtp.mailfrom=poster.example;\r\n\tarc=none smtp.remote-ip=127.0.0.1;\r\n\tdmarc=pass header.from=Poster.Example policy.dmarc=reject";

    #[test]
    fn reads_our_dmarc_and_arc_results() {
        let r = parse_ours(OURS.as_bytes(), "HERALD.test").expect("ours");
        assert_eq!(r.dmarc.as_deref(), Some("pass"));
        assert_eq!(r.dmarc_domain.as_deref(), Some("poster.example"));
        assert_eq!(r.dmarc_policy, DmarcPolicy::Reject);
        assert_eq!(r.arc.as_deref(), Some("none"));
        assert!(
            r.payload.starts_with("herald.test; dkim=pass"),
            "{}",
            r.payload
        );
        assert!(!r.payload.contains('\r'));
        assert!(parse_ours(OURS.as_bytes(), "other.host").is_none());
    }

    #[test]
    fn hostile_values_never_panic_and_read_as_nothing_useful() {
        for v in [
            &b""[..],
            b";;;",
            b" herald.test",
            b" herald.test; dmarc",
            b" herald.test; dmarc=; policy.dmarc=reject",
            b" herald.test; (unclosed comment; dmarc=fail policy.dmarc=reject",
            b" herald.test; \"unclosed; dmarc=fail",
            b" herald.test; dmarc=fail policy.dmarc",
            b"\xff\xfe; dmarc=fail",
            b" herald.test; dmarc=fail (p=reject) policy.dmarc=\xc3",
        ] {
            if let Some(r) = parse_ours(v, "herald.test") {
                assert_ne!(r.dmarc_policy, DmarcPolicy::Reject, "{v:?}");
            }
        }
        let r = parse_ours(
            b" herald.test; dmarc=temperror header.from=x.example",
            "herald.test",
        )
        .expect("ours");
        assert!(r.dmarc_unknown());
    }

    #[test]
    fn strips_only_fields_with_our_id() {
        let msg = b"Authentication-Results: herald.test; dmarc=pass policy.dmarc=none\r\n\
Received: x\r\n\
authentication-results : Herald.Test;\r\n dkim=pass\r\n\
Authentication-Results: mx.other; dkim=fail\r\n\
Subject: hi\r\n\r\nAuthentication-Results: herald.test; body line\r\n";
        let out = strip_ours(msg, "herald.test");
        assert_eq!(
            &out[..],
            &b"Received: x\r\nAuthentication-Results: mx.other; dkim=fail\r\nSubject: hi\r\n\r\nAuthentication-Results: herald.test; body line\r\n"[..]
        );
        assert!(matches!(
            strip_ours(b"Subject: x\r\n\r\n", "h"),
            Cow::Borrowed(_)
        ));
        // No blank line, a field that never ends: still no panic.
        assert_eq!(&strip_ours(b"Authentication-Results: h; x", "h")[..], b"");
    }
}
