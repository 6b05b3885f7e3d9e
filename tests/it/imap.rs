//! End to end for the archive over IMAP, read by a client from another
//! ecosystem: Python's imaplib (`tests/imap/client.py`). Posts arrive over SMTP from the
//! simulated world, are fanned out and archived, and appear over IMAP: anonymous readers see
//! the public list (EXAMINE, UID SEARCH, UID FETCH BODY.PEEK[] and ENVELOPE, SEARCH by
//! subject, sender and text) and are refused the `members` list; a member reads it with the
//! IMAP password from their `/manage` page; the administrator (the HTTP admin token) reads the
//! private one; IDLE sees a post arrive; the same over implicit TLS and STARTTLS with a
//! certificate from the test CA; and IMAP4rev2 (`ENABLE IMAP4rev2`, ESEARCH, SEARCHRES's `$`,
//! BINARY of a base64 attachment) beside a rev1 session that is unchanged.

use crate::support;

use herald_archive::{Archive, Privacy};
use herald_sim::{Profile, World};
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;
use support::*;
use tokio::io::{AsyncBufReadExt, BufReader};

const PUBLIC: &str = "pub@lists.test";
const MEMBERS: &str = "club@lists.test";
const PRIVATE: &str = "staff@lists.test";
const MEMBER: &str = "mia@d0.test";
const TOKEN: &str = "imap-admin-token-0123456789";

/// An admin API call with the bearer token (the server has `http.admin_token` set).
async fn admin(method: &str, url: &str, body: Option<Value>) -> (u16, Value) {
    let client = reqwest::Client::new();
    let req = match method {
        "POST" => client.post(url),
        _ => client.get(url),
    }
    .bearer_auth(TOKEN);
    let req = match body {
        Some(b) => req.json(&b),
        None => req,
    };
    let resp = req.send().await.expect("request");
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn post(list: &str, mid: &str, subject: &str, body: &str) -> Vec<u8> {
    format!(
        "From: Ann <ann@outside.test>\r\nTo: {list}\r\nSubject: {subject}\r\nMessage-ID: <{mid}>\r\n\
         Date: Tue, 24 Nov 2026 10:00:00 +0000\r\nMIME-Version: 1.0\r\n\
         Content-Type: text/plain; charset=us-ascii\r\n\r\n{body}\r\n"
    )
    .into_bytes()
}

async fn send(server: &TestServer, list: &str, message: &[u8]) {
    let (mut smtp, _) = Smtp::connect(server.smtp).await;
    smtp.cmd("EHLO client.outside.test").await;
    let reply = smtp.send_mail("ann@outside.test", &[list], message).await;
    assert!(reply.starts_with("250"), "{reply}");
    smtp.cmd("QUIT").await;
}

/// Waits until `list`'s archive holds `n` messages (the writer is asynchronous).
async fn wait_archived(data_dir: &Path, list: &str, n: usize) {
    let what = format!("{list}: {n} archived");
    let count = eventually_some(Duration::from_secs(60), &what, || async {
        let count = Archive::open(&data_dir.join("archive.db"))
            .and_then(|a| a.uids(list))
            .map(|u| u.len())
            .unwrap_or(0);
        (count >= n).then_some(count)
    })
    .await;
    assert_eq!(count, n, "{list}");
}

struct Setup {
    _world: World,
    server: TestServer,
    dir: tempfile::TempDir,
    imap: std::net::SocketAddr,
    imaps: Option<std::net::SocketAddr>,
    password: String,
}

fn free_port() -> std::net::SocketAddr {
    // A free port: bind, note it, release it for the server.
    let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("probe");
    probe.local_addr().expect("addr")
}

async fn setup(tls: bool) -> Setup {
    let world = World::start(world_config(&[Profile::Normal, Profile::Normal], true))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).expect("data dir");
    {
        // Privacy is the administrator's decision (`herald archive privacy`), before posts.
        let a = Archive::open(&data.join("archive.db")).expect("archive");
        a.set_privacy(PUBLIC, Privacy::Public).expect("privacy");
        a.set_privacy(MEMBERS, Privacy::Members).expect("privacy");
        a.set_privacy(PRIVATE, Privacy::Private).expect("privacy");
    }
    let mut config = server_config(&world, data);
    config.http.admin_token = TOKEN.into();
    let imap = free_port();
    config.imap.listen = Some(imap);
    let mut imaps = None;
    if tls {
        let ca = herald_sim::pki::TestCa::new("Herald IMAP test CA").expect("ca");
        let issued = ca.issue(&["localhost".into()]).expect("leaf");
        let chain: String = issued.chain.iter().map(|c| der_to_pem(c)).collect();
        std::fs::write(dir.path().join("cert.pem"), chain).expect("cert");
        let key = der_to_pem(issued.key.secret_der()).replace("CERTIFICATE", "PRIVATE KEY");
        std::fs::write(dir.path().join("key.pem"), key).expect("key");
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).expect("ca");
        config.tls.cert_file = Some(dir.path().join("cert.pem"));
        config.tls.key_file = Some(dir.path().join("key.pem"));
        let p = free_port();
        config.imap.tls_listen = Some(p);
        imaps = Some(p);
    }
    let server = TestServer::start(config).await;
    let api = server.api.clone();
    for list in [PUBLIC, MEMBERS, PRIVATE] {
        let (status, body) = admin(
            "POST",
            &format!("{api}/api/v1/lists"),
            Some(json!({"address": list, "settings": {"posting_policy": "anyone"}})),
        )
        .await;
        assert_eq!(status, 201, "create {list}: {body}");
        let (status, body) = admin(
            "POST",
            &format!("{api}/api/v1/lists/{list}/members"),
            Some(json!({"address": "bob@d1.test"})),
        )
        .await;
        assert_eq!(status, 201, "{body}");
    }
    let (status, body) = admin(
        "POST",
        &format!("{api}/api/v1/lists/{MEMBERS}/members"),
        Some(json!({ "address": MEMBER })),
    )
    .await;
    assert_eq!(status, 201, "{body}");

    send(
        &server,
        PUBLIC,
        &post(
            PUBLIC,
            "root@outside.test",
            "Release plan",
            "We ship the zanzibar release friday.",
        ),
    )
    .await;
    send(
        &server,
        PUBLIC,
        &post(PUBLIC, "lunch@outside.test", "Lunch", "Pizza at noon."),
    )
    .await;
    send(
        &server,
        MEMBERS,
        &post(
            MEMBERS,
            "club@outside.test",
            "Club news",
            "For members only.",
        ),
    )
    .await;
    send(
        &server,
        PRIVATE,
        &post(PRIVATE, "staff@outside.test", "Payroll", "Private matters."),
    )
    .await;
    let data = server.data_dir.clone();
    wait_archived(&data, PUBLIC, 2).await;
    wait_archived(&data, MEMBERS, 1).await;
    wait_archived(&data, PRIVATE, 1).await;

    // The member's IMAP password, as the member finds it: on the page their mailed
    // subscriptions link opens.
    let expires = herald_types::unix_ms_now() / 1000 + 3600;
    let member = herald_types::Address::parse(MEMBER).expect("address");
    let link = herald_types::token::manage_token(SECRET.as_bytes(), &member, expires);
    let page = reqwest::get(format!("{api}/manage/{link}"))
        .await
        .expect("manage page")
        .text()
        .await
        .expect("page");
    let password = page
        .split("id=\"imap-password\">")
        .nth(1)
        .and_then(|rest| rest.split('<').next())
        .unwrap_or_else(|| panic!("no IMAP password on the page: {page}"))
        .to_string();
    Setup {
        _world: world,
        server,
        dir,
        imap,
        imaps,
        password,
    }
}

