//! `herald import mailman2 <list-dir>` on `config.pck` files in the shapes
//! Mailman 2.1 writes (made by `tests/fixtures/mailman2/make_fixtures.py`: Python 2 style byte
//! strings at protocol 1 for `dev`, Python 3 text at protocol 2 for `announce`) with their
//! pipermail archives, compared field by field; and hostile pickles refused with a clear error
//! and nothing written.

#![allow(clippy::unwrap_used)]

use crate::support;

use herald_directory::Directory;
use herald_types::{
    Address, DeliveryMode, DigestSchedule, DigestVolumeFrequency, FromRewrite, PostingPolicy,
    ReplyToPolicy, SubscriptionPolicy,
};
use std::path::{Path, PathBuf};
use support::binary::herald_with_config;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mailman2")
}

fn setup() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let cfg = tmp.path().join("herald.toml");
    std::fs::write(
        &cfg,
        format!("data_dir = {:?}\n", data.display().to_string()),
    )
    .unwrap();
    (tmp, cfg, data)
}

fn run_ok(cfg: &Path, args: &[&str]) -> String {
    let (ok, out) = herald_with_config(cfg, args);
    assert!(ok, "herald {args:?}:\n{out}");
    out
}

fn a(s: &str) -> Address {
    Address::parse(s).unwrap()
}

#[test]
fn a_mailman2_list_comes_over_with_settings_roster_and_archive() {
    let (_tmp, cfg, data) = setup();
    let dev = fixtures().join("lists/dev");
    let dev = dev.to_str().unwrap();
    let dry = run_ok(&cfg, &["import", "mailman2", dev]);
    assert!(dry.contains("dev@lists.example.org: create list"), "{dry}");
    assert!(dry.contains("members: 8 to add"), "{dry}");
    assert!(
        dry.contains("archive: import") && dry.contains("dev.mbox"),
        "{dry}"
    );
    let out = run_ok(&cfg, &["import", "mailman2", dev, "--apply"]);
    assert!(out.contains("8 members added"), "{out}");
    assert!(out.contains("2 bans"), "{out}");
    assert!(out.contains("archive: 2 messages added"), "{out}");
    for (item, why) in [
        ("member banned@spam.example", "banned by @spam.example"),
        ("members[\"not an address\"]", "address has no '@'"),
        ("setting msg_footer", "%-substitutions"),
        (
            "setting accept_these_nonmembers",
            "no non-member allow list",
        ),
        ("setting description", "no description"),
        ("member passwords", "no passwords"),
    ] {
        assert!(
            out.lines().any(|l| l.contains(item) && l.contains(why)),
            "no skip {item} / {why}:\n{out}"
        );
    }
    let d = Directory::open(&data.join("herald.db")).unwrap();
    // Mailman's owners keep their role: an account each (sign-in by link) with the owner role.
    let accounts = herald_accounts::Accounts::open(
        &data.join("accounts.db"),
        herald_accounts::AccountsConfig::default(),
    )
    .unwrap();
    let role = |who: &str| {
        accounts
            .principal(who)
            .unwrap()
            .and_then(|p| p.role("dev@lists.example.org"))
    };
    assert_eq!(
        role("owner@example.org"),
        Some(herald_accounts::Role::Owner)
    );
    assert_eq!(
        role("moderator@example.org"),
        None,
        "a moderator is not an owner"
    );
    assert!(out.contains("owner@example.org is an owner"), "{out}");
    let list = d
        .list_by_address(&a("dev@lists.example.org"))
        .unwrap()
        .unwrap();
    let s = &list.settings;
    assert_eq!(s.display_name, "Dev");
    assert_eq!(s.subject_prefix.as_deref(), Some("[Dev]"));
    assert_eq!(s.reply_to, ReplyToPolicy::List);
    assert_eq!(s.max_message_bytes, 40 * 1024);
    assert_eq!(s.posting_policy, PostingPolicy::Members);
    assert_eq!(
        s.moderators,
        vec![a("owner@example.org"), a("moderator@example.org")]
    );
    assert_eq!(s.subscription, SubscriptionPolicy::Confirm);
    assert_eq!(s.digest_size_threshold_kb, 30);
    assert_eq!(s.digest_schedule, DigestSchedule::Daily);
    assert_eq!(s.digest_volume_frequency, DigestVolumeFrequency::Monthly);
    assert_eq!(s.bounce_threshold, 5);
    assert!(s.personalize);
    assert_eq!(s.from_rewrite, FromRewrite::WhenNeeded);
    let bans: Vec<String> = d
        .bans(Some(list.id))
        .unwrap()
        .into_iter()
        .map(|b| b.pattern)
        .collect();
    assert_eq!(
        bans,
        vec!["@spam.example".to_string(), "^troll[0-9]+@".to_string()]
    );
    // The roster, member by member.
    let member = |addr: &str| d.member(list.id, &a(addr)).unwrap().unwrap();
    let mode = |addr: &str| d.delivery(list.id, &a(addr)).unwrap().unwrap();
    assert_eq!(
        member("alice@example.org").display_name.as_deref(),
        Some("Alice Liddell")
    );
    assert_eq!(mode("alice@example.org"), DeliveryMode::Regular);
    let bob = member("bob@example.org");
    // The local part keeps the case Mailman kept; Herald writes domains in lower case.
    assert_eq!(bob.address.to_string(), "Bob@example.org");
    assert_eq!(bob.display_name.as_deref(), Some("Bob"));
    assert_eq!(mode("carol@example.org"), DeliveryMode::Nomail);
    assert!(member("carol@example.org").status.is_enabled());
    let dave = member("dave@example.org");
    assert_eq!(
        dave.status,
        herald_types::MemberStatus::Disabled("disabled by bounces in Mailman".into())
    );
    assert!(!member("erin@example.org").status.is_enabled());
    assert_eq!(mode("mod@example.org"), DeliveryMode::Regular);
    // Mailman's Moderate bit (128) is the member's moderation flag; nobody else has it.
    assert_eq!(
        d.moderated(list.id, &a("mod@example.org")).unwrap(),
        Some(true)
    );
    assert_eq!(
        d.moderated(list.id, &a("alice@example.org")).unwrap(),
        Some(false)
    );
    assert!(!out.contains("member_moderation_action"), "{out}");
    assert_eq!(
        member("frank@example.org").display_name.as_deref(),
        Some("Fränk")
    );
    assert_eq!(mode("frank@example.org"), DeliveryMode::DigestMime);
    assert_eq!(mode("grace@example.org"), DeliveryMode::DigestPlain);
    assert!(d
        .member(list.id, &a("banned@spam.example"))
        .unwrap()
        .is_none());
    assert_eq!(d.member_counts(list.id).unwrap().total, 8);
    // The archive: the raw mbox (not pipermail's scrubbed copy), private.
    let archive = herald_archive::Archive::open(&data.join("archive.db")).unwrap();
    assert_eq!(
        archive.privacy("dev@lists.example.org").unwrap(),
        herald_archive::Privacy::Private
    );
    let first = archive
        .message("dev@lists.example.org", "first@example.org")
        .unwrap()
        .unwrap();
    let raw = String::from_utf8_lossy(&first.raw);
    assert!(
        raw.contains("From: Alice Liddell <alice@example.org>"),
        "{raw}"
    );
    assert!(raw.contains("here on we talk code"), "{raw}");
    assert!(archive
        .message("dev@lists.example.org", "second@example.org")
        .unwrap()
        .is_some());

    let again = run_ok(&cfg, &["import", "mailman2", dev, "--apply"]);
    assert!(again.contains("list unchanged"), "{again}");
    assert!(
        !again.contains("is an owner"),
        "owners are made once: {again}"
    );
    assert!(
        again.contains("0 to add, 0 to update, 8 unchanged"),
        "{again}"
    );
    assert!(!again.contains("archive: import"), "{again}");
}

