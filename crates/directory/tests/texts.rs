//! Languages and a list's own wording, on both backends: a member's language
//! is set, cleared and refused when not shipped; `language_for` falls back to the list's; an
//! owner's text is stored, replaced, checked (a bad one refused naming its field, nothing
//! stored), read back as `Overrides`, removed, and goes with its list.

#![allow(clippy::unwrap_used)]

#[macro_use]
mod common;
use common::{Kind, Store};
use herald_directory::{DirectoryError, NewMember};
use herald_i18n::Words;
use herald_types::{Address, ListId, ListSettings};

fn addr(s: &str) -> Address {
    Address::parse(s).unwrap()
}

fn a_members_language_is_theirs_else_the_lists(kind: Kind) {
    let tmp = Store::fresh(kind);
    let d = tmp.open();
    let settings = ListSettings {
        language: "de".into(),
        ..ListSettings::default()
    };
    let list = d.create_list(&addr("dev@l.test"), &settings).unwrap();
    let (ann, bob) = (addr("ann@x.test"), addr("bob@x.test"));
    d.add_members(
        list.id,
        &[NewMember::new(ann.clone()), NewMember::new(bob.clone())],
    )
    .unwrap();
    assert_eq!(d.member_language(list.id, &ann).unwrap(), Some(None));
    assert_eq!(d.language_for(&list, &ann).unwrap(), "de");
    assert!(d.set_member_language(list.id, &ann, Some("en")).unwrap());
    assert_eq!(
        d.member_language(list.id, &ann).unwrap(),
        Some(Some("en".into()))
    );
    assert_eq!(d.language_for(&list, &ann).unwrap(), "en");
    assert_eq!(d.language_for(&list, &bob).unwrap(), "de");
    // A stranger (a confirmation's address) gets the list's.
    assert_eq!(d.language_for(&list, &addr("new@x.test")).unwrap(), "de");
    // Not shipped: refused, nothing changed.
    for bad in ["xx", "", "EN", "de\n", &"d".repeat(5000)] {
        match d.set_member_language(list.id, &ann, Some(bad)) {
            Err(DirectoryError::InvalidInput { field, .. }) => assert_eq!(field, "language"),
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    assert_eq!(d.language_for(&list, &ann).unwrap(), "en");
    assert!(d.set_member_language(list.id, &ann, None).unwrap());
    assert_eq!(d.language_for(&list, &ann).unwrap(), "de");
    assert!(!d
        .set_member_language(list.id, &addr("nobody@x.test"), Some("en"))
        .unwrap());
    assert_eq!(
        d.member_language(list.id, &addr("nobody@x.test")).unwrap(),
        None
    );
    // The person's export carries it.
    d.set_member_language(list.id, &ann, Some("en")).unwrap();
    let person = d.person(&ann).unwrap();
    assert_eq!(person.memberships[0].language.as_deref(), Some("en"));
}

fn an_owners_text_is_checked_stored_and_used(kind: Kind) {
    let tmp = Store::fresh(kind);
    let d = tmp.open();
    let list = d
        .create_list(&addr("dev@l.test"), &ListSettings::default())
        .unwrap();
    assert!(d.list_texts(list.id).unwrap().is_empty());
    d.set_list_text(list.id, "welcome-subject", "en", "Hello from { $name }")
        .unwrap();
    d.set_list_text(list.id, "welcome-subject", "en", "Hi from { $name }")
        .unwrap();
    d.set_list_text(list.id, "welcome-subject", "de", "Hallo von { $name }")
        .unwrap();
    let texts = d.list_texts(list.id).unwrap();
    assert_eq!(texts.len(), 2, "{texts:?}");
    assert_eq!(texts[1].text, "Hi from { $name }");
    let o = d.overrides(list.id).unwrap();
    let en = Words {
        lang: "en",
        overrides: &o,
    };
    assert_eq!(
        en.text("welcome-subject", &[("name", "Dev")]),
        "Hi from Dev"
    );
    // Refused, naming the field, and nothing stored.
    for (id, lang, text, field) in [
        ("welcome-subject", "en", "{ $password }", "text"),
        ("welcome-subject", "en", "{ broken", "text"),
        ("no-such-message", "en", "x", "message"),
        ("welcome-subject", "xx", "x", "language"),
        ("welcome-subject", "en", "", "text"),
    ] {
        match d.set_list_text(list.id, id, lang, text) {
            Err(DirectoryError::InvalidInput { field: f, .. }) => assert_eq!(f, field, "{text}"),
            other => panic!("{text:?}: {other:?}"),
        }
    }
    assert_eq!(d.list_texts(list.id).unwrap().len(), 2);
    assert!(d
        .remove_list_text(list.id, "welcome-subject", "de")
        .unwrap());
    assert!(!d
        .remove_list_text(list.id, "welcome-subject", "de")
        .unwrap());
    assert_eq!(d.list_texts(list.id).unwrap().len(), 1);
    assert!(matches!(
        d.list_texts(ListId(999)),
        Err(DirectoryError::NoSuchList(_))
    ));
    // The texts go with the list.
    assert!(d.delete_list(&list.address).unwrap());
    let again = d
        .create_list(&addr("dev@l.test"), &ListSettings::default())
        .unwrap();
    assert!(d.list_texts(again.id).unwrap().is_empty());
}

both!(
    a_members_language_is_theirs_else_the_lists,
    an_owners_text_is_checked_stored_and_used,
);
