//! Bounce scoring in the directory: weights, the once-per-day rule, staleness, the threshold,
//! reputation events, pruning, and a bounce bomb that cannot touch other members.

#[macro_use]
mod common;
use common::{Kind, Store};
use herald_directory::{Directory, NewBounce, DAY_MS, MAX_EVENTS_PER_ADDRESS};
use herald_types::{Address, ListSettings, MemberStatus};

fn a(s: &str) -> Address {
    Address::parse(s).expect("address")
}

fn setup(kind: Kind) -> (Store, Directory, herald_types::ListId) {
    let dir = Store::fresh(kind);
    let d = dir.open();
    let list = d
        .create_list(&a("dev@l.test"), &ListSettings::default())
        .expect("list");
    let members: Vec<_> = ["bob@x.test", "carol@x.test"]
        .iter()
        .map(|m| herald_directory::NewMember {
            address: a(m),
            display_name: None,
            fields: Default::default(),
        })
        .collect();
    d.add_members(list.id, &members).expect("members");
    (dir, d, list.id)
}

fn hard(at_ms: u64) -> NewBounce {
    NewBounce {
        kind: "hard".into(),
        weight: 1.0,
        status: Some("5.1.1".into()),
        diagnostic: "user unknown".into(),
        source: "dsn",
        post: None,
        at_ms,
    }
}

fn five_days_of_hard_bounces_disable_the_member_with_a_reason(kind: Kind) {
    let (_t, d, list) = setup(kind);
    let bob = a("bob@x.test");
    let t0 = 1_000 * DAY_MS;
    for day in 0..4 {
        let r = d
            .apply_bounce(
                list,
                Some(&bob),
                &hard(t0 + day * DAY_MS),
                herald_bounce::score,
            )
            .expect("apply");
        assert!(r.counted && !r.disabled);
    }
    let r = d
        .apply_bounce(
            list,
            Some(&bob),
            &hard(t0 + 4 * DAY_MS),
            herald_bounce::score,
        )
        .expect("apply");
    assert!(r.disabled, "{r:?}");
    assert_eq!(r.score, 5.0);
    let m = d.member(list, &bob).expect("read").expect("member");
    match m.status {
        MemberStatus::Disabled(why) => assert!(why.contains("bounce score 5.0"), "{why}"),
        s => panic!("still {s:?}"),
    }
    let hist = d
        .bounce_events(Some(list), Some(&bob), None, 100)
        .expect("history");
    assert_eq!(hist.len(), 5);
}

fn a_bounce_bomb_counts_once_a_day_and_touches_nobody_else(kind: Kind) {
    let (_t, d, list) = setup(kind);
    let bob = a("bob@x.test");
    let t0 = 1_000 * DAY_MS;
    for i in 0..3_000u64 {
        d.apply_bounce(list, Some(&bob), &hard(t0 + i), herald_bounce::score)
            .expect("apply");
    }
    let s = d.bounce_score(list, &bob).expect("score").expect("some");
    assert_eq!(s.score, 1.0, "3,000 bounces in one day count once");
    let bob_m = d.member(list, &bob).expect("r").expect("m");
    assert!(bob_m.status.is_enabled());
    let carol = d.member(list, &a("carol@x.test")).expect("r").expect("m");
    assert!(carol.status.is_enabled());
    assert!(d
        .bounce_score(list, &a("carol@x.test"))
        .expect("s")
        .is_none());
    let hist = d
        .bounce_events(Some(list), Some(&bob), None, 10_000)
        .expect("h");
    assert_eq!(
        hist.len() as u32,
        MAX_EVENTS_PER_ADDRESS,
        "history is pruned"
    );
}

