//! The web administration pages as remote browsers meet them: the server has
//! `http.admin_token` set and treats only 127.0.0.1 as local; every browser connects from
//! another loopback address, carries its cookie by hand and reads the CSRF token from the
//! page's own form, as a browser submitting that form would.
//!
//! The story: the site administrator (signed in with the token) creates lists on the lists
//! page and makes accounts owner and moderator → the owner signs in with a password, sees only
//! their lists, sends a setting with an invalid value and gets the message next to the field,
//! saves a valid one → finds a member among 100,000 by address and name prefix, pages on by
//! keyset, disables and re-enables them, resets a real bounce score → adds a member whose name
//! is markup, imports a CSV (progress page, rejected row shown) → approves a held post whose
//! subject is markup and the post reaches the members in the simulated world → exports CSV →
//! a POST without the CSRF token is refused → the moderator gets 403 on another list's pages
//! and on their own list's members, and reaches the held posts → the audit log shows it all.

use crate::support;
use crate::support::accounts;

use accounts::*;
use herald_api_types::MemberDetail;
use herald_sim::{Profile, World};
use reqwest::header::{CONTENT_TYPE, LOCATION};
use reqwest::Method;
use std::time::{Duration, Instant};
use support::*;

const DEV: &str = "dev@lists.test";
const BIG: &str = "big@lists.test";
const OPS: &str = "ops@lists.test";
const OWNER: &str = "owner@d1.test";
const OWNER_PW: &str = "the owner's long password";
const MODERATOR: &str = "mod@d1.test";
const MODERATOR_PW: &str = "the moderator's password";
const XSS: &str = "<script>alert(1)</script>";

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
    let server = TestServer::start(config).await;
    (world, server, dir)
}

/// The value of the first `name="csrf"` field of a page.
fn csrf_of(page: &str) -> String {
    let at = page
        .find("name=\"csrf\" value=\"")
        .unwrap_or_else(|| panic!("no CSRF field in the page: {page:.400}"));
    let rest = &page[at + "name=\"csrf\" value=\"".len()..];
    rest[..rest.find('"').expect("end of value")].to_string()
}

fn enc(s: &str) -> String {
    s.replace('@', "%40").replace('+', "%2B")
}

/// GET a page; its status and HTML.
async fn get(s: &Session, path: &str) -> (u16, String) {
    s.status(s.req(Method::GET, path)).await
}

