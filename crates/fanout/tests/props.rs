//! Property: whatever the member's name and fields hold, a copy has exactly the header fields
//! of a copy for a benign member, no bare CR or LF, correct dot-stuffing, and parses back with
//! its To address intact.

#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

mod common;

use common::*;
use herald_fanout::{render, Template};
use herald_types::ListSettings;
use mail_parser::MessageParser;
use proptest::prelude::*;
use std::sync::OnceLock;

const POST: &[u8] = b"From: Alice <alice@example.com>\r\nTo: announce@lists.example.org\r\nSubject: hi\r\n\
MIME-Version: 1.0\r\nContent-Type: multipart/alternative; boundary=\"b1\"\r\n\r\n--b1\r\nContent-Type: text/plain\r\n\r\n\
.plain\r\n--b1\r\nContent-Type: text/html\r\n\r\n<p>x</p>\r\n--b1--\r\n";

fn template() -> &'static (Template, Vec<String>) {
    static T: OnceLock<(Template, Vec<String>)> = OnceLock::new();
    T.get_or_init(|| {
        let settings = ListSettings {
            display_name: "Announcements".into(),
            subject_prefix: Some("[announce]".into()),
            footer: Some("{{name}}\n{{f1}} and {{f2}}\n{{email}} {{unsubscribe_url}}".into()),
            ..ListSettings::default()
        };
        let t = render(
            &list("announce@lists.example.org", settings),
            &ctx(None),
            POST,
        )
        .unwrap();
        let mut out = Vec::new();
        t.splice(&member("benign@example.com", Some("Benign"), &[]), &mut out);
        let names = header_names(&out);
        (t, names)
    })
}

/// Strings biased towards what breaks mail: CR, LF, NUL, dots, dashes, quotes, non-ASCII.
fn nasty() -> impl Strategy<Value = String> {
    let atoms = prop_oneof![
        Just("\r\n".to_string()),
        Just("\r".to_string()),
        Just("\n".to_string()),
        Just(".".to_string()),
        Just("--b1--".to_string()),
        Just("Bcc: x@y".to_string()),
        Just("\"\\<>,;:".to_string()),
        Just("=?utf-8?B?QQ==?=".to_string()),
        "[\\x00-\\x1f\\x7f]{1,3}",
        "\\PC{0,20}",
        any::<String>(),
    ];
    prop::collection::vec(atoms, 0..12).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn member_data_cannot_break_a_copy(name in nasty(), f1 in nasty(), f2 in nasty(), has_name in any::<bool>()) {
        let (t, names) = template();
        let m = member("target@example.com", has_name.then_some(name.as_str()), &[("f1", &f1), ("f2", &f2)]);
        let mut out = Vec::new();
        t.splice(&m, &mut out);
        check_wire(&out);
        prop_assert_eq!(&header_names(&out), names);
        let plain = undot(&out);
        let msg = MessageParser::new().parse(&plain).expect("parses");
        let to = msg.to().and_then(|a| a.first()).and_then(|a| a.address.as_deref());
        prop_assert_eq!(to, Some("target@example.com"));
        // multipart/mixed root, the original alternative (2 leaves), the footer: 5 parts.
        prop_assert_eq!(msg.parts.len(), 5);
        let leaves = leaf_contents(&plain);
        let original_intact = leaves
            .iter()
            .any(|(c, b)| c == "text/plain" && (b == b".plain\r\n" || b == b".plain"));
        prop_assert!(original_intact);
    }
}
