//! `herald sim run` / `herald sim report` as an operator uses them: a short generated world
//! writes its run directory, the report reads it back, and a bad world file names its key.

#![allow(clippy::unwrap_used)]

use std::process::Command;

fn herald() -> Command {
    Command::new(env!("CARGO_BIN_EXE_herald"))
}

#[test]
fn sim_run_writes_a_run_directory_that_sim_report_reads() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let out = herald()
        .args(["sim", "run", "--duration", "1", "--smtp-port", "0"])
        .args([
            "--dns-addr",
            "127.0.0.1:0",
            "--domains",
            "5",
            "--refused",
            "0.1",
        ])
        .args(["--members", "50", "--run-dir"])
        .arg(&run)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("dns 127.0.0.1:") && stdout.contains("smtp_port "),
        "{stdout}"
    );
    for f in [
        "world.toml",
        "endpoint.json",
        "members.csv",
        "events.jsonl",
        "status.json",
    ] {
        assert!(run.join(f).exists(), "{f} missing");
    }
    let out = herald()
        .args(["sim", "report", "--json"])
        .arg(&run)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["members"], 50);
    assert_eq!(r["delivered"], 0);
    assert!(
        r["deliverable"].as_u64().unwrap() < 50,
        "a refused domain is not deliverable"
    );
    assert_eq!(r["missing"], r["deliverable"]);
    assert!(run.join("curve.png").exists() && run.join("curve.svg").exists());
}

#[test]
fn a_bad_world_file_is_refused_with_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let world = dir.path().join("world.toml");
    std::fs::write(
        &world,
        "[[domains]]\nname = \"a.example\"\nmx_addr = \"10.0.0.1\"\n",
    )
    .unwrap();
    let out = herald()
        .args(["sim", "run", "--config"])
        .arg(&world)
        .args(["--run-dir"])
        .arg(dir.path().join("run"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("domains[0].mx_addr"), "{err}");
}
