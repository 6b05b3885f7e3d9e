//! The bounce stage scores a copy's final failure by its cause, on the real SQLite directory:
//! Herald's own verdicts (the operator gave up, the copy expired) never move the member's score,
//! while a remote "no such user" does (issue 13, item 5: a give-up used to score as a hard
//! bounce against every member it touched).

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
    let dir = tempfile::tempdir().expect("tempdir");
    let directory = Directory::open(&dir.path().join("h.db")).expect("directory");
    let list = directory
        .create_list(&a("dev@l.test"), &ListSettings::default())
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
async fn herald_s_own_verdicts_leave_the_score_alone_a_remote_no_such_user_raises_it() {
    let w = world();
    let greylisted = Reply::new(451, EnhancedStatus::parse("4.7.1"), "greylisted");
    let own = [
        FailureCause::OperatorGaveUp,
        FailureCause::Expired {
            last_reply: Some(greylisted),
        },
        FailureCause::Expired { last_reply: None },
    ];
    for cause in own {
        let p = w.stage.process_failure(failed(&w, cause.clone())).await;
        assert_eq!(p.expect("processed"), None, "{cause:?} is not a bounce");
        assert_eq!(score(&w), None, "{cause:?} moved the score");
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
