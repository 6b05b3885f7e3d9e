//! The lifecycle's own decisions, on a real SQLite directory: stale and used links, the link
//! given back when its action fails, who a confirmed subscribe re-enables, and a refused
//! change that changes nothing.

use super::*;
use herald_directory::ConsentSource;
use herald_types::ListSettings;

fn a(s: &str) -> Address {
    Address::parse(s).expect("address")
}

fn setup() -> (tempfile::TempDir, Membership, List) {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = Directory::open(&dir.path().join("d.db")).expect("open");
    let list = d
        .create_list(&a("dev@l.test"), &ListSettings::default())
        .expect("list");
    (dir, Membership::new(&d), list)
}

fn link(action: Action, who: &str, expires: u64) -> Confirmation {
    Confirmation {
        action,
        list: a("dev@l.test"),
        address: a(who),
        expires_unix_secs: expires,
    }
}

fn now_secs() -> u64 {
    herald_types::unix_ms_now() / 1000
}

fn consent() -> Consent {
    Consent::now(ConsentSource::Web, None)
}

#[test]
fn a_link_is_spent_on_use_and_one_mailed_before_a_departure_subscribes_nobody() {
    let (_t, m, list) = setup();
    let issued = now_secs();
    let sub = link(Action::Subscribe, "bob@x.test", issued + 3600);
    let joined = m
        .confirm(list.id, &sub, issued, &consent())
        .expect("confirm");
    assert_eq!(joined, Confirmed::Joined);
    assert!(matches!(
        m.confirm(list.id, &sub, issued, &consent()),
        Err(ConfirmError::LinkUsed(_))
    ));
    assert!(m
        .unsubscribe(list.id, &a("bob@x.test"), Door::OneClick)
        .expect("leave"));
    // A second link mailed an hour before the departure must not undo it.
    let old = link(Action::Subscribe, "bob@x.test", issued + 3601);
    assert!(matches!(
        m.confirm(list.id, &old, issued - 3600, &consent()),
        Err(ConfirmError::LinkSuperseded(_))
    ));
    // An unsubscribe link stays harmless after a departure: nothing to do.
    let bye = link(Action::Unsubscribe, "bob@x.test", issued + 3602);
    let left = m.confirm(list.id, &bye, issued - 3600, &consent());
    assert_eq!(left.expect("unsubscribe"), Confirmed::NotOn);
}

#[test]
fn a_failed_action_gives_the_link_back() {
    let (_t, m, list) = setup();
    let issued = now_secs();
    let mode = link(
        Action::Delivery(DeliveryMode::Nomail),
        "ann@x.test",
        issued + 3600,
    );
    // Not a member: the change fails, and the same link may be tried again.
    for _ in 0..2 {
        assert!(matches!(
            m.confirm(list.id, &mode, issued, &consent()),
            Err(ConfirmError::NotMember(_))
        ));
    }
}

#[test]
fn a_confirmed_subscribe_re_enables_a_member_bounces_disabled_but_not_an_administrators() {
    let (_t, m, list) = setup();
    let issued = now_secs();
    for (who, reason) in [
        ("bounced@x.test", "bounce score 5.0 >= 5.0"),
        ("held@x.test", "by an administrator"),
    ] {
        m.subscribe(list.id, &NewMember::new(a(who)), &consent(), Door::Admin)
            .expect("add");
        assert!(m
            .disable(list.id, &a(who), reason, Door::Admin)
            .expect("disable"));
        let again = link(Action::Subscribe, who, issued + 3600);
        let done = m.confirm(list.id, &again, issued, &consent());
        assert_eq!(done.expect("confirm"), Confirmed::Renewed);
    }
    let status = |who: &str| {
        m.dir
            .member(list.id, &a(who))
            .expect("read")
            .expect("member")
            .status
    };
    assert_eq!(status("bounced@x.test"), MemberStatus::Enabled);
    assert!(matches!(status("held@x.test"), MemberStatus::Disabled(_)));
}

#[test]
fn a_refused_language_changes_nothing_and_a_second_subscribe_is_already_member() {
    let (_t, m, list) = setup();
    let bob = a("bob@x.test");
    m.subscribe(
        list.id,
        &NewMember::new(bob.clone()),
        &consent(),
        Door::Admin,
    )
    .expect("add");
    assert!(matches!(
        m.subscribe(
            list.id,
            &NewMember::new(bob.clone()),
            &consent(),
            Door::Admin
        ),
        Err(SubscribeError::AlreadyMember(_))
    ));
    let change = Change {
        language: Some(Some("xx-not-shipped".into())),
        delivery: Some(DeliveryMode::Nomail),
        ..Change::default()
    };
    assert!(matches!(
        m.change(list.id, &bob, &change, Door::ManagePage),
        Err(ChangeError::Invalid(_))
    ));
    let mode = m.dir.delivery(list.id, &bob).expect("read");
    assert_eq!(mode, Some(DeliveryMode::Regular));
    let ok = Change {
        delivery: Some(DeliveryMode::Nomail),
        ..Change::default()
    };
    assert!(m
        .change(list.id, &bob, &ok, Door::ManagePage)
        .expect("change"));
    let mode = m.dir.delivery(list.id, &bob).expect("read");
    assert_eq!(mode, Some(DeliveryMode::Nomail));
}

#[test]
fn a_second_complaint_for_the_same_member_changes_nothing() {
    let (_t, m, list) = setup();
    let bob = a("bob@x.test");
    m.subscribe(
        list.id,
        &NewMember::new(bob.clone()),
        &consent(),
        Door::Admin,
    )
    .expect("add");
    let why = "abuse complaint via test";
    let first = m.complaint(list.id, &bob, why, ComplaintAction::Unsubscribe);
    assert!(first.expect("complaint"));
    assert!(m.dir.member(list.id, &bob).expect("read").is_none());
    let second = m.complaint(list.id, &bob, why, ComplaintAction::Unsubscribe);
    assert!(!second.expect("complaint"));
}
