//! Accounts and roles as a real browser meets them: the server has
//! `http.admin_token` set and treats only 127.0.0.1 as local; every browser here connects from
//! another loopback address (127.0.0.2…), which the server sees as remote. Cookies are carried
//! by hand, so each assertion on them is explicit.
//!
//! The story: the operator creates accounts with the `herald` binary (token) → the list owner
//! signs in with a password (cookie flags checked), changes their list's setting, cannot touch
//! another list (403), cannot write without the CSRF token or from another origin → the list's
//! moderator (named in the list's own `moderators` setting, no password) asks for a one-time
//! link, finds it in their mailbox on the simulated Internet, signs in once (not twice, not
//! after expiry), approves a held post, cannot read members → a guesser is throttled after 5
//! wrong passwords (429, per account and per client) → the admin token and the CLI still work
//! → the audit log shows the actions with their actors over the API, the CLI and `/metrics` →
//! erasing the owner (GDPR) leaves no trace of the address in the audit log.

use crate::support;
use crate::support::accounts;

use accounts::*;
use herald_api_types::accounts::{AccountView, AuditView};
use herald_api_types::HeldView;
use herald_sim::{Profile, World};
use reqwest::header::{COOKIE, LOCATION, ORIGIN, RETRY_AFTER, SET_COOKIE};
use serde_json::json;
use std::time::{Duration, Instant};
use support::*;

const DEV: &str = "dev@lists.test";
const OPS: &str = "ops@lists.test";
const OWNER: &str = "owner@d1.test";
const OWNER_PW: &str = "the owner's long password";
const MODERATOR: &str = "mod@d1.test";
const VICTIM: &str = "victim@d1.test";
const VICTIM_PW: &str = "victim's own password";
/// A one-time link lives this long here (15 minutes by default).
const LINK_SECS: u64 = 5;

