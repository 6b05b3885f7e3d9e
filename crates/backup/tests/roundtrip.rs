//! A backup taken from live stores (a real spool, real SQLite files), streamed, unpacked,
//! verified and restored; and hostile or broken streams refused without writing outside the
//! target or passing as complete.
#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is a test failure

use bytes::Bytes;
use herald_backup::restore::{restore, verify, Targets};
use herald_backup::take::{stage, Source};
use herald_backup::{receive, BackupError, KeyFile};
use herald_spool::{FinalState, PostKind, PostMeta, Spool, SpoolConfig};
use herald_types::{Address, ListId, MemberId};
use std::path::Path;

fn meta(n: u64) -> PostMeta {
    PostMeta {
        kind: PostKind::ListPost,
        list_id: ListId(1),
        list_address: Address::parse("list@example.org").unwrap(),
        envelope_from: Some(Address::parse("a@example.com").unwrap()),
        received_at_ms: 1_700_000_000_000 + n,
        max_member_id: MemberId(100),
        message_id: Some(format!("<{n}@example.com>")),
        recipients: Vec::new(),
        hold_reason: None,
        null_sender: false,
        audience: Default::default(),
        dsn: None,
        member_range: None,
    }
}

fn sqlite_with(path: &Path, rows: i64) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.pragma_update(None, "user_version", 3).unwrap();
    conn.execute_batch("CREATE TABLE t (n INTEGER)").unwrap();
    for n in 0..rows {
        conn.execute("INSERT INTO t VALUES (?1)", [n]).unwrap();
    }
}

struct Live {
    _dir: tempfile::TempDir,
    source: Source,
}

async fn live_server() -> Live {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    sqlite_with(&data.join("herald.db"), 50);
    sqlite_with(&data.join("archive.db"), 7);
    std::fs::write(data.join("secret"), b"0123456789abcdef0123456789abcdef").unwrap();
    std::fs::write(data.join("dedup.log"), b"1 2 <x@y>\n").unwrap();
    let key = dir.path().join("etc").join("dkim.pem");
    std::fs::create_dir_all(key.parent().unwrap()).unwrap();
    std::fs::write(
        &key,
        b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
    )
    .unwrap();
    let spool_dir = data.join("spool");
    let (spool, _) = Spool::open(SpoolConfig::new(&spool_dir)).unwrap();
    let post = spool
        .accept(meta(1), Bytes::from_static(b"Subject: x\r\n\r\nbody\r\n"))
        .await
        .unwrap();
    spool
        .record(post, MemberId(7), FinalState::Delivered)
        .await
        .unwrap();
    Live {
        source: Source {
            data_dir: data,
            spool,
            spool_dir,
            keys: vec![KeyFile {
                role: "dkim:example.org:s1".into(),
                path: key,
            }],
            hostname: "herald.test".into(),
        },
        _dir: dir,
    }
}

async fn tar_of(source: &Source) -> Vec<u8> {
    let staged = stage(source).await.unwrap();
    let mut out = Vec::new();
    let m = staged.write_tar(&mut out).unwrap();
    assert_eq!(m.directory_schema, Some(3));
    out
}

#[tokio::test]
async fn a_backup_round_trips_into_a_fresh_machine() {
    let live = live_server().await;
    let tar = tar_of(&live.source).await;
    // The staging is gone once the backup is written.
    let leftovers: Vec<_> = std::fs::read_dir(&live.source.data_dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".backup-"))
        .collect();
    assert!(leftovers.is_empty(), "staging left behind: {leftovers:?}");

    let fresh = tempfile::tempdir().unwrap();
    let backup = fresh.path().join("backup");
    let manifest = receive::unpack(&tar[..], &backup).unwrap();
    assert_eq!(verify(&backup).unwrap(), manifest);
    let key_target = fresh.path().join("keys").join("dkim.pem");
    let targets = Targets {
        data_dir: fresh.path().join("data"),
        spool_dir: fresh.path().join("data").join("spool"),
        keys: vec![KeyFile {
            role: "dkim:example.org:s1".into(),
            path: key_target.clone(),
        }],
        owner: None,
        directory_schema_supported: 3,
    };
    // A backup from a newer Herald (schema 3 here, this one pretending to read up to 2) is
    // refused before anything is copied.
    let older = Targets {
        directory_schema_supported: 2,
        ..targets.clone()
    };
    let err = restore(&backup, &older).unwrap_err();
    assert!(
        err.to_string().contains("newer") || err.to_string().contains("reads up to"),
        "{err}"
    );
    assert!(!targets.data_dir.exists());
    let done = restore(&backup, &targets).unwrap();
    assert_eq!(
        done.data_files, 4,
        "herald.db, archive.db, secret, dedup.log"
    );
    assert!(done.segments >= 1);
    assert_eq!(
        std::fs::read(&key_target).unwrap(),
        std::fs::read(&live.source.keys[0].path).unwrap()
    );
    let conn = rusqlite::Connection::open(targets.data_dir.join("herald.db")).unwrap();
    let rows: i64 = conn
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 50);
    // The restored journal brings the pending post back with its done member.
    let (_spool, recovered) = Spool::open(SpoolConfig::new(&targets.spool_dir)).unwrap();
    assert_eq!(recovered.len(), 1);
    assert!(recovered[0].done.contains(MemberId(7)));

    // Staging left by a crash mid-backup is removed at the next start.
    let stale = live.source.spool_dir.join(".backup-1-2");
    std::fs::create_dir_all(&stale).unwrap();
    std::fs::write(stale.join("seg"), b"x").unwrap();
    herald_backup::take::remove_stale_staging(&[&live.source.data_dir, &live.source.spool_dir]);
    assert!(!stale.exists());

    // A second restore into the same place is refused and changes nothing.
    let again = restore(&backup, &targets).unwrap_err();
    assert!(matches!(again, BackupError::Refused(_)), "{again}");
}

