//! Member self-service as a real subscriber meets it: the server has
//! `http.admin_token` set and treats only 127.0.0.1 as local (`http.local_clients`); the
//! subscriber's browser is a client bound to 127.0.0.2, which the server sees as remote. The
//! confirmation link is read from the mail delivered to the simulated mailbox, the one-click
//! unsubscribe link from the `List-Unsubscribe` header of a delivered post. A GET (a link
//! scanner) changes nothing; only the POST acts.
//!
//! Everything stays on 127.0.0.0/8: the "remote" client is a loopback source address the
//! server is configured not to trust.
//!
//! Bounce administration, through the `herald` binary as an operator runs it: a member disabled
//! by real bounce mail (a DSN through the VERP address) gets no post; `herald member
//! reset-bounces` clears the score, `herald member enable` re-enables, and the next post reaches
//! the member; `herald member rm` removes the bounce history with the member.
//!
//! Consent: the remote confirmation is recorded as `web` with the browser's address, an
//! administrator's add as `admin`; `herald member show` and the API show them.

use crate::support;

use herald_api_types::{BounceEvent, MemberDetail};
use herald_sim::{Profile, World};
use herald_types::MemberStatus;
use serde_json::{json, Value};
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};
use support::*;

const LIST: &str = "dev@lists.test";
const TOKEN: &str = "admin-token-0123456789abcdef";
const NEWBIE: &str = "newbie@d1.test";
/// The subscriber's browser: a loopback source address outside `http.local_clients`.
const REMOTE: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

/// A client whose connections come from `REMOTE`.
fn remote_client() -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(REMOTE)
        .build()
        .expect("client")
}

