//! What the accounts end-to-end tests share: browsers on remote loopback addresses, sessions
//! carried by hand (each cookie checked), calls with the admin token, the sign-in links found
//! in the simulated mailboxes, and `herald account add --password-stdin`.

// Shared by several test files, each of which uses only part of it.
#![allow(dead_code)]

use herald_api_types::accounts::MeView;
use herald_api_types::HeldView;
use herald_sim::World;
use reqwest::header::{HeaderMap, COOKIE, ORIGIN, SET_COOKIE};
use serde_json::Value;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

pub const TOKEN: &str = "admin-token-0123456789abcdef";

/// A server with the admin token set that treats only 127.0.0.1 as local, so every
/// [`browser`] on another loopback address is a remote client; and its data directory.
pub async fn server_for_remote_browsers(
    world: &World,
) -> (crate::support::TestServer, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = crate::support::server_config(world, dir.path().to_path_buf());
    config.http.admin_token = TOKEN.into();
    config.http.local_clients = vec!["127.0.0.1".into()];
    (crate::support::TestServer::start(config).await, dir)
}

/// A browser on `127.0.0.<last>`, following no redirects (each is checked).
pub fn browser(last: u8) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(IpAddr::V4(Ipv4Addr::new(127, 0, 0, last)))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

/// A signed-in browser: its client, the cookie (`herald_admin=<id>`) and the server's origin.
pub struct Session {
    pub client: reqwest::Client,
    pub cookie: String,
    pub origin: String,
}

impl Session {
    /// A request with the cookie and, for writes, this server's `Origin` (as a browser sends).
    pub fn req(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let write = method != reqwest::Method::GET;
        let mut r = self
            .client
            .request(method, format!("{}{path}", self.origin))
            .header(COOKIE, &self.cookie);
        if write {
            r = r.header(ORIGIN, &self.origin);
        }
        r
    }

    pub async fn me(&self) -> MeView {
        let r = self
            .req(reqwest::Method::GET, "/api/v1/me")
            .send()
            .await
            .expect("me");
        assert_eq!(r.status(), 200);
        r.json().await.expect("me view")
    }

    pub async fn status(&self, r: reqwest::RequestBuilder) -> (u16, String) {
        let resp = r.send().await.expect("request");
        let st = resp.status().as_u16();
        (st, resp.text().await.expect("body"))
    }
}

/// The `herald_admin=<id>` pair of a sign-in answer, after checking the cookie's flags.
pub fn session_cookie(headers: &HeaderMap) -> String {
    let set = headers
        .get(SET_COOKIE)
        .expect("a session cookie")
        .to_str()
        .expect("ascii");
    let attrs: Vec<&str> = set.split(';').map(str::trim).collect();
    assert!(attrs.contains(&"HttpOnly"), "{set}");
    assert!(attrs.contains(&"SameSite=Strict"), "{set}");
    assert!(attrs.contains(&"Path=/"), "{set}");
    // Plain HTTP here, no `accounts.cookie_secure`: a Secure cookie would never come back.
    assert!(!attrs.contains(&"Secure"), "{set}");
    let pair = attrs[0].to_string();
    let value = pair.strip_prefix("herald_admin=").expect("cookie name");
    assert_eq!(value.len(), 43, "a 256-bit id, base64url: {value}");
    assert!(!value.contains(TOKEN));
    pair
}

pub async fn password_login(
    api: &str,
    client: &reqwest::Client,
    who: &str,
    pw: &str,
) -> reqwest::Response {
    client
        .post(format!("{api}/login"))
        .form(&[("address", who), ("password", pw)])
        .send()
        .await
        .expect("login")
}

pub async fn wait_for<T>(what: &str, limit: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The `/login/` links mailed to `rcpt`, oldest first.
pub fn sign_in_links(world: &World, rcpt: &str) -> Vec<String> {
    world
        .recorder()
        .snapshot()
        .copies_for(rcpt)
        .iter()
        .filter_map(|c| c.message.clone())
        .filter_map(|raw| {
            let msg = mail_parser::MessageParser::default().parse(&raw[..])?;
            let text = msg.body_text(0)?;
            text.split_whitespace()
                .find(|w| w.contains("/login/"))
                .map(str::to_string)
        })
        .collect()
}

pub async fn token_call(method: &str, url: &str, body: Option<Value>) -> (u16, Value) {
    let c = reqwest::Client::new();
    let mut r = match method {
        "GET" => c.get(url),
        "POST" => c.post(url),
        "PATCH" => c.patch(url),
        "DELETE" => c.delete(url),
        other => panic!("{other}"),
    }
    .bearer_auth(TOKEN);
    if let Some(b) = body {
        r = r.json(&b);
    }
    let resp = r.send().await.expect("request");
    let st = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    (
        st,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// Holds a post on `list` (as an import does) and returns its id.
pub async fn hold(api: &str, list: &str, mid: &str) -> u64 {
    let body = format!("From: stranger@d2.test\r\nTo: {list}\r\nSubject: held\r\nMessage-ID: <{mid}>\r\n\r\nbody\r\n");
    let resp = reqwest::Client::new()
        .post(format!("{api}/api/v1/lists/{list}/held?reason=test"))
        .bearer_auth(TOKEN)
        .body(body)
        .send()
        .await
        .expect("hold");
    assert_eq!(resp.status(), 202);
    let held: Vec<HeldView> = get_token(&format!("{api}/api/v1/held?list={list}")).await;
    held.iter()
        .find(|h| h.message_id.as_deref().is_some_and(|m| m.contains(mid)))
        .map(|h| h.post)
        .expect("the held post")
}

pub async fn get_token<T: serde::de::DeserializeOwned>(url: &str) -> T {
    let (st, v) = token_call("GET", url, None).await;
    assert_eq!(st, 200, "{url}: {v}");
    serde_json::from_value(v).expect("view")
}

/// `herald account add <addr> --password-stdin`, the password on standard input.
pub fn cli_add_with_password(api: &str, address: &str, password: &str) -> String {
    cli_with_stdin(
        api,
        &["account", "add", address, "--password-stdin"],
        password,
    )
}

/// `herald <args>` with the admin token and `line` on standard input; its stdout.
pub fn cli_with_stdin(api: &str, args: &[&str], line: &str) -> String {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(args)
        .env("HERALD_SERVER", api)
        .env("HERALD_ADMIN_TOKEN", TOKEN)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("herald");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(format!("{line}\n").as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("wait");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// A GET with the admin token from a remote loopback address.
pub async fn call_remote_with_token(api: &str, path: &str) -> (u16, String) {
    let resp = browser(8)
        .get(format!("{api}{path}"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("request");
    let st = resp.status().as_u16();
    (st, resp.text().await.expect("body"))
}
