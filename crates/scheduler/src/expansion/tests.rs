//! Expansion over a real SQLite directory and a real dedup store in a temporary directory:
//! which members become jobs (enabled, within the post's snapshot, not done before a restart,
//! not cross-posted duplicates, not "skip if addressed"), in pages, and what the report loop is
//! told.

use super::{expand, expand_generated, ExpandCtx, ExpandError};
use crate::messages::{Job, Report};
use herald_directory::{Directory, NewMember};
use herald_spool::{DedupConfig, DedupStore, Seen};
use herald_spool::{DoneSet, PostKind, PostMeta};
use herald_telemetry::Telemetry;
use herald_types::{Address, List, ListId, ListSettings, Member, MemberId, MemberStatus, PostId};
use std::sync::Arc;
use tokio::sync::mpsc;

const MESSAGE_ID: &str = "<cross@sender.test>";

fn addr(s: &str) -> Address {
    Address::parse(s).expect("addr")
}

/// A directory, a dedup store, and the channels expansion writes to.
struct Rig {
    _dir: tempfile::TempDir,
    directory: Directory,
    dedup: DedupStore,
    jobs: mpsc::Receiver<Vec<Job>>,
    reports: mpsc::Receiver<Report>,
    ctx: Arc<ExpandCtx>,
}

fn rig() -> Rig {
    rig_with(super::window::WindowRule::fixed(100))
}

fn rig_with(window: super::window::WindowRule) -> Rig {
    let dir = tempfile::tempdir().expect("tempdir");
    let directory = Directory::open(&dir.path().join("herald.db")).expect("directory");
    let dedup = DedupStore::open(
        DedupConfig {
            path: dir.path().join("dedup"),
            window_ms: 3_600_000,
            max_entries: 100,
        },
        herald_types::unix_ms_now(),
    )
    .expect("dedup");
    let (jobs_tx, jobs) = mpsc::channel(64);
    let (reports_tx, reports) = mpsc::channel(64);
    let ctx = Arc::new(ExpandCtx {
        directory: directory.clone(),
        list_ctx: herald_fanout::ListContext {
            unsubscribe_base_url: "http://x".into(),
            archive_url: None,
            archived_at: None,
            secret: b"0123456789abcdef".to_vec(),
            dkim: Default::default(),
            authserv_id: "herald.test".into(),
        },
        jobs: jobs_tx,
        reports: reports_tx,
        // Small pages: the tests' lists span several.
        page_size: 2,
        dedup: Some(dedup.clone()),
        post_window: window,
        telemetry: Telemetry::disabled_log(),
    });
    Rig {
        _dir: dir,
        directory,
        dedup,
        jobs,
        reports,
        ctx,
    }
}

impl Rig {
    fn list(&self, address: &str, members: &[&str]) -> (List, Vec<Member>) {
        let list = self
            .directory
            .create_list(&addr(address), &ListSettings::default())
            .expect("list");
        let members = members
            .iter()
            .map(|m| {
                self.directory
                    .add_member(list.id, &NewMember::new(addr(m)))
                    .expect("member")
            })
            .collect();
        (list, members)
    }

    /// Member ids of the jobs queued so far, page by page.
    fn pages(&mut self) -> Vec<Vec<MemberId>> {
        let mut out = Vec::new();
        while let Ok(page) = self.jobs.try_recv() {
            out.push(page.iter().map(|j| j.member.id).collect());
        }
        out
    }

    /// Member ids of every job queued so far.
    fn queued(&mut self) -> Vec<MemberId> {
        self.pages().concat()
    }

    /// `(recipients, already_done)` of the expansion report.
    fn expanded(&mut self) -> Option<(u64, u64)> {
        match self.reports.try_recv() {
            Ok(Report::Expanded {
                recipients,
                already_done,
                ..
            }) => Some((recipients, already_done)),
            _ => None,
        }
    }
}

fn meta(list: &List, max_member: MemberId) -> PostMeta {
    PostMeta {
        kind: PostKind::ListPost,
        list_id: list.id,
        list_address: list.address.clone(),
        envelope_from: Some(addr("s@sender.test")),
        received_at_ms: herald_types::unix_ms_now(),
        max_member_id: max_member,
        message_id: Some(MESSAGE_ID.into()),
        recipients: Vec::new(),
        hold_reason: None,
        null_sender: false,
        audience: Default::default(),
        dsn: None,
        member_range: None,
    }
}

fn body(to: &str) -> bytes::Bytes {
    let text = format!(
        "From: s@sender.test\r\nTo: {to}\r\nMessage-ID: {MESSAGE_ID}\r\nSubject: x\r\n\r\nbody\r\n"
    );
    bytes::Bytes::from(text)
}

fn ids(members: &[Member], which: &[usize]) -> Vec<MemberId> {
    which.iter().map(|&i| members[i].id).collect()
}

#[tokio::test]
async fn expansion_queues_the_enabled_members_of_the_posts_snapshot_page_by_page() {
    let mut rig = rig();
    let (list, m) = rig.list(
        "l@lists.test",
        &[
            "a@x.test",
            "b@x.test",
            "c@x.test",
            "d@x.test",
            "late@x.test",
        ],
    );
    let disabled = MemberStatus::Disabled("bounces".into());
    rig.directory
        .set_member_status(list.id, &m[1].address, &disabled)
        .expect("disable");
    // The post was accepted before `late` joined: its snapshot ends at d.
    let meta = meta(&list, m[3].id);
    let n = expand(rig.ctx.clone(), PostId(1), meta, body("l@lists.test"), None)
        .await
        .expect("expand");
    assert_eq!(n, 3);
    let pages = rig.pages();
    assert!(pages.len() > 1, "read in pages of two: {pages:?}");
    assert_eq!(pages.concat(), ids(&m, &[0, 2, 3]));
    assert_eq!(rig.expanded(), Some((3, 0)));
}

