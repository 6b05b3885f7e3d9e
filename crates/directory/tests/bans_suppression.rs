//! Bans and the suppression list through the directory's public API, on a
//! real SQLite file: every add path refuses, with a reason that names the ban or the
//! suppression; suppressing disables members so fan-out (enabled members only) skips them.

#[macro_use]
mod common;
use common::{Kind, Store};
use herald_directory::{Directory, DirectoryError, NewMember, Refusal, SuppressionSource};
use herald_types::{Address, ListId, ListSettings, MemberId, MemberStatus};

fn a(s: &str) -> Address {
    Address::parse(s).expect("address")
}

fn setup(kind: Kind) -> (Store, Directory, ListId, ListId) {
    let tmp = Store::fresh(kind);
    let d = tmp.open();
    let dev = d
        .create_list(&a("dev@l.test"), &ListSettings::default())
        .expect("list");
    let ann = d
        .create_list(&a("ann@l.test"), &ListSettings::default())
        .expect("list");
    (tmp, d, dev.id, ann.id)
}

fn refused(r: Result<impl std::fmt::Debug, DirectoryError>) -> String {
    match r {
        Err(e @ DirectoryError::Refused { .. }) => {
            assert!(e.is_client_error());
            e.to_string()
        }
        other => panic!("expected Refused, got {other:?}"),
    }
}

fn enabled(d: &Directory, list: ListId) -> Vec<String> {
    d.members_page(list, MemberId(0), MemberId(i64::MAX), 1000, true)
        .expect("page")
        .into_iter()
        .map(|m| m.address.to_string())
        .collect()
}

fn a_list_ban_refuses_subscription_there_and_only_there(kind: Kind) {
    let (_t, d, dev, ann) = setup(kind);
    let ban = d.add_ban(Some(dev), "@Spam.TEST").expect("ban");
    assert_eq!(ban.pattern, "@spam.test");
    let again = d.add_ban(Some(dev), "@spam.test").expect("idempotent");
    assert_eq!(again.id, ban.id);
    let e = refused(d.add_member(dev, &NewMember::new(a("Eve@SPAM.test"))));
    assert!(e.contains("Eve@spam.test cannot be added"), "{e}");
    assert!(e.contains("this list's ban @spam.test"), "{e}");
    d.add_member(ann, &NewMember::new(a("eve@spam.test")))
        .expect("another list is not affected");
    assert_eq!(
        d.ban_for(Some(dev), &a("x@spam.test"))
            .expect("check")
            .map(|b| b.id),
        Some(ban.id)
    );
    assert_eq!(d.ban_for(None, &a("x@spam.test")).expect("check"), None);
    assert!(d.remove_ban(Some(dev), "@SPAM.test").expect("rm"));
    assert!(!d.remove_ban(Some(dev), "@spam.test").expect("rm again"));
    d.add_member(dev, &NewMember::new(a("eve@spam.test")))
        .expect("ban lifted");
}

fn a_global_regex_ban_reaches_every_list_and_every_add_path(kind: Kind) {
    let (_t, d, dev, ann) = setup(kind);
    d.add_ban(None, "^bot[0-9]+@").expect("ban");
    assert_eq!(d.bans(None).expect("ls").len(), 1);
    assert!(d.bans(Some(dev)).expect("ls").is_empty());
    for list in [dev, ann] {
        let e = refused(d.add_member(list, &NewMember::new(a("BOT7@x.test"))));
        assert!(e.contains("the global ban ^bot[0-9]+@"), "{e}");
    }
    refused(d.add_members(
        dev,
        &[
            NewMember::new(a("ok@x.test")),
            NewMember::new(a("bot1@x.test")),
        ],
    ));
    assert!(enabled(&d, dev).is_empty(), "all or nothing");
    let csv = "email,name\nok@x.test,Ok\nbot99@y.test,Bot\nfine@x.test,\n";
    let report = d
        .import_csv(dev, csv.as_bytes(), &mut |_| {})
        .expect("import");
    assert_eq!(report.added, 2);
    assert_eq!(report.rejected_total, 1);
    assert_eq!(report.rejected[0].line, 3);
    assert!(
        report.rejected[0].reason.contains("banned"),
        "{:?}",
        report.rejected
    );
    assert!(matches!(
        d.refusal(ann, &a("bot3@z.test")).expect("check"),
        Some(Refusal::Banned(_))
    ));
    assert_eq!(d.refusal(ann, &a("robot3@z.test")).expect("check"), None);
}

/// A ban written through another handle on the same file (the CLI's process, say) is seen at
/// once: the compiled cache is keyed on the rows, not on this handle's writes.
fn a_ban_added_by_another_handle_is_seen_at_once(kind: Kind) {
    let store = Store::fresh(kind);
    let d1 = store.open();
    let d2 = store.open();
    assert_eq!(d1.ban_for(None, &a("e@x.test")).expect("check"), None);
    d2.add_ban(None, "e@x.test").expect("ban");
    assert!(d1.ban_for(None, &a("E@X.test")).expect("check").is_some());
    d2.remove_ban(None, "e@x.test").expect("rm");
    d2.add_ban(None, "f@x.test").expect("ban");
    assert_eq!(d1.ban_for(None, &a("e@x.test")).expect("check"), None);
    assert!(d1.ban_for(None, &a("f@x.test")).expect("check").is_some());
}

