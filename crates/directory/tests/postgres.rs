//! What only the PostgreSQL backend has: migrations applied once when several nodes
//! start together on a fresh database (the advisory lock), one writer at a time across nodes,
//! and clear errors for a hostile or unreachable `[store] url`. Everything else runs on both
//! backends in the other test files.

use herald_directory::{Directory, DirectoryError, NewMember, SCHEMA_VERSION};
use herald_pg_harness::PgServer;
use herald_types::{Address, ListSettings};
use std::sync::{Arc, Barrier};

fn a(s: &str) -> Address {
    Address::parse(s).expect("address")
}

/// Four nodes open the same fresh database at the same instant: all succeed, and the schema
/// was applied once (one version row, one erasure key — a second run of migration 6 would
/// have failed on its primary key or left two).
#[test]
fn nodes_starting_together_migrate_a_fresh_database_once() {
    let url = PgServer::shared().fresh_database().expect("database");
    let barrier = Arc::new(Barrier::new(4));
    let nodes: Vec<_> = (0..4)
        .map(|_| {
            let (url, barrier) = (url.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                Directory::open_postgres(&url, 2)
            })
        })
        .collect();
    let dirs: Vec<Directory> = nodes
        .into_iter()
        .map(|h| h.join().expect("thread").expect("open"))
        .collect();
    let mut c = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
    let versions: Vec<i64> = c
        .query("SELECT version FROM directory_schema", &[])
        .expect("versions")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(versions, vec![SCHEMA_VERSION]);
    let keys: i64 = c
        .query_one("SELECT COUNT(*) FROM directory_keys", &[])
        .expect("keys")
        .get(0);
    assert_eq!(keys, 1);
    // And the nodes share one directory.
    let list = dirs[0]
        .create_list(&a("dev@l.test"), &ListSettings::default())
        .expect("list");
    assert_eq!(dirs[3].list_by_id(list.id).expect("read"), Some(list));
    assert_eq!(dirs[1].store_kind(), herald_directory::StoreKind::Postgres);
}

/// Two nodes adding members at once: every add counts exactly once, ids are unique and grow
/// in commit order (the write lock), so a post's snapshot "ids <= N" never gains a member
/// committed after it was taken.
#[test]
fn nodes_writing_at_once_count_every_member_once() {
    let url = PgServer::shared().fresh_database().expect("database");
    let one = Directory::open_postgres(&url, 2).expect("node 1");
    let two = Directory::open_postgres(&url, 2).expect("node 2");
    let list = one
        .create_list(&a("dev@l.test"), &ListSettings::default())
        .expect("list");
    let writers: Vec<_> = [one.clone(), two.clone()]
        .into_iter()
        .enumerate()
        .map(|(n, d)| {
            std::thread::spawn(move || {
                let mut added = 0;
                for batch in 0..20 {
                    // Half of each batch is shared with the other node: one of them adds it,
                    // the other updates it.
                    let ms: Vec<NewMember> = (0..50)
                        .map(|i| {
                            let who = if i % 2 == 0 {
                                format!("n{n}")
                            } else {
                                "both".into()
                            };
                            NewMember::new(a(&format!("{who}-{batch}-{i}@x.test")))
                        })
                        .collect();
                    added += d.add_members(list.id, &ms).expect("add");
                }
                added
            })
        })
        .collect();
    let added: u64 = writers.into_iter().map(|h| h.join().expect("thread")).sum();
    let total = two.member_counts(list.id).expect("count").total;
    assert_eq!(total, 20 * (25 + 25 + 25));
    assert_eq!(added, total, "each member counted as added once");
}

/// `herald doctor`'s probe reads the schema version and changes nothing.
#[test]
fn the_probe_reads_the_version_and_creates_nothing() {
    let url = PgServer::shared().fresh_database().expect("database");
    assert_eq!(Directory::probe_postgres(&url).expect("probe"), 0);
    assert_eq!(
        Directory::probe_postgres(&url).expect("again"),
        0,
        "created nothing"
    );
    drop(Directory::open_postgres(&url, 1).expect("open"));
    assert_eq!(
        Directory::probe_postgres(&url).expect("probe"),
        SCHEMA_VERSION
    );
}

