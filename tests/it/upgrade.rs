//! Upgrades: a data directory written by Herald 0.1.0 (committed under
//! `tests/fixtures/upgrade/0.1.0/`: directory schema 3, an archive and statistics database
//! from before they carried a version, a journal with a post still pending) is opened by this
//! Herald: every store is migrated, lists, members and the archive are there, and the pending
//! post is delivered to exactly the members who had not had it. A store written by a *newer*
//! Herald is refused at start with a message that says so — never half-read, never
//! quarantined as damage.

use crate::support;

use herald_sim::{Profile, World};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::binary::{herald_bin, herald_with_config, BinaryServer};
use support::*;

const LIST: &str = "upgrade@lists.test";
const MEMBERS: usize = 10;
const DOMAINS: usize = 2;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upgrade/0.1.0")
}

/// The stores a data directory holds that the fixture keeps (caches such as host health
/// would point at the old world's addresses).
const KEPT: &[&str] = &["herald.db", "archive.db", "stats.db", "dedup.log"];

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read fixture") {
        let entry = entry.expect("entry");
        let path = entry.path();
        let target = to.join(entry.file_name());
        if path.is_dir() {
            copy_tree(&path, &target);
        } else {
            std::fs::copy(&path, &target).expect("copy");
        }
    }
}

/// Writes the fixture anew with the Herald built from this tree: a list of 10 members on two
/// domains, one post delivered to the first domain and greylisted for an hour on the second,
/// then a graceful stop. Run it by hand only when cutting a release whose stores change, and
/// commit the result as that release's fixture.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "writes tests/fixtures/upgrade/0.1.0 anew: run by hand at a release that changes a store"]
async fn make_fixture() {
    let profiles = [
        Profile::Normal,
        Profile::Greylist {
            retry_after: Duration::from_secs(3600),
            announce: false,
        },
    ];
    let world = World::start(world_config(&profiles, false))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let mut server = BinaryServer::configure(dir.path(), &data, &world, "");
    server.start().await;
    let api = server.api.clone();
    create_list(&api, LIST, json!({"posting_policy": "anyone"})).await;
    let (status, report) = http_bytes(
        &format!("{api}/api/v1/lists/{LIST}/import"),
        members_csv(MEMBERS, DOMAINS).into_bytes(),
    )
    .await;
    assert_eq!(status, 200, "{report}");
    let post = b"From: a@outside.test\r\nSubject: before the upgrade\r\nMessage-ID: <upgrade-1@outside.test>\r\n\r\nbody\r\n";
    let (status, r) = http_bytes(&format!("{api}/api/v1/lists/{LIST}/posts"), post.to_vec()).await;
    assert_eq!(status, 202, "{r}");
    assert!(
        world
            .recorder()
            .wait_for((MEMBERS / DOMAINS) as u64, Duration::from_secs(30))
            .await
    );
    // Let the archive writer and the journal commit, then stop as an operator would.
    tokio::time::sleep(Duration::from_secs(2)).await;
    server.stop().await;
    let out = fixture();
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).expect("mkdir fixture");
    for name in KEPT {
        std::fs::copy(data.join(name), out.join(name)).expect("copy store");
    }
    copy_tree(
        &data.join("spool").join("journal"),
        &out.join("spool").join("journal"),
    );
    world.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_directory_from_0_1_0_upgrades_and_resumes_its_pending_post() {
    let world = World::start(world_config(&[Profile::Normal, Profile::Normal], false))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    copy_tree(&fixture(), &data);
    let mut server = BinaryServer::configure(dir.path(), &data, &world, "");
    server.start().await;
    let api = server.api.clone();

    let list: herald_api_types::ListView = get_view(&format!("{api}/api/v1/lists/{LIST}")).await;
    assert_eq!(list.members.total, MEMBERS as u64, "{list:?}");
    wait_settled(&api, Duration::from_secs(60)).await;
    let snap = world.recorder().snapshot();
    for i in 0..MEMBERS {
        let addr = format!("m{i}@d{}.test", i % DOMAINS);
        let copies = snap.copies_for(&addr).len();
        // d0's members had the post before the upgrade; d1's were still greylisted.
        let want = usize::from(i % DOMAINS == 1);
        assert_eq!(copies, want, "{addr}: {copies} copies after the upgrade");
    }
    let (ok, listing) = herald_with_config(&server.config, &["archive", "search", LIST, "upgrade"]);
    assert!(ok, "{listing}");
    assert!(listing.contains("before the upgrade"), "{listing}");
    server.stop().await;
    world.shutdown().await;

    let version = |db: &str| -> i64 {
        rusqlite::Connection::open(data.join(db))
            .expect("open")
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .expect("user_version")
    };
    assert_eq!(version("herald.db"), herald_directory::SCHEMA_VERSION);
}

