//! Lists and members: CRUD round trips, id growth, paging, concurrency, persistence, schema
//! versioning, posting policy, and a timed bulk add.

// Helpers outside #[test] fns are not covered by clippy.toml allow-unwrap-in-tests.
#![allow(clippy::unwrap_used)]

#[macro_use]
mod common;
use common::{Kind, Store};
use herald_directory::{
    Directory, DirectoryError, MemberCounts, NewMember, PostingState, SCHEMA_VERSION,
};
use herald_types::{Address, ListId, ListSettings, MemberId, MemberStatus, PostingPolicy};
use std::collections::BTreeMap;
use std::time::Instant;

fn addr(s: &str) -> Address {
    Address::parse(s).unwrap()
}

fn open_tmp(kind: Kind) -> (Store, Directory) {
    let dir = Store::fresh(kind);
    let d = dir.open();
    (dir, d)
}

fn members(range: std::ops::Range<u32>) -> Vec<NewMember> {
    range
        .map(|i| NewMember::new(addr(&format!("user{i}@d{}.example", i % 50))))
        .collect()
}

fn scan(d: &Directory, list: ListId, up_to: MemberId, limit: usize, enabled: bool) -> Vec<i64> {
    let mut out = Vec::new();
    let mut after = MemberId(0);
    loop {
        let page = d.members_page(list, after, up_to, limit, enabled).unwrap();
        let Some(last) = page.last() else { break };
        after = last.id;
        out.extend(page.iter().map(|m| m.id.0));
    }
    out
}

fn list_crud_round_trip(kind: Kind) {
    let (_tmp, d) = open_tmp(kind);
    let settings = ListSettings {
        display_name: "Announcements".into(),
        subject_prefix: Some("[ann]".into()),
        moderators: vec![addr("boss@example.org")],
        ..ListSettings::default()
    };
    let list = d
        .create_list(&addr("announce@Lists.Example.org"), &settings)
        .unwrap();
    assert_eq!(list.address.to_string(), "announce@lists.example.org");
    assert_eq!(d.list_by_id(list.id).unwrap(), Some(list.clone()));
    // Lookup is case-insensitive, and so is the uniqueness check.
    assert_eq!(
        d.list_by_address(&addr("ANNOUNCE@lists.example.org"))
            .unwrap(),
        Some(list.clone())
    );
    let dup = d
        .create_list(&addr("Announce@lists.example.org"), &settings)
        .unwrap_err();
    assert!(matches!(dup, DirectoryError::AlreadyExists(_)) && dup.is_conflict());
    // Postmaster belongs to the server: a list there would never get its mail.
    for pm in ["postmaster@lists.example.org", "PostMaster@other.test"] {
        let refused = d.create_list(&addr(pm), &settings).unwrap_err();
        assert!(
            matches!(
                refused,
                DirectoryError::InvalidInput {
                    field: "address",
                    ..
                }
            ),
            "{pm}: {refused}"
        );
    }

    let other = d
        .create_list(&addr("talk@lists.example.org"), &ListSettings::default())
        .unwrap();
    assert_eq!(d.lists().unwrap(), vec![list.clone(), other.clone()]);

    let mut changed = settings.clone();
    changed.posting_policy = PostingPolicy::Moderators;
    let updated = d.update_list(list.id, &changed).unwrap();
    assert_eq!(updated.settings, changed);
    assert_eq!(d.list_by_id(list.id).unwrap().unwrap().settings, changed);
    let missing = d.update_list(ListId(999), &changed).unwrap_err();
    assert!(missing.is_not_found());

    d.add_members(list.id, &members(0..10)).unwrap();
    assert!(d.delete_list(&list.address).unwrap());
    assert!(!d.delete_list(&list.address).unwrap());
    assert_eq!(d.list_by_id(list.id).unwrap(), None);
    assert!(d.member_counts(list.id).unwrap_err().is_not_found());
    // A new list never takes a deleted list's id.
    let again = d.create_list(&list.address, &settings).unwrap();
    assert!(again.id > other.id);
}

