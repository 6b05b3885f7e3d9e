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
/// returns it if its authserv-id is `authserv_id` (ASCII case-insensitive, as host names are;
/// an empty id matches nothing).
pub fn parse_ours(value: &[u8], authserv_id: &str) -> Option<ArrivalResults> {
    let id = authserv_id_of(value)?;
    if authserv_id.is_empty() || !id.eq_ignore_ascii_case(authserv_id.as_bytes()) {
        return None;
    }
    let payload = std::str::from_utf8(value)
        .ok()?
        .trim_matches([' ', '\t', '\r', '\n']);
    let mut out = ArrivalResults {
        payload: payload.to_string(),
        dmarc: None,
        dmarc_domain: None,
        dmarc_policy: DmarcPolicy::None,
        arc: None,
    };
    let mut arc_results = 0;
    // The first part is the authserv-id (and version); each later one is a resinfo.
    for resinfo in resinfos(payload).iter().skip(1) {
        let Some((method, result, props)) = method_result(resinfo) else {
            continue;
        };
        match method.as_str() {
            // We write one DMARC result; the first counts.
            "dmarc" if out.dmarc.is_none() => {
                out.dmarc = Some(result);
                for (p, v) in props.split_whitespace().filter_map(|t| t.split_once('=')) {
                    if p.eq_ignore_ascii_case("header.from") {
                        out.dmarc_domain = Some(v.trim_matches('"').to_ascii_lowercase());
                    } else if p.eq_ignore_ascii_case("policy.dmarc") {
                        out.dmarc_policy = match v.to_ascii_lowercase().as_str() {
                            "reject" => DmarcPolicy::Reject,
                            "quarantine" => DmarcPolicy::Quarantine,
                            _ => DmarcPolicy::None,
                        };
                    }
                }
            }
            "arc" => {
                arc_results += 1;
                out.arc = Some(result);
            }
            _ => {}
        }
    }
    // Several arc= results name no verdict (ARC sealing then treats the chain as failed).
    if arc_results > 1 {
        out.arc = None;
    }
    Some(out)
}

/// The authserv-id at the start of an A-R value (RFC 8601 §2.2): a token, or the content of
/// a quoted string without escapes.
pub fn authserv_id_of(value: &[u8]) -> Option<&[u8]> {
    let start = value
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t' | b'\r' | b'\n'))?;
    let rest = &value[start..];
    if let Some(quoted) = rest.strip_prefix(b"\"") {
        let end = quoted.iter().position(|&b| b == b'"' || b == b'\\')?;
        return (quoted[end] == b'"').then_some(&quoted[..end]);
    }
    let end = rest
        .iter()
        .position(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\n' | b';' | b'('))
        .unwrap_or(rest.len());
    (end > 0).then_some(&rest[..end])
}

/// `method [/ version] = result props…` (RFC 8601 §2.2): the lower-cased method and result
/// (letters only, so `pass` in `pass(comment)` or `passed` stays apart), and the rest.
fn method_result(resinfo: &str) -> Option<(String, String, &str)> {
    let (method, rest) = resinfo.split_once('=')?;
    let method = method.split('/').next().unwrap_or_default().trim();
    let rest = rest.trim_start();
    let end = rest
        .find(|c: char| !c.is_ascii_alphabetic())
        .unwrap_or(rest.len());
    let (result, props) = rest.split_at(end);
    if result.is_empty() || !props.is_empty() && !props.starts_with([' ', '\t']) {
        return None;
    }
    Some((
        method.to_ascii_lowercase(),
        result.to_ascii_lowercase(),
        props,
    ))
}

/// The `;`-separated parts of an A-R payload, with comments removed (they may hold `;` or
/// `=`; mail-auth writes reasons as comments) and `;` inside quoted strings kept. Nesting
/// depth is bounded by the payload length.
fn resinfos(payload: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut part = String::new();
    let (mut depth, mut quoted, mut escaped) = (0usize, false, false);
    for c in payload.chars() {
        if escaped {
            escaped = false;
        } else if c == '\\' && (quoted || depth > 0) {
            escaped = true;
        } else if quoted {
            quoted = c != '"';
        } else if c == '(' {
            depth += 1;
            continue;
        } else if c == ')' && depth > 0 {
            depth -= 1;
            continue;
        } else if depth == 0 && c == '"' {
            quoted = true;
        } else if depth == 0 && c == ';' {
            parts.push(std::mem::take(&mut part).trim().to_string());
            continue;
        }
        if depth == 0 {
            part.push(c);
        }
    }
    parts.push(part.trim().to_string());
    parts
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
            r.payload.starts_with("herald.test;\r\n\tdkim=pass"),
            "{}",
            r.payload
        );
        assert!(!r.payload.ends_with(['\r', '\n']));
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
    fn comments_quotes_and_repeats_do_not_fool_the_arc_result() {
        let arc = |v: &str| parse_ours(v.as_bytes(), "x").and_then(|r| r.arc);
        assert_eq!(
            arc("x; dkim=pass (arc=fail; x); arc=pass").as_deref(),
            Some("pass")
        );
        assert_eq!(
            arc("x; dkim=pass header.i=\"a;arc=fail\"; arc=none").as_deref(),
            Some("none")
        );
        assert_eq!(arc("x; ARC / 1 = PASS").as_deref(), Some("pass"));
        assert_eq!(arc("x; arc=passed").as_deref(), Some("passed"));
        assert_eq!(
            arc("x; arc=pass; arc=pass"),
            None,
            "two results name no verdict"
        );
        assert_eq!(arc("arc=pass"), None, "the first part is the authserv-id");
        assert_eq!(arc("x; ((((("), None);
        assert!(parse_ours(b" \"x\"; arc=none", "x").is_some());
        assert!(parse_ours(b" ; arc=none", "").is_none());
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