#[test]
fn an_announcement_list_written_by_python3_pickle_protocol_2() {
    let (_tmp, cfg, data) = setup();
    let dir = fixtures().join("lists/announce");
    let out = run_ok(
        &cfg,
        &["import", "mailman2", dir.to_str().unwrap(), "--apply"],
    );
    assert!(out.contains("5 members added"), "{out}");
    assert!(out.contains("archive: 2 messages added"), "{out}");
    assert!(out.contains("approve each subscription"), "{out}");
    let d = Directory::open(&data.join("herald.db")).unwrap();
    let list = d
        .list_by_address(&a("announce@lists.example.org"))
        .unwrap()
        .unwrap();
    let s = &list.settings;
    assert_eq!(
        s.posting_policy,
        PostingPolicy::Moderators,
        "every member moderated"
    );
    assert_eq!(
        s.reply_to,
        ReplyToPolicy::Explicit(a("replies@example.org"))
    );
    assert_eq!(s.subject_prefix, None);
    assert_eq!(s.max_message_bytes, 0);
    assert_eq!(s.subscription, SubscriptionPolicy::Closed);
    assert!(!s.personalize);
    assert_eq!(s.from_rewrite, FromRewrite::Always);
    assert_eq!(s.bounce_threshold, 3);
    assert_eq!(s.digest_schedule, DigestSchedule::None);
    let archive = herald_archive::Archive::open(&data.join("archive.db")).unwrap();
    assert_eq!(
        archive.privacy("announce@lists.example.org").unwrap(),
        herald_archive::Privacy::Public
    );
    assert!(archive
        .message("announce@lists.example.org", "rel1@example.net")
        .unwrap()
        .is_some());
    assert!(archive
        .message("announce@lists.example.org", "rel11@example.net")
        .unwrap()
        .is_some());
}

#[test]
fn hostile_pickles_are_refused_with_a_clear_error_and_nothing_runs() {
    let (tmp, cfg, data) = setup();
    let pwned = Path::new("/tmp/herald-pwned");
    let _ = std::fs::remove_file(pwned);
    for (file, want) in [
        (
            "reduce_os_system.pck",
            "names the Python callable posix.system",
        ),
        ("inst_os_system.pck", "names the Python callable os.system"),
        (
            "huge_size.pck",
            "declares 2147483647 bytes but only 16 remain",
        ),
        ("truncated.pck", "truncated"),
        ("deep.pck", "nested more than 100 levels deep"),
        ("not_a_dict.pck", "not a dict of list attributes"),
    ] {
        let dir = tmp.path().join("lists").join("evil");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(
            fixtures().join("hostile").join(file),
            dir.join("config.pck"),
        )
        .unwrap();
        let (ok, out) = herald_with_config(
            &cfg,
            &[
                "import",
                "mailman2",
                dir.to_str().unwrap(),
                "--address",
                "evil@l.test",
                "--apply",
            ],
        );
        assert!(!ok, "{file} accepted: {out}");
        assert!(
            out.contains("refused") && out.contains(want),
            "{file}: {out}"
        );
        assert!(!out.contains("panicked"), "{out}");
        assert_eq!(out.lines().count(), 1, "one clear line: {out}");
    }
    assert!(!pwned.exists(), "a pickle ran code");
    assert!(
        !data.join("herald.db").exists() || {
            let d = Directory::open(&data.join("herald.db")).unwrap();
            d.lists().unwrap().is_empty()
        }
    );
}