#[tokio::test]
async fn a_damaged_or_truncated_backup_is_refused() {
    let live = live_server().await;
    let tar = tar_of(&live.source).await;
    let dir = tempfile::tempdir().unwrap();

    // Cut short (the server stopped mid-stream): no manifest, refused.
    let cut = &tar[..tar.len() / 2];
    let err = receive::unpack(cut, &dir.path().join("short")).unwrap_err();
    assert!(
        err.to_string().contains("incomplete") || err.to_string().contains("tar"),
        "{err}"
    );
    assert!(verify(&dir.path().join("short")).is_err());

    // A flipped byte inside a file: its hash no longer matches.
    let backup = dir.path().join("ok");
    receive::unpack(&tar[..], &backup).unwrap();
    let db = backup.join("data").join("secret");
    let mut bytes = std::fs::read(&db).unwrap();
    bytes[0] ^= 1;
    std::fs::write(&db, bytes).unwrap();
    let err = verify(&backup).unwrap_err();
    assert!(err.to_string().contains("data/secret"), "{err}");

    // Unpacking into a directory that is not empty is refused.
    let err = receive::unpack(&tar[..], &backup).unwrap_err();
    assert!(matches!(err, BackupError::Refused(_)), "{err}");
}

/// A tar entry written byte by byte, so names tar::Builder would refuse can be crafted.
fn raw_entry(name: &str, kind: tar::EntryType, data: &[u8]) -> Vec<u8> {
    let mut header = tar::Header::new_old();
    {
        let old = header.as_old_mut();
        old.name[..name.len()].copy_from_slice(name.as_bytes());
    }
    header.set_size(data.len() as u64);
    header.set_entry_type(kind);
    header.set_mode(0o600);
    header.set_cksum();
    let mut out = header.as_bytes().to_vec();
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(512) * 512, 0);
    out
}

#[test]
fn hostile_entries_never_write_outside_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let outside = dir.path().join("escaped");
    for (n, (name, kind)) in [
        ("../escaped", tar::EntryType::Regular),
        ("/tmp/escaped", tar::EntryType::Regular),
        ("data/../../escaped", tar::EntryType::Regular),
        ("spool/journal/../../../escaped", tar::EntryType::Regular),
        ("keys/link", tar::EntryType::Symlink),
        ("data/herald.db", tar::EntryType::Directory),
        ("etc/passwd", tar::EntryType::Regular),
    ]
    .into_iter()
    .enumerate()
    {
        let mut stream = raw_entry(name, kind, b"x");
        stream.extend_from_slice(&[0u8; 1024]);
        let target = dir.path().join(format!("t{n}")).join("inner");
        let err = receive::unpack(&stream[..], &target).unwrap_err();
        assert!(matches!(err, BackupError::Stream(_)), "{name}: {err}");
        assert!(!outside.exists(), "{name} escaped");
    }
    // A file after the manifest, and a manifest that does not list what came.
    let mut stream = raw_entry("manifest.json", tar::EntryType::Regular, b"{}");
    stream.extend(raw_entry("data/secret", tar::EntryType::Regular, b"s"));
    stream.extend_from_slice(&[0u8; 1024]);
    assert!(receive::unpack(&stream[..], &dir.path().join("m1")).is_err());
    let manifest = br#"{"format":"herald-backup/1","herald_version":"0","directory_schema":null,"hostname":"h","taken_at":"t","spool_segments":0,"files":[],"keys":[],"skipped":[]}"#;
    let mut stream = raw_entry("data/secret", tar::EntryType::Regular, b"s");
    stream.extend(raw_entry(
        "manifest.json",
        tar::EntryType::Regular,
        manifest,
    ));
    stream.extend_from_slice(&[0u8; 1024]);
    let err = receive::unpack(&stream[..], &dir.path().join("m2")).unwrap_err();
    assert!(err.to_string().contains("not in the manifest"), "{err}");
    assert!(!dir.path().join("m2").join("manifest.json").exists());
    // Random bytes are a clear error, not a panic.
    let noise: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 7) as u8)
        .collect();
    assert!(receive::unpack(&noise[..], &dir.path().join("m3")).is_err());
}