fn lists_by_domain_match_the_whole_domain_only(kind: Kind) {
    let (_tmp, d) = open_tmp(kind);
    assert!(!d.has_list_in_domain("lists.example.org").unwrap());
    d.create_list(&addr("Dev@Lists.Example.org"), &ListSettings::default())
        .unwrap();
    assert!(d.has_list_in_domain("lists.example.org").unwrap());
    assert!(d.has_list_in_domain("LISTS.example.ORG").unwrap());
    for other in [
        "example.org",
        "s.example.org",
        "xlists.example.org",
        "%",
        "_",
    ] {
        assert!(!d.has_list_in_domain(other).unwrap(), "{other}");
    }
}

fn list_settings_are_validated(kind: Kind) {
    let (_tmp, d) = open_tmp(kind);
    let cases = [
        ListSettings {
            display_name: "A\r\nBcc: x@y.z".into(),
            ..Default::default()
        },
        ListSettings {
            subject_prefix: Some("[x]\n".into()),
            ..Default::default()
        },
        ListSettings {
            footer: Some("bye\rsmuggle".into()),
            ..Default::default()
        },
        ListSettings {
            display_name: "n".repeat(300),
            ..Default::default()
        },
        ListSettings {
            welcome_message: Some("hi\u{0}there".into()),
            ..Default::default()
        },
        ListSettings {
            welcome_message: Some("bye\rsmuggle".into()),
            ..Default::default()
        },
        ListSettings {
            welcome_message: Some("w".repeat(herald_directory::MAX_FOOTER_BYTES + 1)),
            ..Default::default()
        },
    ];
    for s in cases {
        let e = d.create_list(&addr("l@x.example"), &s).unwrap_err();
        assert!(matches!(e, DirectoryError::InvalidInput { .. }), "{e}");
    }
    let ok = ListSettings {
        footer: Some("line one\r\nline two\n\tend".into()),
        welcome_message: Some("Welcome, {{email}}!\n\tRules: be kind.".into()),
        ..Default::default()
    };
    d.create_list(&addr("l@x.example"), &ok).unwrap();
}

fn member_crud_round_trip(kind: Kind) {
    let (_tmp, d) = open_tmp(kind);
    let list = d
        .create_list(&addr("l@x.example"), &ListSettings::default())
        .unwrap();
    let mut fields = BTreeMap::new();
    fields.insert("city".to_string(), "Paris".to_string());
    let nm = NewMember {
        address: addr("Alice@Example.com"),
        display_name: Some("Alice".into()),
        fields: fields.clone(),
    };
    let m = d.add_member(list.id, &nm).unwrap();
    assert_eq!(
        d.member(list.id, &addr("alice@example.com")).unwrap(),
        Some(m.clone())
    );
    let dup = d
        .add_member(list.id, &NewMember::new(addr("ALICE@example.com")))
        .unwrap_err();
    assert!(matches!(dup, DirectoryError::AlreadyMember(_)));
    let no_list = d.add_member(ListId(42), &nm).unwrap_err();
    assert!(no_list.is_not_found());

    let bad = NewMember {
        display_name: Some("x\ny".into()),
        ..nm.clone()
    };
    assert!(matches!(
        d.add_member(list.id, &bad),
        Err(DirectoryError::InvalidInput {
            field: "display_name",
            ..
        })
    ));

    let disabled = MemberStatus::Disabled("bounce score 5.0".into());
    assert!(d.set_member_status(list.id, &m.address, &disabled).unwrap());
    assert!(!d
        .set_member_status(list.id, &addr("nobody@x.example"), &disabled)
        .unwrap());
    assert_eq!(
        d.member(list.id, &m.address).unwrap().unwrap().status,
        disabled
    );
    assert_eq!(
        d.member_counts(list.id).unwrap(),
        MemberCounts {
            total: 1,
            enabled: 0,
            disabled: 1
        }
    );

    // Re-adding updates name and fields, keeps id and status.
    let readd = NewMember {
        address: addr("alice@example.com"),
        display_name: Some("Alice B".into()),
        fields: BTreeMap::new(),
    };
    assert_eq!(d.add_members(list.id, &[readd]).unwrap(), 0);
    let now = d.member(list.id, &m.address).unwrap().unwrap();
    assert_eq!(
        (now.id, now.display_name.as_deref(), now.status.clone()),
        (m.id, Some("Alice B"), disabled)
    );
    assert!(now.fields.is_empty());

    assert!(d
        .remove_member(list.id, &addr("ALICE@example.com"))
        .unwrap());
    assert!(!d.remove_member(list.id, &m.address).unwrap());
    assert_eq!(d.member(list.id, &m.address).unwrap(), None);
}