/// `herald serve` on `data` must stop at once with a message naming a newer Herald, and leave
/// the store it refused as it was.
async fn refuses_to_start(data: &Path, world: &World, store: &Path, what: &str) {
    let dir = data.parent().expect("parent");
    let server = BinaryServer::configure(dir, data, world, "");
    let before = std::fs::read(store).expect("read store");
    let mut child = std::process::Command::new(herald_bin())
        .args(["serve", "--config"])
        .arg(&server.config)
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("{what}: herald serve kept running on a store from a newer Herald");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr)
        .expect("stderr");
    assert!(!status.success(), "{what}: started anyway");
    assert!(
        stderr.contains("newer") && stderr.contains("upgrade Herald"),
        "{what}: the refusal must say why: {stderr}"
    );
    assert!(
        std::fs::read(store).expect("read store") == before,
        "{what}: the refused store was changed"
    );
    eprintln!("{what}: {}", stderr.trim());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_from_a_newer_herald_are_refused_with_a_clear_message() {
    let world = World::start(world_config(&[Profile::Normal], false))
        .await
        .expect("world");
    let set_version = |db: &Path, v: i64| {
        rusqlite::Connection::open(db)
            .expect("open")
            .pragma_update(None, "user_version", v)
            .expect("set user_version");
    };

    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    copy_tree(&fixture(), &data);
    let db = data.join("herald.db");
    set_version(&db, herald_directory::SCHEMA_VERSION + 1);
    refuses_to_start(&data, &world, &db, "directory").await;

    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    copy_tree(&fixture(), &data);
    let db = data.join("archive.db");
    set_version(&db, herald_archive::store::SCHEMA_VERSION + 1);
    refuses_to_start(&data, &world, &db, "archive").await;

    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    copy_tree(&fixture(), &data);
    let db = data.join("stats.db");
    set_version(&db, 2);
    refuses_to_start(&data, &world, &db, "statistics").await;

    // The digest ledger came after 0.1.0: a newer one is refused too.
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    copy_tree(&fixture(), &data);
    let db = data.join("digest.db");
    set_version(&db, herald_digest::state::SCHEMA_VERSION + 1);
    refuses_to_start(&data, &world, &db, "digest ledger").await;

    // So did the TLS report ledger.
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    copy_tree(&fixture(), &data);
    let db = data.join("tlsrpt.db");
    set_version(&db, herald_tlsrpt::ledger::SCHEMA_VERSION + 1);
    refuses_to_start(&data, &world, &db, "TLS report ledger").await;

    // And the web accounts (sessions, roles, the audit log): the same refusal, in the same
    // words, before anything is written to the file.
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    copy_tree(&fixture(), &data);
    let db = data.join("accounts.db");
    set_version(&db, 2);
    refuses_to_start(&data, &world, &db, "accounts database").await;

    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    copy_tree(&fixture(), &data);
    let segment = data.join("spool/journal/0000000000000001.log");
    let mut bytes = std::fs::read(&segment).expect("read segment");
    assert_eq!(&bytes[..8], b"HRLDJNL1");
    bytes[7] = b'2';
    std::fs::write(&segment, bytes).expect("write segment");
    refuses_to_start(&data, &world, &segment, "journal").await;
    assert!(
        !data
            .join("spool/journal/0000000000000001.log.corrupt")
            .exists()
            && segment.exists(),
        "a newer journal must not be quarantined as damage"
    );
    world.shutdown().await;
}