fn stale_scores_restart_and_soft_counts_half_and_reputation_spares_members(kind: Kind) {
    let (_t, d, list) = setup(kind);
    let bob = a("bob@x.test");
    let t0 = 1_000 * DAY_MS;
    let soft = NewBounce {
        kind: "soft".into(),
        weight: 0.5,
        ..hard(t0)
    };
    assert_eq!(
        d.apply_bounce(list, Some(&bob), &soft, herald_bounce::score)
            .expect("a")
            .score,
        0.5
    );
    let later = hard(t0 + 31 * DAY_MS);
    assert_eq!(
        d.apply_bounce(list, Some(&bob), &later, herald_bounce::score)
            .expect("a")
            .score,
        1.0
    );
    let policy = NewBounce {
        kind: "policy".into(),
        weight: 0.0,
        ..hard(t0 + 40 * DAY_MS)
    };
    let r = d
        .apply_bounce(list, None, &policy, herald_bounce::score)
        .expect("policy");
    assert!(!r.counted && !r.member_found);
    let rep = d
        .bounce_events(Some(list), None, Some("policy"), 10)
        .expect("rep");
    assert_eq!(rep.len(), 1);
    assert_eq!(rep[0].address, "");
    // An event for a stranger is recorded but changes nobody.
    let r = d
        .apply_bounce(
            list,
            Some(&a("who@x.test")),
            &hard(t0),
            herald_bounce::score,
        )
        .expect("stranger");
    assert!(!r.member_found && !r.counted);
}

fn an_administrator_resets_a_score_or_re_enables_and_removal_forgets_the_history(kind: Kind) {
    let (_t, d, list) = setup(kind);
    let (bob, carol) = (a("bob@x.test"), a("carol@x.test"));
    let t0 = 1_000 * DAY_MS;
    for who in [&bob, &carol] {
        for day in 0..5 {
            d.apply_bounce(
                list,
                Some(who),
                &hard(t0 + day * DAY_MS),
                herald_bounce::score,
            )
            .expect("apply");
        }
        let m = d.member(list, who).expect("read").expect("member");
        assert!(!m.status.is_enabled(), "disabled by bounces");
    }
    // Reset the score only: status and history stay.
    assert!(d.reset_bounce_score(list, &bob).expect("reset"));
    assert_eq!(d.bounce_score(list, &bob).expect("score"), None);
    assert!(!d
        .member(list, &bob)
        .expect("r")
        .expect("m")
        .status
        .is_enabled());
    assert_eq!(
        d.bounce_events(Some(list), Some(&bob), None, 100)
            .expect("h")
            .len(),
        5
    );
    // Re-enable: enabled, score cleared, history kept; the next bounce counts from zero.
    assert!(d.reset_bounces(list, &bob).expect("enable"));
    assert!(d
        .member(list, &bob)
        .expect("r")
        .expect("m")
        .status
        .is_enabled());
    let r = d
        .apply_bounce(
            list,
            Some(&bob),
            &hard(t0 + 10 * DAY_MS),
            herald_bounce::score,
        )
        .expect("apply");
    assert!(!r.disabled && r.score == 1.0, "{r:?}");
    // Not a member: false, nothing created.
    let nobody = a("nobody@x.test");
    assert!(!d.reset_bounce_score(list, &nobody).expect("reset"));
    assert!(!d.reset_bounces(list, &nobody).expect("enable"));
    assert!(d.member(list, &nobody).expect("r").is_none());
    // Removing carol removes her history and score; bob's stay.
    assert!(d.remove_member(list, &carol).expect("remove"));
    assert_eq!(d.bounce_score(list, &carol).expect("score"), None);
    assert!(d
        .bounce_events(Some(list), Some(&carol), None, 100)
        .expect("h")
        .is_empty());
    assert_eq!(
        d.bounce_events(Some(list), Some(&bob), None, 100)
            .expect("h")
            .len(),
        6
    );
    // Re-added, she starts clean.
    d.add_member(list, &herald_directory::NewMember::new(carol.clone()))
        .expect("re-add");
    assert_eq!(d.bounce_score(list, &carol).expect("score"), None);
}

both!(
    five_days_of_hard_bounces_disable_the_member_with_a_reason,
    a_bounce_bomb_counts_once_a_day_and_touches_nobody_else,
    stale_scores_restart_and_soft_counts_half_and_reputation_spares_members,
    an_administrator_resets_a_score_or_re_enables_and_removal_forgets_the_history,
);