fn member_ids_only_grow(kind: Kind) {
    let (_tmp, d) = open_tmp(kind);
    let list = d
        .create_list(&addr("l@x.example"), &ListSettings::default())
        .unwrap();
    assert_eq!(d.add_members(list.id, &members(0..5)).unwrap(), 5);
    let max = d.max_member_id(list.id).unwrap();
    let last = members(4..5).remove(0).address;
    assert!(d.remove_member(list.id, &last).unwrap());
    assert!(d.max_member_id(list.id).unwrap() < max);
    let readded = d.add_member(list.id, &NewMember::new(last)).unwrap();
    assert!(
        readded.id > max,
        "deleted id {max} must not be reused, got {}",
        readded.id
    );
    // Duplicates inside one bulk call count once as added.
    let twice = [
        NewMember::new(addr("z@x.example")),
        NewMember::new(addr("Z@X.example")),
    ];
    assert_eq!(d.add_members(list.id, &twice).unwrap(), 1);
    assert_eq!(d.member_counts(list.id).unwrap().total, 6);
}

fn members_page_covers_each_enabled_member_once(kind: Kind) {
    let (_tmp, d) = open_tmp(kind);
    let list = d
        .create_list(&addr("l@x.example"), &ListSettings::default())
        .unwrap();
    let other = d
        .create_list(&addr("o@x.example"), &ListSettings::default())
        .unwrap();
    d.add_members(list.id, &members(0..600)).unwrap();
    d.add_members(other.id, &members(0..100)).unwrap(); // interleaved ids of another list
    d.add_members(list.id, &members(600..1000)).unwrap();
    let all = scan(&d, list.id, MemberId(i64::MAX), 1000, false);
    assert_eq!(all.len(), 1000);
    for (i, id) in all.iter().enumerate() {
        let a = members(i as u32..i as u32 + 1).remove(0).address;
        if i % 7 == 0 {
            d.set_member_status(list.id, &a, &MemberStatus::Disabled("admin".into()))
                .unwrap();
        } else if i % 11 == 0 {
            d.remove_member(list.id, &a).unwrap();
        }
        assert!(*id > 0);
    }
    let up_to = MemberId(all[799]);
    let want: Vec<i64> = all[..800]
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 7 != 0 && i % 11 != 0)
        .map(|(_, id)| *id)
        .collect();
    for limit in [1, 33, 1000] {
        assert_eq!(scan(&d, list.id, up_to, limit, true), want, "limit {limit}");
    }
    let counts = d.member_counts(list.id).unwrap();
    assert_eq!(
        counts.total,
        1000 - (0..1000).filter(|i| i % 7 != 0 && i % 11 == 0).count() as u64
    );
    assert_eq!(
        counts.disabled,
        (0..1000).filter(|i| i % 7 == 0).count() as u64
    );
    assert_eq!(counts.enabled + counts.disabled, counts.total);
    assert!(d
        .members_page(list.id, MemberId(0), up_to, 1_000_000, true)
        .is_err());
}

fn concurrent_readers_and_writer(kind: Kind) {
    let (_tmp, d) = open_tmp(kind);
    let list = d
        .create_list(&addr("l@x.example"), &ListSettings::default())
        .unwrap();
    d.add_members(list.id, &members(0..2000)).unwrap();
    let snapshot = d.max_member_id(list.id).unwrap();
    let writer = {
        let d = d.clone();
        std::thread::spawn(move || {
            for b in 0..20u32 {
                d.add_members(list.id, &members(2000 + b * 100..2100 + b * 100))
                    .unwrap();
            }
        })
    };
    let readers: Vec<_> = (0..6)
        .map(|_| {
            let d = d.clone();
            std::thread::spawn(move || {
                for _ in 0..5 {
                    let ids = scan(&d, list.id, snapshot, 500, true);
                    assert_eq!(
                        ids.len(),
                        2000,
                        "snapshot must be stable while the list grows"
                    );
                    assert!(ids.windows(2).all(|w| w[0] < w[1]));
                    let c = d.member_counts(list.id).unwrap();
                    assert!((2000..=4000).contains(&c.total));
                }
            })
        })
        .collect();
    writer.join().unwrap();
    for r in readers {
        r.join().unwrap();
    }
    assert_eq!(d.member_counts(list.id).unwrap().total, 4000);
}

