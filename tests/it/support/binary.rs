//! The real `herald` binary as a child process, for tests that must kill it (`kill -9`) or run
//! it the way an operator does: a config file pointing at the simulated world, a data
//! directory, and `herald serve`.

use herald_sim::World;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::SECRET;

/// The binary to run: `HERALD_BIN` when set (a benchmark comparing two builds on the same
/// harness, e.g. a release build before and after a change), else the one cargo built.
pub fn herald_bin() -> PathBuf {
    std::env::var_os("HERALD_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_herald")))
}

/// `herald --config <config> <args>` as an operator runs it on the machine: whether it
/// succeeded, and its stdout followed by its stderr.
pub fn herald_with_config(config: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(herald_bin())
        .arg("--config")
        .arg(config)
        .args(args)
        .output()
        .expect("run herald");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// A port free right now on 127.0.0.1 (the child binds it a moment later).
pub fn free_port() -> u16 {
    free_port_on("127.0.0.1")
}

/// A port free right now on `ip` (the child binds it a moment later).
pub fn free_port_on(ip: &str) -> u16 {
    std::net::TcpListener::bind(format!("{ip}:0"))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// The config every test's `herald serve` starts from: `data` as its data directory, SMTP,
/// LMTP (a free port) and HTTP on `ip`, DNS and delivery pointed at `world`.
pub fn base_config(
    data: &Path,
    ip: &str,
    smtp: SocketAddr,
    http: SocketAddr,
    world: &World,
) -> String {
    format!(
        r#"data_dir = "{data}"
hostname = "herald.test"
secret = "{SECRET}"
[server]
allow_root = true
[listen]
smtp = "{smtp}"
lmtp = "{ip}:{lmtp}"
http = "{http}"
[dns]
nameservers = ["{dns}"]
timeout_ms = 1000
[delivery]
port = {port}
connect_timeout_secs = 2
banner_timeout_secs = 2
"#,
        data = data.display(),
        lmtp = free_port_on(ip),
        dns = world.dns_addr(),
        port = world.smtp_port(),
    )
}

/// A `herald serve` child process and where to reach it.
pub struct BinaryServer {
    pub config: PathBuf,
    pub smtp: SocketAddr,
    pub http: SocketAddr,
    pub api: String,
    /// Started under `nice -n` this much (a server beside a busy process, as in production).
    pub nice: u8,
    /// Started under `prlimit --nofile=N:N`: soft and hard open-file limit N, as on a host
    /// whose limit is N (the server may raise its soft limit only to the hard one).
    pub nofile: Option<u64>,
    child: Option<Child>,
    /// The last lines of the running child's stderr (its log at `RUST_LOG=warn`).
    log_tail: std::sync::Arc<std::sync::Mutex<String>>,
}

impl BinaryServer {
    /// Writes `<dir>/herald.toml` for `data` pointed at `world`, with `extra` TOML appended
    /// (sections of its own, e.g. `[scheduler]`). Does not start it.
    pub fn configure(dir: &Path, data: &Path, world: &World, extra: &str) -> BinaryServer {
        let http: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
        let smtp: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
        let toml = format!(
            "{}{extra}\n",
            base_config(data, "127.0.0.1", smtp, http, world)
        );
        let config = dir.join("herald.toml");
        std::fs::write(&config, toml).expect("write config");
        BinaryServer {
            config,
            smtp,
            http,
            api: format!("http://{http}"),
            nice: 0,
            nofile: None,
            child: None,
            log_tail: Default::default(),
        }
    }

    /// Starts `herald serve` and waits until its API answers. `free_port` only finds a port
    /// free a moment before the child binds it, and with tests running in parallel another
    /// test can take it in between: when the child exits because an address is in use, this
    /// picks new ports, rewrites the config and starts again (up to three times).
    pub async fn start(&mut self) {
        assert!(self.child.is_none(), "already running");
        for attempt in 1..=3 {
            let (mut child, stderr_tail) = self.spawn();
            let started = std::time::Instant::now();
            loop {
                if let Ok(Some(status)) = child.try_wait() {
                    let tail = stderr_tail.lock().map(|t| t.clone()).unwrap_or_default();
                    assert!(
                        tail.contains("Address already in use") && attempt < 3,
                        "herald serve exited before answering ({status}): {tail}"
                    );
                    self.move_to_new_ports();
                    break;
                }
                if super::healthy(&self.api).await {
                    self.child = Some(child);
                    self.log_tail = stderr_tail;
                    return;
                }
                assert!(
                    started.elapsed() < std::time::Duration::from_secs(30),
                    "server did not come up"
                );
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }

    /// Spawns the child with its stderr passed through to ours, keeping the last lines so a
    /// failed start can say why.
    fn spawn(&self) -> (Child, std::sync::Arc<std::sync::Mutex<String>>) {
        let mut argv: Vec<std::ffi::OsString> = Vec::new();
        if let Some(n) = self.nofile {
            argv.extend([
                "prlimit".into(),
                format!("--nofile={n}:{n}").into(),
                "--".into(),
            ]);
        }
        if self.nice > 0 {
            argv.extend(["nice".into(), "-n".into(), self.nice.to_string().into()]);
        }
        argv.push(herald_bin().into());
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..]);
        let mut child = cmd
            .args(["serve", "--config"])
            .arg(&self.config)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn herald serve");
        let tail = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        if let Some(stderr) = child.stderr.take() {
            let tail = tail.clone();
            std::thread::spawn(move || {
                use std::io::BufRead;
                for line in std::io::BufReader::new(stderr)
                    .lines()
                    .map_while(Result::ok)
                {
                    eprintln!("{line}");
                    if let Ok(mut t) = tail.lock() {
                        if t.len() > 8192 {
                            t.clear();
                        }
                        t.push_str(&line);
                        t.push('\n');
                    }
                }
            });
        }
        (child, tail)
    }

    /// New free ports for SMTP, LMTP and HTTP, written into the config file.
    fn move_to_new_ports(&mut self) {
        let mut toml = std::fs::read_to_string(&self.config).expect("read config");
        let http: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
        let smtp: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
        toml = toml
            .replacen(
                &format!("http = \"{}\"", self.http),
                &format!("http = \"{http}\""),
                1,
            )
            .replacen(
                &format!("smtp = \"{}\"", self.smtp),
                &format!("smtp = \"{smtp}\""),
                1,
            );
        if let Some(start) = toml.find("lmtp = \"127.0.0.1:") {
            let end = start + toml[start..].find('\n').unwrap_or(toml.len() - start);
            toml.replace_range(start..end, &format!("lmtp = \"127.0.0.1:{}\"", free_port()));
        }
        std::fs::write(&self.config, toml).expect("write config");
        self.http = http;
        self.smtp = smtp;
        self.api = format!("http://{http}");
    }

    /// The last lines (a few KiB) the running child logged: WARN and above.
    pub fn log_tail(&self) -> String {
        self.log_tail.lock().map(|t| t.clone()).unwrap_or_default()
    }

    /// The running child's process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL: no drain, no flush — a crash.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().expect("SIGKILL");
            let _ = child.wait();
        }
    }

    /// SIGTERM and wait: the graceful stop must succeed.
    pub async fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let status = tokio::task::spawn_blocking(move || child.wait())
            .await
            .expect("join")
            .expect("wait");
        assert!(
            status.success(),
            "graceful shutdown after SIGTERM: {status:?}"
        );
    }
}

impl Drop for BinaryServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
