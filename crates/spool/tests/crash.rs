//! kill -9 in the middle of work: every post whose `accept` returned is recovered, every outcome
//! confirmed by `flush` is in its done set, and every post whose `complete` returned stays gone.
//!
//! The test re-executes its own binary as the child (`crash_child_process` with an environment
//! variable set); the child prints a line after each acknowledged step, the parent SIGKILLs it
//! mid-loop and then reopens the spool.
#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is a test failure

mod common;

use common::{body, meta};
use herald_spool::{FinalState, Spool, SpoolConfig};
use herald_types::{MemberId, PostId};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const DIR_ENV: &str = "HERALD_SPOOL_CRASH_DIR";
const MEMBERS: i64 = 20;
const TAG: &str = "SPOOLCRASH";

/// The child: accept, record, sometimes flush, sometimes complete — forever, until killed.
#[test]
fn crash_child_process() {
    let Ok(dir) = std::env::var(DIR_ENV) else {
        return; // Run normally: nothing to do.
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let mut c = SpoolConfig::new(dir);
        c.commit_interval_ms = 2;
        c.segment_max_bytes = 64 << 10; // roll and compact while being killed, too
        let (spool, _) = Spool::open(c).unwrap();
        let mut out = std::io::stdout().lock();
        for n in 0u64.. {
            let id = spool.accept(meta(n), body(n, 3000)).await.unwrap();
            writeln!(out, "{TAG} A {}", id.0).unwrap();
            for m in 1..=MEMBERS {
                spool
                    .record(id, MemberId(m), FinalState::Delivered)
                    .await
                    .unwrap();
            }
            if n % 2 == 0 {
                spool.flush().await.unwrap();
                writeln!(out, "{TAG} F {}", id.0).unwrap();
            }
            if n % 3 == 2 {
                spool.complete(id).await.unwrap();
                writeln!(out, "{TAG} C {}", id.0).unwrap();
            }
            out.flush().unwrap();
        }
    });
}

#[derive(Default)]
struct Acked {
    accepted: BTreeSet<u64>,
    flushed: BTreeSet<u64>,
    completed: BTreeSet<u64>,
}

fn parse(lines: &[String]) -> Acked {
    let mut acked = Acked::default();
    for line in lines {
        // libtest may print its own "test … " prefix on the same line as the first report.
        let Some(at) = line.find(TAG) else { continue };
        let mut parts = line[at + TAG.len()..].split_whitespace();
        let (Some(kind), Some(Ok(id))) = (parts.next(), parts.next().map(str::parse::<u64>)) else {
            continue;
        };
        match kind {
            "A" => acked.accepted.insert(id),
            "F" => acked.flushed.insert(id),
            "C" => acked.completed.insert(id),
            _ => false,
        };
    }
    acked
}

#[test]
fn sigkill_loses_nothing_that_was_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "crash_child_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(DIR_ENV, dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let mut lines = Vec::new();
    let start = Instant::now();
    // Let it run through a few segment rolls, then kill it wherever it is.
    while parse(&lines).accepted.len() < 40 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "child made no progress"
        );
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap() == 0 {
            panic!("child exited early");
        }
        lines.push(line);
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    // Lines printed before the kill are acknowledgements too; a half-written last line is not.
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut reader, &mut rest);
    lines.extend(
        rest.split_inclusive('\n')
            .filter(|l| l.ends_with('\n'))
            .map(String::from),
    );
    let acked = parse(&lines);

    let (_spool, recovered) = Spool::open(SpoolConfig::new(dir.path())).unwrap();
    let by_id: BTreeMap<PostId, _> = recovered.iter().map(|p| (p.id, p)).collect();
    for id in &acked.accepted {
        let live = by_id.get(&PostId(*id));
        if acked.completed.contains(id) {
            assert!(live.is_none(), "completed post {id} came back");
            continue;
        }
        let post = live.unwrap_or_else(|| panic!("accepted post {id} was lost"));
        if acked.flushed.contains(id) {
            assert_eq!(
                post.done.len(),
                MEMBERS as u64,
                "flushed outcomes of {id} were lost"
            );
        }
    }
    assert!(
        acked.accepted.len() >= 40,
        "every acknowledged accept was parsed"
    );
    assert!(acked.completed.len() >= 10 && acked.flushed.len() >= 15);
}
