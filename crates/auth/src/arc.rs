//! ARC (RFC 8617): sealing each fan-out copy with the list domain's DKIM key, so that a
//! receiver can trust the authentication results we saw on arrival although the list changed
//! the message (subject prefix, footer, List-* fields) and broke the poster's DKIM signature.
//!
//! Place in the flow: on arrival the server prepends our `Authentication-Results` field, with
//! the `arc=` result of the incoming chain ([`crate::Authenticator::check_arrival`]). Fan-out
//! reads it once per post into an [`ArcHop`]; for each copy, after DKIM-signing it, it calls
//! [`seal`] and prepends the three fields returned.
//!
//! The new set (RFC 8617 §4.1), instance `N`:
//! - `ARC-Authentication-Results: i=N; <our A-R payload>`;
//! - `ARC-Message-Signature`: a DKIM-Signature without `v=` and with `i=`, over the fields our
//!   DKIM-Signature covers plus every `DKIM-Signature` present (ours is prepended before
//!   sealing), c=relaxed/relaxed, with the copy's relaxed body hash (the one DKIM computed);
//! - `ARC-Seal: i; a; t; cv; d; s; b`: signs, relaxed, the ARC sets 1..N in instance order
//!   (AAR, AMS, AS each), the new AS last with an empty `b=` and no trailing CRLF. With
//!   cv=fail it signs the new set only (RFC 8617 §5.1.2: as if it were the first set; a
//!   broken chain's earlier sets are not worth vouching for). dkimpy does the same.
//!
//! Why not mail-auth's `ArcSealer`: it needs a parsed message and hashes the whole body per
//! call; fan-out seals thousands of copies of one post whose body hash is already known
//! (shared prefix + per-copy tail, `dkim::canon`).
//!
//! Limits: instances 1..=50 ([`MAX_INSTANCE`], RFC 8617 §4.2.1); every AAR line ≤ 998 octets.
//!
//! SECURITY: earlier ARC sets come from the post, so they are hostile input. They are located
//! by their `i=` tag and canonicalized, nothing more, and only when cv=pass (the arrival check
//! verified them). The A-R payload is ours, but it is still checked to be one header value
//! (folds are CRLF + WSP, no controls) so that it can never add a field to the copy.

use crate::dkim::{canonical_signed_fields, header_fields, relaxed_header, DkimError, DkimSigner};
use base64::Engine;

/// Highest ARC instance (RFC 8617 §4.2.1): a post already at 50 is not sealed again.
pub const MAX_INSTANCE: u32 = 50;

/// The names of the fields of an ARC set, in the order the seal signs them.
const SET_FIELDS: [&str; 3] = [
    "ARC-Authentication-Results",
    "ARC-Message-Signature",
    "ARC-Seal",
];

/// Chain validation status (`cv=`) of the incoming chain, as our arrival check found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArcCv {
    /// No earlier ARC set (only valid at instance 1).
    None,
    /// The incoming chain verified (only valid above instance 1).
    Pass,
    /// The incoming chain is broken; the seal says so and covers only its own set.
    Fail,
}

impl ArcCv {
    /// The `cv=` tag value.
    pub fn tag(self) -> &'static str {
        match self {
            ArcCv::None => "none",
            ArcCv::Pass => "pass",
            ArcCv::Fail => "fail",
        }
    }
}

/// What one post's copies seal: the same for every copy of the post.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArcHop {
    /// `i=` of the new set: one above the post's highest ARC instance (1..=50).
    pub instance: u32,
    /// `cv=` of the new seal.
    pub cv: ArcCv,
    /// Our Authentication-Results payload, after the field name and colon:
    /// `authserv-id; dkim=...; arc=...` (folding kept; surrounding whitespace ignored).
    pub auth_results: String,
}