#[test]
fn hostile_and_unreachable_urls_are_clear_errors() {
    for url in [
        "postgres://u:secret@127.0.0.1:notaport/db",
        "postgres://u:secret@127.0.0.1:5432/db?sslmode=bogus",
        "host=127.0.0.1 port=",
    ] {
        match Directory::open_postgres(url, 2) {
            Err(e @ DirectoryError::StoreUrl { .. }) => {
                assert!(!e.to_string().contains("secret"), "{e}");
                assert!(!e.is_client_error());
            }
            other => panic!("{url}: expected StoreUrl, got {other:?}"),
        }
    }
    // A port nobody listens on: the connection is refused, named as such.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let url = format!("postgres://u:secret@127.0.0.1:{port}/db?connect_timeout=2");
    match Directory::open_postgres(&url, 2) {
        Err(e @ DirectoryError::PgOpen { .. }) => {
            assert!(!e.to_string().contains("secret"), "{e}");
            assert!(
                e.is_unavailable(),
                "a refused connection is the store unreachable"
            );
        }
        other => panic!("expected PgOpen, got {other:?}"),
    }
}

/// The server ends every connection of the pool (as a restart does; here
/// `pg_terminate_backend`, SQLSTATE 57P01): the next call fails as "unavailable" and is
/// counted, the connection it ran on is discarded, and the call after works on a new one —
/// the pool never hands a dead connection out forever. A statement that is merely wrong is
/// not "unavailable".
#[test]
fn the_pool_discards_connections_the_server_ended_and_reconnects() {
    let url = PgServer::shared().fresh_database().expect("database");
    let d = Directory::open_postgres(&url, 1).expect("open");
    let list = d
        .create_list(&a("l@lists.test"), &ListSettings::default())
        .expect("list");
    assert_eq!(d.store_errors(), 0);
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
    let ended: i64 = admin
        .query_one(
            "SELECT COUNT(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE datname = current_database() AND pid <> pg_backend_pid()) t",
            &[],
        )
        .expect("terminate")
        .get(0);
    assert_eq!(ended, 1, "the pool's one connection");
    let mut failures = 0;
    // The driver may notice the end only when it next reads: one call fails at most.
    for _ in 0..3 {
        match d.list_by_id(list.id) {
            Ok(found) => {
                assert!(found.is_some());
                break;
            }
            Err(e) => {
                assert!(e.is_unavailable(), "{e:?}");
                failures += 1;
            }
        }
    }
    assert!(failures <= 1, "{failures} failures after one restart");
    assert_eq!(d.store_errors(), failures);
    assert!(d.list_by_id(list.id).expect("works again").is_some());
    // A wrong statement (here: a duplicate) is the caller's problem, not an outage.
    let dup = d.create_list(&a("l@lists.test"), &ListSettings::default());
    assert!(matches!(&dup, Err(e) if !e.is_unavailable()), "{dup:?}");
}

/// Links are spent on use across a cluster: two nodes race to spend one link and exactly one
/// wins, the other (and every later try at either node) sees it spent; a removal at one node is
/// the departure both read, and an erasure forgets it.
#[test]
fn a_link_spent_at_one_node_is_spent_at_every_node() {
    use herald_directory::LinkKind;
    let url = PgServer::shared().fresh_database().expect("database");
    let one = Directory::open_postgres(&url, 2).expect("node 1");
    let two = Directory::open_postgres(&url, 2).expect("node 2");
    let far = herald_types::unix_ms_now() + 3_600_000;
    let barrier = Arc::new(Barrier::new(2));
    let racers: Vec<_> = [one.clone(), two.clone()]
        .into_iter()
        .map(|d| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                d.spend_link(LinkKind::Confirmation, "race", far)
                    .expect("spend")
            })
        })
        .collect();
    let won: Vec<bool> = racers
        .into_iter()
        .map(|h| h.join().expect("thread"))
        .collect();
    assert_eq!(won.iter().filter(|w| **w).count(), 1, "{won:?}");
    assert!(one.link_spent("race").expect("read") && two.link_spent("race").expect("read"));
    assert!(!two
        .spend_link(LinkKind::Confirmation, "race", far)
        .expect("again"));
    // Expired keys are forgotten by the next claim at any node.
    assert!(one.spend_link(LinkKind::Form, "old", 1).expect("spend"));
    assert!(two.spend_link(LinkKind::Form, "new", far).expect("spend"));
    assert!(!one.link_spent("old").expect("read"));

    let list = one
        .create_list(&a("dev@l.test"), &ListSettings::default())
        .expect("list");
    let bob = a("bob@x.test");
    one.add_member(list.id, &NewMember::new(bob.clone()))
        .expect("add");
    let before = herald_types::unix_ms_now();
    assert!(two.remove_member(list.id, &bob).expect("remove"));
    let at = one.last_departure(list.id, &a("BOB@x.test")).expect("read");
    assert!(at.is_some_and(|t| t >= before), "{at:?}");
    two.erase_person(&bob).expect("erase");
    assert_eq!(one.last_departure(list.id, &bob).expect("read"), None);
}
