//! The versioned API as a client on another machine meets it: the server has
//! `http.admin_token` set and treats only 127.0.0.1 as local, and every request here comes
//! from 127.0.0.9.
//!
//! - The OpenAPI document is served without a token, says 3.1, and describes exactly what is
//!   served: every operation it names answers at its path (neither axum's empty "no route" 404
//!   nor 405), with the token; without the token, a 401 problem.
//! - Errors are RFC 9457 problems (`application/problem+json`) naming the field at fault: a
//!   body field of the wrong type or an address that does not parse, a query parameter, a path
//!   segment, a body that is not JSON (415).
//! - Paging by cursor: the members of a list come in pages, `after` the last id of the page
//!   before, and the pages together are the list.
//! - The unversioned `/api/...` paths are gone (404): the CLI and the dashboard use `/api/v1`.

use crate::support;

use herald_api_types::{MemberView, Problem};
use herald_sim::{Profile, World};
use serde_json::{json, Value};
use std::net::{IpAddr, Ipv4Addr};
use support::*;

const TOKEN: &str = "api-v1-token-0123456789abcdef";
const LIST: &str = "v1@lists.test";

/// A client the server sees as remote (127.0.0.9 is not among its local clients).
fn remote() -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 9)))
        .build()
        .expect("client")
}

async fn call(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    token: bool,
    body: Option<(&str, Vec<u8>)>,
) -> (u16, String, String) {
    let mut req = client.request(method, url);
    if token {
        req = req.bearer_auth(TOKEN);
    }
    if let Some((content_type, bytes)) = body {
        req = req.header("content-type", content_type).body(bytes);
    }
    let resp = req.send().await.expect("request");
    let status = resp.status().as_u16();
    let ct = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    (status, ct, resp.text().await.expect("body"))
}