/// POST a form (CSRF token included by the caller); the status and the redirect target.
async fn post_form(s: &Session, path: &str, form: &[(&str, &str)]) -> (u16, String) {
    let resp = s
        .req(Method::POST, path)
        .form(form)
        .send()
        .await
        .expect("post");
    let st = resp.status().as_u16();
    let to = resp
        .headers()
        .get(LOCATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body = resp.text().await.expect("body");
    (st, if to.is_empty() { body } else { to })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owners_and_moderators_run_their_lists_from_a_browser() {
    let (world, server, _dir) = start().await;
    let api = server.api.clone();
    let admin = site_admin_sets_up(&api).await;
    let owner = signs_in(&api, 3, OWNER, OWNER_PW).await;
    owner_sees_only_their_lists(&owner).await;
    a_bad_setting_is_shown_next_to_its_field(&owner).await;
    finds_one_member_among_100000(&api, &owner).await;
    resets_a_real_bounce_score(&api, &server, &owner).await;
    member_markup_is_escaped_and_csv_imports(&owner).await;
    approves_a_held_post_that_is_delivered(&world, &api, &owner).await;
    exports_csv(&owner).await;
    a_post_without_csrf_is_refused(&owner).await;
    moderator_is_kept_to_held_posts(&world, &api).await;
    the_audit_log_shows_the_actions(&admin).await;
    server.stop().await;
    world.shutdown().await;
}

/// The site administrator: token sign-in from a remote browser, two lists created on the
/// lists page (one with markup as its name), accounts given roles on the list page.
async fn site_admin_sets_up(api: &str) -> Session {
    cli_add_with_password(api, OWNER, OWNER_PW);
    cli_add_with_password(api, MODERATOR, MODERATOR_PW);
    let client = browser(2);
    let resp = client
        .post(format!("{api}/login"))
        .form(&[("token", TOKEN)])
        .send()
        .await
        .expect("login");
    assert_eq!(resp.status(), 303);
    let admin = Session {
        client: client.clone(),
        cookie: session_cookie(resp.headers()),
        origin: api.to_string(),
    };
    let (st, page) = get(&admin, "/admin/lists").await;
    assert_eq!(st, 200, "{page}");
    assert!(page.contains("Create a list") && page.contains("<label for=\"address\">"));
    let csrf = csrf_of(&page);
    for (list, name) in [(DEV, XSS), (BIG, "Big"), (OPS, "Ops")] {
        let (st, to) = post_form(
            &admin,
            "/admin/lists",
            &[("csrf", &csrf), ("address", list), ("display_name", name)],
        )
        .await;
        assert_eq!(st, 303, "{to}");
        assert!(to.ends_with("?done=created"), "{to}");
    }
    // A bad address: the message next to the field, nothing created.
    let (st, page) = post_form(
        &admin,
        "/admin/lists",
        &[
            ("csrf", &csrf),
            ("address", "not an address"),
            ("display_name", "x"),
        ],
    )
    .await;
    assert_eq!(st, 422);
    assert!(
        page.contains("id=\"address-error\"")
            && page.contains("aria-describedby=\"address-error\"")
    );
    // The list's name is markup: shown escaped everywhere.
    let (_, page) = get(&admin, "/admin/lists").await;
    assert!(!page.contains(XSS) && page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    for (list, who, role) in [
        (DEV, OWNER, "owner"),
        (BIG, OWNER, "owner"),
        (DEV, MODERATOR, "moderator"),
    ] {
        let (st, to) = post_form(
            &admin,
            &format!("/admin/lists/{}/roles", enc(list)),
            &[("csrf", &csrf), ("account", who), ("role", role)],
        )
        .await;
        assert_eq!(st, 303, "{to}");
    }
    // A role for an account that does not exist: said next to the field.
    let (st, page) = post_form(
        &admin,
        &format!("/admin/lists/{}/roles", enc(DEV)),
        &[
            ("csrf", &csrf),
            ("account", "nobody@d1.test"),
            ("role", "owner"),
        ],
    )
    .await;
    assert_eq!(st, 422);
    assert!(page.contains("id=\"account-error\""), "{page:.300}");
    admin
}

async fn signs_in(api: &str, last: u8, who: &str, pw: &str) -> Session {
    let client = browser(last);
    let resp = password_login(api, &client, who, pw).await;
    assert_eq!(resp.status(), 303);
    Session {
        client: client.clone(),
        cookie: session_cookie(resp.headers()),
        origin: api.to_string(),
    }
}

async fn owner_sees_only_their_lists(owner: &Session) {
    let (st, page) = get(owner, "/admin/lists").await;
    assert_eq!(st, 200);
    assert!(page.contains(DEV) && page.contains(BIG), "{page}");
    assert!(!page.contains(OPS), "owners see only their lists");
    assert!(
        !page.contains("Create a list"),
        "creating lists is the site's"
    );
    for path in [
        format!("/admin/lists/{}", enc(OPS)),
        format!("/admin/lists/{}/members", enc(OPS)),
        "/admin/audit".to_string(),
        "/admin/postmaster".to_string(),
        "/admin/stragglers".to_string(),
    ] {
        assert_eq!(get(owner, &path).await.0, 403, "{path}");
    }
}

async fn a_bad_setting_is_shown_next_to_its_field(owner: &Session) {
    let path = format!("/admin/lists/{}", enc(DEV));
    let (st, page) = get(owner, &path).await;
    assert_eq!(st, 200);
    assert!(
        page.contains("<label for=\"bounce_threshold\">"),
        "every setting has a label"
    );
    let csrf = csrf_of(&page);
    let (st, page) = post_form(
        owner,
        &path,
        &[
            ("csrf", &csrf),
            ("bounce_threshold", "five"),
            ("subject_prefix", "[dev]"),
        ],
    )
    .await;
    assert_eq!(st, 422);
    assert!(
        page.contains("aria-describedby=\"bounce_threshold-error bounce_threshold-help\""),
        "the field points at its error"
    );
    let err_at = page
        .find("id=\"bounce_threshold-error\"")
        .expect("the error");
    let field_at = page.find("id=\"bounce_threshold\"").expect("the field");
    assert!(
        err_at > field_at && err_at - field_at < 400,
        "next to the field"
    );
    assert!(
        page.contains("value=\"five\""),
        "the value as sent, to correct it"
    );
    let (_, shown) = token_call("GET", &format!("{}/api/v1/lists/{DEV}", owner.origin), None).await;
    assert!(
        shown["settings"]["subject_prefix"].is_null(),
        "nothing saved: {shown}"
    );
    // A control character the directory refuses: its message next to its field too.
    let (st, page) = post_form(
        owner,
        &path,
        &[("csrf", &csrf), ("subject_prefix", "[a]\u{7}")],
    )
    .await;
    assert_eq!(st, 422);
    assert!(page.contains("id=\"subject_prefix-error\""), "{page:.300}");
    let (st, to) = post_form(
        owner,
        &path,
        &[
            ("csrf", &csrf),
            ("subject_prefix", "[dev]"),
            ("bounce_threshold", "3"),
        ],
    )
    .await;
    assert_eq!(st, 303, "{to}");
    let (_, shown) = token_call("GET", &format!("{}/api/v1/lists/{DEV}", owner.origin), None).await;
    assert_eq!(shown["settings"]["subject_prefix"], "[dev]");
    assert_eq!(shown["settings"]["bounce_threshold"], 3);
    assert_eq!(
        shown["settings"]["personalize"], true,
        "an unsent checkbox keeps its value"
    );
    let (_, page) = get(owner, &format!("{path}?done=saved")).await;
    assert!(page.contains("The settings were saved."));
}

async fn finds_one_member_among_100000(api: &str, owner: &Session) {
    let mut csv = String::from("email,name\n");
    for i in 0..100_000 {
        csv.push_str(&format!("m{i:06}@bulk.test,Member {i:06}\n"));
    }
    let (st, v) = http_bytes_token(
        &format!("{api}/api/v1/lists/{BIG}/import"),
        csv.into_bytes(),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let members = format!("/admin/lists/{}/members", enc(BIG));
    let t = Instant::now();
    let (st, page) = get(owner, &format!("{members}?by=address&q=M04242")).await;
    let took = t.elapsed();
    assert_eq!(st, 200);
    let rows = page.matches("@bulk.test</th>").count();
    assert_eq!(rows, 10, "m042420..m042429");
    assert!(
        page.contains("m042425@bulk.test") && !page.contains("m042430@"),
        "{page:.300}"
    );
    assert!(took < Duration::from_secs(2), "a prefix page took {took:?}");
    let (_, page) = get(owner, &format!("{members}?by=name&q=member%20099999")).await;
    assert_eq!(page.matches("@bulk.test</th>").count(), 1);
    // Keyset paging: the first page links the next by the last member's id; the second page
    // goes on where the first stopped.
    let (_, first) = get(owner, &format!("{members}?by=address&q=m0")).await;
    assert_eq!(first.matches("@bulk.test</th>").count(), 50);
    assert!(first.contains("m000049@bulk.test") && !first.contains("m000050@bulk.test"));
    let href_at = first.find("rel=\"next\" href=\"").expect("a next page");
    let rest = &first[href_at + "rel=\"next\" href=\"".len()..];
    let next = rest[..rest.find('"').expect("end")].replace("&amp;", "&");
    assert!(next.contains("after="), "{next}");
    let (_, second) = get(owner, &next).await;
    assert!(second.contains("m000050@bulk.test") && !second.contains("m000049@bulk.test"));
    // Hostile searches: an error next to the search field, no crash.
    let long = "a".repeat(300);
    let (st, page) = get(owner, &format!("{members}?q={long}")).await;
    assert_eq!(st, 422);
    assert!(page.contains("id=\"q-error\""));
    let (st, _) = get(owner, &format!("{members}?q=%25%27%22%3C&after=-5")).await;
    assert_eq!(st, 200);

    // Disable and re-enable the member found.
    let page = get(owner, &format!("{members}?q=m042425")).await.1;
    let csrf = csrf_of(&page);
    let act = |verb: &str| format!("{members}/m042425%40bulk.test/{verb}");
    let (st, to) = post_form(owner, &act("disable"), &[("csrf", &csrf)]).await;
    assert_eq!(st, 303);
    let (_, page) = get(owner, &to).await;
    assert!(
        page.contains("disabled: disabled by an administrator")
            && page.contains("The member was disabled.")
    );
    let (st, to) = post_form(owner, &act("enable"), &[("csrf", &csrf)]).await;
    assert_eq!(st, 303);
    let (_, page) = get(owner, &to).await;
    assert!(page.contains("<td>enabled</td>"), "{page:.200}");
    // Delivery mode.
    let (st, _) = post_form(
        owner,
        &act("delivery"),
        &[("csrf", &csrf), ("delivery", "digest-plain")],
    )
    .await;
    assert_eq!(st, 303);
    let (_, page) = get(owner, &format!("{members}?q=m042425")).await;
    assert!(page.contains("value=\"digest-plain\" selected"));
    let (st, _) = post_form(
        owner,
        &act("delivery"),
        &[("csrf", &csrf), ("delivery", "sometimes")],
    )
    .await;
    assert_eq!(st, 400, "an unknown mode is refused");
}

async fn http_bytes_token(url: &str, body: Vec<u8>) -> (u16, String) {
    let resp = reqwest::Client::new()
        .post(url)
        .bearer_auth(TOKEN)
        .body(body)
        .send()
        .await
        .expect("import");
    let st = resp.status().as_u16();
    (st, resp.text().await.expect("body"))
}

/// A hard bounce through the list's VERP address gives bob a score; the owner resets it on
/// the bounces page.
async fn resets_a_real_bounce_score(api: &str, server: &TestServer, owner: &Session) {
    for m in ["bob@d0.test", "carol@d2.test"] {
        let url = format!("{api}/api/v1/lists/{DEV}/members");
        let (st, v) = token_call("POST", &url, Some(serde_json::json!({ "address": m }))).await;
        assert_eq!(st, 201, "{v}");
    }
    let dsn =
        std::fs::read_to_string("crates/bounce/tests/corpus/postfix_hard.eml").expect("corpus");
    let (mut c, _) = Smtp::connect(server.smtp).await;
    c.cmd("EHLO client.test").await;
    let r = c
        .send_mail("", &["dev-bounces+bob=d0.test@lists.test"], dsn.as_bytes())
        .await;
    assert!(r.starts_with("250"), "{r}");
    c.cmd("QUIT").await;
    let detail_url = format!("{api}/api/v1/lists/{DEV}/members/bob@d0.test/detail");
    let score = || async {
        let d: MemberDetail = get_token(&detail_url).await;
        d.bounce_score.map(|b| b.score).unwrap_or(0.0)
    };
    let start = Instant::now();
    while score().await == 0.0 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no bounce scored"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let bounces = format!("/admin/lists/{}/bounces", enc(DEV));
    let (st, page) = get(owner, &bounces).await;
    assert_eq!(st, 200);
    assert!(
        page.contains("bob@d0.test") && page.contains("hard"),
        "{page:.300}"
    );
    let csrf = csrf_of(&page);
    let (st, to) = post_form(
        owner,
        &format!(
            "/admin/lists/{}/members/bob%40d0.test/reset-bounces",
            enc(DEV)
        ),
        &[("csrf", &csrf), ("back", "bounces")],
    )
    .await;
    assert_eq!(st, 303);
    assert!(to.contains("/bounces?done=reset"), "{to}");
    assert_eq!(score().await, 0.0, "the score was reset");
}

async fn member_markup_is_escaped_and_csv_imports(owner: &Session) {
    let members = format!("/admin/lists/{}/members", enc(DEV));
    let page = get(owner, &members).await.1;
    let csrf = csrf_of(&page);
    let (st, _) = post_form(
        owner,
        &members,
        &[
            ("csrf", &csrf),
            ("address", "dave@d1.test"),
            ("name", "<img src=x onerror=alert(2)>"),
        ],
    )
    .await;
    assert_eq!(st, 303);
    let (_, page) = get(owner, &format!("{members}?q=dave")).await;
    assert!(!page.contains("<img src=x") && page.contains("&lt;img src=x onerror=alert(2)&gt;"));
    // A bad address: the message next to the add form's field.
    let (st, page) = post_form(owner, &members, &[("csrf", &csrf), ("address", "dave@")]).await;
    assert_eq!(st, 422);
    assert!(page.contains("id=\"add-address-error\""));
    // CSV import: multipart with the token in the action's query, as the page's form does.
    let action_at = page
        .find("enctype=\"multipart/form-data\"")
        .expect("import form");
    let form_start = page[..action_at].rfind("<form").expect("form");
    let form_tag = &page[form_start..action_at];
    let action = form_tag
        .split("action=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("action")
        .replace("&amp;", "&");
    assert!(action.contains("?csrf="), "{action}");
    let csv = "email,name\nerin@d1.test,Erin\nnot-an-address,X\nfrank@d2.test,=cmd|' /C calc'!A0\n";
    let part = reqwest::multipart::Part::bytes(csv.as_bytes().to_vec())
        .file_name("members.csv")
        .mime_str("text/csv")
        .expect("mime");
    let resp = owner
        .req(Method::POST, &action)
        .multipart(reqwest::multipart::Form::new().part("file", part))
        .send()
        .await
        .expect("upload");
    assert_eq!(resp.status(), 303);
    let progress = resp.headers()[LOCATION]
        .to_str()
        .expect("location")
        .to_string();
    let start = Instant::now();
    let report = loop {
        let (st, page) = get(owner, &progress).await;
        assert_eq!(st, 200);
        if page.contains("Done:") {
            break page;
        }
        assert!(
            page.contains("http-equiv=\"refresh\""),
            "refreshes while running"
        );
        assert!(start.elapsed() < Duration::from_secs(20));
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        report.contains("<strong>2</strong> added")
            && report.contains("<strong>1</strong> rejected"),
        "{report}"
    );
    assert!(
        report.contains("<td>3</td>"),
        "the rejected row's line: {report}"
    );
    // Without the token in the query, the upload is refused.
    let part = reqwest::multipart::Part::bytes(csv.as_bytes().to_vec()).file_name("m.csv");
    let resp = owner
        .req(Method::POST, &format!("/admin/lists/{}/import", enc(DEV)))
        .multipart(reqwest::multipart::Form::new().part("file", part))
        .send()
        .await
        .expect("upload");
    assert_eq!(resp.status(), 403);
    // Hostile uploads: too large, no file field, not multipart at all: a clear refusal each,
    // and nothing imported.
    let big = vec![b'a'; 32 * 1024 * 1024 + 1];
    let part = reqwest::multipart::Part::bytes(big).file_name("huge.csv");
    let resp = owner
        .req(Method::POST, &action)
        .multipart(reqwest::multipart::Form::new().part("file", part))
        .send()
        .await
        .expect("upload");
    assert_eq!(resp.status(), 413);
    assert!(resp
        .text()
        .await
        .expect("body")
        .contains("larger than 32 MiB"));
    let resp = owner
        .req(Method::POST, &action)
        .multipart(reqwest::multipart::Form::new().text("other", "x"))
        .send()
        .await
        .expect("upload");
    assert_eq!(resp.status(), 400);
    let resp = owner
        .req(Method::POST, &action)
        .header(CONTENT_TYPE, "multipart/form-data; boundary=zzz")
        .body("--zzz\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nunterminated")
        .send()
        .await
        .expect("upload");
    assert_eq!(resp.status(), 400);
    // Another list's import job is not shown under this list.
    assert_eq!(
        get(owner, &progress.replace("dev%40", "big%40")).await.0,
        404
    );
}

async fn approves_a_held_post_that_is_delivered(world: &World, api: &str, owner: &Session) {
    let body = format!(
        "From: stranger@d2.test\r\nTo: {DEV}\r\nSubject: {XSS}\r\nMessage-ID: <held-xss@d2.test>\r\n\
         Content-Type: text/html\r\n\r\n<p>Hello <iframe src=//evil.test></iframe></p>\r\n"
    );
    let resp = reqwest::Client::new()
        .post(format!(
            "{api}/api/v1/lists/{DEV}/held?reason=not%20a%20member"
        ))
        .bearer_auth(TOKEN)
        .body(body)
        .send()
        .await
        .expect("hold");
    assert_eq!(resp.status(), 202);
    let held = format!("/admin/lists/{}/held", enc(DEV));
    let (st, page) = get(owner, &held).await;
    assert_eq!(st, 200);
    assert!(
        !page.contains(XSS) && page.contains("&lt;script&gt;alert(1)"),
        "{page}"
    );
    let id_at = page.find("name=\"post\" value=\"").expect("a held post");
    let rest = &page[id_at + "name=\"post\" value=\"".len()..];
    let post = rest[..rest.find('"').expect("end")].to_string();
    let (st, message) = get(owner, &format!("{held}/{post}")).await;
    assert_eq!(st, 200);
    assert!(!message.contains("<iframe") && message.contains("(converted from HTML)"));
    let csrf = csrf_of(&page);
    let (st, to) = post_form(
        owner,
        &format!("{held}/approve"),
        &[("csrf", &csrf), ("post", &post), ("reason", "")],
    )
    .await;
    assert_eq!(st, 303, "{to}");
    assert!(to.ends_with("done=approved"));
    let start = Instant::now();
    loop {
        let snap = world.recorder().snapshot();
        if !snap.copies_for("bob@d0.test").is_empty()
            && !snap.copies_for("carol@d2.test").is_empty()
        {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the approved post was not delivered"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (_, page) = get(owner, &held).await;
    assert!(
        page.contains("No post is waiting"),
        "approved posts leave the list"
    );
}

async fn exports_csv(owner: &Session) {
    let resp = owner
        .req(Method::GET, &format!("/admin/lists/{}/export", enc(DEV)))
        .send()
        .await
        .expect("export");
    assert_eq!(resp.status(), 200);
    assert!(resp.headers()[CONTENT_TYPE]
        .to_str()
        .expect("ct")
        .starts_with("text/csv"));
    let csv = resp.text().await.expect("csv");
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("email,name"));
    let rest: Vec<&str> = lines.collect();
    assert!(
        rest.contains(&"bob@d0.test,") && rest.contains(&"erin@d1.test,Erin"),
        "{csv}"
    );
    assert!(
        csv.contains("frank@d2.test,'=cmd|' /C calc'!A0"),
        "formula neutralized: {csv}"
    );
    let mut sorted = rest.clone();
    sorted.sort();
    assert_eq!(rest, sorted, "address order");
}

async fn a_post_without_csrf_is_refused(owner: &Session) {
    // Their list's audit log, linked from the list's pages.
    let (st, page) = get(owner, &format!("/admin/audit?list={}", enc(DEV))).await;
    assert_eq!(st, 200);
    assert!(page.contains("<td>held.approve</td>"), "{page:.300}");
    assert!(
        !page.contains(&format!("<td>{BIG}</td>")),
        "another list's rows"
    );
    let members = format!("/admin/lists/{}/members", enc(DEV));
    let (st, _) = post_form(owner, &members, &[("address", "mallory@d1.test")]).await;
    assert_eq!(st, 403);
    let (st, _) = post_form(
        owner,
        &members,
        &[("csrf", "forged"), ("address", "mallory@d1.test")],
    )
    .await;
    assert_eq!(st, 403);
    let (_, page) = get(owner, &format!("{members}?q=mallory")).await;
    assert!(page.contains("No member matches."));
}

async fn moderator_is_kept_to_held_posts(world: &World, api: &str) {
    let moderator = signs_in(api, 4, MODERATOR, MODERATOR_PW).await;
    let (st, page) = get(&moderator, "/admin/lists").await;
    assert_eq!(st, 200);
    assert!(page.contains(DEV) && !page.contains(BIG) && !page.contains(OPS));
    for path in [
        format!("/admin/lists/{}/held", enc(OPS)),
        format!("/admin/lists/{}", enc(OPS)),
        format!("/admin/lists/{}/members", enc(DEV)),
        format!("/admin/lists/{}", enc(DEV)),
        format!("/admin/lists/{}/export", enc(DEV)),
        format!("/admin/lists/{}/bounces", enc(DEV)),
    ] {
        assert_eq!(get(&moderator, &path).await.0, 403, "{path}");
    }
    let held_ops = hold(api, OPS, "ops-held@d2.test").await;
    let (st, page) = get(&moderator, &format!("/admin/lists/{}/held", enc(DEV))).await;
    assert_eq!(st, 200);
    assert!(
        !page.contains("/members\""),
        "no members link for a moderator"
    );
    // Another list's post named through their own list's form is not acted on.
    let csrf = csrf_of(&page);
    let (st, to) = post_form(
        &moderator,
        &format!("/admin/lists/{}/held/discard", enc(DEV)),
        &[("csrf", &csrf), ("post", &held_ops.to_string())],
    )
    .await;
    assert_eq!(st, 303);
    assert!(to.ends_with("done=none"), "{to}");
    let still: Vec<herald_api_types::HeldView> =
        get_token(&format!("{api}/api/v1/held?list={OPS}")).await;
    assert!(
        still.iter().any(|h| h.post == held_ops),
        "ops's post untouched"
    );
    // Their own list's post: discarded in bulk.
    let a = hold(api, DEV, "dev-1@d2.test").await;
    let b = hold(api, DEV, "dev-2@d2.test").await;
    let (st, _) = post_form(
        &moderator,
        &format!("/admin/lists/{}/held/discard", enc(DEV)),
        &[
            ("csrf", &csrf),
            ("post", &a.to_string()),
            ("post", &b.to_string()),
        ],
    )
    .await;
    assert_eq!(st, 303);
    let left: Vec<herald_api_types::HeldView> =
        get_token(&format!("{api}/api/v1/held?list={DEV}")).await;
    assert!(left.is_empty(), "{left:?}");
    // Rejected with a reason: the sender is told, with the reason.
    let body = format!(
        "From: poster@d2.test\r\nTo: {DEV}\r\nSubject: off\r\nMessage-ID: <rej@d2.test>\r\n\r\nx\r\n"
    );
    let resp = reqwest::Client::new()
        .post(format!(
            "{api}/api/v1/lists/{DEV}/held?reason=test&from=poster@d2.test"
        ))
        .bearer_auth(TOKEN)
        .body(body)
        .send()
        .await
        .expect("hold");
    assert_eq!(resp.status(), 202);
    let held: Vec<herald_api_types::HeldView> =
        get_token(&format!("{api}/api/v1/held?list={DEV}")).await;
    let post = held[0].post.to_string();
    let (st, to) = post_form(
        &moderator,
        &format!("/admin/lists/{}/held/reject", enc(DEV)),
        &[
            ("csrf", &csrf),
            ("post", &post),
            ("reason", "Off topic\r\nhere."),
        ],
    )
    .await;
    assert_eq!(st, 303);
    assert!(to.ends_with("done=rejected"), "{to}");
    let start = Instant::now();
    loop {
        let told = world
            .recorder()
            .snapshot()
            .copies_for("poster@d2.test")
            .iter()
            .filter_map(|c| c.message.clone())
            .filter_map(|raw| {
                let m = mail_parser::MessageParser::default().parse(&raw[..])?;
                m.body_text(0).map(|t| t.to_string())
            })
            .any(|t| t.contains("The moderator's reason:") && t.contains("Off topic  here."));
        if told {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the sender was not told why"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn the_audit_log_shows_the_actions(admin: &Session) {
    let (st, page) = get(admin, "/admin/audit").await;
    assert_eq!(st, 200);
    for action in [
        "list.create",
        "account.role",
        "list.update",
        "member.disable",
        "member.enable",
        "member.reset_bounces",
        "member.import",
        "held.approve",
        "held.discard",
    ] {
        assert!(
            page.contains(&format!("<td>{action}</td>")),
            "{action} not in the audit log"
        );
    }
    assert!(
        page.contains("<td>denied</td>"),
        "the refused POSTs are there too"
    );
    assert!(page.contains(OWNER) && page.contains(MODERATOR));
    for path in ["/admin/stragglers", "/admin/postmaster"] {
        let (st, page) = get(admin, path).await;
        assert_eq!(st, 200, "{path}");
        assert!(page.contains("<h1>"), "{path}");
    }
}
