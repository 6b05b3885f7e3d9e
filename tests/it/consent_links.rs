//! Capability links are spent on use, through the real `herald` binary as a subscriber's
//! browser meets it: the server has `http.admin_token` set (so loopback is not trusted for
//! anything) and `http.local_clients = ["127.0.0.1"]`; the browser is a client bound to
//! 127.0.0.2. Links are read from the mail delivered to the simulated mailbox.
//!
//! - A `/confirm/<token>` link subscribes once. Reopened after the member left (by the
//!   subscriptions page, by one-click, by an administrator's removal) it says so (410, with a
//!   link to the subscribe page) and neither subscribes nor records consent. A link never used
//!   but mailed before the member left does nothing either.
//! - The subscribe form's time token is spent by its first submission: replayed for another
//!   address it gets the form back (409) and mails nobody.
//! - Wrong admin tokens are throttled per client (429 with `Retry-After`, a WARN naming the
//!   client), without locking other clients out.
//!
//! Everything stays on 127.0.0.0/8.

use crate::support;

use herald_sim::{Profile, World};
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};
use support::binary::BinaryServer;
use support::*;

const LIST: &str = "dev@lists.test";
const TOKEN: &str = "consent-admin-token-0123456789abcdef";
const NEWBIE: &str = "newbie@d1.test";
/// The subscriber's browser: a loopback source address the server does not trust.
const REMOTE: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

fn remote_client() -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(REMOTE)
        .build()
        .expect("client")
}

/// (status, body) of a request, with the admin token when `token`.
async fn call(client: &reqwest::Client, method: &str, url: &str, token: bool) -> (u16, String) {
    let mut req = match method {
        "GET" => client.get(url),
        "POST" => client.post(url),
        "DELETE" => client.delete(url),
        other => panic!("method {other}"),
    };
    if token {
        req = req.bearer_auth(TOKEN);
    }
    let resp = req.send().await.expect("request");
    let status = resp.status().as_u16();
    (status, resp.text().await.expect("body"))
}

async fn post_form(client: &reqwest::Client, url: &str, fields: &[(&str, &str)]) -> (u16, String) {
    let resp = client.post(url).form(fields).send().await.expect("post");
    let status = resp.status().as_u16();
    (status, resp.text().await.expect("body"))
}

async fn start() -> (World, BinaryServer, tempfile::TempDir) {
    let world = World::start(world_config(&[Profile::Normal, Profile::Normal], true))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let extra = format!(
        "[http]\nadmin_token = \"{TOKEN}\"\nlocal_clients = [\"127.0.0.1\"]\n\
         [notice_limits]\nconfirmations_per_address_per_day = 50\n"
    );
    let mut server = BinaryServer::configure(dir.path(), &dir.path().join("data"), &world, &extra);
    server.start().await;
    let resp = reqwest::Client::new()
        .post(format!("{}/api/v1/lists", server.api))
        .bearer_auth(TOKEN)
        .json(&serde_json::json!({"address": LIST, "settings": {"posting_policy": "anyone"}}))
        .send()
        .await
        .expect("create list");
    assert_eq!(resp.status().as_u16(), 201, "create list");
    (world, server, dir)
}

/// Every link containing `marker` in the text bodies of the mail delivered to `rcpt`, oldest
/// first.
fn links(world: &World, rcpt: &str, marker: &str) -> Vec<String> {
    delivered(world, rcpt)
        .iter()
        .filter_map(|raw| {
            let msg = mail_parser::MessageParser::default().parse(raw)?;
            let text = msg.body_text(0)?;
            text.split_whitespace()
                .find(|w| w.contains(marker))
                .map(str::to_string)
        })
        .collect()
}

/// The http URL in the `List-Unsubscribe` header of the newest copy of a post to `rcpt`.
fn one_click_link(world: &World, rcpt: &str) -> Option<String> {
    delivered(world, rcpt).iter().rev().find_map(|raw| {
        let msg = mail_parser::MessageParser::default().parse(raw)?;
        let v = msg.header_raw("List-Unsubscribe")?;
        v.split(['<', '>'])
            .map(str::trim)
            .find(|u| u.starts_with("http"))
            .map(str::to_string)
    })
}

