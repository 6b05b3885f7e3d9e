//! The footer splice check (`footer_splice`): a hostile post rendered once into a fan-out
//! [`Template`], then spliced for a benign member and for a hostile one.
//!
//! Input layout: byte 0 chooses list settings (personalization, subject prefix, an archive
//! URL); the rest is split at `0xFF` bytes into the footer template, the list's display name,
//! the member's display name, two member fields (`f1`, `f2`) and, last (so it may itself
//! contain `0xFF`), the raw post.
//!
//! Properties, for every post that renders (a refused post is a normal outcome):
//! - no panic; the copy is SMTP DATA: CRLF only, ends with CRLF, dot-stuffed;
//! - no header injection: the hostile member's copy has exactly the header fields, in order,
//!   of the benign member's copy, and its line lengths stay within 998 octets wherever the
//!   benign copy's do;
//! - the splice is deterministic (same member, same bytes).
//!
//! SECURITY: posts come from anyone allowed to post; member names and fields come from
//! subscription forms and imports. Neither may add a header or break a line.

use crate::assert_crlf_only;
use herald_fanout::{render, ListContext, Template};
use herald_types::{Address, List, ListId, ListSettings, Member, MemberId, MemberStatus};
use std::collections::BTreeMap;

const LIST: &str = "announce@lists.example.org";
/// RFC 5322 §2.1.1: the longest line, CRLF excluded.
const MAX_LINE_OCTETS: usize = 998;

/// Renders and splices `data` (layout in the module docs).
pub fn check(data: &[u8]) {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let mut parts = rest.splitn(6, |&b| b == 0xFF);
    let mut next = || String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
    let (footer, list_name, member_name, f1, f2) = (next(), next(), next(), next(), next());
    let post = rest.splitn(6, |&b| b == 0xFF).nth(5).unwrap_or_default();
    let Some(template) = template(flags, footer, list_name, post) else {
        return;
    };
    let benign = splice(
        &template,
        &member("benign@example.com", Some("Benign"), "a", "b"),
    );
    let hostile_member = member(
        "target@example.net",
        (flags & 8 != 0).then_some(member_name.as_str()),
        &f1,
        &f2,
    );
    let hostile = splice(&template, &hostile_member);
    assert_eq!(
        header_names(&hostile),
        header_names(&benign),
        "member data changed the header fields"
    );
    let limit = MAX_LINE_OCTETS.max(longest_line(&benign));
    assert!(
        longest_line(&hostile) <= limit,
        "member data made a {}-octet line",
        longest_line(&hostile)
    );
    assert_eq!(
        splice(&template, &hostile_member),
        hostile,
        "splice is not deterministic"
    );
}

/// The list as byte 0 describes it, rendered; `None` when the post is refused.
fn template(flags: u8, footer: String, display_name: String, post: &[u8]) -> Option<Template> {
    let settings = ListSettings {
        display_name,
        subject_prefix: (flags & 1 != 0).then(|| "[announce]".to_string()),
        footer: Some(footer),
        personalize: flags & 2 != 0,
        ..ListSettings::default()
    };
    let list = List {
        id: ListId(1),
        address: Address::parse(LIST).ok()?,
        settings,
        created_at_ms: 0,
    };
    let ctx = ListContext {
        unsubscribe_base_url: "https://lists.example.org".to_string(),
        archive_url: (flags & 4 != 0).then(|| "https://lists.example.org/archive".to_string()),
        archived_at: None,
        secret: b"fuzz-secret".to_vec(),
        dkim: Default::default(),
        authserv_id: "herald.test".to_string(),
    };
    render(&list, &ctx, post).ok()
}

fn member(address: &str, name: Option<&str>, f1: &str, f2: &str) -> Member {
    let fields = [("f1", f1), ("f2", f2)]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect::<BTreeMap<_, _>>();
    Member {
        id: MemberId(7),
        list_id: ListId(1),
        // Both addresses are literals above: a parse failure is a bug in this file.
        address: Address::parse(address).expect("fixture address"),
        display_name: name.map(str::to_string),
        status: MemberStatus::Enabled,
        fields,
    }
}

/// Splices one copy and checks what every copy must be on the wire.
fn splice(t: &Template, m: &Member) -> Vec<u8> {
    let mut out = Vec::new();
    t.splice(m, &mut out);
    assert_crlf_only(&out, "spliced copy");
    assert!(out.ends_with(b"\r\n"), "copy does not end with CRLF");
    for line in out.split(|&b| b == b'\n') {
        // Dot-stuffed: a line that starts with "." had one added, so it starts with "..".
        assert!(
            !line.starts_with(b".") || line.starts_with(b".."),
            "line not dot-stuffed: {:?}",
            String::from_utf8_lossy(line)
        );
    }
    out
}

/// The names of the header fields, in order (continuation lines belong to their field).
fn header_names(copy: &[u8]) -> Vec<Vec<u8>> {
    copy.split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .take_while(|l| !l.is_empty())
        .filter(|l| !l.starts_with(b" ") && !l.starts_with(b"\t"))
        .map(|l| l.split(|&b| b == b':').next().unwrap_or_default().to_vec())
        .collect()
}

/// The longest line, CRLF excluded.
fn longest_line(copy: &[u8]) -> usize {
    copy.split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l).len())
        .max()
        .unwrap_or(0)
}