fn reopening_keeps_everything(kind: Kind) {
    let store = Store::fresh(kind);
    let (list, member) = {
        let d = store.open();
        let list = d
            .create_list(
                &addr("l@x.example"),
                &ListSettings {
                    display_name: "L".into(),
                    ..Default::default()
                },
            )
            .unwrap();
        let mut nm = NewMember::new(addr("bob@x.example"));
        nm.fields.insert("team".into(), "blue".into());
        let m = d.add_member(list.id, &nm).unwrap();
        d.set_member_status(
            list.id,
            &m.address,
            &MemberStatus::Disabled("bounces".into()),
        )
        .unwrap();
        let member = d.member(list.id, &m.address).unwrap().unwrap();
        (list, member)
    };
    let d = store.open();
    assert_eq!(d.lists().unwrap(), vec![list.clone()]);
    assert_eq!(d.member(list.id, &member.address).unwrap(), Some(member));
}

fn newer_schema_is_refused(kind: Kind) {
    let store = Store::fresh(kind);
    drop(store.open());
    match store.path() {
        Some(path) => {
            let conn = rusqlite::Connection::open(path).unwrap();
            conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
                .unwrap();
        }
        None => {
            store
                .pg_client()
                .execute(
                    "UPDATE directory_schema SET version = $1",
                    &[&(SCHEMA_VERSION + 1)],
                )
                .unwrap();
        }
    }
    match store.try_open() {
        Err(DirectoryError::SchemaTooNew { found, supported }) => {
            assert_eq!((found, supported), (SCHEMA_VERSION + 1, SCHEMA_VERSION));
        }
        other => panic!("expected SchemaTooNew, got {other:?}"),
    }
}

#[test]
fn not_a_database_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("directory.db");
    std::fs::write(
        &path,
        b"this is not sqlite, just some text that is long enough.......",
    )
    .unwrap();
    let e = Directory::open(&path).unwrap_err();
    assert!(
        matches!(
            e,
            DirectoryError::Open { .. } | DirectoryError::Storage { .. }
        ),
        "{e}"
    );
    assert!(!e.is_client_error());
}

/// The store's half of posting rights: the state enqueue's rule (`herald_enqueue::posting_right`)
/// decides on, read the way the member table compares addresses.
fn posting_policy(kind: Kind) {
    let (_tmp, d) = open_tmp(kind);
    let list = d
        .create_list(&addr("l@x.example"), &ListSettings::default())
        .unwrap();
    d.add_members(
        list.id,
        &[
            NewMember::new(addr("m@x.example")),
            NewMember::new(addr("off@x.example")),
        ],
    )
    .unwrap();
    d.set_member_status(
        list.id,
        &addr("off@x.example"),
        &MemberStatus::Disabled("admin".into()),
    )
    .unwrap();
    let stranger = addr("s@y.example");
    let state = |a: &Address| d.posting_state(list.id, a).unwrap();
    let (enabled, disabled, moderated) = (
        PostingState {
            enabled: true,
            moderated: false,
        },
        PostingState {
            enabled: false,
            moderated: false,
        },
        PostingState {
            enabled: true,
            moderated: true,
        },
    );
    assert_eq!(state(&addr("M@x.example")), Some(enabled));
    assert_eq!(state(&addr("off@x.example")), Some(disabled));
    assert_eq!(state(&stranger), None);
    // The moderation flag: set, read and listed; clearing it restores the member.
    assert!(d
        .set_moderated(list.id, &addr("m@x.example"), true)
        .unwrap());
    assert_eq!(
        d.moderated(list.id, &addr("M@x.example")).unwrap(),
        Some(true)
    );
    assert_eq!(state(&addr("M@x.example")), Some(moderated));
    assert_eq!(
        d.moderated_members(list.id, 10).unwrap(),
        vec![addr("m@x.example")]
    );
    assert!(
        !d.set_moderated(list.id, &stranger, true).unwrap(),
        "not a member"
    );
    assert_eq!(d.moderated(list.id, &stranger).unwrap(), None);
    assert!(d
        .set_moderated(list.id, &addr("m@x.example"), false)
        .unwrap());
    assert_eq!(state(&addr("m@x.example")), Some(enabled));
}

