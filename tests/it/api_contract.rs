//! The HTTP API's wire contract, pinned: a real server on the simulated world is driven into a
//! known state (a list with members, a delivered post, a refused domain holding stragglers and
//! a down host, held posts, a scored bounce, stored postmaster mail, a subscription request),
//! every JSON endpoint is called, and the *shape* of each answer (object keys, value kinds,
//! array element shapes) is compared with a golden file per endpoint family under
//! `tests/golden/api/`.
//!
//! The goldens were recorded from the server as it answered before the API mapped its domain
//! structs onto `herald-api-types` views, so they prove the views left the wire unchanged (the
//! dashboard in `web/`, `docs/grafana-herald.json` and operators' scripts read these keys). A
//! field renamed in a stage is now a compile error in `crates/api/src/views/`; a field renamed
//! in a view fails here.
//!
//! Re-record (only for a deliberate wire change, reviewed like an API change):
//! `HERALD_BLESS_API=1 cargo test --test it api_contract::`.
//!
//! Comparison rules (why they are not plain equality): values differ from run to run (ids,
//! times), so only kinds are kept; a `null` matches any kind (an `Option` is `null` in one run
//! and set in another, depending on timing); an empty array matches any element shape. Object
//! key sets must be equal: a key added, removed or renamed fails.

use crate::support;

use herald_sim::{Profile, World};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use support::*;

const LIST: &str = "dev@lists.test";

/// The kind-only shape of a JSON value (see the header for the rules).
fn shape(v: &Value) -> Value {
    match v {
        Value::Null => json!("null"),
        Value::Bool(_) => json!("bool"),
        Value::Number(n) if n.is_f64() => json!("float"),
        Value::Number(_) => json!("int"),
        Value::String(_) => json!("string"),
        Value::Array(items) => {
            let merged = items.iter().map(shape).reduce(|a, b| merge(&a, &b));
            Value::Array(merged.into_iter().collect())
        }
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), shape(v))).collect()),
    }
}

/// Two shapes of the same field seen in different elements, as one.
fn merge(a: &Value, b: &Value) -> Value {
    match (a, b) {
        (Value::String(x), _) if x == "null" => b.clone(),
        (_, Value::String(y)) if y == "null" => a.clone(),
        (Value::Object(x), Value::Object(y)) => {
            let mut out = x.clone();
            for (k, v) in y {
                let m = out.get(k).map_or_else(|| v.clone(), |o| merge(o, v));
                out.insert(k.clone(), m);
            }
            Value::Object(out)
        }
        (Value::Array(x), Value::Array(y)) => match (x.first(), y.first()) {
            (Some(p), Some(q)) => Value::Array(vec![merge(p, q)]),
            _ => Value::Array(x.iter().chain(y.iter()).cloned().collect()),
        },
        _ => a.clone(),
    }
}

/// Where `actual` departs from `golden`, as readable paths.
fn mismatches(path: &str, golden: &Value, actual: &Value, out: &mut Vec<String>) {
    match (golden, actual) {
        (Value::String(g), _) if g == "null" => {}
        (_, Value::String(a)) if a == "null" => {}
        (Value::Object(g), Value::Object(a)) => {
            for k in g.keys().filter(|k| !a.contains_key(*k)) {
                out.push(format!("{path}.{k}: missing"));
            }
            for k in a.keys().filter(|k| !g.contains_key(*k)) {
                out.push(format!("{path}.{k}: not in the golden"));
            }
            for (k, gv) in g {
                if let Some(av) = a.get(k) {
                    mismatches(&format!("{path}.{k}"), gv, av, out);
                }
            }
        }
        (Value::Array(g), Value::Array(a)) => {
            if let (Some(g0), Some(a0)) = (g.first(), a.first()) {
                mismatches(&format!("{path}[]"), g0, a0, out);
            }
        }
        (g, a) if g == a => {}
        (g, a) => out.push(format!("{path}: golden {g}, got {a}")),
    }
}

/// Collects the shapes of one endpoint family and checks them against its golden file.
struct Family {
    name: &'static str,
    seen: BTreeMap<String, Value>,
}

impl Family {
    fn new(name: &'static str) -> Family {
        Family {
            name,
            seen: BTreeMap::new(),
        }
    }

    /// Records one answer; a non-JSON or unexpected status fails at once.
    fn record(&mut self, what: &str, (status, body): (u16, Value), want_status: u16) {
        assert_eq!(status, want_status, "{what}: {body}");
        self.seen.insert(what.to_string(), shape(&body));
    }

