//! herald-pg-harness: a real PostgreSQL server for tests, started by the test binary
//! itself, shared by its tests, one fresh database per test.
//!
//! Place in the flow: test support only (a dev-dependency of `directory` and of the root
//! crate's end-to-end tests); nothing in Herald's own path uses it.
//!
//! How it runs the server: `initdb` into a temporary directory, then `postgres -D <data> -k
//! <socket dir> -p <free port> -h 127.0.0.1` in the foreground under a tiny `sh` that waits on
//! its standard input. The harness keeps the write end of that pipe; when the test process ends
//! (however it ends, even by a panic or `kill -9`) the pipe closes, `read` returns and the shell
//! stops PostgreSQL (fast shutdown) and removes the directory. Statics are never dropped in
//! Rust, so tying the server's life to a pipe is what makes "stopped at the end" hold.
//!
//! Fault tests ("PostgreSQL down for a few seconds") start a server of their own
//! ([`PgServer::start_crash_safe`], never the shared one) and stop it as a crash would
//! ([`PgServer::stop_immediate`]: `pg_ctl stop -m immediate`), then start it again on the same
//! port and data ([`PgServer::restart`]: `pg_ctl start`, a daemon the lifeline's shell also
//! stops at the end, by its data directory rather than by the first postmaster's pid).
//!
//! `initdb` refuses to run as root. When the tests run as root (containers, CI), the server runs
//! as the `postgres` system user through `runuser`, as Debian's own packaging runs it; the
//! temporary directory is handed to that user first.
//!
//! Finding the binaries: `HERALD_PG_BIN` if set, else the newest `/usr/lib/postgresql/*/bin`
//! (Debian's layout), else `PATH`. When none is found, or the server does not come up,
//! [`PgServer::shared`] panics with the reason: a test that needs PostgreSQL fails, it is never
//! skipped (`.ci/run` installs PostgreSQL when it is missing).
//!
//! SECURITY: the server listens on 127.0.0.1 only and trusts every local connection (`--auth
//! trust`): it holds nothing but test data and lives as long as the test binary.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The superuser `initdb` creates; tests connect as it.
pub const USER: &str = "herald";

/// How long the server may take to accept connections after it is started.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Why the test server could not be provided.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    #[error("PostgreSQL binaries not found (looked in $HERALD_PG_BIN, /usr/lib/postgresql/*/bin and PATH for {0}); install PostgreSQL (apt-get install postgresql)")]
    NoBinaries(&'static str),
    #[error("running as root and there is no `postgres` user to run PostgreSQL as: {0}")]
    NoUser(String),
    #[error("{what} failed: {detail}")]
    Command { what: &'static str, detail: String },
    #[error("PostgreSQL did not accept connections within {secs} s; its log says: {log}")]
    NotReady { secs: u64, log: String },
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{what}: {source}")]
    Sql {
        what: &'static str,
        #[source]
        source: postgres::Error,
    },
}

/// The server's options, the same at the first start and at a restart: nothing waits for the
/// disk (test data).
const SERVER_OPTIONS: &str =
    "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300";

/// The options of a server a fault test stops as a crash would ([`PgServer::start_crash_safe`]):
/// a commit returns after its WAL is written to the kernel (not fsync'd), so it survives the
/// server process dying — as it would on a production server — though not the machine.
const CRASH_SAFE_OPTIONS: &str =
    "-c fsync=off -c synchronous_commit=on -c full_page_writes=off -c max_connections=300";

/// A running throw-away server.
pub struct PgServer {
    port: u16,
    root: PathBuf,
    /// The PostgreSQL binaries (for `pg_ctl` in [`PgServer::stop_immediate`] and
    /// [`PgServer::restart`]).
    bin: PathBuf,
    /// Whether the server runs as the `postgres` user (the tests run as root).
    as_postgres: bool,
    /// Its `-c` options (kept for a restart).
    options: &'static str,
    /// The write end of the shell's stdin: closing it (at process exit) stops the server.
    _lifeline: Mutex<ChildStdin>,
    _child: Mutex<Child>,
    next_db: AtomicU32,
}

impl std::fmt::Debug for PgServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgServer")
            .field("port", &self.port)
            .finish()
    }
}