/// Eight members over eight domains, none of their copies final (the jobs stay in the channel,
/// holding their permits): with a window fixed at 4 the expansion waits after 4 copies; with a
/// window that grows by 2 per domain up to 10 all 8 are queued.
#[tokio::test]
async fn the_window_grows_with_the_domains_of_the_post() {
    use super::window::WindowRule;
    let members: Vec<String> = (0..8).map(|i| format!("m{i}@d{i}.test")).collect();
    let refs: Vec<&str> = members.iter().map(String::as_str).collect();
    let run = |rule| {
        let refs = refs.clone();
        async move {
            let mut rig = rig_with(rule);
            let (list, m) = rig.list("l@lists.test", &refs);
            let meta = meta(&list, m[7].id);
            let r = tokio::time::timeout(
                std::time::Duration::from_secs(2),
                expand(rig.ctx.clone(), PostId(1), meta, body("l@lists.test"), None),
            )
            .await;
            (r.map(|r| r.expect("expand")).ok(), rig.queued().len())
        }
    };
    let fixed = run(WindowRule::fixed(4)).await;
    assert_eq!(
        fixed,
        (None, 4),
        "a fixed window of 4 stops the expansion at 4 copies"
    );
    let growing = WindowRule {
        floor: 4,
        per_domain: 2,
        cap: 10,
    };
    assert_eq!(
        run(growing).await,
        (Some(8), 8),
        "the grown window takes all 8"
    );
}

#[tokio::test]
async fn expansion_skips_members_already_done_after_recovery_and_cross_posted_duplicates() {
    let mut rig = rig();
    // The same message went to `other` first; its enabled members got it there.
    let (other, o) = rig.list("other@lists.test", &["b@x.test", "c@x.test"]);
    let disabled = MemberStatus::Disabled("left".into());
    rig.directory
        .set_member_status(other.id, &o[1].address, &disabled)
        .expect("disable");
    rig.dedup.record(
        MESSAGE_ID,
        Seen {
            list: other.id,
            post: PostId(1),
            max_member: MemberId(i64::MAX),
            at_ms: herald_types::unix_ms_now(),
        },
    );
    let (list, m) = rig.list(
        "l@lists.test",
        &["a@x.test", "b@x.test", "c@x.test", "d@x.test"],
    );
    // Before a restart, a was delivered: recovery hands its id in the done set.
    let mut done = DoneSet::new();
    done.insert(m[0].id);
    let meta = meta(&list, m[3].id);
    let n = expand(
        rig.ctx.clone(),
        PostId(2),
        meta,
        body("l@lists.test"),
        Some(done),
    )
    .await
    .expect("expand");
    // b is skipped (enabled on `other`), c is not (disabled there: it never got that copy).
    assert_eq!(rig.queued(), ids(&m, &[2, 3]));
    assert_eq!(n, 2);
    assert_eq!(
        rig.expanded(),
        Some((3, 1)),
        "the done member counts toward the total, so the post can complete"
    );
}

#[tokio::test]
async fn a_member_who_asked_is_skipped_when_the_post_names_them() {
    let mut rig = rig();
    let (list, m) = rig.list("l@lists.test", &["a@x.test", "b@x.test", "c@x.test"]);
    rig.directory
        .set_skip_if_addressed(list.id, &m[0].address, true)
        .expect("pref");
    // Both a and b are named; only a asked not to get the list copy too.
    let meta = meta(&list, m[2].id);
    let to = "l@lists.test, A@x.test, b@x.test";
    expand(rig.ctx.clone(), PostId(1), meta, body(to), None)
        .await
        .expect("expand");
    assert_eq!(rig.queued(), ids(&m, &[1, 2]));
}

#[tokio::test]
async fn a_post_of_a_deleted_list_is_not_expanded() {
    let mut rig = rig();
    let (list, _) = rig.list("l@lists.test", &["a@x.test"]);
    let mut meta = meta(&list, MemberId(10));
    meta.list_id = ListId(list.id.0 + 1);
    let r = expand(rig.ctx.clone(), PostId(1), meta, body("l@lists.test"), None).await;
    assert!(matches!(
        r,
        Err(ExpandError::ListGone {
            post: PostId(1),
            ..
        })
    ));
    assert!(rig.queued().is_empty());
    assert_eq!(
        rig.expanded(),
        None,
        "no total: the post stays in the spool"
    );
}

#[tokio::test]
async fn generated_mail_goes_to_its_explicit_recipients_minus_those_done() {
    let mut rig = rig();
    let (list, _) = rig.list("l@lists.test", &["member@x.test"]);
    let mut meta = meta(&list, MemberId(10));
    meta.kind = PostKind::Generated;
    meta.recipients = vec![addr("r1@x.test"), addr("r2@x.test"), addr("r3@x.test")];
    // Recipient i is journaled as member i + 1; the first was delivered before a restart.
    let mut done = DoneSet::new();
    done.insert(MemberId(1));
    let n = expand_generated(
        rig.ctx.clone(),
        PostId(1),
        meta,
        body("r1@x.test"),
        Some(done),
    )
    .await
    .expect("expand");
    assert_eq!(n, 2);
    let mut rcpts = Vec::new();
    while let Ok(page) = rig.jobs.try_recv() {
        rcpts.extend(
            page.iter()
                .map(|j| (j.member.id, j.member.address.to_string())),
        );
    }
    assert_eq!(
        rcpts,
        [
            (MemberId(2), "r2@x.test".to_string()),
            (MemberId(3), "r3@x.test".to_string())
        ],
        "never the list's members"
    );
    assert_eq!(rig.expanded(), Some((3, 1)));
}