/// The world, the server (admin token set, 127.0.0.1 the only local client, short links), and
/// two lists: `dev`, whose `moderators` setting names the moderator, and `ops`.
async fn start() -> (World, TestServer, tempfile::TempDir) {
    let world = World::start(world_config(
        &[Profile::Normal, Profile::Normal, Profile::Normal],
        true,
    ))
    .await
    .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = server_config(&world, dir.path().to_path_buf());
    config.http.admin_token = TOKEN.into();
    config.http.local_clients = vec!["127.0.0.1".into()];
    config.accounts.login_link_secs = LINK_SECS;
    let server = TestServer::start(config).await;
    let api = server.api.clone();
    for (list, moderators) in [(DEV, json!([MODERATOR])), (OPS, json!([]))] {
        let (st, v) = token_call(
            "POST",
            &format!("{api}/api/v1/lists"),
            Some(json!({"address": list, "settings": {"moderators": moderators}})),
        )
        .await;
        assert_eq!(st, 201, "{v}");
    }
    (world, server, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accounts_roles_sessions_csrf_throttling_links_and_the_audit_log() {
    let (world, server, _dir) = start().await;
    let api = server.api.clone();
    operator_adds_accounts(&api).await;
    let (owner, csrf) = owner_signs_in(&api).await;
    owner_is_kept_to_their_list(&api, &owner, &csrf).await;
    let held_dev = hold(&api, DEV, "held-dev@d2.test").await;
    let held_ops = hold(&api, OPS, "held-ops@d2.test").await;
    a_form_without_its_csrf_field_is_refused(&api, &owner, held_dev).await;
    moderator_signs_in_by_link_and_moderates(&world, &api, held_dev, held_ops).await;
    an_expired_link_is_refused(&world, &api).await;
    owner_signs_out(&owner, &csrf).await;
    a_guesser_is_throttled(&api).await;
    the_token_the_cli_and_a_site_admin_reach_everything(&api, held_ops).await;
    let owner = the_audit_log_shows_who_did_what(&api, held_dev).await;
    a_deleted_list_takes_its_roles(&api).await;
    the_backup_carries_accounts_db(&api).await;
    erasure_reaches_the_audit_log(&api, &owner).await;
    server.stop().await;
    world.shutdown().await;
}

async fn operator_adds_accounts(api: &str) {
    // The operator: accounts and a role, with the binary and the admin token.
    let out = cli_add_with_password(api, OWNER, OWNER_PW);
    assert!(out.contains("added owner@d1.test"), "{out}");
    herald_cli(api, Some(TOKEN), &["account", "role", OWNER, DEV, "owner"]);
    cli_add_with_password(api, VICTIM, VICTIM_PW);
    let ls = herald_cli(api, Some(TOKEN), &["account", "ls"]);
    assert!(
        ls.contains("owner:dev@lists.test") && ls.contains("password"),
        "{ls}"
    );
    // Bad input to the CLI's API: a password too short, a role that is not one.
    let (st, _) = token_call(
        "POST",
        &format!("{api}/api/v1/accounts"),
        Some(json!({"address": "x@d1.test", "password": "short"})),
    )
    .await;
    assert_eq!(st, 400);
}

/// The owner's session and its CSRF token.
async fn owner_signs_in(api: &str) -> (Session, String) {
    // The owner signs in with a password from a remote browser.
    let owner_browser = browser(2);
    let resp = password_login(api, &owner_browser, OWNER, "not the password").await;
    assert_eq!(resp.status(), 401, "a wrong password");
    let resp = password_login(api, &owner_browser, OWNER, OWNER_PW).await;
    assert_eq!(resp.status(), 303);
    assert_eq!(resp.headers()[LOCATION], "/admin/");
    let first = session_cookie(resp.headers());
    // Signing in again with that cookie gives a new id and ends the old one (no fixation).
    let resp = owner_browser
        .post(format!("{api}/login"))
        .header(COOKIE, &first)
        .form(&[("address", OWNER), ("password", OWNER_PW)])
        .send()
        .await
        .expect("login");
    let cookie = session_cookie(resp.headers());
    assert_ne!(cookie, first);
    let owner = Session {
        client: owner_browser.clone(),
        cookie,
        origin: api.to_string(),
    };
    let stale = Session {
        client: owner_browser.clone(),
        cookie: first,
        origin: api.to_string(),
    };
    let (st, _) = stale
        .status(stale.req(reqwest::Method::GET, "/api/v1/me"))
        .await;
    assert_eq!(st, 401, "the old session ended");

    // A sign-in form posted from another site (login CSRF) is refused.
    let resp = owner_browser
        .post(format!("{api}/login"))
        .header(ORIGIN, "http://evil.test")
        .form(&[("address", OWNER), ("password", OWNER_PW)])
        .send()
        .await
        .expect("login");
    assert_eq!(resp.status(), 403);
    assert!(resp.headers().get(SET_COOKIE).is_none());

    // The owner's page: who, and only their lists.
    let (st, page) = owner
        .status(owner.req(reqwest::Method::GET, "/admin/"))
        .await;
    assert_eq!(st, 200);
    assert!(
        page.contains("owner@d1.test") && page.contains(DEV),
        "{page}"
    );
    assert!(!page.contains(OPS), "owners see only their lists: {page}");
    assert!(
        page.contains("<label for=\"") || page.contains("Sign out"),
        "{page}"
    );
    let me = owner.me().await;
    assert_eq!(me.actor, OWNER);
    assert!(!me.site_admin);
    let csrf = me.csrf.expect("a session's CSRF token");
    (owner, csrf)
}

async fn owner_is_kept_to_their_list(api: &str, owner: &Session, csrf: &str) {
    let csrf = csrf.to_string();
    // Their list's setting: changed. Another list: 403.
    let patch = |list: &str| {
        owner
            .req(reqwest::Method::PATCH, &format!("/api/v1/lists/{list}"))
            .header("x-csrf-token", &csrf)
            .json(&json!({"subject_prefix": "[dev]"}))
    };
    let (st, body) = owner.status(patch(DEV)).await;
    assert_eq!(st, 200, "{body}");
    let (_, shown) = token_call("GET", &format!("{api}/api/v1/lists/{DEV}"), None).await;
    assert_eq!(shown["settings"]["subject_prefix"], "[dev]", "{shown}");
    let (st, _) = owner.status(patch(OPS)).await;
    assert_eq!(st, 403, "another owner's list");
    let (_, shown) = token_call("GET", &format!("{api}/api/v1/lists/{OPS}"), None).await;
    assert!(shown["settings"]["subject_prefix"].is_null(), "{shown}");
    // Members of their list: yes; the server's status, the dashboard, accounts: no.
    let (st, _) = owner
        .status(owner.req(
            reqwest::Method::GET,
            &format!("/api/v1/lists/{DEV}/members"),
        ))
        .await;
    assert_eq!(st, 200);
    for path in [
        "/api/v1/status",
        "/api/v1/accounts",
        "/metrics",
        "/api/v1/audit",
    ] {
        let (st, _) = owner.status(owner.req(reqwest::Method::GET, path)).await;
        assert_eq!(st, 403, "{path}");
    }
    let (st, _) = owner.status(owner.req(reqwest::Method::GET, "/")).await;
    assert_eq!(st, 303, "the dashboard sends an owner to their page");
    let (st, _) = owner
        .status(
            owner
                .req(reqwest::Method::DELETE, &format!("/api/v1/lists/{DEV}"))
                .header("x-csrf-token", &csrf),
        )
        .await;
    assert_eq!(st, 403, "deleting a list is the site's decision");

    // CSRF: without the token, with a forged one, from another origin, without any origin.
    let no_token = owner
        .req(reqwest::Method::PATCH, &format!("/api/v1/lists/{DEV}"))
        .json(&json!({"subject_prefix": "[x]"}));
    assert_eq!(owner.status(no_token).await.0, 403);
    let forged = owner
        .req(reqwest::Method::PATCH, &format!("/api/v1/lists/{DEV}"))
        .header("x-csrf-token", "A".repeat(43))
        .json(&json!({"subject_prefix": "[x]"}));
    assert_eq!(owner.status(forged).await.0, 403);
    let cross = owner
        .client
        .patch(format!("{api}/api/v1/lists/{DEV}"))
        .header(COOKIE, &owner.cookie)
        .header(ORIGIN, "http://evil.test")
        .header("x-csrf-token", &csrf)
        .json(&json!({"subject_prefix": "[x]"}));
    assert_eq!(owner.status(cross).await.0, 403);
    let no_origin = owner
        .client
        .patch(format!("{api}/api/v1/lists/{DEV}"))
        .header(COOKIE, &owner.cookie)
        .header("x-csrf-token", &csrf)
        .json(&json!({"subject_prefix": "[x]"}));
    assert_eq!(owner.status(no_origin).await.0, 403);
}

async fn a_form_without_its_csrf_field_is_refused(api: &str, owner: &Session, held_dev: u64) {
    // A form POST without its CSRF field, then a sign-out form without it: refused.
    let form = owner
        .req(
            reqwest::Method::POST,
            &format!("/api/v1/held/{held_dev}/reject"),
        )
        .form(&[("x", "y")]);
    assert_eq!(owner.status(form).await.0, 403);
    let logout = owner
        .req(reqwest::Method::POST, "/logout")
        .form(&[("x", "y")]);
    assert_eq!(owner.status(logout).await.0, 403);
    let (_, shown) = token_call("GET", &format!("{api}/api/v1/lists/{DEV}"), None).await;
    assert_eq!(
        shown["settings"]["subject_prefix"], "[dev]",
        "nothing changed"
    );
}

async fn moderator_signs_in_by_link_and_moderates(
    world: &World,
    api: &str,
    held_dev: u64,
    held_ops: u64,
) {
    // The moderator: no account, no password — named in the list's settings — asks for a link.
    let mod_browser = browser(5);
    let ask = |who: &'static str| {
        mod_browser
            .post(format!("{api}/login/link"))
            .form(&[("address", who)])
            .send()
    };
    let resp = ask(MODERATOR).await.expect("ask");
    assert_eq!(resp.status(), 200);
    let known = resp.text().await.expect("page");
    let resp = ask("nobody@d1.test").await.expect("ask");
    assert_eq!(resp.status(), 200);
    let unknown = resp.text().await.expect("page");
    assert_eq!(
        known.replace(MODERATOR, "X"),
        unknown.replace("nobody@d1.test", "X"),
        "the same answer for an address that may sign in and one that may not"
    );
    let link = wait_for("the sign-in mail", Duration::from_secs(30), || {
        sign_in_links(world, MODERATOR).first().cloned()
    })
    .await;
    assert!(sign_in_links(world, "nobody@d1.test").is_empty());
    assert!(link.starts_with(&format!("{api}/login/")), "{link}");
    // A link scanner's GET changes nothing; the button's POST signs in, once.
    for _ in 0..2 {
        let page = mod_browser.get(&link).send().await.expect("get");
        assert_eq!(page.status(), 200);
        assert!(page.text().await.expect("page").contains("<button"));
    }
    let resp = mod_browser.post(&link).send().await.expect("post");
    assert_eq!(resp.status(), 303);
    let moderator = Session {
        client: mod_browser.clone(),
        cookie: session_cookie(resp.headers()),
        origin: api.to_string(),
    };
    let again = mod_browser.post(&link).send().await.expect("again");
    assert_eq!(again.status(), 403, "a link works once");
    assert!(again.headers().get(SET_COOKIE).is_none());
    let me = moderator.me().await;
    assert_eq!(me.actor, MODERATOR);
    assert_eq!(me.roles.len(), 1);
    assert_eq!(
        (me.roles[0].list.as_str(), me.roles[0].role.as_str()),
        (DEV, "moderator")
    );
    let mcsrf = me.csrf.expect("csrf");

    // Held posts of their list: listed and approved. Members: no. Another list's post: no.
    let (st, body) = moderator
        .status(moderator.req(reqwest::Method::GET, &format!("/api/v1/held?list={DEV}")))
        .await;
    assert_eq!(st, 200, "{body}");
    let held: Vec<HeldView> = serde_json::from_str(&body).expect("held");
    assert!(held.iter().any(|h| h.post == held_dev) && held.iter().all(|h| h.list == DEV));
    let (st, _) = moderator
        .status(moderator.req(reqwest::Method::GET, "/api/v1/held"))
        .await;
    assert_eq!(st, 403, "every list's held posts are the site's");
    let (st, _) = moderator
        .status(moderator.req(
            reqwest::Method::GET,
            &format!("/api/v1/lists/{DEV}/members"),
        ))
        .await;
    assert_eq!(st, 403, "a moderator does not read members");
    let approve = |post: u64| {
        moderator
            .req(
                reqwest::Method::POST,
                &format!("/api/v1/held/{post}/approve"),
            )
            .header("x-csrf-token", &mcsrf)
    };
    let (st, body) = moderator.status(approve(held_ops)).await;
    assert_eq!(st, 403, "{body}");
    let (st, body) = moderator.status(approve(held_dev)).await;
    assert_eq!(st, 200, "{body}");
    let held: Vec<HeldView> = get_token(&format!("{api}/api/v1/held")).await;
    assert!(held.iter().all(|h| h.post != held_dev) && held.iter().any(|h| h.post == held_ops));
}

async fn an_expired_link_is_refused(world: &World, api: &str) {
    let mod_browser = browser(5);
    // A second link, used after it expired.
    let asked_at = Instant::now();
    let asked = mod_browser
        .post(format!("{api}/login/link"))
        .form(&[("address", MODERATOR)])
        .send()
        .await
        .expect("ask");
    assert_eq!(asked.status(), 200);
    let late = wait_for("the second sign-in mail", Duration::from_secs(30), || {
        sign_in_links(world, MODERATOR).get(1).cloned()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(LINK_SECS + 1).saturating_sub(asked_at.elapsed())).await;
    let resp = mod_browser.post(&late).send().await.expect("late");
    assert_eq!(resp.status(), 403, "an expired link");
}

async fn owner_signs_out(owner: &Session, csrf: &str) {
    let csrf = csrf.to_string();
    // The owner signs out with the form's CSRF field; the session is gone.
    let logout = owner
        .req(reqwest::Method::POST, "/logout")
        .form(&[("csrf", csrf.as_str())]);
    let (st, _) = owner.status(logout).await;
    assert_eq!(st, 303);
    let (st, _) = owner
        .status(owner.req(reqwest::Method::GET, "/admin/"))
        .await;
    assert_eq!(st, 303, "back to /login");
}

async fn a_guesser_is_throttled(api: &str) {
    // A guesser on 127.0.0.3: five wrong passwords, then 429 with Retry-After — even for the
    // right one, and from another client for that account, and from that client for another.
    let guesser = browser(3);
    for i in 0..5 {
        let resp = password_login(api, &guesser, VICTIM, &format!("guess number {i}")).await;
        assert_eq!(resp.status(), 401, "guess {i}");
    }
    let resp = password_login(api, &guesser, VICTIM, "guess number 6").await;
    assert_eq!(resp.status(), 429);
    let wait: u64 = resp.headers()[RETRY_AFTER]
        .to_str()
        .expect("ascii")
        .parse()
        .expect("seconds");
    assert!(wait > 60 && wait <= 15 * 60, "{wait}");
    assert_eq!(
        password_login(api, &guesser, VICTIM, VICTIM_PW)
            .await
            .status(),
        429
    );
    assert_eq!(
        password_login(api, &browser(4), VICTIM, VICTIM_PW)
            .await
            .status(),
        429,
        "the account is throttled whoever asks"
    );
    assert_eq!(
        password_login(api, &guesser, OWNER, OWNER_PW)
            .await
            .status(),
        429,
        "the client is throttled whatever it tries"
    );
    assert_eq!(
        password_login(api, &browser(6), OWNER, OWNER_PW)
            .await
            .status(),
        303,
        "others are not"
    );
}

async fn the_token_the_cli_and_a_site_admin_reach_everything(api: &str, held_ops: u64) {
    // The admin token and the CLI work as before, from a remote client too.
    let (st, _) = call_remote_with_token(api, "/api/v1/status").await;
    assert_eq!(st, 200);
    let held_cli = herald_cli(api, Some(TOKEN), &["held", "--list", OPS]);
    assert!(held_cli.contains(&held_ops.to_string()), "{held_cli}");
    let resp = browser(7)
        .post(format!("{api}/login"))
        .form(&[("token", TOKEN)])
        .send()
        .await
        .expect("token login");
    assert_eq!(resp.status(), 303, "the dashboard's token form");
    let dash = Session {
        client: browser(7),
        cookie: session_cookie(resp.headers()),
        origin: api.to_string(),
    };
    let (st, page) = dash.status(dash.req(reqwest::Method::GET, "/")).await;
    assert!(st == 200 && page.contains("rate-chart"), "{st}");

    // A site administrator's account: everything, like the token.
    const ADMIN: &str = "admin@d0.test";
    cli_add_with_password(api, ADMIN, "the admin's long password");
    herald_cli(
        api,
        Some(TOKEN),
        &["account", "site-admin", ADMIN, "--on", "true"],
    );
    let r = password_login(api, &browser(10), ADMIN, "the admin's long password").await;
    let admin = Session {
        client: browser(10),
        cookie: session_cookie(r.headers()),
        origin: api.to_string(),
    };
    let acsrf = admin.me().await.csrf.expect("csrf");
    for path in ["/api/v1/status", "/api/v1/accounts", "/metrics"] {
        let (st, _) = admin.status(admin.req(reqwest::Method::GET, path)).await;
        assert_eq!(st, 200, "{path}");
    }
    let (st, page) = admin
        .status(admin.req(reqwest::Method::GET, "/admin/"))
        .await;
    assert!(
        st == 200 && page.contains(DEV) && page.contains(OPS),
        "{page}"
    );
    let reject = admin
        .req(
            reqwest::Method::POST,
            &format!("/api/v1/held/{held_ops}/reject"),
        )
        .header("x-csrf-token", &acsrf);
    assert_eq!(admin.status(reject).await.0, 200);
    // `herald account passwd`: a new password ends the account's sessions; it works, the old not.
    let out = cli_with_stdin(api, &["account", "passwd", ADMIN], "a brand new password");
    assert!(out.contains("password set"), "{out}");
    let (st, _) = admin
        .status(admin.req(reqwest::Method::GET, "/api/v1/me"))
        .await;
    assert_eq!(st, 401, "sessions end with a new password");
    let old = password_login(api, &browser(11), ADMIN, "the admin's long password").await;
    assert_eq!(old.status(), 401);
    let new = password_login(api, &browser(11), ADMIN, "a brand new password").await;
    assert_eq!(new.status(), 303);
}

/// Checks the log as the site and as the dev list's owner; answers the owner's new session.
async fn the_audit_log_shows_who_did_what(api: &str, held_dev: u64) -> Session {
    // The audit log: who did what, over the API…
    let audit: Vec<AuditView> = get_token(&format!("{api}/api/v1/audit?limit=500")).await;
    let find = |actor: &str, action: &str, outcome: &str| {
        audit
            .iter()
            .find(|e| e.actor == actor && e.action == action && e.outcome == outcome)
            .cloned()
    };
    let changed = find(OWNER, "list.update", "ok").expect("the owner's change");
    assert_eq!(changed.list.as_deref(), Some(DEV));
    assert_eq!(changed.client.as_deref(), Some("127.0.0.2"));
    let denied = find(OWNER, "list.update", "denied").expect("the refused change");
    assert!(
        audit.iter().any(|e| e.actor == OWNER
            && e.action == "list.update"
            && e.list.as_deref() == Some(OPS)
            && e.outcome == "denied"),
        "{denied:?}"
    );
    let approved = find(MODERATOR, "held.approve", "ok").expect("the approval");
    assert_eq!(approved.target, Some(held_dev.to_string()));
    assert!(audit.iter().any(|e| e.actor == "token"
        && e.action == "account.add"
        && e.target.as_deref() == Some(OWNER)
        && e.outcome == "ok"));
    assert!(
        find("token", "account.add", "error 400").is_some(),
        "refused input is recorded with its outcome"
    );
    assert!(find("token", "account.role", "ok").is_some_and(|e| e.list.as_deref() == Some(DEV)));
    assert!(find(VICTIM, "login.password", "throttled").is_some());
    assert!(find(MODERATOR, "login.link", "ok").is_some());
    assert!(find("token", "held.import", "ok").is_some());
    // …as the list's owner sees it (their list only), over the CLI and in /metrics.
    let owner_again = password_login(api, &browser(6), OWNER, OWNER_PW).await;
    let owner = Session {
        client: browser(6),
        cookie: session_cookie(owner_again.headers()),
        origin: api.to_string(),
    };
    let (st, body) = owner
        .status(owner.req(reqwest::Method::GET, &format!("/api/v1/audit?list={DEV}")))
        .await;
    assert_eq!(st, 200, "{body}");
    let theirs: Vec<AuditView> = serde_json::from_str(&body).expect("audit");
    assert!(!theirs.is_empty() && theirs.iter().all(|e| e.list.as_deref() == Some(DEV)));
    let cli = herald_cli(api, Some(TOKEN), &["audit", "--list", DEV]);
    assert!(
        cli.contains("list.update") && cli.contains(OWNER) && cli.contains("held.approve"),
        "{cli}"
    );
    let metrics = reqwest::Client::new()
        .get(format!("{api}/metrics"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("herald_audit_events_total{action=\"list.update\"}")),
        "{metrics}"
    );
    owner
}

async fn a_deleted_list_takes_its_roles(api: &str) {
    // A deleted list takes its roles along: created again, it has no owner from before.
    const TMP: &str = "tmp@lists.test";
    let lists_url = format!("{api}/api/v1/lists");
    assert_eq!(
        token_call("POST", &lists_url, Some(json!({"address": TMP})))
            .await
            .0,
        201
    );
    herald_cli(api, Some(TOKEN), &["account", "role", VICTIM, TMP, "owner"]);
    assert_eq!(
        token_call("DELETE", &format!("{lists_url}/{TMP}"), None)
            .await
            .0,
        204
    );
    assert_eq!(
        token_call("POST", &lists_url, Some(json!({"address": TMP})))
            .await
            .0,
        201
    );
    let victim: AccountView = get_token(&format!("{api}/api/v1/accounts/{VICTIM}")).await;
    assert!(victim.roles.is_empty(), "{victim:?}");
}

async fn the_backup_carries_accounts_db(api: &str) {
    // `herald backup` carries accounts.db (the accounts, sessions and the audit log).
    let backup = reqwest::Client::new()
        .get(format!("{api}/api/v1/backup"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("backup")
        .bytes()
        .await
        .expect("tar");
    assert!(
        backup.windows(16).any(|w| w == b"data/accounts.db"),
        "the backup has no data/accounts.db"
    );
}

async fn erasure_reaches_the_audit_log(api: &str, owner: &Session) {
    // GDPR erasure of the owner: the address leaves the audit log and the accounts.
    herald_cli(api, Some(TOKEN), &["member", "erase", OWNER, "--yes"]);
    let audit: Vec<AuditView> = get_token(&format!("{api}/api/v1/audit?limit=1000")).await;
    let text = serde_json::to_string(&audit).expect("json");
    assert!(
        !text.contains(OWNER),
        "the erased address is still in the audit log"
    );
    assert!(audit
        .iter()
        .any(|e| e.actor.starts_with("erased:") && e.action == "list.update"));
    let accounts: Vec<AccountView> = get_token(&format!("{api}/api/v1/accounts")).await;
    assert!(accounts.iter().all(|a| a.address != OWNER));
    let (st, _) = owner
        .status(owner.req(reqwest::Method::GET, "/api/v1/me"))
        .await;
    assert_eq!(st, 401, "the erased account's session ended");
}

/// Hostile input at the sign-in and session boundary gets a clear answer and changes nothing:
/// a 10 KB cookie, a well-formed but unknown session id, a 1 MB password, garbage link tokens,
/// an oversized form, a Unicode address (which is a fine account).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_sign_in_input_gets_clear_answers() {
    let world = World::start(world_config(&[Profile::Normal], false))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = server_config(&world, dir.path().to_path_buf());
    config.http.admin_token = TOKEN.into();
    config.http.local_clients = vec!["127.0.0.1".into()];
    let server = TestServer::start(config).await;
    let api = server.api.clone();
    let b = browser(2);
    let get =
        |path: &str, cookie: String| b.get(format!("{api}{path}")).header(COOKIE, cookie).send();
    let huge = format!("herald_admin={}", "A".repeat(10 * 1024));
    assert_eq!(
        get("/api/v1/me", huge.clone()).await.expect("me").status(),
        401
    );
    assert_eq!(get("/admin/", huge).await.expect("admin").status(), 303);
    let unknown = format!("herald_admin={}", "A".repeat(43));
    assert_eq!(get("/api/v1/me", unknown).await.expect("me").status(), 401);
    // Bytes that are not UTF-8 (obs-text, which HTTP allows in a header value).
    let garbage = reqwest::header::HeaderValue::from_bytes(b"herald_admin=\xff\xfe; x=\x80")
        .expect("obs-text");
    let r = b
        .get(format!("{api}/api/v1/me"))
        .header(COOKIE, garbage)
        .send()
        .await
        .expect("me");
    assert_eq!(r.status(), 401);

    // A 1 MB password is refused without being hashed.
    let started = Instant::now();
    let big = "p".repeat(1 << 20);
    let r = password_login(&api, &b, "someone@d0.test", &big).await;
    assert_eq!(r.status(), 401);
    assert!(started.elapsed() < Duration::from_secs(5));
    let r = b
        .post(format!("{api}/login"))
        .form(&[("address", "x@d0.test")])
        .send()
        .await
        .expect("login");
    assert_eq!(r.status(), 400, "no password given");

    // Link tokens: garbage of every kind is no link, on GET and POST (a path that is not
    // UTF-8 is refused by the router's decoder, 400).
    for t in ["x", "%ff%fe", &"A".repeat(10 * 1024), &"A".repeat(43)] {
        let r = b.get(format!("{api}/login/{t}")).send().await.expect("get");
        assert!(
            matches!(r.status().as_u16(), 400 | 403),
            "{t:.20}: {}",
            r.status()
        );
        let r = b
            .post(format!("{api}/login/{t}"))
            .send()
            .await
            .expect("post");
        assert!(
            matches!(r.status().as_u16(), 400 | 403),
            "{t:.20}: {}",
            r.status()
        );
        assert!(r.headers().get(SET_COOKIE).is_none());
    }
    let r = b
        .post(format!("{api}/login/link"))
        .form(&[("address", "not an address\r\nBcc: x@evil.test")])
        .send()
        .await
        .expect("link");
    assert_eq!(r.status(), 400);

    // A Unicode address is an account like any other.
    let jorg = "jörg@bücher.test";
    let (st, v) = token_call(
        "POST",
        &format!("{api}/api/v1/accounts"),
        Some(json!({"address": jorg, "password": "ein langes Passwort"})),
    )
    .await;
    assert_eq!(st, 201, "{v}");
    let r = password_login(&api, &b, jorg, "ein langes Passwort").await;
    assert_eq!(r.status(), 303);
    let s = Session {
        client: b.clone(),
        cookie: session_cookie(r.headers()),
        origin: api.to_string(),
    };
    let me = s.me().await;
    assert_eq!(me.actor.to_lowercase(), "jörg@xn--bcher-kva.test");
    // A form too large for the guard to read for its CSRF field: 413, nothing done.
    let big_form = s.req(reqwest::Method::POST, "/logout").form(&[
        ("csrf", me.csrf.as_deref().unwrap_or("")),
        ("pad", &"x".repeat(100 * 1024)),
    ]);
    assert_eq!(s.status(big_form).await.0, 413);
    assert_eq!(s.me().await.actor, me.actor, "still signed in");
    let (st, _) = token_call("GET", &format!("{api}/api/v1/audit?since=yesterday"), None).await;
    assert_eq!(st, 400);

    // A dashboard session opened with the admin token ends when the operator changes the token.
    let r = b
        .post(format!("{api}/login"))
        .form(&[("token", TOKEN)])
        .send()
        .await
        .expect("token login");
    let dash = session_cookie(r.headers());
    assert_eq!(
        get("/api/v1/status", dash.clone())
            .await
            .expect("status")
            .status(),
        200
    );
    let data_dir = server.data_dir.clone();
    server.stop().await;
    let mut config = server_config(&world, data_dir);
    config.http.admin_token = "a-new-admin-token-0123456789".into();
    let server = TestServer::start(config).await;
    let r = b
        .get(format!("{}/api/v1/status", server.api))
        .header(COOKIE, &dash)
        .send()
        .await
        .expect("status");
    assert_eq!(r.status(), 401, "the old token's session ended");
    // The account and its password survived the restart (accounts.db).
    let r = password_login(&server.api, &browser(9), jorg, "ein langes Passwort").await;
    assert_eq!(r.status(), 303);

    server.stop().await;
    world.shutdown().await;
}