/// (status, body text) of a request; `token` adds the admin bearer token.
async fn call(
    client: &reqwest::Client,
    method: &str,
    url: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (u16, String) {
    let mut req = match method {
        "GET" => client.get(url),
        "POST" => client.post(url),
        "DELETE" => client.delete(url),
        "PATCH" => client.patch(url),
        other => panic!("method {other}"),
    };
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.expect("request");
    let status = resp.status().as_u16();
    (status, resp.text().await.expect("body"))
}

async fn start(admin_token: Option<&str>) -> (World, TestServer, tempfile::TempDir) {
    let world = World::start(world_config(&[Profile::Normal, Profile::Normal], true))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = server_config(&world, dir.path().to_path_buf());
    config.http.admin_token = admin_token.unwrap_or_default().to_string();
    config.http.local_clients = vec!["127.0.0.1".into()];
    let server = TestServer::start(config).await;
    let admin = reqwest::Client::new();
    let (st, body) = call(
        &admin,
        "POST",
        &format!("{}/api/v1/lists", server.api),
        admin_token,
        Some(json!({"address": LIST, "settings": {"posting_policy": "anyone"}})),
    )
    .await;
    assert_eq!(st, 201, "create list: {body}");
    (world, server, dir)
}

/// The `/confirm/` link in the text body of the newest confirmation mail for `rcpt`, decoded as
/// a mail client would (the body may be quoted-printable).
fn confirmation_link(world: &World, rcpt: &str) -> Option<String> {
    delivered(world, rcpt).iter().rev().find_map(|raw| {
        let msg = mail_parser::MessageParser::default().parse(raw)?;
        if !msg.subject()?.starts_with("confirm ") {
            return None;
        }
        let text = msg.body_text(0)?;
        text.split_whitespace()
            .find(|w| w.contains("/confirm/"))
            .map(str::to_string)
    })
}

/// The https?/http URL in the `List-Unsubscribe` header of the newest copy of a post.
fn unsubscribe_link(world: &World, rcpt: &str) -> Option<String> {
    delivered(world, rcpt).iter().rev().find_map(|raw| {
        let msg = mail_parser::MessageParser::default().parse(raw)?;
        let v = msg.header_raw("List-Unsubscribe")?;
        v.split(['<', '>'])
            .map(str::trim)
            .find(|u| u.starts_with("http"))
            .map(str::to_string)
    })
}

async fn is_member(api: &str, token: Option<&str>) -> bool {
    let url = format!("{api}/api/v1/lists/{LIST}/members/{NEWBIE}");
    match call(&reqwest::Client::new(), "GET", &url, token, None).await {
        (200, _) => true,
        (404, _) => false,
        other => panic!("member lookup: {other:?}"),
    }
}

/// Subscribes `NEWBIE` by double opt-in, confirming from the remote client; returns the link.
async fn subscribe_and_confirm_remotely(world: &World, api: &str, token: Option<&str>) {
    let (st, body) = call(
        &reqwest::Client::new(),
        "POST",
        &format!("{api}/api/v1/lists/{LIST}/subscribe"),
        token,
        Some(json!({"address": NEWBIE})),
    )
    .await;
    assert_eq!(st, 202, "subscribe request: {body}");
    let link = wait_until_some("the confirmation mail", || confirmation_link(world, NEWBIE)).await;
    assert!(
        link.starts_with(api),
        "the link points at this server: {link}"
    );
    let browser = remote_client();
    // A link scanner (or the person, first): a page with a button, nothing changes.
    let (st, page) = call(&browser, "GET", &link, None, None).await;
    assert_eq!(st, 200, "the confirmation page for a remote client: {page}");
    assert!(page.contains("<form method=\"post\""), "{page}");
    assert!(page.contains(NEWBIE), "{page}");
    assert!(!is_member(api, token).await, "a GET never subscribes");
    // The button.
    let (st, page) = call(&browser, "POST", &link, None, None).await;
    assert_eq!(st, 200, "confirmed from a remote client: {page}");
    assert!(is_member(api, token).await, "subscribed after the POST");
    // The consent is recorded: by the web link, from the browser's address.
    let url = format!("{api}/api/v1/lists/{LIST}/members/{NEWBIE}/detail");
    let (st, body) = call(&reqwest::Client::new(), "GET", &url, token, None).await;
    assert_eq!(st, 200, "{body}");
    let detail: MemberDetail = serde_json::from_str(&body).expect("detail");
    let consent = detail.consent.expect("consent recorded");
    assert_eq!(consent.source, "web");
    assert_eq!(consent.client.as_deref(), Some("127.0.0.2"), "{body}");
    let age_ms = herald_types::unix_ms_now().saturating_sub(consent.at_ms);
    assert!(age_ms < 60_000, "recorded now: {consent:?}");
    // A tampered token gets a page saying so, and nothing else.
    let (st, _) = call(&browser, "POST", &format!("{link}x"), None, None).await;
    assert_eq!(st, 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_subscriber_confirms_and_unsubscribes_with_the_admin_token_set() {
    let (world, server, _dir) = start(Some(TOKEN)).await;
    let api = server.api.clone();
    let browser = remote_client();
    // The admin API stays closed to this client without the token.
    let (st, _) = call(&browser, "GET", &format!("{api}/api/v1/status"), None, None).await;
    assert_eq!(st, 401, "the admin API needs the token");

    subscribe_and_confirm_remotely(&world, &api, Some(TOKEN)).await;

    // A post reaches the new member with a one-click unsubscribe link.
    let msg = format!(
        "From: bob@d0.test\r\nTo: {LIST}\r\nSubject: hello\r\nMessage-ID: <p1@d0.test>\r\n\r\nbody\r\n"
    );
    let (mut c, _) = Smtp::connect(server.smtp).await;
    c.cmd("EHLO client.test").await;
    let r = c.send_mail("bob@d0.test", &[LIST], msg.as_bytes()).await;
    assert!(r.starts_with("250"), "{r}");
    c.cmd("QUIT").await;
    let link = wait_until_some("the post's copy", || unsubscribe_link(&world, NEWBIE)).await;
    // A scanner following the link sees a page; the member stays.
    let (st, page) = call(&browser, "GET", &link, None, None).await;
    assert_eq!(st, 200, "{page}");
    assert!(
        page.contains("List-Unsubscribe"),
        "the page's button POSTs: {page}"
    );
    assert!(
        is_member(&api, Some(TOKEN)).await,
        "a GET never unsubscribes"
    );
    // The mailbox provider's RFC 8058 POST.
    let resp = browser
        .post(&link)
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body("List-Unsubscribe=One-Click")
        .send()
        .await
        .expect("one-click");
    assert_eq!(resp.status().as_u16(), 200);
    assert!(
        !is_member(&api, Some(TOKEN)).await,
        "unsubscribed by the POST"
    );
    server.stop().await;
    world.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_only_configured_local_clients_administer_but_anyone_confirms() {
    let (world, server, _dir) = start(None).await;
    let api = server.api.clone();
    let (st, body) = call(
        &remote_client(),
        "GET",
        &format!("{api}/api/v1/status"),
        None,
        None,
    )
    .await;
    assert_eq!(st, 403, "127.0.0.2 is not in http.local_clients: {body}");
    let (st, body) = call(
        &reqwest::Client::new(),
        "GET",
        &format!("{api}/api/v1/status"),
        None,
        None,
    )
    .await;
    assert_eq!(st, 200, "127.0.0.1 is: {body}");
    subscribe_and_confirm_remotely(&world, &api, None).await;
    server.stop().await;
    world.shutdown().await;
}

async fn post_to_list(server: &TestServer, mid: &str) {
    let msg = format!(
        "From: carol@d1.test\r\nTo: {LIST}\r\nSubject: news\r\nMessage-ID: <{mid}>\r\n\r\nbody\r\n"
    );
    let (mut c, _) = Smtp::connect(server.smtp).await;
    c.cmd("EHLO client.test").await;
    let r = c.send_mail("carol@d1.test", &[LIST], msg.as_bytes()).await;
    assert!(r.starts_with("250"), "{r}");
    c.cmd("QUIT").await;
}

/// How many copies of the post `mid` reached `rcpt`.
fn copies_of(world: &World, rcpt: &str, mid: &str) -> usize {
    delivered(world, rcpt)
        .iter()
        .filter(|m| String::from_utf8_lossy(m).contains(&format!("<{mid}>")))
        .count()
}

async fn member_detail(api: &str, who: &str) -> (u16, String) {
    let url = format!("{api}/api/v1/lists/{LIST}/members/{who}/detail");
    call(&reqwest::Client::new(), "GET", &url, Some(TOKEN), None).await
}

/// Waits until every known post is complete and nothing is queued (`support::wait_settled`
/// with the admin token): then "no copy for bob" means none will come.
async fn settled(api: &str) {
    let start = Instant::now();
    loop {
        let url = format!("{api}/api/v1/status");
        let (st, body) = call(&reqwest::Client::new(), "GET", &url, Some(TOKEN), None).await;
        assert_eq!(st, 200, "{body}");
        let s: herald_api_types::Status = serde_json::from_str(&body).expect("status");
        if s.queued == 0 && s.posts.iter().all(|p| p.complete) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "not settled: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The `herald` binary against the server, as an operator runs it (off the async workers).
async fn cli(api: &str, args: &[&str]) -> String {
    let (api, args): (String, Vec<String>) =
        (api.into(), args.iter().map(|a| a.to_string()).collect());
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        herald_cli(&api, Some(TOKEN), &args)
    })
    .await
    .expect("cli task")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_disabled_by_bounces_is_re_enabled_by_the_cli_and_gets_the_next_post() {
    let (world, server, _dir) = start(Some(TOKEN)).await;
    let api = server.api.clone();
    let admin = reqwest::Client::new();
    let (st, body) = call(
        &admin,
        "PATCH",
        &format!("{api}/api/v1/lists/{LIST}"),
        Some(TOKEN),
        Some(json!({"bounce_threshold": 1})),
    )
    .await;
    assert_eq!(st, 200, "{body}");
    for who in ["bob@d0.test", "carol@d1.test"] {
        let (st, body) = call(
            &admin,
            "POST",
            &format!("{api}/api/v1/lists/{LIST}/members"),
            Some(TOKEN),
            Some(json!({"address": who})),
        )
        .await;
        assert_eq!(st, 201, "{body}");
    }
    // Real bounce mail for bob through his VERP return path disables him.
    let dsn =
        std::fs::read_to_string("crates/bounce/tests/corpus/postfix_hard.eml").expect("corpus");
    let (mut c, _) = Smtp::connect(server.smtp).await;
    c.cmd("EHLO mx.d0.test").await;
    let r = c
        .send_mail("", &["dev-bounces+bob=d0.test@lists.test"], dsn.as_bytes())
        .await;
    assert!(r.starts_with("250"), "{r}");
    c.cmd("QUIT").await;
    let start = Instant::now();
    let disabled = loop {
        let (st, body) = member_detail(&api, "bob@d0.test").await;
        assert_eq!(st, 200, "{body}");
        let d: MemberDetail = serde_json::from_str(&body).expect("detail");
        if matches!(d.member.status, MemberStatus::Disabled(_)) {
            break d;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "never disabled: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(disabled.bounce_score.map(|b| b.score), Some(1.0));

    // While disabled, a post reaches carol and not bob.
    post_to_list(&server, "p1@d1.test").await;
    wait_until_some("p1 at carol", || {
        (copies_of(&world, "carol@d1.test", "p1@d1.test") == 1).then_some(())
    })
    .await;
    settled(&api).await;
    assert_eq!(
        copies_of(&world, "bob@d0.test", "p1@d1.test"),
        0,
        "disabled: no copy"
    );

    // reset-bounces clears the score only.
    let out = cli(&api, &["member", "reset-bounces", LIST, "bob@d0.test"]).await;
    assert!(out.contains("cleared"), "{out}");
    let shown = cli(&api, &["member", "show", LIST, "bob@d0.test"]).await;
    assert!(shown.contains("status:       disabled"), "{shown}");
    assert!(shown.contains("bounce score: 0"), "{shown}");
    // enable brings him back.
    let out = cli(&api, &["member", "enable", LIST, "bob@d0.test"]).await;
    assert!(out.contains("enabled bob@d0.test"), "{out}");
    let shown = cli(&api, &["member", "show", LIST, "bob@d0.test"]).await;
    assert!(shown.contains("status:       enabled"), "{shown}");
    assert!(shown.contains("bounces:      1"), "history kept: {shown}");
    assert!(
        shown.contains("consent:      admin at 20"),
        "added by the API: {shown}"
    );

    // The next post reaches him.
    post_to_list(&server, "p2@d1.test").await;
    wait_until_some("p2 at bob", || {
        (copies_of(&world, "bob@d0.test", "p2@d1.test") == 1).then_some(())
    })
    .await;

    // An unknown member is a clear error, not a silent success.
    let (st, _) = call(
        &admin,
        "POST",
        &format!("{api}/api/v1/lists/{LIST}/members/nobody@d0.test/enable"),
        Some(TOKEN),
        None,
    )
    .await;
    assert_eq!(st, 404);

    // Removing bob removes his bounce history with him.
    cli(&api, &["member", "rm", LIST, "bob@d0.test"]).await;
    let (st, body) = call(
        &admin,
        "GET",
        &format!("{api}/api/v1/bounces?list={LIST}"),
        Some(TOKEN),
        None,
    )
    .await;
    assert_eq!(st, 200, "{body}");
    let events: Vec<BounceEvent> = serde_json::from_str(&body).expect("bounces");
    assert!(
        events.iter().all(|e| e.address != "bob@d0.test"),
        "no history left for a removed member: {body}"
    );
    server.stop().await;
    world.shutdown().await;
}

/// The hidden time-token of the subscribe form in `html`.
fn form_token(html: &str) -> String {
    html.split("name=\"t\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("no time-token in the form: {html}"))
        .to_string()
}

/// The newest subscriptions-page link mailed to `rcpt`, if one has arrived.
fn subscriptions_link(world: &World, rcpt: &str) -> Option<String> {
    delivered(world, rcpt).iter().rev().find_map(|raw| {
        let msg = mail_parser::MessageParser::default().parse(raw)?;
        (msg.subject()? == "your subscriptions").then_some(())?;
        msg.body_text(0)?
            .split_whitespace()
            .find(|w| w.contains("/manage/"))
            .map(str::to_string)
    })
}

async fn post_form(client: &reqwest::Client, url: &str, fields: &[(&str, &str)]) -> (u16, String) {
    let resp = client
        .post(url)
        .form(fields)
        .send()
        .await
        .expect("post form");
    let status = resp.status().as_u16();
    (status, resp.text().await.expect("body"))
}

/// The public subscribe page as a newcomer's browser meets it: admin token set,
/// the browser not a local client. A bot that posts at once, or fills the honeypot, gets the
/// same answer and no mail; a person who fills the form gets the confirmation, whose link
/// (confirmed by POST) makes them a member with consent recorded as `web` from their address. A
/// flood of forms for one victim address sends at most the per-address confirmation limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newcomer_subscribes_through_the_public_form_and_bots_do_not() {
    let (world, server, _dir) = start(Some(TOKEN)).await;
    let browser = remote_client();
    let url = format!("{}/subscribe/{LIST}", server.api);
    let (st, html) = call(&browser, "GET", &url, None, None).await;
    assert_eq!(st, 200, "{html}");
    assert!(html.contains("<label for=\"email\">"), "{html}");
    assert!(!html.contains("<script"), "works without JavaScript");
    let t = form_token(&html);
    // Each served form is sent once: every sender below fetches a form of its own (all now,
    // so that they are old enough after the one wait below).
    let mut forms = Vec::new();
    for _ in 0..12 {
        let (_, html) = call(&browser, "GET", &url, None, None).await;
        forms.push(form_token(&html));
    }

    // A bot: posts the form it just fetched at once, or fills the honeypot. Same page, no mail.
    let (st, bot) = post_form(
        &browser,
        &url,
        &[("email", "bot1@d1.test"), ("website", ""), ("t", &t)],
    )
    .await;
    assert_eq!(st, 200, "{bot}");
    assert!(bot.contains("Check your mailbox"), "{bot}");
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let (_, bot) = post_form(
        &browser,
        &url,
        &[
            ("email", "bot2@d1.test"),
            ("website", "http://spam.example"),
            ("t", &forms[0]),
        ],
    )
    .await;
    assert!(bot.contains("Check your mailbox"), "{bot}");
    // A forged or missing token: the form again, with the reason next to the field.
    let (st, again) = post_form(&browser, &url, &[("email", NEWBIE), ("t", "forged")]).await;
    assert_eq!(st, 400);
    assert!(
        again.contains("role=\"alert\"") && again.contains("expired"),
        "{again}"
    );
    let (st, again) = post_form(
        &browser,
        &url,
        &[("email", "not an address <x>"), ("t", &t)],
    )
    .await;
    assert_eq!(st, 400);
    assert!(again.contains("not an e-mail address"), "{again}");
    assert!(!again.contains("<x>"), "the value is escaped: {again}");

    // A person.
    let (st, done) = post_form(
        &browser,
        &url,
        &[("email", NEWBIE), ("website", ""), ("t", &forms[1])],
    )
    .await;
    assert_eq!(st, 200, "{done}");
    assert!(done.contains("Check your mailbox"), "{done}");
    let link = wait_until_some("the confirmation mail", || {
        confirmation_link(&world, NEWBIE)
    })
    .await;
    for bot in ["bot1@d1.test", "bot2@d1.test"] {
        assert!(delivered(&world, bot).is_empty(), "{bot} was mailed");
    }
    // A link scanner's GET changes nothing; the person's POST subscribes.
    let (st, page) = call(&browser, "GET", &link, None, None).await;
    assert_eq!(st, 200, "{page}");
    let (st, page) = call(&browser, "POST", &link, None, None).await;
    assert_eq!(st, 200, "{page}");
    let (st, detail) = call(
        &reqwest::Client::new(),
        "GET",
        &format!("{}/api/v1/lists/{LIST}/members/{NEWBIE}/detail", server.api),
        Some(TOKEN),
        None,
    )
    .await;
    assert_eq!(st, 200, "{detail}");
    let detail: MemberDetail = serde_json::from_str(&detail).expect("member detail");
    let consent = detail.consent.expect("consent recorded");
    assert_eq!(consent.source, "web");
    assert_eq!(consent.client.as_deref(), Some("127.0.0.2"));

    // Someone posts the form ten times for a victim: the victim gets the per-address limit (3
    // a day by default), not ten messages; the page never tells.
    for t in &forms[2..12] {
        let (st, page) = post_form(&browser, &url, &[("email", "victim@d0.test"), ("t", t)]).await;
        assert_eq!(st, 200, "{page}");
    }
    wait_until_some("the victim's first confirmation", || {
        (!delivered(&world, "victim@d0.test").is_empty()).then_some(())
    })
    .await;
    // Give the rest every chance to arrive, were they sent.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let n = delivered(&world, "victim@d0.test").len();
    assert!((1..=3).contains(&n), "the victim got {n} confirmations");

    // The member manages their own subscriptions: the form mails a link (a stranger asking
    // gets the same page and no mail); the link's page changes name and delivery, downloads
    // their data and unsubscribes.
    let manage = format!("{}/manage", server.api);
    let (st, html) = call(&browser, "GET", &manage, None, None).await;
    assert_eq!(st, 200, "{html}");
    let (_, other) = call(&browser, "GET", &manage, None, None).await;
    let ts = [form_token(&html), form_token(&other)];
    tokio::time::sleep(Duration::from_millis(2100)).await;
    for (who, t) in [NEWBIE, "stranger@d1.test"].into_iter().zip(&ts) {
        let (st, page) = post_form(&browser, &manage, &[("email", who), ("t", t)]).await;
        assert_eq!(st, 200, "{page}");
        assert!(page.contains("Check your mailbox"), "{page}");
    }
    let link = wait_until_some("the subscriptions link", || {
        subscriptions_link(&world, NEWBIE)
    })
    .await;
    assert!(delivered(&world, "stranger@d1.test").is_empty());
    let (st, page) = call(&browser, "GET", &link, None, None).await;
    assert_eq!(st, 200, "{page}");
    assert!(
        page.contains(LIST) && page.contains("Unsubscribe from"),
        "{page}"
    );
    let (st, page) = post_form(
        &browser,
        &link,
        &[
            ("list", LIST),
            ("action", "save"),
            ("name", "New Bie"),
            ("delivery", "nomail"),
        ],
    )
    .await;
    assert_eq!(st, 200, "{page}");
    assert!(page.contains("Saved your settings"), "{page}");
    let detail_url = format!("{}/api/v1/lists/{LIST}/members/{NEWBIE}/detail", server.api);
    let (_, detail) = call(
        &reqwest::Client::new(),
        "GET",
        &detail_url,
        Some(TOKEN),
        None,
    )
    .await;
    let detail: MemberDetail = serde_json::from_str(&detail).expect("member detail");
    assert_eq!(detail.delivery, herald_types::DeliveryMode::Nomail);
    assert_eq!(detail.member.display_name.as_deref(), Some("New Bie"));
    // A name that would break a header is refused, and nothing changes.
    let (st, _) = post_form(
        &browser,
        &link,
        &[
            ("list", LIST),
            ("action", "save"),
            ("name", "Evil\r\nBcc: x@y.test"),
        ],
    )
    .await;
    assert_eq!(st, 400);
    let (st, data) = call(&browser, "GET", &format!("{link}/data"), None, None).await;
    assert_eq!(st, 200, "{data}");
    assert!(
        data.contains("New Bie") && data.contains("\"source\":\"web\""),
        "{data}"
    );
    let (st, page) = post_form(
        &browser,
        &link,
        &[("list", LIST), ("action", "unsubscribe")],
    )
    .await;
    assert_eq!(st, 200, "{page}");
    assert!(page.contains("You are unsubscribed"), "{page}");
    let (st, _) = call(
        &reqwest::Client::new(),
        "GET",
        &detail_url,
        Some(TOKEN),
        None,
    )
    .await;
    assert_eq!(st, 404, "unsubscribed");
    let forged = link.replace("/manage/", "/manage/x");
    let (st, _) = call(&browser, "GET", &forged, None, None).await;
    assert_eq!(st, 403);

    // An unknown list is not found.
    let (st, page) = call(
        &browser,
        "GET",
        &format!("{}/subscribe/nope@lists.test", server.api),
        None,
        None,
    )
    .await;
    assert_eq!(st, 404, "{page}");
    server.stop().await;
    world.shutdown().await;
}

/// A `members` archive as its readers meet it: an anonymous browser is told it
/// is for members; a member opens it from the link on their subscriptions page (mailed to them),
/// after which a cookie scoped to that list's archive carries the key; a tampered key, and the
/// same key once the member has left, are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_members_archive_opens_for_a_member_from_their_subscriptions_page_only() {
    let (world, server, dir) = start(Some(TOKEN)).await;
    let admin = reqwest::Client::new();
    let (st, body) = call(
        &admin,
        "POST",
        &format!("{}/api/v1/lists/{LIST}/members", server.api),
        Some(TOKEN),
        Some(json!({"address": NEWBIE})),
    )
    .await;
    assert_eq!(st, 201, "{body}");
    // As `herald archive privacy dev@lists.test members` does, on the shared store.
    herald_archive::Archive::open(&dir.path().join("archive.db"))
        .expect("archive")
        .set_privacy(LIST, herald_archive::Privacy::Members)
        .expect("privacy");
    post_to_list(&server, "members-only@d1.test").await;
    settled(&server.api).await;

    let browser = remote_client();
    let month = format!("{}/archive/{LIST}/", server.api);
    let (st, page) = call(&browser, "GET", &month, None, None).await;
    assert_eq!(st, 403, "an anonymous reader: {page}");
    assert!(
        page.contains("Members only") && !page.contains("news"),
        "{page}"
    );

    // The member asks for their subscriptions page, as on the public form.
    let manage = format!("{}/manage", server.api);
    let (_, html) = call(&browser, "GET", &manage, None, None).await;
    let t = form_token(&html);
    tokio::time::sleep(Duration::from_millis(2100)).await;
    post_form(&browser, &manage, &[("email", NEWBIE), ("t", &t)]).await;
    let link = wait_until_some("the subscriptions link", || {
        subscriptions_link(&world, NEWBIE)
    })
    .await;
    let (st, page) = call(&browser, "GET", &link, None, None).await;
    assert_eq!(st, 200, "{page}");
    let archive_link = page
        .split("href=\"")
        .filter_map(|s| s.split('"').next())
        .find(|h| h.starts_with(&format!("/archive/{LIST}/?key=")))
        .unwrap_or_else(|| panic!("no archive link: {page}"))
        .to_string();
    let r = browser
        .get(format!("{}{archive_link}", server.api))
        .send()
        .await
        .expect("GET archive");
    assert_eq!(r.status().as_u16(), 200);
    let cookie = r.headers()["set-cookie"]
        .to_str()
        .expect("cookie")
        .to_string();
    assert!(
        cookie.contains(&format!("Path=/archive/{LIST}/"))
            && cookie.contains("HttpOnly")
            && cookie.contains("SameSite=Lax"),
        "{cookie}"
    );
    let jar = cookie.split(';').next().expect("name=value").to_string();
    // The next pages with the cookie only, as the browser sends it.
    let with_cookie = |url: String| {
        let req = browser.get(url).header("cookie", jar.clone());
        async move {
            let r = req.send().await.expect("GET");
            (r.status().as_u16(), r.text().await.expect("body"))
        }
    };
    let (st, months) = with_cookie(month.clone()).await;
    assert_eq!(st, 200, "{months}");
    assert!(
        months.contains("<html lang=\"en\">"),
        "the list's language: {months}"
    );
    // A member who reads in German sees the members' archive in German;
    // anonymous readers keep the list's English.
    let (st, body) = call(
        &admin,
        "PATCH",
        &format!("{}/api/v1/lists/{LIST}/members/{NEWBIE}", server.api),
        Some(TOKEN),
        Some(json!({"language": "de"})),
    )
    .await;
    assert_eq!(st, 200, "{body}");
    let (st, months) = with_cookie(month.clone()).await;
    assert_eq!(st, 200, "{months}");
    assert!(
        months.contains("<html lang=\"de\">") && months.contains(">Atom-Feed</a>"),
        "the member's language: {months}"
    );
    let (st, page) = call(&browser, "GET", &month, None, None).await;
    assert_eq!(st, 403);
    assert!(page.contains("Members only"), "{page}");
    let (st, raw) = with_cookie(format!(
        "{}/archive/{LIST}/msg/members-only@d1.test/raw",
        server.api
    ))
    .await;
    assert_eq!(st, 200);
    assert!(raw.contains("Subject: news"), "{raw}");
    // A tampered key is refused.
    let forged = archive_link.replace("key=", "key=x");
    let (st, _) = call(
        &browser,
        "GET",
        &format!("{}{forged}", server.api),
        None,
        None,
    )
    .await;
    assert_eq!(st, 403);
    // The member leaves: the same key and cookie open nothing any more.
    let (st, _) = call(
        &admin,
        "DELETE",
        &format!("{}/api/v1/lists/{LIST}/members/{NEWBIE}", server.api),
        Some(TOKEN),
        None,
    )
    .await;
    assert!(st == 200 || st == 204, "{st}");
    let (st, _) = with_cookie(month).await;
    assert_eq!(st, 403, "a former member");
    server.stop().await;
    world.shutdown().await;
}
