//! Which ARC set a post's copies get: read once at render time from the stored post.
//!
//! The server verifies a post on arrival and prepends our `Authentication-Results` field
//! (`herald_auth::Authenticator::check_arrival`), after stripping any incoming one that
//! carries our authserv-id. So the topmost A-R with `ListContext::authserv_id` is ours and
//! trusted; all others are the poster's or a relay's and are ignored. From it:
//! - its payload (after the field name) becomes the `ARC-Authentication-Results` content;
//! - its `arc=` result becomes the seal's cv: pass → pass, fail → fail, none or absent →
//!   none. When the post carries ARC-Seal fields but the result says nothing usable (none,
//!   absent, temperror, several `arc=`), the chain is treated as failed: cv=fail is the
//!   conservative claim (RFC 8617 §5.1.2), and above instance 1 "none" is not allowed;
//! - the instance is one above the highest `i=` among the post's ARC-Seal fields.
//!
//! No trusted A-R → no seal (DKIM only). Instance above 50 → no seal (RFC 8617 §4.2.1).
//!
//! SECURITY: ARC-Seal fields are hostile input; only their `i=` is read (bounded, saturating,
//! see `herald_auth::arc::instance`). The A-R text is ours; it is parsed without panicking
//! anyway, and a payload that is not valid UTF-8 means no seal.

use crate::message::{Field, Post};
use herald_auth::arc::{instance, MAX_INSTANCE};
use herald_auth::results::{authserv_id_of, parse_ours};
use herald_auth::{ArcCv, ArcHop};

/// The topmost `Authentication-Results` field whose authserv-id is `authserv_id` (compared
/// ASCII case-insensitively, as host names are). An empty id trusts nothing.
pub(crate) fn trusted_auth_results<'p, 'a>(
    post: &'p Post<'a>,
    authserv_id: &str,
) -> Option<&'p Field<'a>> {
    if authserv_id.is_empty() {
        return None;
    }
    post.fields.iter().find(|f| {
        f.is("Authentication-Results")
            && authserv_id_of(f.value)
                .is_some_and(|id| id.eq_ignore_ascii_case(authserv_id.as_bytes()))
    })
}

/// The ARC hop the copies of `post` seal, or `None` when they are not to be sealed.
pub(crate) fn hop(post: &Post<'_>, authserv_id: &str) -> Option<ArcHop> {
    let field = trusted_auth_results(post, authserv_id)?;
    let results = parse_ours(field.value, authserv_id)?;
    let seals: Vec<Option<u32>> = post
        .fields
        .iter()
        .filter(|f| f.is("ARC-Seal"))
        .map(|f| instance(f.raw))
        .collect();
    let highest = seals.iter().flatten().max().copied().unwrap_or(0);
    let instance = highest.saturating_add(1);
    if instance > MAX_INSTANCE {
        return None;
    }
    let arc = match results.arc.as_deref() {
        Some("pass") => Some(ArcCv::Pass),
        Some("fail") => Some(ArcCv::Fail),
        Some("none") => Some(ArcCv::None),
        _ => None,
    };
    let cv = match (arc, seals.is_empty()) {
        (Some(ArcCv::Fail), _) => ArcCv::Fail,
        // A chain we cannot name a verdict for is a failed one (see the module doc).
        (Some(ArcCv::None) | None, false) => ArcCv::Fail,
        // Our verifier passed a chain whose seals we cannot number: do not vouch for it.
        (Some(ArcCv::Pass), false) if instance == 1 => ArcCv::Fail,
        (Some(ArcCv::Pass), false) => ArcCv::Pass,
        // No seals: this is the first set. A stray arc=pass cannot be vouched for either.
        (Some(ArcCv::Pass | ArcCv::None) | None, true) => ArcCv::None,
    };
    Some(ArcHop {
        instance,
        cv,
        auth_results: results.payload,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::split;

    const ID: &str = "herald.test";

    fn hop_with(header: &str, id: &str) -> Option<ArcHop> {
        let raw = format!("{header}From: a@example.com\r\n\r\nbody\r\n");
        hop(&split(raw.as_bytes()).unwrap(), id)
    }

    fn hop_of(header: &str) -> Option<ArcHop> {
        hop_with(header, ID)
    }

    #[test]
    fn the_topmost_trusted_field_counts() {
        let h = hop_of(
            "Authentication-Results: other.test; arc=fail\r\n\
             Authentication-Results: HERALD.test;\r\n\tdkim=pass;\r\n\tarc=none\r\n\
             Authentication-Results: herald.test; arc=pass\r\n",
        )
        .unwrap();
        assert_eq!(h.instance, 1);
        assert_eq!(h.cv, ArcCv::None);
        assert_eq!(h.auth_results, "HERALD.test;\r\n\tdkim=pass;\r\n\tarc=none");
        assert_eq!(
            hop_of("Authentication-Results: other.test; arc=pass\r\n"),
            None
        );
        assert_eq!(
            hop_of("Authentication-Results: herald.testx; arc=pass\r\n"),
            None
        );
        assert!(hop_of("Authentication-Results: \"herald.test\"; arc=none\r\n").is_some());
        assert_eq!(hop_with("Authentication-Results: ; arc=none\r\n", ""), None);
    }

    #[test]
    fn cv_and_instance_rules() {
        let ar = |r: &str| format!("Authentication-Results: herald.test; dkim=none; {r}\r\n");
        let seal = |i: &str| format!("ARC-Seal: i={i}; cv=none; b=x\r\n");
        let cases = [
            (ar("arc=pass") + &seal("1"), Some((2, ArcCv::Pass))),
            (
                ar("arc=fail (broken)") + &seal("2") + &seal("1"),
                Some((3, ArcCv::Fail)),
            ),
            (ar("arc=none"), Some((1, ArcCv::None))),
            (ar("spf=pass"), Some((1, ArcCv::None))),
            (ar("arc=pass"), Some((1, ArcCv::None))),
            (ar("arc=none") + &seal("1"), Some((2, ArcCv::Fail))),
            (ar("arc=temperror") + &seal("1"), Some((2, ArcCv::Fail))),
            (
                ar("arc=pass; arc=pass") + &seal("1"),
                Some((2, ArcCv::Fail)),
            ),
            (
                ar("arc=pass") + "ARC-Seal: cv=none\r\n",
                Some((1, ArcCv::Fail)),
            ),
            (ar("arc=pass") + &seal("49"), Some((50, ArcCv::Pass))),
            (ar("arc=pass") + &seal("50"), None),
            (ar("arc=fail") + &seal("999"), None),
            (ar("arc=fail") + &seal("99999999999999999999999"), None),
        ];
        for (header, want) in cases {
            let got = hop_of(&header).map(|h| (h.instance, h.cv));
            assert_eq!(got, want, "{header}");
        }
    }
}
