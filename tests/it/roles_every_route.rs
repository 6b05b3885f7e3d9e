//! The security test "one role reaching another list's pages or API refused — for every
//! route, generated from the router": the list of routes is the server's own OpenAPI document
//! (`/api/v1/openapi.json`), which utoipa-axum builds from the router as each route is added,
//! so a route added later is in this test without anyone remembering to add it.
//!
//! Three signed-in browsers on remote loopback addresses (the server has `http.admin_token` set
//! and treats only 127.0.0.1 as local): the owner of `dev`, a moderator of `dev`, and an account
//! with no role at all. For every operation in the document, with every path parameter pointing
//! at the *other* list `ops` (its address, a member of it, a post held on it) and every `list`
//! query parameter naming `ops`, each of the three must be refused (401/403) — never a 2xx,
//! never a 404 or 400 that would tell them what exists. Writes carry the session's CSRF token
//! and the server's Origin, so a refusal is the role's and not the CSRF check's.
//!
//! The only exception is what any signed-in person may read about themselves (`GET /me`).
//! And the same operations on their own list `dev` are checked the other way for the owner and
//! the moderator, so the test cannot pass by refusing everything.

use crate::support;
use crate::support::accounts;

use accounts::*;
use herald_sim::{Profile, World};
use reqwest::Method;
use serde_json::{json, Value};
use support::*;

const DEV: &str = "dev@lists.test";
const OPS: &str = "ops@lists.test";
const OWNER: &str = "owner@d1.test";
const MODERATOR: &str = "moderator@d1.test";
const NOBODY: &str = "nobody@d1.test";
const PASSWORD: &str = "a long enough password 1";

async fn sign_in(api: &str, last: u8, who: &str) -> (Session, String) {
    let client = browser(last);
    let resp = password_login(api, &client, who, PASSWORD).await;
    assert_eq!(resp.status(), 303, "{who} signs in");
    let session = Session {
        client,
        cookie: session_cookie(resp.headers()),
        origin: api.to_string(),
    };
    let csrf = session.me().await.csrf.expect("a session has a CSRF token");
    (session, csrf)
}

/// Fills the path template with `list`'s things and adds `list=` to the query when the
/// operation takes it.
fn concrete(path: &str, op: &Value, list: &str, member: &str, held: u64, post_hex: &str) -> String {
    let held_route = path.contains("/held/") || path.contains("/bounces/");
    let mut p = path
        .replace("{list}", list)
        .replace("{member}", member)
        .replace("{address}", member)
        .replace(
            "{post}",
            &if held_route {
                held.to_string()
            } else {
                post_hex.to_string()
            },
        );
    let takes_list_query = op["parameters"]
        .as_array()
        .is_some_and(|ps| ps.iter().any(|p| p["in"] == "query" && p["name"] == "list"));
    if takes_list_query {
        p.push_str(&format!("?list={list}"));
    }
    p
}

/// A body that parses for the operation (so a refusal is not a 400 or 415 in disguise); the
/// guard answers before any handler, so its content does not matter beyond its media type.
fn body_for(op: &Value) -> Option<(&'static str, Vec<u8>)> {
    let content = op["requestBody"]["content"].as_object()?;
    if content.contains_key("application/json") {
        Some(("application/json", b"{}".to_vec()))
    } else if content.contains_key("text/csv") {
        Some(("text/csv", b"email\r\nx@d0.test\r\n".to_vec()))
    } else {
        Some((
            "message/rfc822",
            b"From: a@d0.test\r\nSubject: x\r\n\r\nx\r\n".to_vec(),
        ))
    }
}