fn suppressing_disables_everywhere_and_refuses_every_way_back(kind: Kind) {
    let (_t, d, dev, ann) = setup(kind);
    for list in [dev, ann] {
        d.add_members(
            list,
            &[
                NewMember::new(a("kim@x.test")),
                NewMember::new(a("lee@x.test")),
            ],
        )
        .expect("add");
    }
    let s = d
        .suppress(
            None,
            &a("KIM@x.test"),
            "erasure request 42",
            SuppressionSource::Erasure,
        )
        .expect("suppress");
    assert!(s.new);
    assert_eq!(s.disabled, 2, "on both lists");
    for list in [dev, ann] {
        assert_eq!(
            enabled(&d, list),
            vec!["lee@x.test"],
            "fan-out reads enabled members only"
        );
        let m = d
            .member(list, &a("kim@x.test"))
            .expect("read")
            .expect("kept");
        assert!(matches!(&m.status, MemberStatus::Disabled(r) if r.contains("erasure request 42")));
    }
    // Every way back is refused, with the reason.
    let e = refused(d.add_member(dev, &NewMember::new(a("kim@x.test"))));
    assert!(
        e.contains("global suppression list (erasure: erasure request 42)"),
        "{e}"
    );
    refused(d.set_member_status(dev, &a("kim@x.test"), &MemberStatus::Enabled));
    refused(d.reset_bounces(dev, &a("kim@x.test")));
    let report = d
        .import_csv(
            ann,
            "email\nkim@x.test\nnew@x.test\n".as_bytes(),
            &mut |_| {},
        )
        .expect("import");
    assert_eq!((report.added, report.rejected_total), (1, 1));
    assert!(
        report.rejected[0].reason.contains("suppression"),
        "{:?}",
        report.rejected
    );
    // A second suppression is harmless and keeps the first record.
    let again = d
        .suppress(None, &a("kim@x.test"), "other", SuppressionSource::Operator)
        .expect("again");
    assert!(!again.new);
    assert_eq!(again.entry.reason, "erasure request 42");
    assert_eq!(again.disabled, 0);
    let listed = d.suppressions(None, 10).expect("ls");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].source, SuppressionSource::Erasure);
    // Lifting it re-enables nobody, but lets an administrator do so.
    assert!(d.unsuppress(None, &a("kim@x.test")).expect("rm"));
    assert_eq!(enabled(&d, dev), vec!["lee@x.test"]);
    d.set_member_status(dev, &a("kim@x.test"), &MemberStatus::Enabled)
        .expect("enable");
}

fn a_list_suppression_leaves_other_lists_alone(kind: Kind) {
    let (_t, d, dev, ann) = setup(kind);
    for list in [dev, ann] {
        d.add_member(list, &NewMember::new(a("kim@x.test")))
            .expect("add");
    }
    let s = d
        .suppress(
            Some(dev),
            &a("kim@x.test"),
            "complained",
            SuppressionSource::Complaint,
        )
        .expect("suppress");
    assert_eq!(s.disabled, 1);
    assert!(enabled(&d, dev).is_empty());
    assert_eq!(enabled(&d, ann), vec!["kim@x.test"]);
    let e = refused(d.set_member_status(dev, &a("kim@x.test"), &MemberStatus::Enabled));
    assert!(
        e.contains("this list's suppression list (complaint: complained)"),
        "{e}"
    );
    assert!(d
        .suppression_for(Some(ann), &a("kim@x.test"))
        .expect("check")
        .is_none());
    assert!(d.suppressions(None, 10).expect("ls").is_empty());
    assert_eq!(d.suppressions(Some(dev), 10).expect("ls").len(), 1);
    // Deleting the list deletes its suppressions with it.
    d.delete_list(&a("dev@l.test")).expect("delete");
    assert!(d.suppressions(Some(dev), 10).expect("ls").is_empty());
}

/// Hostile input to the suppression list: refused with the field named, nothing written.
fn hostile_suppression_reasons_are_refused(kind: Kind) {
    let (_t, d, dev, _) = setup(kind);
    for reason in ["", "   ", "x\r\nBcc: y", "x\u{0}", &"r".repeat(300)] {
        let e = d
            .suppress(
                Some(dev),
                &a("k@x.test"),
                reason,
                SuppressionSource::Operator,
            )
            .expect_err(reason);
        assert!(
            matches!(
                e,
                DirectoryError::InvalidInput {
                    field: "reason",
                    ..
                }
            ),
            "{e}"
        );
    }
    assert!(d.suppressions(Some(dev), 10).expect("ls").is_empty());
    let e = d
        .add_ban(Some(ListId(9999)), "x@y.test")
        .expect_err("no list");
    assert!(e.is_not_found());
}

both!(
    a_list_ban_refuses_subscription_there_and_only_there,
    a_global_regex_ban_reaches_every_list_and_every_add_path,
    a_ban_added_by_another_handle_is_seen_at_once,
    suppressing_disables_everywhere_and_refuses_every_way_back,
    a_list_suppression_leaves_other_lists_alone,
    hostile_suppression_reasons_are_refused,
);