impl Setup {
    fn python(&self, mode: &str, tls: bool) -> tokio::process::Command {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/imap/client.py");
        let mut cmd = tokio::process::Command::new("python3");
        let (host, port) = match (tls, self.imaps) {
            (true, Some(p)) => ("localhost", p.port()),
            _ => (
                if self.imaps.is_some() {
                    "localhost"
                } else {
                    "127.0.0.1"
                },
                self.imap.port(),
            ),
        };
        cmd.arg(script)
            .arg(mode)
            .env("IMAP_HOST", host)
            .env("IMAP_PORT", port.to_string())
            .env("IMAP_TLS", if tls { "1" } else { "0" })
            .env("PUBLIC_LIST", PUBLIC)
            .env("MEMBERS_LIST", MEMBERS)
            .env("PRIVATE_LIST", PRIVATE)
            .env("MEMBER", MEMBER)
            .env("MEMBER_PASSWORD", &self.password)
            .env("ADMIN_TOKEN", TOKEN)
            .env("CA_FILE", self.dir.path().join("ca.pem"))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        cmd
    }

    /// Runs a mode to its end; returns its JSON line.
    async fn run(&self, mode: &str, tls: bool) -> Value {
        self.run_with(mode, tls, &[]).await
    }

    async fn run_with(&self, mode: &str, tls: bool, env: &[(&str, String)]) -> Value {
        let mut cmd = self.python(mode, tls);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
            .await
            .expect("client finishes")
            .expect("python3 runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "imaplib {mode}: {}\n{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_str(stdout.lines().last().unwrap_or("")).expect("JSON line")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imaplib_reads_archives_by_privacy_and_idle_sees_new_posts() {
    let s = setup(false).await;
    let read = s.run("read", false).await;
    assert_eq!(read["public"].as_array().map(Vec::len), Some(2), "{read}");
    let member = s.run("member", false).await;
    assert_eq!(
        member["members"].as_array().map(Vec::len),
        Some(1),
        "{member}"
    );
    let admin_view = s.run("admin", false).await;
    assert_eq!(admin_view["private"].as_array().map(Vec::len), Some(1));

    // IDLE: the client idles; a post arrives over SMTP; the client sees EXISTS.
    let mut child = s.python("idle", false).spawn().expect("python3");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let first = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("client idles")
        .expect("read")
        .unwrap_or_default();
    assert_eq!(first, "IDLING");
    send(
        &s.server,
        PUBLIC,
        &post(PUBLIC, "new@outside.test", "Just arrived", "Fresh."),
    )
    .await;
    let last = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("client sees the post")
        .expect("read")
        .unwrap_or_default();
    let status = child.wait().await.expect("exit");
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        use tokio::io::AsyncReadExt;
        let _ = e.read_to_string(&mut err).await;
    }
    assert!(status.success(), "idle: {err} {last}");
    assert_eq!(last, "{\"exists\": 3}");

    let api = s.server.api.clone();
    // Every session has ended: the gauge drops as each session's task finishes (just after
    // the client has read its LOGOUT answer), so it is polled.
    let text = eventually_some(Duration::from_secs(10), "no IMAP session open", || async {
        let (status, text) = admin("GET", &format!("{api}/metrics"), None).await;
        assert_eq!(status, 200);
        let text = text.as_str().unwrap_or_default().to_string();
        text.lines()
            .any(|l| l == "herald_imap_sessions 0")
            .then_some(text)
    })
    .await;
    let count = |series: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    // imaplib's EXAMINE (read-only SELECT), once per session that read a mailbox.
    assert!(
        count("herald_imap_commands_total{command=\"EXAMINE\"}") >= 5,
        "{text}"
    );
    assert!(
        count("herald_imap_commands_total{command=\"LOGIN\"}") >= 2,
        "{text}"
    );
    // Every session has ended.
    assert_eq!(count("herald_imap_sessions"), 0, "{text}");
    s.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imaplib_over_implicit_tls_and_starttls() {
    let s = setup(true).await;
    let tls = s.run("tls", true).await;
    assert_eq!(tls["members"].as_array().map(Vec::len), Some(1), "{tls}");
    let starttls = s.run("starttls", false).await;
    assert_eq!(
        starttls["members"].as_array().map(Vec::len),
        Some(1),
        "{starttls}"
    );
    s.server.stop().await;
}

/// IMAP4rev2 through imaplib: `ENABLE IMAP4rev2` (imaplib's `enable()`), `UID SEARCH RETURN
/// (MIN MAX COUNT)` read from the untagged ESEARCH, `RETURN (SAVE)` then `UID FETCH $`, and
/// BINARY of a base64 attachment (bytes with NUL, so a literal8) and a quoted-printable part;
/// then a session that does not ENABLE sees rev1 as before (RECENT, `* SEARCH`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imaplib_speaks_imap4rev2_after_enable() {
    let s = setup(false).await;
    let attachment: &[u8] = b"\x00\x01\x02hello\xff\r\nbinary";
    let message = format!(
        "From: Ann <ann@outside.test>\r\nTo: {PUBLIC}\r\nSubject: The attachment\r\n\
         Message-ID: <att@outside.test>\r\nDate: Tue, 24 Nov 2026 11:00:00 +0000\r\n\
         MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"b\"\r\n\r\n\
         --b\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Content-Transfer-Encoding: quoted-printable\r\n\r\ncaf=C3=A9 au lait\r\n\
         --b\r\nContent-Type: application/octet-stream\r\nContent-Transfer-Encoding: base64\r\n\r\n\
         {}\r\n--b--\r\n",
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, attachment)
    );
    send(&s.server, PUBLIC, message.as_bytes()).await;
    wait_archived(&s.server.data_dir, PUBLIC, 3).await;
    let uids = Archive::open(&s.server.data_dir.join("archive.db"))
        .and_then(|a| a.uids(PUBLIC))
        .expect("uids");
    let hex: String = attachment.iter().map(|b| format!("{b:02x}")).collect();
    let joined = uids
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let out = s
        .run_with(
            "rev2",
            false,
            &[("PUBLIC_UIDS", joined), ("ATTACHMENT_HEX", hex)],
        )
        .await;
    assert_eq!(out["rev2"], json!(uids), "{out}");
    assert_eq!(out["attachment"], json!(uids[2]), "{out}");
    s.server.stop().await;
}
