//! The CLI as an operator uses it in a shell: output piped into `head`, which closes
//! the pipe early, and a server that goes away in the middle of a request. Neither may panic:
//! a closed pipe ends the command quietly (status 141, as a command stopped by SIGPIPE), a
//! server problem is one line on stderr and status 1.

use crate::support;

use herald_sim::{Profile, World};
use serde_json::json;
use std::io::Read;
use std::process::{Command, Stdio};
use support::*;
use tokio::io::AsyncReadExt;

fn herald() -> Command {
    Command::new(env!("CARGO_BIN_EXE_herald"))
}

fn assert_one_line_error(out: &std::process::Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(
        out.status.code(),
        Some(1),
        "status: {:?}; stderr: {stderr}",
        out.status
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr:?}");
    assert!(stderr.starts_with("herald: "), "{stderr}");
    stderr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_pipe_ends_the_command_quietly() {
    let world = World::start(world_config(&[Profile::Normal], false))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let server = TestServer::start(server_config(&world, dir.path().to_path_buf())).await;
    let list = "pipe@lists.test";
    create_list(&server.api, list, json!({})).await;
    let (status, r) = http_bytes(
        &format!("{}/api/v1/lists/{list}/import", server.api),
        members_csv(3000, 1).into_bytes(),
    )
    .await;
    assert_eq!(status, 200, "{r}");

    // `herald member ls … | head -c 200`: read a little, then close the pipe.
    let api = server.api.clone();
    let out = tokio::task::spawn_blocking(move || {
        let mut child = herald()
            .args(["--server", &api, "member", "ls", list, "--limit", "3000"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let mut stdout = child.stdout.take().expect("stdout");
        let mut first = [0u8; 200];
        stdout.read_exact(&mut first).expect("some output");
        drop(stdout);
        child.wait_with_output().expect("wait")
    })
    .await
    .expect("join");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.is_empty(), "quiet on a closed pipe: {stderr}");
    assert_eq!(out.status.code(), Some(141), "{:?}", out.status);
    server.stop().await;
    world.shutdown().await;
}

#[tokio::test]
async fn a_server_that_goes_away_mid_request_is_one_line() {
    // Accepts, reads the request, and closes without an answer.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let rude = tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf).await;
            drop(s);
        }
    });
    let url = format!("http://{addr}");
    for args in [
        vec!["status"],
        vec!["queue"],
        vec!["member", "ls", "x@lists.test"],
    ] {
        let url = url.clone();
        let out = tokio::task::spawn_blocking(move || {
            herald()
                .args(["--server", &url])
                .args(&args)
                .output()
                .expect("run")
        })
        .await
        .expect("join");
        assert_one_line_error(&out);
    }
    rude.abort();

    // Nothing listening at all.
    let closed = format!("http://127.0.0.1:{}", support::binary::free_port());
    let out = tokio::task::spawn_blocking(move || {
        herald()
            .args(["--server", &closed, "status"])
            .output()
            .expect("run")
    })
    .await
    .expect("join");
    let line = assert_one_line_error(&out);
    assert!(line.contains("no Herald server is answering"), "{line}");
}
