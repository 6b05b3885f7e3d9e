//! Fixtures shared by the fan-out benchmarks (splice_bench, sign_bench): a ~10 KB plain-text
//! post (optionally as stored after the arrival check, with our Authentication-Results on
//! top, which makes copies ARC-sealed), 1,000 distinct members with a name and a custom field,
//! and the list they belong to. One copy, so the benchmarks measure the same work.

use herald_auth::DkimKeys;
use herald_fanout::{render, ListContext, Template};
use herald_types::{Address, List, ListId, ListSettings, Member, MemberId, MemberStatus};
use std::collections::BTreeMap;

pub const MEMBERS: usize = 1_000;

pub fn post_10k() -> Vec<u8> {
    let mut post = b"From: Alice Example <alice@example.com>\r\nTo: announce@lists.example.org\r\n\
Subject: Weekly report\r\nDate: Mon, 3 Mar 2025 10:00:00 +0000\r\nMessage-ID: <bench@example.com>\r\n\
MIME-Version: 1.0\r\nContent-Type: text/plain; charset=us-ascii\r\n\r\n"
        .to_vec();
    let line =
        b"The quick brown fox jumps over the lazy dog; pack my box with five dozen jugs.\r\n";
    while post.len() < 10 * 1024 {
        post.extend_from_slice(line);
    }
    post
}

/// The authserv-id of the benchmark server (`ListContext::authserv_id`).
pub const AUTHSERV_ID: &str = "lists.example.org";

/// The 10 KB post as the server stores it after `check_arrival`: a typical arrival result of
/// ours on top (mail-auth's layout), so that copies of it are ARC-sealed at i=1.
#[allow(dead_code)] // sign_bench only; splice_bench shares this module
pub fn post_10k_arrived() -> Vec<u8> {
    let ar = format!(
        "Authentication-Results: {AUTHSERV_ID};\r\n\tdkim=pass header.d=example.com header.s=s1 header.b=AbCdEfGh;\r\n\t\
spf=pass (lists.example.org: domain of alice@example.com designates 192.0.2.1 as permitted sender) smtp.mailfrom=alice@example.com;\r\n\t\
arc=none smtp.remote-ip=192.0.2.1;\r\n\tdmarc=pass header.from=example.com policy.dmarc=reject\r\n"
    );
    [ar.as_bytes(), &post_10k()].concat()
}

pub fn members() -> Vec<Member> {
    (0..MEMBERS)
        .map(|i| Member {
            id: MemberId(i as i64),
            list_id: ListId(1),
            address: Address::parse(&format!("member{i}@host{}.example.com", i % 37))
                .expect("valid"),
            display_name: Some(format!("Member Number {i}")),
            status: MemberStatus::Enabled,
            fields: BTreeMap::from([("company".to_string(), format!("Company {i}"))]),
        })
        .collect()
}

/// The benchmark list's template for the 10 KB post.
pub fn template(
    footer: Option<&str>,
    personalize: bool,
    archive_url: Option<&str>,
    dkim: DkimKeys,
) -> Template {
    template_of(&post_10k(), footer, personalize, archive_url, dkim)
}

/// The benchmark list's template for `post`.
pub fn template_of(
    post: &[u8],
    footer: Option<&str>,
    personalize: bool,
    archive_url: Option<&str>,
    dkim: DkimKeys,
) -> Template {
    let list = List {
        id: ListId(1),
        address: Address::parse("announce@lists.example.org").expect("valid"),
        settings: ListSettings {
            display_name: "Announcements".into(),
            subject_prefix: Some("[announce]".into()),
            footer: footer.map(str::to_string),
            personalize,
            ..ListSettings::default()
        },
        created_at_ms: 0,
    };
    let ctx = ListContext {
        unsubscribe_base_url: "https://lists.example.org".into(),
        archive_url: archive_url.map(str::to_string),
        archived_at: None,
        secret: b"bench-secret-0123456789abcdef".to_vec(),
        dkim,
        authserv_id: AUTHSERV_ID.into(),
    };
    render(&list, &ctx, post).expect("renders")
}