impl PgServer {
    /// The server of this test binary, started on first use. Panics with the reason when it
    /// cannot be started: tests needing PostgreSQL fail rather than skip.
    pub fn shared() -> &'static PgServer {
        static SERVER: OnceLock<PgServer> = OnceLock::new();
        SERVER.get_or_init(|| match PgServer::start() {
            Ok(s) => s,
            Err(e) => panic!("cannot start the test PostgreSQL server: {e}"),
        })
    }

    /// Starts a new server (most tests want [`PgServer::shared`]).
    pub fn start() -> Result<PgServer, HarnessError> {
        PgServer::start_with(SERVER_OPTIONS)
    }

    /// Starts a new server whose commits survive [`PgServer::stop_immediate`] (written to the
    /// kernel before they return): for tests that stop the server mid-run.
    pub fn start_crash_safe() -> Result<PgServer, HarnessError> {
        PgServer::start_with(CRASH_SAFE_OPTIONS)
    }

    fn start_with(options: &'static str) -> Result<PgServer, HarnessError> {
        let bin = find_bin_dir()?;
        let as_postgres = nix::unistd::geteuid().is_root();
        let tmp = tempfile::Builder::new()
            .prefix("herald-pg-")
            .tempdir()
            .map_err(|source| HarnessError::Io {
                what: "create the server's directory",
                source,
            })?;
        // The shell removes the directory when the server stops; the harness must not.
        let root = tmp.keep();
        if as_postgres {
            hand_to_postgres_user(&root)?;
        }
        let data = root.join("data");
        let log = root.join("postgres.log");
        let mut initdb = wrap(as_postgres, &bin.join("initdb"));
        initdb.arg("-D").arg(&data).args([
            "-U",
            USER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "-N",
        ]);
        run(initdb, "initdb")?;
        let port = free_port()?;
        // At the end: the first postmaster by its pid, then (after a restart, which runs it as
        // a daemon) whatever postmaster runs on the data directory, by `pg_ctl`.
        let script = "\"$1\" -D \"$2\" -k \"$3\" -p \"$4\" -h 127.0.0.1 $7 2>\"$5\" & pid=$!; \
             read _; kill -INT $pid 2>/dev/null; wait $pid; \
             \"$6\" -D \"$2\" stop -m fast -w >/dev/null 2>&1; rm -rf \"$3\"";
        let mut sh = wrap(as_postgres, Path::new("/bin/sh"));
        sh.arg("-c")
            .arg(script)
            .arg("sh")
            .arg(bin.join("postgres"))
            .arg(&data)
            .arg(&root)
            .arg(port.to_string())
            .arg(&log)
            .arg(bin.join("pg_ctl"))
            .arg(options)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = sh.spawn().map_err(|source| HarnessError::Io {
            what: "start postgres",
            source,
        })?;
        let lifeline = child.stdin.take().ok_or(HarnessError::Command {
            what: "start postgres",
            detail: "no stdin pipe".into(),
        })?;
        let server = PgServer {
            port,
            root,
            bin,
            as_postgres,
            options,
            _lifeline: Mutex::new(lifeline),
            _child: Mutex::new(child),
            next_db: AtomicU32::new(1),
        };
        server.wait_ready(&log)?;
        Ok(server)
    }

    /// The port the server listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of database `db`.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://{USER}@127.0.0.1:{}/{db}", self.port)
    }

    /// Creates an empty database of its own for one test and returns its URL.
    pub fn fresh_database(&self) -> Result<String, HarnessError> {
        let n = self.next_db.fetch_add(1, Ordering::Relaxed);
        let name = format!("t{}_{n}", std::process::id());
        let mut admin = self.admin()?;
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .map_err(|source| HarnessError::Sql {
                what: "create a test database",
                source,
            })?;
        Ok(self.url(&name))
    }

    fn admin(&self) -> Result<postgres::Client, HarnessError> {
        postgres::Client::connect(&self.url("postgres"), postgres::NoTls).map_err(|source| {
            HarnessError::Sql {
                what: "connect to the test server",
                source,
            }
        })
    }

    fn wait_ready(&self, log: &Path) -> Result<(), HarnessError> {
        let start = Instant::now();
        loop {
            match self.admin() {
                Ok(_) => return Ok(()),
                Err(_) if start.elapsed() < START_TIMEOUT => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Err(_) => {
                    let mut text = String::new();
                    if let Ok(mut f) = std::fs::File::open(log) {
                        let _ = f.read_to_string(&mut text);
                    }
                    return Err(HarnessError::NotReady {
                        secs: START_TIMEOUT.as_secs(),
                        log: text,
                    });
                }
            }
        }
    }

    /// The directory holding the data, the socket and the log (removed when the server stops).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Stops the server as a crash would: `pg_ctl stop -m immediate` (every backend killed, no
    /// checkpoint; the next start runs crash recovery). Clients see their connections drop
    /// and new ones refused. Only for a server of a test's own
    /// ([`PgServer::start_crash_safe`], whose commits survive it): the shared one serves the
    /// binary's other tests.
    pub fn stop_immediate(&self) -> Result<(), HarnessError> {
        let mut c = wrap(self.as_postgres, &self.bin.join("pg_ctl"));
        c.arg("-D")
            .arg(self.root.join("data"))
            .args(["stop", "-m", "immediate", "-w", "-t", "30"]);
        run(c, "pg_ctl stop -m immediate")
    }

    /// Starts the server again after [`PgServer::stop_immediate`], on the same port with the
    /// same data and options, and waits until it accepts connections.
    pub fn restart(&self) -> Result<(), HarnessError> {
        let log = self.root.join("postgres-restart.log");
        let options = format!(
            "-k {} -p {} -h 127.0.0.1 {}",
            self.root.display(),
            self.port,
            self.options
        );
        let mut c = wrap(self.as_postgres, &self.bin.join("pg_ctl"));
        c.arg("-D")
            .arg(self.root.join("data"))
            .arg("-l")
            .arg(&log)
            .arg("-o")
            .arg(options)
            .args(["start", "-w", "-t", "30"]);
        run(c, "pg_ctl start")?;
        self.wait_ready(&log)
    }
}