/// The problem body of an error answer, checked for its media type and status.
fn problem(what: &str, status: u16, ct: &str, body: &str) -> Problem {
    assert_eq!(
        ct, "application/problem+json",
        "{what}: error media type ({status} {body})"
    );
    let p: Problem = serde_json::from_str(body)
        .unwrap_or_else(|e| panic!("{what}: not a problem ({e}): {body}"));
    assert_eq!(p.status, status, "{what}: {body}");
    assert!(!p.detail.is_empty(), "{what}: {body}");
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_versioned_api_is_documented_served_and_answers_problems() {
    let dir = tempfile::tempdir().expect("tempdir");
    let world = World::start(world_config(&[Profile::Normal], false))
        .await
        .expect("world");
    let mut config = server_config(&world, dir.path().join("data"));
    config.http.admin_token = TOKEN.into();
    config.http.local_clients = vec!["127.0.0.1".into()];
    let server = TestServer::start(config).await;
    let api = server.api.clone();
    let client = remote();
    use reqwest::Method;

    // A list with 25 members, through the API as the CLI would add them.
    let (st, _, body) = call(
        &client,
        Method::POST,
        &format!("{api}/api/v1/lists"),
        true,
        Some((
            "application/json",
            json!({"address": LIST}).to_string().into_bytes(),
        )),
    )
    .await;
    assert_eq!(st, 201, "{body}");
    for i in 0..25 {
        let (st, _, body) = call(
            &client,
            Method::POST,
            &format!("{api}/api/v1/lists/{LIST}/members"),
            true,
            Some((
                "application/json",
                json!({"address": format!("m{i:02}@d0.test")})
                    .to_string()
                    .into_bytes(),
            )),
        )
        .await;
        assert_eq!(st, 201, "{body}");
    }

    // The document, without a token, from a remote client.
    let (st, ct, body) = call(
        &client,
        Method::GET,
        &format!("{api}/api/v1/openapi.json"),
        false,
        None,
    )
    .await;
    assert_eq!(st, 200, "{body}");
    assert!(ct.starts_with("application/json"), "{ct}");
    let doc: Value = serde_json::from_str(&body).expect("document is JSON");
    assert!(
        doc["openapi"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.1")),
        "{}",
        doc["openapi"]
    );
    let paths = doc["paths"].as_object().expect("paths");
    assert!(paths.len() >= 40, "{} paths", paths.len());
    let mut operations = 0;
    for (path, item) in paths {
        assert!(path.starts_with("/api/v1/"), "{path}");
        for (method, op) in item.as_object().expect("path item") {
            operations += 1;
            let responses = op["responses"].as_object().expect("responses");
            assert!(
                responses.contains_key("400") && responses.contains_key("401"),
                "{method} {path}: the error answers are documented"
            );
            assert!(
                responses["400"]["content"]
                    .get("application/problem+json")
                    .is_some(),
                "{method} {path}: errors are problems"
            );
            // Served where documented: a concrete path (the real list, a real member, post 1).
            // Backup streams the whole data directory: asked without the token only.
            let concrete = path
                .replace("{list}", LIST)
                .replace("{member}", "m00@d0.test")
                .replace("{address}", "m00@d0.test")
                .replace("{post}", "1");
            let m = Method::from_bytes(method.to_uppercase().as_bytes()).expect("method");
            let url = format!("{api}{concrete}");
            let (st, ct, body) = call(&client, m.clone(), &url, false, None).await;
            assert_eq!(st, 401, "{method} {path} without the token: {body}");
            problem(
                &format!("{method} {path} without the token"),
                st,
                &ct,
                &body,
            );
            if path.ends_with("/backup") || m == Method::DELETE {
                continue;
            }
            let (st, ct, body) = call(&client, m, &url, true, None).await;
            assert_ne!(st, 405, "{method} {path} is served: {body}");
            assert!(
                !(st == 404 && body.is_empty()),
                "{method} {path} is routed (axum's own 404 has no body)"
            );
            assert!(st < 500, "{method} {path}: {st} {body}");
            if st >= 400 {
                problem(&format!("{method} {path}"), st, &ct, &body);
            }
        }
    }
    assert!(operations >= 55, "{operations} operations");

    // Problems name the field at fault.
    /// What is sent, the status wanted and the field the problem must name.
    type Case<'a> = (
        &'a str,
        Method,
        String,
        Option<(&'a str, Vec<u8>)>,
        u16,
        Option<&'a str>,
    );
    let cases: Vec<Case> = vec![
        (
            "a body field of the wrong type",
            Method::POST,
            format!("{api}/api/v1/lists"),
            Some(("application/json", br#"{"address": 5}"#.to_vec())),
            400,
            Some("address"),
        ),
        (
            "an address that does not parse",
            Method::POST,
            format!("{api}/api/v1/lists/{LIST}/members"),
            Some(("application/json", br#"{"address": "no at sign"}"#.to_vec())),
            400,
            Some("address"),
        ),
        (
            "a nested setting of the wrong type",
            Method::POST,
            format!("{api}/api/v1/lists"),
            Some((
                "application/json",
                br#"{"address": "x@lists.test", "settings": {"bounce_threshold": "five"}}"#
                    .to_vec(),
            )),
            400,
            Some("settings.bounce_threshold"),
        ),
        (
            "a query parameter",
            Method::GET,
            format!("{api}/api/v1/lists/{LIST}/members?limit=lots"),
            None,
            400,
            Some("limit"),
        ),
        (
            "a path segment",
            Method::GET,
            format!("{api}/api/v1/posts/not-hex"),
            None,
            400,
            Some("post"),
        ),
        (
            "a list that does not parse",
            Method::GET,
            format!("{api}/api/v1/lists/not-a-list"),
            None,
            400,
            Some("list"),
        ),
        (
            "a body that is not JSON",
            Method::POST,
            format!("{api}/api/v1/lists"),
            Some(("text/plain", b"address=x@lists.test".to_vec())),
            415,
            None,
        ),
        (
            "JSON that is not an object",
            Method::POST,
            format!("{api}/api/v1/lists"),
            Some(("application/json", b"[1, 2".to_vec())),
            400,
            None,
        ),
        (
            "no such list",
            Method::GET,
            format!("{api}/api/v1/lists/nobody@lists.test"),
            None,
            404,
            None,
        ),
    ];
    for (what, method, url, body, want, field) in cases {
        let (st, ct, text) = call(&client, method, &url, true, body).await;
        assert_eq!(st, want, "{what}: {text}");
        let p = problem(what, st, &ct, &text);
        assert_eq!(p.field.as_deref(), field, "{what}: {text}");
    }

    // Paging by cursor: 25 members in pages of 10, each `after` the last id of the one before.
    let mut seen = Vec::new();
    let mut after = 0i64;
    loop {
        let (st, _, body) = call(
            &client,
            Method::GET,
            &format!("{api}/api/v1/lists/{LIST}/members?limit=10&after={after}"),
            true,
            None,
        )
        .await;
        assert_eq!(st, 200, "{body}");
        let page: Vec<MemberView> = serde_json::from_str(&body).expect("members page");
        let Some(last) = page.last() else { break };
        assert!(page.len() <= 10);
        after = last.id;
        seen.extend(page.into_iter().map(|m| m.address));
    }
    seen.sort();
    let want: Vec<String> = (0..25).map(|i| format!("m{i:02}@d0.test")).collect();
    assert_eq!(
        seen, want,
        "the pages together are the list, each member once"
    );

    // The unversioned paths are gone.
    let (st, _, body) = call(
        &client,
        Method::GET,
        &format!("{api}/api/lists"),
        true,
        None,
    )
    .await;
    assert_eq!(st, 404, "{body}");
}
