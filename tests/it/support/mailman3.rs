//! Mailman 3 core as a test source for `herald import mailman3`: installed from
//! PyPI into a virtual environment under `target/tmp` (kept, so reruns start in seconds), run
//! with a minimal `mailman.cfg` (SQLite, REST on 127.0.0.1 at a free port, no MTA), and a list
//! built through its REST API and `mailman inject` the way its administrators build one.
//!
//! With `CI` set a failed install fails the test; elsewhere (no network) it prints why and
//! the caller skips.
#![allow(clippy::unwrap_used)]

use super::binary::free_port;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Pinned: 3.3.10 is the release this importer reads; SQLAlchemy 2.1 breaks its queries
/// (`ArgumentError: FROM expression … expected` on every roster request).
pub const PIP_PACKAGES: &[&str] = &["mailman==3.3.10", "sqlalchemy<2.1"];
pub const LIST: &str = "dev@lists.test";
pub const LIST_ID: &str = "dev.lists.test";

pub fn venv() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("mailman3-venv")
}

/// The `mailman` program, installing it on first use; `None` (skip) only outside CI.
pub fn mailman_bin() -> Option<PathBuf> {
    // Tests in one binary run in parallel: without this lock two of them each remove and
    // recreate the venv under the other's feet (`[Errno 17] File exists`). The second waits
    // and then finds the marker.
    static INSTALL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _installing = INSTALL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let venv = venv();
    let bin = venv.join("bin/mailman");
    let marker = venv.join("herald-installed");
    if bin.exists() && marker.exists() {
        return Some(bin);
    }
    let step = |what: &str, cmd: &mut Command| -> Result<(), String> {
        let out = cmd
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("{what}: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{what} failed ({}):\n{}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    };
    let _ = std::fs::remove_dir_all(&venv);
    let result = step(
        "python3 -m venv",
        Command::new("python3").args(["-m", "venv"]).arg(&venv),
    )
    .and_then(|()| {
        step(
            "pip install mailman",
            Command::new(venv.join("bin/pip"))
                .args(["install", "--quiet", "--disable-pip-version-check"])
                .args(PIP_PACKAGES),
        )
    });
    match result {
        Ok(()) => {
            std::fs::write(&marker, PIP_PACKAGES.join("\n")).unwrap();
            Some(bin)
        }
        Err(why) if std::env::var_os("CI").is_some() => {
            panic!("CI: Mailman 3 could not be installed: {why}")
        }
        Err(why) => {
            eprintln!("SKIPPED: Mailman 3 could not be installed here (no network?): {why}");
            None
        }
    }
}

/// A running Mailman 3 core; stopped on drop.
pub struct Mailman {
    bin: PathBuf,
    cfg: PathBuf,
    pub rest: String,
    pub http: reqwest::Client,
}

impl Mailman {
    pub fn start(bin: PathBuf, dir: &Path) -> Mailman {
        let var = dir.join("var");
        let rest_port = free_port();
        let cfg = dir.join("mailman.cfg");
        std::fs::write(
            &cfg,
            format!(
                "[mailman]\nlayout: custom\nsite_owner: admin@lists.test\n\n\
                 [paths.custom]\nvar_dir: {var}\nbin_dir: {bindir}\n\n\
                 [database]\nclass: mailman.database.sqlite.SQLiteDatabase\n\
                 url: sqlite:///{var}/mailman.db\n\n\
                 [webservice]\nhostname: 127.0.0.1\nport: {rest_port}\n\
                 admin_user: restadmin\nadmin_pass: restpass\n\n\
                 [mta]\nincoming: mailman.mta.null.NullMTA\noutgoing: mailman.mta.deliver.deliver\n\
                 smtp_host: 127.0.0.1\nsmtp_port: {smtp}\nlmtp_host: 127.0.0.1\nlmtp_port: {lmtp}\n\n\
                 [archiver.prototype]\nenable: no\n",
                var = var.display(),
                bindir = bin.parent().unwrap().display(),
                smtp = free_port(),
                lmtp = free_port(),
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.join("mailman-start.log")).unwrap();
        // `mailman start` forks its master and returns; its output goes to a file so the
        // runners it leaves behind hold no pipe of ours.
        let status = Command::new(&bin)
            .arg("-C")
            .arg(&cfg)
            .args(["--run-as-root", "start"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .status()
            .unwrap();
        assert!(
            status.success(),
            "mailman start failed: see {}",
            dir.display()
        );
        Mailman {
            bin,
            cfg,
            rest: format!("http://127.0.0.1:{rest_port}"),
            http: reqwest::Client::new(),
        }
    }

    pub async fn wait_up(&self) {
        let started = Instant::now();
        loop {
            let ok = self
                .http
                .get(format!("{}/3.1/system/versions", self.rest))
                .basic_auth("restadmin", Some("restpass"))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if ok {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "Mailman's REST API never came up"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    pub async fn call(&self, method: &str, path: &str, form: &[(&str, &str)]) -> Value {
        let url = format!("{}/3.1/{path}", self.rest);
        let req = match method {
            "POST" => self.http.post(&url).form(form),
            "PATCH" => self.http.patch(&url).form(form),
            _ => self.http.get(&url),
        };
        let resp = req
            .basic_auth("restadmin", Some("restpass"))
            .send()
            .await
            .unwrap();
        let status = resp.status();
        let text = resp.text().await.unwrap();
        assert!(
            status.is_success(),
            "Mailman {method} {path} {form:?}: {status} {text}"
        );
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    pub async fn member_id(&self, email: &str) -> String {
        let found = self
            .call(
                "GET",
                &format!("members/find?list_id={LIST_ID}&subscriber={email}&role=member"),
                &[],
            )
            .await;
        found["entries"][0]["member_id"]
            .as_str()
            .unwrap()
            .to_string()
    }

    pub fn inject(&self, message: &Path) {
        let status = Command::new(&self.bin)
            .arg("-C")
            .arg(&self.cfg)
            .args(["--run-as-root", "inject", "-f"])
            .arg(message)
            .arg(LIST)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "mailman inject failed");
    }
}

impl Drop for Mailman {
    fn drop(&mut self) {
        let _ = Command::new(&self.bin)
            .arg("-C")
            .arg(&self.cfg)
            .args(["--run-as-root", "stop"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Builds the list in Mailman the way its administrators do, through its REST API.
pub async fn build_list(mm: &Mailman, dir: &Path) {
    mm.call("POST", "domains", &[("mail_host", "lists.test")])
        .await;
    mm.call("POST", "lists", &[("fqdn_listname", LIST)]).await;
    mm.call(
        "PATCH",
        &format!("lists/{LIST_ID}/config"),
        &[
            ("display_name", "Developers"),
            ("subject_prefix", "[dev] "),
            ("reply_goes_to_list", "point_to_list"),
            ("max_message_size", "100"),
            ("archive_policy", "private"),
            ("default_nonmember_action", "hold"),
            ("description", "The developers' list"),
            // Digests by send-now only, so no timer races the test's checks.
            ("digest_send_periodic", "false"),
            ("digest_size_threshold", "0"),
        ],
    )
    .await;
    for (email, name) in [
        ("reg@d0.test", "Reg Ular"),
        ("dig@d0.test", "Di Gest"),
        ("plain@d0.test", ""),
        ("away@d0.test", "A Way"),
        ("off@d0.test", ""),
        ("held-back@d0.test", "Held Back"),
    ] {
        mm.call(
            "POST",
            "members",
            &[
                ("list_id", LIST_ID),
                ("subscriber", email),
                ("display_name", name),
                ("pre_verified", "true"),
                ("pre_confirmed", "true"),
                ("pre_approved", "true"),
                ("send_welcome_message", "false"),
            ],
        )
        .await;
    }
    for (email, pref, value) in [
        ("dig@d0.test", "delivery_mode", "mime_digests"),
        ("plain@d0.test", "delivery_mode", "plaintext_digests"),
        ("away@d0.test", "delivery_status", "by_user"),
        ("off@d0.test", "delivery_status", "by_moderator"),
    ] {
        let id = mm.member_id(email).await;
        mm.call(
            "PATCH",
            &format!("members/{id}/preferences"),
            &[(pref, value)],
        )
        .await;
    }
    let id = mm.member_id("held-back@d0.test").await;
    mm.call(
        "PATCH",
        &format!("members/{id}"),
        &[("moderation_action", "hold")],
    )
    .await;
    for (email, role) in [("own@d0.test", "owner"), ("mod@d0.test", "moderator")] {
        mm.call(
            "POST",
            "members",
            &[("list_id", LIST_ID), ("subscriber", email), ("role", role)],
        )
        .await;
    }
    mm.call(
        "POST",
        &format!("lists/{LIST_ID}/bans"),
        &[("email", "troll@d0.test")],
    )
    .await;
    mm.call("POST", "bans", &[("email", "^.*@spam\\.test$")])
        .await;
    mm.call(
        "POST",
        &format!("lists/{LIST_ID}/header-matches"),
        &[
            ("header", "x-spam"),
            ("pattern", "yes"),
            ("action", "discard"),
        ],
    )
    .await;
    // A post from a non-member: Mailman holds it.
    let held = dir.join("held.eml");
    std::fs::write(
        &held,
        "From: stranger@d1.test\nTo: dev@lists.test\nSubject: Please let me in\n\
         Message-ID: <held-1@d1.test>\nDate: Mon, 01 Jan 2024 00:00:00 +0000\n\nHello?\n",
    )
    .unwrap();
    mm.inject(&held);
    let started = Instant::now();
    while mm.call("GET", &format!("lists/{LIST_ID}/held"), &[]).await["total_size"] != 1 {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "Mailman never held the post"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
