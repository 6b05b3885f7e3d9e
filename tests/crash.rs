//! No loss on crash: the real `herald` binary is killed with SIGKILL in the middle of a fan-out,
//! started again on the same data directory, and must deliver to every member that had not yet
//! received the post; duplicates are bounded by the copies that were in flight.

mod support;

use herald_sim::{Profile, World};
use serde_json::json;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use support::*;

const LIST: &str = "crash@lists.test";
const MEMBERS: usize = 4000;
const DOMAINS: usize = 8;
const CONNS_PER_DEST: usize = 2;
const BATCH: usize = 8;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

fn write_config(path: &Path, data: &Path, world: &World) -> SocketAddr {
    let http: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    let toml = format!(
        r#"data_dir = "{data}"
hostname = "herald.test"
secret = "{SECRET}"
[listen]
smtp = "127.0.0.1:{smtp}"
lmtp = "127.0.0.1:{lmtp}"
http = "{http}"
[dns]
nameservers = ["{dns}"]
timeout_ms = 1000
[delivery]
port = {port}
connect_timeout_secs = 2
banner_timeout_secs = 2
[scheduler]
max_connections_per_destination = {CONNS_PER_DEST}
max_copies_per_batch = {BATCH}
retry_initial_secs = 1
retry_max_secs = 2
destination_backoff_secs = 1
tick_ms = 50
"#,
        data = data.display(),
        smtp = free_port(),
        lmtp = free_port(),
        dns = world.dns_addr(),
        port = world.smtp_port(),
    );
    std::fs::write(path, toml).expect("write config");
    http
}

fn spawn_server(config: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(["serve", "--config"])
        .arg(config)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn herald serve")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_fanout_loses_no_recipient() {
    // Slow receivers so the fan-out is still running when the server is killed.
    let slow = Profile::Slow {
        delay: Duration::from_millis(3),
    };
    let mut world_cfg = world_config(&vec![slow; DOMAINS], false);
    world_cfg.receiver.check_mime_every = 0;
    let world = World::start(world_cfg).await.expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("herald.toml");
    let http = write_config(&config, &dir.path().join("data"), &world);
    let api = format!("http://{http}");

    let mut server = spawn_server(&config);
    wait_healthy(&api).await;
    create_list(&api, LIST, json!({"posting_policy": "anyone"})).await;
    let (status, report) = http_bytes(
        &format!("{api}/api/lists/{LIST}/import"),
        members_csv(MEMBERS, DOMAINS).into_bytes(),
    )
    .await;
    assert_eq!(status, 200, "{report}");
    let post = b"From: a@outside.test\r\nSubject: crash\r\nMessage-ID: <crash-1@outside.test>\r\n\r\nbody\r\n";
    let (status, r) = http_bytes(&format!("{api}/api/lists/{LIST}/posts"), post.to_vec()).await;
    assert_eq!(status, 202, "{r}");
    let post_id = r["post"].as_str().expect("post id").to_string();

    // Kill it hard once a fifth of the copies are out.
    assert!(
        world
            .recorder()
            .wait_for(MEMBERS as u64 / 5, Duration::from_secs(60))
            .await,
        "fan-out did not start"
    );
    server.kill().expect("SIGKILL");
    let _ = server.wait();
    let at_kill = world.recorder().accepted();
    assert!(
        at_kill < MEMBERS as u64,
        "the fan-out finished before the kill ({at_kill} copies): make the world slower"
    );

    let mut server = spawn_server(&config);
    wait_healthy(&api).await;
    let progress = wait_complete(&api, &post_id, Duration::from_secs(120)).await;
    let snap = world.recorder().snapshot();
    let mut missing = Vec::new();
    for i in 0..MEMBERS {
        let addr = format!("m{i}@d{}.test", i % DOMAINS);
        if snap.copies_for(&addr).is_empty() {
            missing.push(addr);
        }
    }
    assert!(missing.is_empty(), "lost recipients: {missing:?}");
    // Copies written but not yet journaled when the process died can go out twice; there are at
    // most connections × batch of them (plus one pipelined group per connection).
    let in_flight_bound = (DOMAINS * CONNS_PER_DEST * (BATCH + 1)) as u64;
    assert!(
        snap.duplicates <= in_flight_bound,
        "{} duplicates, more than the {in_flight_bound} that can be in flight",
        snap.duplicates
    );
    assert_eq!(snap.unique_recipients, MEMBERS as u64, "{progress}");
    eprintln!(
        "killed at {at_kill} copies; after restart: {} accepted, {} duplicates, progress {progress}",
        snap.accepted, snap.duplicates
    );
    let _ = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status();
    let status = tokio::task::spawn_blocking(move || server.wait())
        .await
        .expect("join")
        .expect("wait");
    assert!(
        status.success(),
        "graceful shutdown after SIGTERM: {status:?}"
    );
    world.shutdown().await;
}
