//! The bounce stage scores a copy's final failure by its cause, on the real SQLite directory:
//! the operator's give-up never moves the member's score (it used to score as a hard bounce
//! against every member it touched), a remote "no such user" does, and a copy that expired after
//! the list's retry period counts as a soft failure of its own kind, so an address that never
//! answers is disabled under the list's bounce policy.

use herald_bounce::stage::BounceStage;
use herald_bounce::BounceKind;
use herald_directory::{Directory, NewMember};
use herald_spool::{Spool, SpoolConfig};
use herald_types::{
    Address, EnhancedStatus, FailedCopy, FailureCause, ListId, ListSettings, MemberStatus, PostId,
    Reply,
};

fn a(s: &str) -> Address {
    Address::parse(s).expect("address")
}

struct World {
    _dir: tempfile::TempDir,
    directory: Directory,
    stage: BounceStage,
    list: ListId,
}

fn world() -> World {
    world_with(ListSettings::default())
}

fn world_with(settings: ListSettings) -> World {
    let dir = tempfile::tempdir().expect("tempdir");
    let directory = Directory::open(&dir.path().join("h.db")).expect("directory");
    let list = directory
        .create_list(&a("dev@l.test"), &settings)
        .expect("list")
        .id;
    let bob = NewMember {
        address: a("bob@x.test"),
        display_name: None,
        fields: Default::default(),
    };
    directory.add_members(list, &[bob]).expect("member");
    let (spool, _) = Spool::open(SpoolConfig::new(dir.path().join("spool"))).expect("spool");
    let stage = BounceStage {
        directory: directory.clone(),
        spool,
        disabled: None,
        complaints: None,
    };
    World {
        _dir: dir,
        directory,
        stage,
        list,
    }
}

fn failed(w: &World, cause: FailureCause) -> FailedCopy {
    FailedCopy {
        list: w.list,
        post: PostId(7),
        rcpt: a("bob@x.test"),
        cause,
    }
}

fn score(w: &World) -> Option<f64> {
    let s = w.directory.bounce_score(w.list, &a("bob@x.test"));
    s.expect("score").map(|s| s.score)
}

#[tokio::test]
async fn an_operators_give_up_leaves_the_score_alone_a_remote_no_such_user_raises_it() {
    let w = world();
    for _ in 0..3 {
        let p = w
            .stage
            .process_failure(failed(&w, FailureCause::OperatorGaveUp))
            .await;
        assert_eq!(p.expect("processed"), None, "a give-up is not a bounce");
        assert_eq!(score(&w), None, "a give-up moved the score");
    }
    let events = w.directory.bounce_events(Some(w.list), None, None, 10);
    assert!(events.expect("events").is_empty(), "nothing recorded");

    let unknown = Reply::new(550, EnhancedStatus::parse("5.1.1"), "no such user");
    let p = w
        .stage
        .process_failure(failed(&w, FailureCause::Remote(unknown)))
        .await;
    let p = p.expect("processed").expect("scored");
    assert_eq!((p.kind, p.counted), (BounceKind::Hard, true));
    assert_eq!(score(&w), Some(1.0));
    let bob = w.directory.member(w.list, &a("bob@x.test")).expect("read");
    assert_eq!(bob.expect("member").status, MemberStatus::Enabled);
}

#[tokio::test]
async fn an_expired_copy_counts_as_its_own_soft_kind_and_disables_at_the_threshold() {
    let w = world_with(ListSettings {
        bounce_threshold: 1,
        ..ListSettings::default()
    });
    let greylisted = Reply::new(451, EnhancedStatus::parse("4.7.1"), "greylisted");
    let expired = FailureCause::Expired {
        last_reply: Some(greylisted),
    };
    let p = w.stage.process_failure(failed(&w, expired.clone())).await;
    let p = p.expect("processed").expect("scored");
    assert_eq!(
        (p.kind, p.counted, p.disabled),
        (BounceKind::Expired, true, false)
    );
    assert_eq!(score(&w), Some(0.5));
    // The same day again: recorded, not counted (the once-per-day rule of every bounce).
    let p = w.stage.process_failure(failed(&w, expired.clone())).await;
    let p = p.expect("processed").expect("scored");
    assert_eq!((p.kind, p.counted), (BounceKind::Expired, false));
    let events = w.directory.bounce_events(Some(w.list), None, None, 10);
    let events = events.expect("events");
    assert_eq!(events.len(), 2, "{events:?}");
    assert!(
        events
            .iter()
            .all(|e| e.kind == "expired" && e.source == "expiry"),
        "{events:?}"
    );
    assert_eq!(events[0].status.as_deref(), Some("5.4.7"), "{events:?}");

    // A day later the score rises again and reaches the list's threshold: disabled. The day is
    // moved by writing the first count a day earlier, as the clock would have.
    let w = world_with(ListSettings {
        bounce_threshold: 1,
        ..ListSettings::default()
    });
    let yesterday = herald_types::unix_ms_now() - herald_directory::DAY_MS;
    let earlier = herald_directory::NewBounce {
        kind: BounceKind::Expired.as_str().into(),
        weight: BounceKind::Expired.weight(),
        status: Some("5.4.7".into()),
        diagnostic: "expired".into(),
        source: "expiry",
        post: Some(PostId(6)),
        at_ms: yesterday,
    };
    let bob = a("bob@x.test");
    let applied = w
        .directory
        .apply_bounce(w.list, Some(&bob), &earlier, herald_bounce::score);
    assert!(applied.expect("applied").counted);
    let p = w.stage.process_failure(failed(&w, expired)).await;
    let p = p.expect("processed").expect("scored");
    assert_eq!((p.counted, p.disabled), (true, true), "{p:?}");
    let bob = w
        .directory
        .member(w.list, &bob)
        .expect("read")
        .expect("member");
    assert!(
        matches!(&bob.status, MemberStatus::Disabled(why) if why.contains("expired 5.4.7")),
        "{:?}",
        bob.status
    );
}