/// Runs `program` directly, or as the `postgres` user when we are root.
fn wrap(as_postgres: bool, program: &Path) -> Command {
    if as_postgres {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

fn run(mut c: Command, what: &'static str) -> Result<(), HarnessError> {
    let out = c
        .stdin(Stdio::null())
        .output()
        .map_err(|source| HarnessError::Io { what, source })?;
    if out.status.success() {
        return Ok(());
    }
    Err(HarnessError::Command {
        what,
        detail: format!(
            "{}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ),
    })
}

fn hand_to_postgres_user(dir: &Path) -> Result<(), HarnessError> {
    let user = nix::unistd::User::from_name("postgres")
        .map_err(|e| HarnessError::NoUser(e.to_string()))?
        .ok_or_else(|| HarnessError::NoUser("getpwnam(\"postgres\") found nothing".into()))?;
    nix::unistd::chown(dir, Some(user.uid), Some(user.gid)).map_err(|e| HarnessError::Io {
        what: "hand the directory to the postgres user",
        source: e.into(),
    })
}

/// A port nobody listens on now (the kernel's choice); PostgreSQL binds it right after.
fn free_port() -> Result<u16, HarnessError> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|source| HarnessError::Io {
        what: "find a free port",
        source,
    })?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|source| HarnessError::Io {
            what: "find a free port",
            source,
        })
}

fn find_bin_dir() -> Result<PathBuf, HarnessError> {
    if let Some(dir) = std::env::var_os("HERALD_PG_BIN") {
        return Ok(PathBuf::from(dir));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((v, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Ok(bin);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .find(|p| p.join("initdb").exists() && p.join("postgres").exists())
        .ok_or(HarnessError::NoBinaries("initdb and postgres"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_starts_and_hands_out_separate_databases() {
        let s = PgServer::shared();
        let a = s.fresh_database().expect("db a");
        let b = s.fresh_database().expect("db b");
        assert_ne!(a, b);
        let mut c = postgres::Client::connect(&a, postgres::NoTls).expect("connect");
        let one: i32 = c.query_one("SELECT 1", &[]).expect("select").get(0);
        assert_eq!(one, 1);
        let listen: String = c
            .query_one("SHOW listen_addresses", &[])
            .expect("show")
            .get(0);
        assert_eq!(listen, "127.0.0.1");
    }

    /// A server of a test's own stops as a crash would and starts again on the same port with
    /// its data: connections are refused in between, and a committed row survives.
    #[test]
    fn a_private_server_stops_and_starts_again_on_the_same_port() {
        let s = PgServer::start_crash_safe().expect("start");
        let url = s.fresh_database().expect("db");
        let mut c = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
        c.batch_execute("CREATE TABLE t (x INT); INSERT INTO t VALUES (7)")
            .expect("write");
        s.stop_immediate().expect("stop");
        assert!(
            c.query_one("SELECT 1", &[]).is_err(),
            "old connection works"
        );
        assert!(
            postgres::Client::connect(&url, postgres::NoTls).is_err(),
            "connected while stopped"
        );
        s.restart().expect("restart");
        let mut c = postgres::Client::connect(&url, postgres::NoTls).expect("reconnect");
        let x: i32 = c.query_one("SELECT x FROM t", &[]).expect("read").get(0);
        assert_eq!(x, 7);
    }
}