/// Why a copy could not be sealed. The copy still goes out (DKIM-signed, unsealed).
#[derive(Debug, thiserror::Error)]
pub enum ArcError {
    #[error("ARC instance {0} is outside 1..=50")]
    Instance(u32),
    #[error("cv={} is not allowed at instance {instance}", cv.tag())]
    Cv { instance: u32, cv: ArcCv },
    #[error("the authentication results are not one header value with lines within 998 octets")]
    AuthResults,
    #[error("earlier ARC set {0} is missing or duplicated in the copy's header")]
    BrokenChain(u32),
    #[error(transparent)]
    Dkim(#[from] DkimError),
}

/// Returns the new ARC set for a copy: `ARC-Seal`, `ARC-Message-Signature` and
/// `ARC-Authentication-Results`, in that order, each folded and CRLF-terminated, to be
/// prepended to the copy as they are.
///
/// `header` is the copy's header block in wire form (as for [`DkimSigner::sign`]), including
/// the list's own DKIM-Signature and any earlier ARC sets; `body_hash` the copy's relaxed
/// body hash; `now` the signing time (`t=`, Unix seconds). Signs with `signer`'s key, `d=`
/// and `s=`.
pub fn seal(
    signer: &DkimSigner,
    header: &[u8],
    body_hash: &[u8; 32],
    now: u64,
    hop: &ArcHop,
) -> Result<Vec<u8>, ArcError> {
    let i = hop.instance;
    if !(1..=MAX_INSTANCE).contains(&i) {
        return Err(ArcError::Instance(i));
    }
    // RFC 8617 §4.1.3: i=1 has nothing to vouch for, above it "none" means no verdict.
    let cv_fits = match hop.cv {
        ArcCv::None => i == 1,
        ArcCv::Pass => i > 1,
        ArcCv::Fail => true,
    };
    if !cv_fits {
        return Err(ArcError::Cv {
            instance: i,
            cv: hop.cv,
        });
    }
    let aar = results_field(i, &hop.auth_results)?;
    let fields = header_fields(header);
    let (a, d, s) = (signer.algorithm().tag(), signer.domain(), signer.selector());

    let mut canonical = Vec::with_capacity(2048);
    let names = canonical_signed_fields(&fields, &["DKIM-Signature"], &mut canonical)?;
    let ams = format!(
        "ARC-Message-Signature: i={i}; a={a}; c=relaxed/relaxed; d={d}; s={s};\r\n t={now}; h={names};\r\n bh={};\r\n b=",
        base64::engine::general_purpose::STANDARD.encode(body_hash),
    );
    let ams = signer.finish_field(ams.into_bytes(), &mut canonical)?;

    canonical.clear();
    if hop.cv != ArcCv::Fail {
        for set in earlier_sets(&fields, i)? {
            for raw in set {
                relaxed_header(raw, &mut canonical);
            }
        }
    }
    relaxed_header(&aar, &mut canonical);
    relaxed_header(&ams, &mut canonical);
    let seal = format!(
        "ARC-Seal: i={i}; a={a}; t={now}; cv={}; d={d}; s={s};\r\n b=",
        hop.cv.tag()
    );
    let seal = signer.finish_field(seal.into_bytes(), &mut canonical)?;

    let mut out = Vec::with_capacity(seal.len() + ams.len() + aar.len());
    out.extend_from_slice(&seal);
    out.extend_from_slice(&ams);
    out.extend_from_slice(&aar);
    Ok(out)
}

/// The `i=` tag of an ARC field (`raw`: name, colon, value, as in the header), or `None` when
/// `raw` is not an ARC field or its `i=` is absent, repeated or not a number. Numbers beyond
/// `u32` saturate: they are out of range either way, and must not pass for small ones.
pub fn instance(raw: &[u8]) -> Option<u32> {
    let colon = raw.iter().position(|&b| b == b':')?;
    let name = trim_fws(&raw[..colon]);
    let mut tags = raw[colon + 1..].split(|&b| b == b';').map(tag);
    if name.eq_ignore_ascii_case(SET_FIELDS[0].as_bytes()) {
        // An AAR starts with its instance (RFC 8617 §4.1.1); what follows is an A-R payload,
        // whose own `i=`-looking text (e.g. `header.i=`) must not count.
        let (n, v) = tags.next()??;
        return if n == b"i" { number(v) } else { None };
    }
    if !SET_FIELDS[1..]
        .iter()
        .any(|n| name.eq_ignore_ascii_case(n.as_bytes()))
    {
        return None;
    }
    let mut found = None;
    for (n, v) in tags.flatten() {
        if n == b"i" {
            if found.is_some() {
                return None;
            }
            found = Some(number(v)?);
        }
    }
    found
}

/// `ARC-Authentication-Results: i=N; <payload>` + CRLF, if the payload is one header value.
fn results_field(instance: u32, payload: &str) -> Result<Vec<u8>, ArcError> {
    let payload = payload.trim_matches([' ', '\t', '\r', '\n']);
    let field = format!("ARC-Authentication-Results: i={instance}; {payload}\r\n").into_bytes();
    if payload.is_empty() || !is_one_field(&field) {
        return Err(ArcError::AuthResults);
    }
    Ok(field)
}

/// Whether `field` is exactly one CRLF-terminated header field: no bare CR or LF, no controls
/// but HTAB, every continuation line starts with WSP and has content, no line over 998 octets.
fn is_one_field(field: &[u8]) -> bool {
    let Some(mut rest) = field.strip_suffix(b"\r\n") else {
        return false;
    };
    let mut first = true;
    loop {
        let (line, next) = match rest.windows(2).position(|w| w == b"\r\n") {
            Some(at) => (&rest[..at], Some(&rest[at + 2..])),
            None => (rest, None),
        };
        let folded = first
            || (matches!(line.first(), Some(b' ' | b'\t'))
                && line.iter().any(|b| !matches!(b, b' ' | b'\t')));
        let clean = line.iter().all(|&b| b == b'\t' || (b >= 0x20 && b != 0x7f));
        if !folded || !clean || line.len() > 998 {
            return false;
        }
        match next {
            Some(n) => {
                rest = n;
                first = false;
            }
            None => return true,
        }
    }
}

/// The ARC sets 1..`below` of the header, each as [AAR, AMS, AS]. One pass over the fields;
/// a set with a field missing or present twice makes the chain unusable.
fn earlier_sets<'h>(
    fields: &[(&str, &'h [u8])],
    below: u32,
) -> Result<Vec<[&'h [u8]; 3]>, ArcError> {
    let count = below.saturating_sub(1) as usize;
    let mut sets: Vec<[Option<&[u8]>; 3]> = vec![[None; 3]; count];
    for (name, raw) in fields {
        let Some(kind) = SET_FIELDS.iter().position(|n| n.eq_ignore_ascii_case(name)) else {
            continue;
        };
        let Some(i) = instance(raw).filter(|&i| i >= 1 && i < below) else {
            continue;
        };
        if sets[i as usize - 1][kind].replace(raw).is_some() {
            return Err(ArcError::BrokenChain(i));
        }
    }
    let mut out = Vec::with_capacity(count);
    for (n, set) in sets.into_iter().enumerate() {
        match set {
            [Some(aar), Some(ams), Some(seal)] => out.push([aar, ams, seal]),
            _ => return Err(ArcError::BrokenChain(n as u32 + 1)),
        }
    }
    Ok(out)
}

/// One `name=value` of a tag list (RFC 6376 §3.2), folding whitespace trimmed.
fn tag(part: &[u8]) -> Option<(&[u8], &[u8])> {
    let eq = part.iter().position(|&b| b == b'=')?;
    Some((trim_fws(&part[..eq]), trim_fws(&part[eq + 1..])))
}

fn number(v: &[u8]) -> Option<u32> {
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(v.iter().fold(0u32, |n, &d| {
        n.saturating_mul(10).saturating_add(u32::from(d - b'0'))
    }))
}

fn trim_fws(s: &[u8]) -> &[u8] {
    let fws = |b: &u8| matches!(b, b' ' | b'\t' | b'\r' | b'\n');
    let start = s.iter().position(|b| !fws(b)).unwrap_or(s.len());
    let end = s.iter().rposition(|b| !fws(b)).map_or(start, |e| e + 1);
    &s[start..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instances_are_read_defensively() {
        assert_eq!(
            instance(b"ARC-Seal: i=2; a=rsa-sha256; cv=pass\r\n"),
            Some(2)
        );
        assert_eq!(instance(b"arc-seal : a=x;\r\n\ti = 7 ; b=\r\n"), Some(7));
        assert_eq!(instance(b"ARC-Seal: i=999\r\n"), Some(999));
        assert_eq!(
            instance(b"ARC-Seal: i=99999999999999999999\r\n"),
            Some(u32::MAX)
        );
        for bad in [
            &b"ARC-Seal: a=rsa-sha256; cv=none\r\n"[..],
            b"ARC-Seal: i=1; i=2\r\n",
            b"ARC-Seal: i=-1\r\n",
            b"ARC-Seal: i=\r\n",
            b"ARC-Seal: i=1x\r\n",
            b"ARC-Seal\r\n",
            b"DKIM-Signature: i=1\r\n",
            b"ARC-Authentication-Results: x.test; dkim=pass header.i=@a; i=3\r\n",
        ] {
            assert_eq!(instance(bad), None, "{}", String::from_utf8_lossy(bad));
        }
        let aar = b"ARC-Authentication-Results: i=3; x.test;\r\n\tdkim=pass header.i=1\r\n";
        assert_eq!(instance(aar), Some(3));
        assert_eq!(instance(b"ARC-Message-Signature: i=4; h=from\r\n"), Some(4));
    }

    #[test]
    fn auth_results_must_be_one_value() {
        assert!(results_field(1, " x.test;\r\n\tdkim=pass;\r\n\tarc=none\r\n").is_ok());
        for bad in [
            "",
            " \r\n",
            "x.test;\r\nX-Injected: yes",
            "x.test;\r\n\r\n\tdkim=pass",
            "x.test;\r\n \r\n dkim=pass",
            "x.test; bare\nlf",
            "x.test; bare\rcr",
            "x.test; nul\0",
        ] {
            assert!(
                matches!(results_field(1, bad), Err(ArcError::AuthResults)),
                "{bad:?}"
            );
        }
        let long = format!("x.test; dkim=pass ({})", "a".repeat(990));
        assert!(results_field(1, &long).is_err());
    }

    #[test]
    fn earlier_sets_need_each_field_once() {
        let f = |h: &'static [u8]| header_fields(h);
        let one = b"ARC-Seal: i=1\r\nARC-Message-Signature: i=1\r\nARC-Authentication-Results: i=1; a\r\n";
        let sets = earlier_sets(&f(one), 2).expect("complete set");
        assert_eq!(sets.len(), 1);
        assert!(sets[0][0].starts_with(b"ARC-Authentication-Results"));
        assert!(sets[0][2].starts_with(b"ARC-Seal"));
        assert!(matches!(
            earlier_sets(&f(one), 3),
            Err(ArcError::BrokenChain(2))
        ));
        let twice = b"ARC-Seal: i=1\r\nARC-Seal: i=1\r\n";
        assert!(matches!(
            earlier_sets(&f(twice), 2),
            Err(ArcError::BrokenChain(1))
        ));
        assert!(earlier_sets(&f(b"ARC-Seal: i=1\r\n"), 1)
            .expect("nothing below 1")
            .is_empty());
    }
}
