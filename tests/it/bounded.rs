//! What a long-running server must not let grow, driven through the real `herald` binary on the
//! simulated world:
//! - a member whose host never answers is disabled under the list's bounce policy by the copies
//!   that expire after the list's retry period (each an `expired` bounce event, counted like a
//!   soft bounce), while the operator's give-up of another member's copies never counts;
//! - the delivery log rotates itself at its configured size during a fan-out: rotated files are
//!   gzip'd, at most `delivery_log_keep_files` remain, and the person export still finds the
//!   lines that went into a compressed file.

use crate::support;

use herald_sim::{Profile, World};
use serde_json::json;
use std::path::Path;
use std::time::Duration;
use support::binary::BinaryServer;
use support::*;

const LIST: &str = "news@lists.test";
const OTHER: &str = "slow@lists.test";

/// Fast retries, so a copy for a dead host is tried (and then expired) within seconds.
const FAST_RETRIES: &str = "[scheduler]\nretry_initial_secs = 1\nretry_max_secs = 1\n\
     destination_backoff_secs = 1\ndestination_backoff_max_secs = 1\ntick_ms = 50\n";

fn show(api: &str, list: &str, member: &str) -> String {
    herald_cli(api, None, &["member", "show", list, member])
}

/// The once-per-day rule is the list's policy; a test cannot wait a day, so the member's last
/// counted bounce is moved a day back in the directory, as the clock would have moved it.
fn a_day_passes(data: &Path) {
    let db = rusqlite::Connection::open(data.join("herald.db")).expect("directory");
    db.busy_timeout(Duration::from_secs(10)).expect("timeout");
    db.execute(
        "UPDATE bounce_scores SET last_counted_ms = last_counted_ms - 86400000",
        [],
    )
    .expect("move the day");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_never_answers_disables_its_member_an_operators_give_up_never_counts() {
    // d0 answers; d1 refuses every connection (a dead host).
    let world = World::start(world_config(&[Profile::Normal, Profile::Refused], false))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let mut server = BinaryServer::configure(dir.path(), &data, &world, FAST_RETRIES);
    server.start().await;
    let api = server.api.clone();
    // Copies on LIST are given up after 3 s; OTHER keeps its copies for days, so the operator
    // can give them up by hand. Both disable at a score of 1 (two soft failures, a day apart).
    for (list, max_age) in [(LIST, 3), (OTHER, 432_000)] {
        create_list(
            &api,
            list,
            json!({"posting_policy": "anyone", "max_age_secs": max_age, "bounce_threshold": 1}),
        )
        .await;
    }
    add_members(&api, LIST, &["live@d0.test", "dead@d1.test"]).await;
    add_members(&api, OTHER, &["kept@d1.test"]).await;

    for round in 1..=2 {
        let post = inject_post(&api, LIST, &format!("expiry-{round}")).await;
        let p = wait_complete(&api, &post, Duration::from_secs(90)).await;
        assert_eq!((p.delivered, p.failed), (1, 1), "round {round}: {p:?}");
        eventually(
            Duration::from_secs(30),
            "the expired copy recorded",
            || async {
                show(&api, LIST, "dead@d1.test").contains(&format!("bounces:      {round}"))
            },
        )
        .await;

        let other = inject_post(&api, OTHER, &format!("give-up-{round}")).await;
        // The copy waits for its dead host: tried and deferred, or parked on arrival in the
        // deferred queue when the host is already known down. Either way the operator's
        // give-up finds it.
        let give_up = || {
            herald_cli(
                &api,
                None,
                &[
                    "stragglers",
                    "--action",
                    "give-up",
                    "--recipient",
                    "kept@d1.test",
                ],
            )
        };
        eventually(Duration::from_secs(30), "kept's copy given up", || async {
            give_up().contains("1 queued copies matched")
        })
        .await;
        let p = wait_complete(&api, &other, Duration::from_secs(30)).await;
        assert_eq!(p.failed, 1, "{p:?}");
        if round == 1 {
            let dead = show(&api, LIST, "dead@d1.test");
            assert!(dead.contains("status:       enabled"), "{dead}");
            assert!(
                dead.contains("bounce score: 0.5\n"),
                "one soft count: {dead}"
            );
            assert!(dead.contains("expired") && dead.contains("5.4.7"), "{dead}");
            a_day_passes(&data);
        }
    }
    let dead = show(&api, LIST, "dead@d1.test");
    assert!(
        dead.contains(
            "status:       disabled (bounce score 1.0 reached 1.0 (last: expired 5.4.7))"
        ),
        "two expired copies a day apart reach the threshold: {dead}"
    );
    let live = show(&api, LIST, "live@d0.test");
    assert!(
        live.contains("status:       enabled") && live.contains("bounces:      0"),
        "{live}"
    );
    // The operator gave up on kept's copies twice, a day apart: nothing recorded, nothing counted.
    let kept = show(&api, OTHER, "kept@d1.test");
    assert!(kept.contains("status:       enabled"), "{kept}");
    assert!(
        kept.contains("bounce score: 0\n") && kept.contains("bounces:      0"),
        "{kept}"
    );
    server.stop().await;
    world.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_delivery_log_rotates_compresses_keeps_its_count_and_stays_readable() {
    let world = World::start(world_config(
        &[Profile::Normal, Profile::Normal, Profile::Normal],
        false,
    ))
    .await
    .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let extra = format!(
        "{FAST_RETRIES}[log]\ndelivery_log_max_bytes = 4096\ndelivery_log_keep_files = 3\n"
    );
    let mut server = BinaryServer::configure(dir.path(), &data, &world, &extra);
    server.start().await;
    let api = server.api.clone();
    setup_personalized_list(&api, LIST, members_csv(300, 3)).await;
    let post = inject_post(&api, LIST, "rotation").await;
    let p = wait_complete(&api, &post, Duration::from_secs(120)).await;
    assert_eq!(p.delivered, 300, "{p:?}");

    // ~300 lines of ~190 bytes: a dozen rotations of 4 KB; the sweeper keeps the newest 3.
    let live = data.join("log/delivery.log");
    eventually(
        Duration::from_secs(30),
        "3 rotated files, all gzip'd",
        || {
            let files = herald_telemetry::logfiles::rotated_files(&live);
            async move { files.len() == 3 && files.iter().all(|f| f.compressed) }
        },
    )
    .await;
    let names: Vec<String> = std::fs::read_dir(live.parent().expect("log dir"))
        .expect("log dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names.len(),
        4,
        "the live file and 3 rotated ones: {names:?}"
    );
    assert!(std::fs::metadata(&live).expect("live").len() < 4096 + 1024);

    // A member whose delivery line is only in a compressed file is still found by the reader.
    let newest = &herald_telemetry::logfiles::rotated_files(&live)[0];
    let mut text = String::new();
    std::io::Read::read_to_string(
        &mut herald_telemetry::logfiles::open_log_file(&newest.path).expect("open .gz"),
        &mut text,
    )
    .expect("gunzip");
    let line = text
        .lines()
        .find(|l| l.contains("status=sent"))
        .expect("a delivery line in the rotated file");
    let rcpt = &line[line.find("to=<").expect("to=") + 4..line.find(">,").expect("to=<…>")];
    assert!(!std::fs::read_to_string(&live)
        .expect("live")
        .contains(&format!("<{rcpt}>")));
    let export = herald_cli(&api, None, &["member", "export", rcpt]);
    assert!(
        export.contains(line),
        "the export shows {line:?}:\n{export}"
    );
    server.stop().await;
    world.shutdown().await;
}
