//! Delivery modes: the page fan-out reads holds the members of one mode only,
//! enabled ones only, each once; a mode change keeps the member (id, status, counts); unknown
//! members and lists are reported, not invented.

#![allow(clippy::unwrap_used)]

#[macro_use]
mod common;
use common::{Kind, Store};
use herald_directory::{Directory, DirectoryError, NewMember};
use herald_types::{Address, DeliveryMode, ListId, ListSettings, MemberId, MemberStatus};

fn addr(s: &str) -> Address {
    Address::parse(s).unwrap()
}

fn scan(d: &Directory, list: ListId, mode: DeliveryMode, limit: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut after = MemberId(0);
    loop {
        let page = d
            .delivery_page(list, after, MemberId(i64::MAX), limit, mode)
            .unwrap();
        let Some(last) = page.last() else { break };
        after = last.id;
        out.extend(page.iter().map(|m| m.address.to_string()));
    }
    out
}

fn each_mode_page_holds_its_enabled_members_once(kind: Kind) {
    let tmp = Store::fresh(kind);
    let d = tmp.open();
    let list = d
        .create_list(&addr("dev@l.test"), &ListSettings::default())
        .unwrap();
    let ms: Vec<NewMember> = (0..40)
        .map(|i| NewMember::new(addr(&format!("m{i:02}@x.test"))))
        .collect();
    d.add_members(list.id, &ms).unwrap();
    let mode_of = |i: usize| DeliveryMode::ALL[i % 4];
    for i in 0..40 {
        let a = addr(&format!("m{i:02}@x.test"));
        assert!(d.set_delivery(list.id, &a, mode_of(i)).unwrap());
    }
    // A disabled digest member gets no digest either.
    d.set_member_status(
        list.id,
        &addr("m01@x.test"),
        &MemberStatus::Disabled("bounces".into()),
    )
    .unwrap();
    for (k, mode) in DeliveryMode::ALL.into_iter().enumerate() {
        let want: Vec<String> = (0..40)
            .filter(|i| i % 4 == k && *i != 1)
            .map(|i| format!("m{i:02}@x.test"))
            .collect();
        // Small pages exercise the paging boundary.
        assert_eq!(scan(&d, list.id, mode, 3), want, "{mode}");
    }
    let counts = d.delivery_counts(list.id).unwrap();
    assert_eq!(counts[&DeliveryMode::Regular], 10);
    assert_eq!(counts[&DeliveryMode::DigestMime], 9);
    // nomail is still a member and still enabled.
    let counts_all = d.member_counts(list.id).unwrap();
    assert_eq!((counts_all.total, counts_all.enabled), (40, 39));
    let m = d.member(list.id, &addr("m03@x.test")).unwrap().unwrap();
    assert_eq!(m.status, MemberStatus::Enabled);
    assert_eq!(
        d.delivery(list.id, &addr("M03@X.test")).unwrap(),
        Some(DeliveryMode::Nomail)
    );
}

fn re_adding_a_member_keeps_their_mode_and_unknowns_are_reported(kind: Kind) {
    let tmp = Store::fresh(kind);
    let d = tmp.open();
    let list = d
        .create_list(&addr("dev@l.test"), &ListSettings::default())
        .unwrap();
    let a = addr("a@x.test");
    d.add_members(list.id, &[NewMember::new(a.clone())])
        .unwrap();
    d.set_delivery(list.id, &a, DeliveryMode::DigestPlain)
        .unwrap();
    // A CSV re-import must not put a digest member back on single posts.
    d.add_members(list.id, &[NewMember::new(a.clone())])
        .unwrap();
    assert_eq!(
        d.delivery(list.id, &a).unwrap(),
        Some(DeliveryMode::DigestPlain)
    );
    assert!(!d
        .set_delivery(list.id, &addr("nobody@x.test"), DeliveryMode::Nomail)
        .unwrap());
    assert_eq!(d.delivery(list.id, &addr("nobody@x.test")).unwrap(), None);
    assert!(matches!(
        d.set_delivery(ListId(999), &a, DeliveryMode::Nomail),
        Err(DirectoryError::NoSuchList(_))
    ));
}

both!(
    each_mode_page_holds_its_enabled_members_once,
    re_adding_a_member_keeps_their_mode_and_unknowns_are_reported,
);