fn bulk_add_200k_timed(kind: Kind) {
    let (_tmp, d) = open_tmp(kind);
    let list = d
        .create_list(&addr("big@x.example"), &ListSettings::default())
        .unwrap();
    let ms = members(0..200_000);
    let start = Instant::now();
    assert_eq!(d.add_members(list.id, &ms).unwrap(), 200_000);
    let added = start.elapsed();
    let start = Instant::now();
    let ids = scan(&d, list.id, MemberId(i64::MAX), 10_000, true);
    let scanned = start.elapsed();
    assert_eq!(ids.len(), 200_000);
    println!(
        "add_members 200,000: {added:?} ({:.0}/s); members_page scan: {scanned:?} ({:.0}/s)",
        200_000.0 / added.as_secs_f64(),
        200_000.0 / scanned.as_secs_f64()
    );
}

/// Consent: an import records `import` for new rows only, a confirmation replaces
/// it, a re-import does not overwrite the confirmation, hostile client text is bounded and
/// cleaned, and removing the member removes the record.
fn consent_is_recorded_per_source_and_survives_re_imports(kind: Kind) {
    use herald_directory::{Consent, ConsentSource, MAX_CLIENT_CHARS};
    let tmp = Store::fresh(kind);
    let d = tmp.open();
    let list = d
        .create_list(
            &Address::parse("dev@l.test").expect("a"),
            &herald_types::ListSettings::default(),
        )
        .expect("list");
    let bob = Address::parse("bob@x.test").expect("a");
    d.import_csv(list.id, "email\nbob@x.test\n".as_bytes(), &mut |_| {})
        .expect("import");
    let c = d
        .member_consent(list.id, &bob)
        .expect("read")
        .expect("recorded");
    assert_eq!((c.source, c.client), (ConsentSource::Import, None));
    let web = Consent::now(ConsentSource::Web, Some("127.0.0.2"));
    assert!(d.record_consent(list.id, &bob, &web).expect("record"));
    d.import_csv(
        list.id,
        "email,name\nbob@x.test,Bob\n".as_bytes(),
        &mut |_| {},
    )
    .expect("re-import");
    assert_eq!(
        d.member_consent(list.id, &bob).expect("read"),
        Some(web.clone())
    );
    let hostile = format!("evil\r\nX-Injected: 1{}", "a".repeat(10_000));
    let c = Consent::now(ConsentSource::Mail, Some(&hostile));
    let client = c.client.clone().expect("client");
    assert!(client.chars().count() <= MAX_CLIENT_CHARS && !client.contains('\n'));
    assert!(d.record_consent(list.id, &bob, &c).expect("record"));
    assert_eq!(d.member_consent(list.id, &bob).expect("read"), Some(c));
    let nobody = Address::parse("nobody@x.test").expect("a");
    assert!(!d.record_consent(list.id, &nobody, &web).expect("record"));
    assert!(d.remove_member(list.id, &bob).expect("remove"));
    d.add_member(list.id, &NewMember::new(bob.clone()))
        .expect("re-add");
    assert_eq!(
        d.member_consent(list.id, &bob).expect("read"),
        None,
        "cascaded"
    );
}

both!(
    list_crud_round_trip,
    lists_by_domain_match_the_whole_domain_only,
    list_settings_are_validated,
    member_crud_round_trip,
    member_ids_only_grow,
    members_page_covers_each_enabled_member_once,
    concurrent_readers_and_writer,
    reopening_keeps_everything,
    newer_schema_is_refused,
    posting_policy,
    bulk_add_200k_timed,
    consent_is_recorded_per_source_and_survives_re_imports,
);