/// Waits until every post the server knows is out and nothing is queued (asked with the
/// admin token, from 127.0.0.1).
async fn settled(api: &str) {
    let started = Instant::now();
    loop {
        let (st, body) = call(
            &reqwest::Client::new(),
            "GET",
            &format!("{api}/api/v1/status"),
            true,
        )
        .await;
        if st == 200 {
            let s: herald_api_types::Status = serde_json::from_str(&body).expect("status");
            if s.queued == 0 && s.posts.iter().all(|p| p.complete) {
                return;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "not settled: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Asks for a subscription of `NEWBIE` (the API, as an operator's tool would) and returns the
/// new confirmation link once it is delivered.
async fn new_confirmation_link(world: &World, api: &str) -> String {
    let before = links(world, NEWBIE, "/confirm/").len();
    let resp = reqwest::Client::new()
        .post(format!("{api}/api/v1/lists/{LIST}/subscribe"))
        .bearer_auth(TOKEN)
        .json(&serde_json::json!({ "address": NEWBIE }))
        .send()
        .await
        .expect("subscribe request");
    assert_eq!(resp.status().as_u16(), 202);
    wait_until_some("a new confirmation link", || {
        links(world, NEWBIE, "/confirm/").get(before).cloned()
    })
    .await
}

/// (is a member, consent time) of `NEWBIE`, asked with the admin token.
async fn membership(api: &str) -> (bool, Option<u64>) {
    let url = format!("{api}/api/v1/lists/{LIST}/members/{NEWBIE}/detail");
    match call(&reqwest::Client::new(), "GET", &url, true).await {
        (200, body) => {
            let d: herald_api_types::MemberDetail = serde_json::from_str(&body).expect("detail");
            (true, d.consent.map(|c| c.at_ms))
        }
        (404, _) => (false, None),
        other => panic!("member lookup: {other:?}"),
    }
}

/// Waits until the wall clock is in a later whole second than `after_ms`: links carry their
/// time in seconds, and "mailed before the departure" means an earlier second.
async fn next_second(after_ms: u64) {
    let target = (after_ms / 1000 + 1) * 1000;
    while herald_types::unix_ms_now() < target {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Asserts that opening and pressing `link` now does nothing and says why (`why` in the page).
async fn refused(api: &str, link: &str, why: &str) {
    let browser = remote_client();
    for method in ["GET", "POST"] {
        let (st, page) = call(&browser, method, link, false).await;
        assert_eq!(st, 410, "{method} of a spent link: {page}");
        assert!(page.contains(why), "{method}: {page}");
        assert!(
            page.contains(&format!("href=\"/subscribe/{LIST}\"")),
            "{method} offers a fresh subscription: {page}"
        );
        assert!(
            !page.contains("<form"),
            "no button that can do nothing: {page}"
        );
    }
    assert_eq!(membership(api).await, (false, None), "still unsubscribed");
}

/// Confirms `link` from the browser: the member is in.
async fn confirm(api: &str, link: &str) {
    let (st, page) = call(&remote_client(), "POST", link, false).await;
    assert_eq!(st, 200, "confirm: {page}");
    assert!(membership(api).await.0, "subscribed");
}

/// The subscribe → confirm → unsubscribe (subscriptions page, then one-click) → reopen walk of
/// the browser review: the old links never subscribe again, and a link mailed before the
/// departure but never used does nothing either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirmation_links_are_spent_and_never_undo_an_unsubscribe() {
    let (world, mut server, _dir) = start().await;
    let api = server.api.clone();
    let browser = remote_client();
    let first = new_confirmation_link(&world, &api).await;
    confirm(&api, &first).await;
    // The same link again while subscribed: spent, says so, changes nothing.
    let consent = membership(&api).await.1;
    let (st, page) = call(&browser, "POST", &first, false).await;
    assert_eq!(st, 410, "{page}");
    assert!(page.contains("already used"), "{page}");
    assert_eq!(
        membership(&api).await.1,
        consent,
        "no fresh consent recorded"
    );

    // Unsubscribe on the subscriptions page (its link asked for with the /manage form).
    let manage = format!("{api}/manage");
    let (_, html) = call(&browser, "GET", &manage, false).await;
    let t = form_token(&html);
    next_second(herald_types::unix_ms_now() + 1000).await; // the form's 2 s minimum
    let (st, page) = post_form(&browser, &manage, &[("email", NEWBIE), ("t", &t)]).await;
    assert_eq!(st, 200, "{page}");
    let link = wait_until_some("the subscriptions link", || {
        links(&world, NEWBIE, "/manage/").pop()
    })
    .await;
    let (st, page) = post_form(
        &browser,
        &link,
        &[("list", LIST), ("action", "unsubscribe")],
    )
    .await;
    assert_eq!(st, 200, "{page}");
    assert!(
        !membership(&api).await.0,
        "unsubscribed on the subscriptions page"
    );
    refused(&api, &first, "already used").await;

    // Subscribe again with a fresh link (that works), get a post, and ask for one more link
    // that is never used before the member leaves by one-click.
    let second = new_confirmation_link(&world, &api).await;
    confirm(&api, &second).await;
    // (Links asked for in one second are one link: this one must be another.)
    next_second(herald_types::unix_ms_now()).await;
    let unused = new_confirmation_link(&world, &api).await;
    let msg = format!(
        "From: bob@d0.test\r\nTo: {LIST}\r\nSubject: hello\r\nMessage-ID: <p1@d0.test>\r\n\r\nbody\r\n"
    );
    let (mut c, _) = Smtp::connect(server.smtp).await;
    c.cmd("EHLO client.test").await;
    let r = c.send_mail("bob@d0.test", &[LIST], msg.as_bytes()).await;
    assert!(r.starts_with("250"), "{r}");
    c.cmd("QUIT").await;
    let one_click = wait_until_some("the post's one-click link", || {
        one_click_link(&world, NEWBIE)
    })
    .await;
    next_second(herald_types::unix_ms_now()).await;
    let resp = browser
        .post(&one_click)
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body("List-Unsubscribe=One-Click")
        .send()
        .await
        .expect("one-click");
    assert_eq!(resp.status().as_u16(), 200);
    assert!(!membership(&api).await.0, "unsubscribed by one-click");
    refused(&api, &second, "already used").await;
    refused(&api, &first, "already used").await;
    refused(&api, &unused, "after this link was sent").await;
    server.stop().await;
    world.shutdown().await;
}

/// An administrator's removal: the used link and a link mailed before the removal both do
/// nothing; a link asked for after the removal subscribes as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_removal_is_never_undone_by_an_old_link() {
    let (world, mut server, _dir) = start().await;
    let api = server.api.clone();
    let used = new_confirmation_link(&world, &api).await;
    confirm(&api, &used).await;
    // (Links asked for in one second are one link: this one must be another.)
    next_second(herald_types::unix_ms_now()).await;
    let unused = new_confirmation_link(&world, &api).await;
    next_second(herald_types::unix_ms_now()).await;
    let url = format!("{api}/api/v1/lists/{LIST}/members/{NEWBIE}");
    let (st, body) = call(&reqwest::Client::new(), "DELETE", &url, true).await;
    assert_eq!(st, 204, "admin removal: {body}");
    refused(&api, &used, "already used").await;
    refused(&api, &unused, "after this link was sent").await;
    // The person asks again: a new link works at once (same second as the removal or not).
    let fresh = new_confirmation_link(&world, &api).await;
    confirm(&api, &fresh).await;
    server.stop().await;
    world.shutdown().await;
}

/// The hidden time-token of a form in `html`.
fn form_token(html: &str) -> String {
    html.split("name=\"t\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("no time-token in the form: {html}"))
        .to_string()
}

/// The review's replay: one fetched form posted for a second address is refused with a clear
/// page and mails nobody; a second visitor's own form still works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_form_token_mails_nobody() {
    let (world, mut server, _dir) = start().await;
    let browser = remote_client();
    let url = format!("{}/subscribe/{LIST}", server.api);
    let (_, html) = call(&browser, "GET", &url, false).await;
    let t = form_token(&html);
    let (_, html) = call(&browser, "GET", &url, false).await;
    let other_t = form_token(&html);
    next_second(herald_types::unix_ms_now() + 1000).await; // the form's 2 s minimum
    let (st, page) = post_form(&browser, &url, &[("email", "a@d0.test"), ("t", &t)]).await;
    assert_eq!(st, 200, "{page}");
    let (st, page) = post_form(&browser, &url, &[("email", "b@d0.test"), ("t", &t)]).await;
    assert_eq!(st, 409, "the replay is refused: {page}");
    assert!(page.contains("already sent once"), "{page}");
    assert!(page.contains("name=\"t\""), "with a fresh form: {page}");
    let (st, page) = post_form(&browser, &url, &[("email", "c@d0.test"), ("t", &other_t)]).await;
    assert_eq!(st, 200, "{page}");
    for who in ["a@d0.test", "c@d0.test"] {
        wait_until_some(who, || (!delivered(&world, who).is_empty()).then_some(())).await;
    }
    settled(&server.api).await;
    assert!(
        delivered(&world, "b@d0.test").is_empty(),
        "the replay mailed b"
    );
    assert!(server.log_tail().contains("time token replayed"));
    assert_ne!(t, other_t, "each served form has a token of its own");
    server.stop().await;
    world.shutdown().await;
}

/// 1,000 wrong admin tokens from one client: after the sign-in limit every answer is 429 with
/// `Retry-After` (the right token included, from that client), the server says who at WARN,
/// and another client with the right token is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_admin_tokens_are_throttled_per_client() {
    let (world, mut server, _dir) = start().await;
    let guesser = remote_client();
    let status = format!("{}/api/v1/status", server.api);
    let started = Instant::now();
    let (mut unauthorized, mut throttled, mut retry_after) = (0, 0, None);
    for i in 0..1000 {
        let resp = guesser
            .get(&status)
            .bearer_auth(format!("guess-{i}"))
            .send()
            .await
            .expect("request");
        match resp.status().as_u16() {
            401 => unauthorized += 1,
            429 => {
                throttled += 1;
                retry_after = resp
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
            }
            other => panic!("wrong token answered {other}"),
        }
    }
    eprintln!(
        "1000 wrong admin tokens in {:?}: {unauthorized} x 401, {throttled} x 429, Retry-After {retry_after:?}",
        started.elapsed()
    );
    assert!(unauthorized <= 5, "{unauthorized} guesses were checked");
    assert_eq!(unauthorized + throttled, 1000);
    assert!(
        retry_after.is_some_and(|s| s > 0),
        "Retry-After: {retry_after:?}"
    );
    let resp = guesser
        .get(&status)
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("req");
    assert_eq!(
        resp.status().as_u16(),
        429,
        "the guesser learns nothing now"
    );
    let (st, _) = call(&reqwest::Client::new(), "GET", &status, true).await;
    assert_eq!(st, 200, "another client is not locked out");
    let log = server.log_tail();
    assert!(
        log.contains("wrong admin token") && log.contains("127.0.0.2") && log.contains("WARN"),
        "{log}"
    );
    server.stop().await;
    world.shutdown().await;
}

/// A cluster is one list service: a confirmation used at one node and a form token spent at
/// one node are refused at the other (two `herald serve` nodes sharing one PostgreSQL store).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_spent_at_one_node_is_spent_at_the_other() {
    use support::cluster::{pg_url, Node, NodeOptions};
    let url = pg_url().await;
    let world = World::start(world_config(&[Profile::Normal, Profile::Normal], true))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = NodeOptions {
        admin_token: Some(TOKEN.into()),
        own_egress: false,
        ..NodeOptions::default()
    };
    let mut a = Node::configure(dir.path(), "127.0.0.3", "node-a", &url, &world, &opts);
    let mut b = Node::configure(dir.path(), "127.0.0.4", "node-b", &url, &world, &opts);
    a.start().await;
    b.start().await;
    let resp = reqwest::Client::new()
        .post(format!("{}/api/v1/lists", a.api()))
        .bearer_auth(TOKEN)
        .json(&serde_json::json!({"address": LIST, "settings": {"posting_policy": "anyone"}}))
        .send()
        .await
        .expect("create list");
    assert_eq!(resp.status().as_u16(), 201, "create list");

    let link = new_confirmation_link(&world, &a.api()).await;
    let path = &link[link.find("/confirm/").expect("path")..];
    confirm(&b.api(), &format!("{}{path}", a.api())).await;
    let (st, page) = call(
        &remote_client(),
        "POST",
        &format!("{}{path}", b.api()),
        false,
    )
    .await;
    assert_eq!(st, 410, "the link used at node A, at node B: {page}");
    assert!(page.contains("already used"), "{page}");

    let browser = remote_client();
    let (_, html) = call(
        &browser,
        "GET",
        &format!("{}/subscribe/{LIST}", a.api()),
        false,
    )
    .await;
    let t = form_token(&html);
    next_second(herald_types::unix_ms_now() + 1000).await; // the form's 2 s minimum
    for (node, who, want) in [(&a, "x@d0.test", 200), (&b, "y@d0.test", 409)] {
        let url = format!("{}/subscribe/{LIST}", node.api());
        let (st, page) = post_form(&browser, &url, &[("email", who), ("t", &t)]).await;
        assert_eq!(st, want, "{who} at {}: {page}", node.id);
    }
    a.stop();
    b.stop();
    world.shutdown().await;
}
