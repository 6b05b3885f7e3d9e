//! Member search: prefix search on address and display name, ASCII case
//! folded, paged by keyset so that every match is seen exactly once and nothing else; `%` and
//! `_` are plain characters; hostile prefixes are refused with the field named.

#![allow(clippy::unwrap_used)]

#[macro_use]
mod common;
use common::{Kind, Store};
use herald_directory::{Directory, DirectoryError, NewMember, SearchBy};
use herald_types::{Address, ListId, ListSettings};

fn addr(s: &str) -> Address {
    Address::parse(s).unwrap()
}

/// Every page of a search, concatenated (addresses).
fn all_pages(d: &Directory, list: ListId, by: SearchBy, q: &str, limit: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut after = None;
    loop {
        let page = d.search_members(list, by, q, after, limit).unwrap();
        out.extend(page.iter().map(|f| f.member.address.to_string()));
        match page.last() {
            Some(last) if page.len() == limit => after = Some(last.member.id),
            _ => break,
        }
    }
    out
}

fn setup(kind: Kind) -> (Store, Directory, ListId) {
    let store = Store::fresh(kind);
    let d = store.open();
    let list = d
        .create_list(&addr("l@lists.test"), &ListSettings::default())
        .unwrap();
    let mut ms = Vec::new();
    for i in 0..300 {
        let mut m = NewMember::new(addr(&format!("user{i:03}@d{}.test", i % 3)));
        m.display_name = Some(format!("{} {i:03}", ["Ann", "bob", "Álvaro"][i % 3]));
        ms.push(m);
    }
    let mut odd = NewMember::new(addr("Pct%_x@d9.test"));
    odd.display_name = None;
    ms.push(odd);
    ms.push(NewMember::new(addr("pctAx@d9.test")));
    d.add_members(list.id, &ms).unwrap();
    (store, d, list.id)
}

fn prefixes_find_each_match_once_in_order(kind: Kind) {
    let (_s, d, list) = setup(kind);
    let users = all_pages(&d, list, SearchBy::Address, "USER1", 7);
    assert_eq!(users.len(), 100, "user100..user199");
    let mut sorted = users.clone();
    sorted.sort();
    assert_eq!(users, sorted, "address order");
    assert_eq!(users.first().map(String::as_str), Some("user100@d1.test"));
    // By name: ASCII folded ("ANN" finds "Ann"), non-ASCII compared exactly.
    let anns = all_pages(&d, list, SearchBy::Name, "ANN", 9);
    assert_eq!(anns.len(), 100);
    assert!(anns.iter().all(|a| a.ends_with("@d0.test")), "{anns:?}");
    assert_eq!(all_pages(&d, list, SearchBy::Name, "Álv", 50).len(), 100);
    // Wildcards are characters: only the address that has them.
    assert_eq!(
        all_pages(&d, list, SearchBy::Address, "pct%_", 10),
        vec!["Pct%_x@d9.test".to_string()]
    );
    // Everything, in address order, when the prefix is empty.
    assert_eq!(all_pages(&d, list, SearchBy::Address, "", 64).len(), 302);
    assert!(all_pages(&d, list, SearchBy::Address, "zzz", 10).is_empty());
    // A keyset member removed meanwhile: the next page starts from the prefix again, no error.
    let first = d
        .search_members(list, SearchBy::Address, "user2", None, 5)
        .unwrap();
    let gone = first.last().unwrap().member.clone();
    assert!(d.remove_member(list, &gone.address).unwrap());
    let next = d
        .search_members(list, SearchBy::Address, "user2", Some(gone.id), 5)
        .unwrap();
    assert_eq!(next[0].member.address.to_string(), "user200@d2.test");
}

fn hostile_searches_are_refused(kind: Kind) {
    let (_s, d, list) = setup(kind);
    for q in ["a\r\nb".to_string(), "\0".to_string(), "x".repeat(257)] {
        match d.search_members(list, SearchBy::Name, &q, None, 10) {
            Err(DirectoryError::InvalidInput { field, .. }) => assert_eq!(field, "q"),
            other => panic!("{q:.20?}: {other:?}"),
        }
    }
    assert!(d
        .search_members(ListId(9999), SearchBy::Address, "a", None, 10)
        .is_err());
}

both!(
    prefixes_find_each_match_once_in_order,
    hostile_searches_are_refused,
);