async fn send(
    s: &Session,
    csrf: &str,
    method: &Method,
    path: &str,
    body: Option<(&str, Vec<u8>)>,
) -> (u16, String) {
    let mut r = s.req(method.clone(), path);
    if *method != Method::GET {
        r = r.header("x-csrf-token", csrf);
    }
    if let Some((ct, bytes)) = body {
        r = r.header("content-type", ct).body(bytes);
    }
    s.status(r).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_role_reaches_another_lists_routes_whatever_the_route() {
    let world = World::start(world_config(
        &[Profile::Normal, Profile::Normal, Profile::Normal],
        false,
    ))
    .await
    .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = server_config(&world, dir.path().to_path_buf());
    config.http.admin_token = TOKEN.into();
    config.http.local_clients = vec!["127.0.0.1".into()];
    let server = TestServer::start(config).await;
    let api = server.api.clone();

    // Two lists with a member each, accounts, roles, and a post held on each list.
    for (list, moderators) in [(DEV, json!([MODERATOR])), (OPS, json!([]))] {
        let (st, v) = token_call(
            "POST",
            &format!("{api}/api/v1/lists"),
            Some(json!({"address": list, "settings": {"moderators": moderators}})),
        )
        .await;
        assert_eq!(st, 201, "{v}");
        let (st, v) = token_call(
            "POST",
            &format!("{api}/api/v1/lists/{list}/members"),
            Some(json!({"address": "member@d0.test"})),
        )
        .await;
        assert_eq!(st, 201, "{v}");
    }
    for who in [OWNER, MODERATOR, NOBODY] {
        let (st, v) = token_call(
            "POST",
            &format!("{api}/api/v1/accounts"),
            Some(json!({"address": who, "password": PASSWORD})),
        )
        .await;
        assert_eq!(st, 201, "{v}");
    }
    let resp = reqwest::Client::new()
        .put(format!("{api}/api/v1/accounts/{OWNER}/roles/{DEV}"))
        .bearer_auth(TOKEN)
        .json(&json!({"role": "owner"}))
        .send()
        .await
        .expect("role");
    assert_eq!(resp.status(), 200);
    let held_dev = hold(&api, DEV, "held-dev@d2.test").await;
    let held_ops = hold(&api, OPS, "held-ops@d2.test").await;

    let (doc_status, doc) = token_call("GET", &format!("{api}/api/v1/openapi.json"), None).await;
    assert_eq!(doc_status, 200);
    let paths = doc["paths"].as_object().expect("paths");

    let owner = sign_in(&api, 2, OWNER).await;
    let moderator = sign_in(&api, 3, MODERATOR).await;
    let nobody = sign_in(&api, 4, NOBODY).await;
    let roles = [
        ("the owner of dev", &owner),
        ("a moderator of dev", &moderator),
        ("an account with no role", &nobody),
    ];

    let mut checked = 0;
    for (path, item) in paths {
        for (method, op) in item.as_object().expect("path item") {
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).expect("method");
            if path.ends_with("/me") {
                continue; // Anyone signed in reads who they are.
            }
            let target = concrete(path, op, OPS, "member@d0.test", held_ops, "1");
            for (who, (session, csrf)) in &roles {
                let (st, body) = send(session, csrf, &method, &target, body_for(op)).await;
                assert!(
                    st == 403 || st == 401,
                    "{who}: {method} {target} answered {st}, not a refusal: {body}"
                );
                checked += 1;
            }
        }
    }
    assert!(
        checked >= 3 * 55,
        "{checked} role × route checks: the document lists every route"
    );

    // The other way round, so the test cannot pass by refusing everything: on their own list,
    // the owner reads the settings and members and the moderator reads and rejects its held
    // post, while the moderator is still refused the members.
    let (o, o_csrf) = &owner;
    let (st, body) = send(
        o,
        o_csrf,
        &Method::GET,
        &format!("/api/v1/lists/{DEV}"),
        None,
    )
    .await;
    assert_eq!(st, 200, "{body}");
    let (st, body) = send(
        o,
        o_csrf,
        &Method::GET,
        &format!("/api/v1/lists/{DEV}/members"),
        None,
    )
    .await;
    assert_eq!(st, 200, "{body}");
    let (m, m_csrf) = &moderator;
    let (st, body) = send(
        m,
        m_csrf,
        &Method::GET,
        &format!("/api/v1/held?list={DEV}"),
        None,
    )
    .await;
    assert_eq!(st, 200, "{body}");
    let (st, body) = send(
        m,
        m_csrf,
        &Method::GET,
        &format!("/api/v1/lists/{DEV}/members"),
        None,
    )
    .await;
    assert_eq!(st, 403, "a moderator sees held posts only: {body}");
    let (st, body) = send(
        m,
        m_csrf,
        &Method::POST,
        &format!("/api/v1/held/{held_dev}/reject"),
        None,
    )
    .await;
    assert_eq!(st, 200, "{body}");

    server.stop().await;
    world.shutdown().await;
}