    fn check(self) {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/golden/api")
            .join(format!("{}.json", self.name));
        let actual = Value::Object(self.seen.into_iter().collect::<Map<_, _>>());
        if std::env::var_os("HERALD_BLESS_API").is_some() {
            let text = serde_json::to_string_pretty(&actual).expect("serialize") + "\n";
            std::fs::write(&path, text).expect("write golden");
            return;
        }
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (record with HERALD_BLESS_API=1)", path.display()));
        let golden: Value = serde_json::from_str(&text).expect("golden is JSON");
        let mut out = Vec::new();
        mismatches(self.name, &golden, &actual, &mut out);
        assert!(
            out.is_empty(),
            "the wire of {} changed:\n{}",
            self.name,
            out.join("\n")
        );
    }
}

async fn get(api: &str, path: &str) -> (u16, Value) {
    http("GET", &format!("{api}{path}"), None).await
}

async fn post(api: &str, path: &str, body: Value) -> (u16, Value) {
    http("POST", &format!("{api}{path}"), Some(body)).await
}

/// Polls a GET until `ok` holds (the state the goldens need), or fails after 60 s.
async fn wait_for(api: &str, path: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let (st, v) = get(api, path).await;
        if st == 200 && ok(&v) {
            return v;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "timed out on {path}: {st} {v}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn smtp(server: &TestServer, from: &str, rcpts: &[&str], msg: &str) -> String {
    let (mut c, _) = Smtp::connect(server.smtp).await;
    c.cmd("EHLO client.test").await;
    let r = c.send_mail(from, rcpts, msg.as_bytes()).await;
    c.cmd("QUIT").await;
    r
}

fn message(from: &str, to: &str, mid: &str) -> String {
    format!("From: {from}\r\nTo: {to}\r\nSubject: contract\r\nMessage-ID: <{mid}>\r\n\r\nbody\r\n")
}

fn non_empty(v: &Value) -> bool {
    v.as_array().is_some_and(|a| !a.is_empty())
}

async fn start() -> (World, TestServer, tempfile::TempDir) {
    let world = World::start(world_config(&[Profile::Normal, Profile::Refused], false))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = server_config(&world, dir.path().join("data"));
    cfg.stats.flush_secs = 1;
    cfg.scheduler.host_down_after_failures = 1;
    let server = TestServer::start(cfg).await;
    (world, server, dir)
}

/// Lists and members: create, show, change, list, add, import, one member, its detail.
async fn lists_family(api: &str) {
    let mut f = Family::new("lists");
    let settings = json!({"posting_policy": "members", "subject_prefix": "[dev]"});
    f.record(
        "POST /api/v1/lists",
        post(
            api,
            "/api/v1/lists",
            json!({"address": LIST, "settings": settings}),
        )
        .await,
        201,
    );
    f.record(
        "POST /api/v1/lists/{list}/members",
        post(
            api,
            &format!("/api/v1/lists/{LIST}/members"),
            json!({"address": "bob@d0.test", "name": "Bob", "fields": {"city": "Oslo"}}),
        )
        .await,
        201,
    );
    let csv = "email,name\ncarol@d1.test,Carol\nnot-an-address,X\n"
        .as_bytes()
        .to_vec();
    f.record(
        "POST /api/v1/lists/{list}/import",
        http_bytes(&format!("{api}/api/v1/lists/{LIST}/import"), csv).await,
        200,
    );
    f.record("GET /api/v1/lists", get(api, "/api/v1/lists").await, 200);
    f.record(
        "GET /api/v1/lists/{list}",
        get(api, &format!("/api/v1/lists/{LIST}")).await,
        200,
    );
    f.record(
        "PATCH /api/v1/lists/{list}",
        http(
            "PATCH",
            &format!("{api}/api/v1/lists/{LIST}"),
            Some(json!({"from_rewrite": "always"})),
        )
        .await,
        200,
    );
    f.record(
        "GET /api/v1/lists/{list}/members",
        get(api, &format!("/api/v1/lists/{LIST}/members")).await,
        200,
    );
    f.record(
        "GET /api/v1/lists/{list}/members/{member}",
        get(api, &format!("/api/v1/lists/{LIST}/members/bob@d0.test")).await,
        200,
    );
    f.record(
        "GET /api/v1/lists/nobody@lists.test (error)",
        get(api, "/api/v1/lists/nobody@lists.test").await,
        404,
    );
    f.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_json_endpoint_answers_in_the_recorded_shape() {
    let (world, server, _dir) = start().await;
    let api = server.api.clone();
    lists_family(&api).await;

    // A post: bob's copy is delivered, carol's domain refuses connections (a straggler).
    let mut posts = Family::new("posts");
    let (st, injected) = http_bytes(
        &format!("{api}/api/v1/lists/{LIST}/posts"),
        message("bob@d0.test", LIST, "c1@d0.test").into_bytes(),
    )
    .await;
    let post_id = injected["post"].as_str().expect("post id").to_string();
    posts.record("POST /api/v1/lists/{list}/posts", (st, injected), 202);
    wait_for(&api, &format!("/api/v1/posts/{post_id}"), |p| {
        p["delivered"] == 1
    })
    .await;
    wait_for(&api, "/api/v1/stragglers", |s| s["total"] == 1).await;
    wait_for(&api, "/api/v1/queue", |q| non_empty(&q["down_hosts"])).await;
    posts.record("GET /api/v1/posts", get(&api, "/api/v1/posts").await, 200);
    posts.record(
        "GET /api/v1/posts/{post}",
        get(&api, &format!("/api/v1/posts/{post_id}")).await,
        200,
    );
    posts.record("GET /api/v1/status", get(&api, "/api/v1/status").await, 200);
    posts.check();

    let mut live = Family::new("live");
    live.record(
        "GET /api/v1/queue?stragglers=true",
        get(&api, "/api/v1/queue?stragglers=true").await,
        200,
    );
    live.record("GET /api/v1/top", get(&api, "/api/v1/top").await, 200);
    live.record(
        "GET /api/v1/stragglers",
        get(&api, "/api/v1/stragglers").await,
        200,
    );
    live.record(
        "POST /api/v1/stragglers/retry",
        post(
            &api,
            "/api/v1/stragglers/retry",
            json!({"domain": "d1.test"}),
        )
        .await,
        200,
    );
    live.record(
        "POST /api/v1/stragglers/disable",
        post(
            &api,
            "/api/v1/stragglers/disable",
            json!({"recipient": "carol@d1.test", "list": LIST}),
        )
        .await,
        200,
    );
    live.check();

    let mut reports = Family::new("reports");
    wait_for(&api, "/api/v1/reports/hourly?since_ms=0", non_empty).await;
    reports.record(
        "GET /api/v1/reports/hourly",
        get(&api, "/api/v1/reports/hourly?since_ms=0").await,
        200,
    );
    reports.record(
        "GET /api/v1/reports/day",
        get(&api, "/api/v1/reports/day").await,
        200,
    );
    reports.record(
        "GET /api/v1/reports/post/{post}",
        get(&api, &format!("/api/v1/reports/post/{post_id}")).await,
        200,
    );
    reports.check();

    housekeeping_family(&server).await;
    server.stop().await;
    world.shutdown().await;
}

/// Held posts, bounces, member detail, subscription requests and stored postmaster mail.
async fn housekeeping_family(server: &TestServer) {
    let api = server.api.as_str();
    let mut f = Family::new("housekeeping");
    for mid in ["h1@outside.test", "h2@outside.test"] {
        let r = smtp(
            server,
            "eve@outside.test",
            &[LIST],
            &message("eve@outside.test", LIST, mid),
        )
        .await;
        assert!(r.starts_with("250"), "{r}");
    }
    let held = wait_for(api, "/api/v1/held", |v| {
        v.as_array().is_some_and(|a| a.len() == 2)
    })
    .await;
    f.record("GET /api/v1/held", (200, held.clone()), 200);
    let ids: Vec<String> = held
        .as_array()
        .into_iter()
        .flatten()
        // Held posts carry their id as a number (and approve/reject take it in decimal).
        .filter_map(|h| h["post"].as_u64().map(|n| n.to_string()))
        .collect();
    assert_eq!(ids.len(), 2, "held ids: {held}");
    f.record(
        "POST /api/v1/held/{post}/approve",
        post(api, &format!("/api/v1/held/{}/approve", ids[0]), json!({})).await,
        200,
    );
    f.record(
        "POST /api/v1/held/{post}/reject",
        post(api, &format!("/api/v1/held/{}/reject", ids[1]), json!({})).await,
        200,
    );

    let dsn =
        std::fs::read_to_string("crates/bounce/tests/corpus/postfix_hard.eml").expect("corpus");
    let r = smtp(server, "", &["dev-bounces+bob=d0.test@lists.test"], &dsn).await;
    assert!(r.starts_with("250"), "{r}");
    let bounces = wait_for(api, "/api/v1/bounces", non_empty).await;
    f.record("GET /api/v1/bounces", (200, bounces), 200);
    f.record(
        "GET /api/v1/lists/{list}/members/{member}/detail",
        get(
            api,
            &format!("/api/v1/lists/{LIST}/members/bob@d0.test/detail"),
        )
        .await,
        200,
    );
    f.record(
        "POST /api/v1/lists/{list}/subscribe",
        post(
            api,
            &format!("/api/v1/lists/{LIST}/subscribe"),
            json!({"address": "newbie@d0.test"}),
        )
        .await,
        202,
    );

    let note = message("bob@d0.test", "postmaster@herald.test", "pm1@d0.test");
    let r = smtp(server, "bob@d0.test", &["postmaster@herald.test"], &note).await;
    assert!(r.starts_with("250"), "{r}");
    let stored = wait_for(api, "/api/v1/postmaster", non_empty).await;
    f.record("GET /api/v1/postmaster", (200, stored), 200);
    f.check();
}
