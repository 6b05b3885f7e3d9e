//! Observability end to end on the simulated world, with known outcomes: 400 members over four
//! domains — two accept everything, one rejects every recipient (550 5.1.1), one refuses
//! connections (every copy deferred). The reports (over the API and through the `herald report`
//! CLI), the stragglers and their actions, `/metrics`, `/api/v1/top` and the admin-token guard are
//! checked against those counts exactly.

use crate::support;

use herald_api_types::{
    ActionResult, DayReport, HourRow, Injected, MemberView, PostReport, PostSummary, ReasonRow,
    Stragglers, Top, Totals,
};
use herald_sim::{Profile, World};
use herald_types::MemberStatus;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use support::*;

const LIST: &str = "obs@lists.test";
const MEMBERS: usize = 400;
const TOKEN: &str = "observe-test-token-0123456789";

fn profiles() -> Vec<Profile> {
    vec![
        Profile::Normal,
        Profile::Normal,
        Profile::UnknownUsers {
            users: Vec::new(),
            fraction: 1.0,
        },
        Profile::Refused,
    ]
}

fn post_body() -> Vec<u8> {
    format!(
        "From: P <p@outside.test>\r\nTo: {LIST}\r\nSubject: stats\r\nMessage-ID: <obs-1@outside.test>\r\n\r\nHello.\r\n"
    )
    .into_bytes()
}

/// GET with an optional bearer token; (status, JSON or text).
async fn get_auth(url: &str, token: Option<&str>) -> (u16, Value) {
    let mut req = reqwest::Client::new().get(url);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.expect("request");
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

async fn post_auth(url: &str, body: Value) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .post(url)
        .bearer_auth(TOKEN)
        .json(&body)
        .send()
        .await
        .expect("request");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn setup() -> (World, tempfile::TempDir, TestServer, String) {
    let world = World::start(world_config(&profiles(), false))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = server_config(&world, dir.path().join("data"));
    cfg.http.admin_token = TOKEN.into();
    cfg.stats.flush_secs = 1;
    // The refusing host must show as down after its first refused connection.
    cfg.scheduler.host_down_after_failures = 1;
    let server = TestServer::start(cfg).await;
    let api = server.api.clone();
    let settings = json!({"posting_policy": "anyone"});
    let (s, b) = post_auth(
        &format!("{api}/api/v1/lists"),
        json!({"address": LIST, "settings": settings}),
    )
    .await;
    assert_eq!(s, 201, "{b}");
    let resp = reqwest::Client::new()
        .post(format!("{api}/api/v1/lists/{LIST}/import"))
        .bearer_auth(TOKEN)
        .body(members_csv(MEMBERS, 4))
        .send()
        .await
        .expect("import");
    assert_eq!(resp.status().as_u16(), 200);
    (world, dir, server, api)
}

/// Waits until the 300 final outcomes are in and all 100 copies to d3 were deferred once.
async fn wait_known_state(api: &str, post: &str) -> Value {
    let started = Instant::now();
    loop {
        let (_, p) = get_auth(&format!("{api}/api/v1/posts/{post}"), Some(TOKEN)).await;
        let (_, s) = get_auth(&format!("{api}/api/v1/stragglers"), Some(TOKEN)).await;
        let (pv, sv): (PostSummary, Stragglers) = (view("progress", &p), view("stragglers", &s));
        if pv.delivered + pv.failed == 300 && sv.total == 100 {
            return p;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no known state: {p} {s}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_stragglers_and_actions_match_a_known_fan_out() {
    let (world, dir, server, api) = setup().await;
    let resp = reqwest::Client::new()
        .post(format!("{api}/api/v1/lists/{LIST}/posts"))
        .bearer_auth(TOKEN)
        .body(post_body())
        .send()
        .await
        .expect("post");
    let post = resp.json::<Injected>().await.expect("injected").post;
    wait_known_state(&api, &post).await;

    let (s, hours) = get_auth(
        &format!("{api}/api/v1/reports/hourly?since_ms=0"),
        Some(TOKEN),
    )
    .await;
    assert_eq!(s, 200, "{hours}");
    let hours: Vec<HourRow> = view("hourly", &hours);
    let sum = |k: fn(&HourRow) -> u64| hours.iter().map(k).sum::<u64>();
    assert_eq!(
        (sum(|r| r.delivered), sum(|r| r.failed)),
        (200, 100),
        "{hours:?}"
    );
    if let [hour] = hours.as_slice() {
        assert_eq!((hour.delivered_hosts, hour.failed_hosts), (2, 1));
    }
    let (_, day) = get_auth(&format!("{api}/api/v1/reports/day"), Some(TOKEN)).await;
    let day: DayReport = view("day", &day);
    assert_eq!((day.delivered, day.failed), (200, 100), "{day:?}");
    assert_eq!(
        day.arrivals.first().map(|a| a.post.as_str()),
        Some(post.as_str())
    );
    let (_, rep) = get_auth(&format!("{api}/api/v1/reports/post/{post}"), Some(TOKEN)).await;
    let rep: PostReport = view("post report", &rep);
    assert_eq!((rep.delivered, rep.failed), (200, 100), "{rep:?}");
    assert_eq!(rep.recipients, Some(400));
    assert_eq!(
        rep.failures.first(),
        Some(&ReasonRow {
            reason: "550 5.1.1".into(),
            copies: 100
        })
    );
    assert!(rep.t50_secs.is_some() && rep.t100_secs.is_none(), "{rep:?}");

    let (_, strag) = get_auth(&format!("{api}/api/v1/stragglers?limit=5"), Some(TOKEN)).await;
    let strag: Stragglers = view("stragglers", &strag);
    let first = strag
        .destinations
        .first()
        .expect("a straggling destination");
    assert_eq!(first.key, "d3.test", "{strag:?}");
    assert_eq!(first.pending, 100);
    assert_eq!(strag.recipients.len(), 5);

    // The CLI renders the same numbers from the same store.
    let table = herald_cli(
        &api,
        Some(TOKEN),
        &["report", "hourly", "--since", "1970-01-01"],
    );
    assert!(
        table.lines().any(|l| l.starts_with("Totals")
            && l.contains("/        100")
            && l.contains("/        200")),
        "{table}"
    );
    let png = dir.path().join("day.png");
    let out = herald_cli(
        &api,
        Some(TOKEN),
        &["report", "day", "--out", png.to_str().expect("utf8")],
    );
    assert!(out.contains("200 delivered, 100 failed"), "{out}");
    assert!(std::fs::read(&png).expect("png").starts_with(b"\x89PNG"));
    let text = herald_cli(&api, Some(TOKEN), &["report", "post", &post]);
    assert!(
        text.contains("delivered         200") && text.contains("100  550 5.1.1"),
        "{text}"
    );
    let s = herald_cli(&api, Some(TOKEN), &["stragglers", "--limit", "3"]);
    assert!(
        s.contains("100 deferred copies pending") && s.contains("d3.test"),
        "{s}"
    );

    // Actions: retry now, disable one member, give up the rest.
    let (s, r) = post_auth(
        &format!("{api}/api/v1/stragglers/retry"),
        json!({"domain": "d3.test"}),
    )
    .await;
    assert_eq!(s, 200, "{r}");
    let (s, r) = post_auth(
        &format!("{api}/api/v1/stragglers/disable"),
        json!({"recipient": "m3@d3.test"}),
    )
    .await;
    let action: ActionResult = view("disable", &r);
    assert_eq!(
        (s, action.disabled_on),
        (200, vec![LIST.to_string()]),
        "{r}"
    );
    let (_, m) = get_auth(
        &format!("{api}/api/v1/lists/{LIST}/members/m3@d3.test"),
        Some(TOKEN),
    )
    .await;
    let member: MemberView = view("member", &m);
    assert!(matches!(member.status, MemberStatus::Disabled(_)), "{m}");
    let out = herald_cli(
        &api,
        Some(TOKEN),
        &["stragglers", "--action", "give-up", "--domain", "d3.test"],
    );
    assert!(out.contains("queued copies matched"), "{out}");
    let p = wait_complete_auth(&api, &post).await;
    assert_eq!((p.delivered, p.failed), (200, 200), "{p:?}");
    let (_, rep) = get_auth(&format!("{api}/api/v1/reports/post/{post}"), Some(TOKEN)).await;
    let rep: PostReport = view("post report", &rep);
    assert_eq!(rep.failed, 200, "{rep:?}");
    assert!(rep
        .failures
        .iter()
        .any(|f| f.reason == "550 5.0.0" && f.copies == 100));
    let (_, strag) = get_auth(&format!("{api}/api/v1/stragglers"), Some(TOKEN)).await;
    assert_eq!(view::<Stragglers>("stragglers", &strag).total, 0);

    server.stop().await;
    world.shutdown().await;
}

async fn wait_complete_auth(api: &str, post: &str) -> PostSummary {
    let started = Instant::now();
    loop {
        let (_, p) = get_auth(&format!("{api}/api/v1/posts/{post}"), Some(TOKEN)).await;
        let summary: PostSummary = view("progress", &p);
        if summary.complete {
            return summary;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "not complete: {p}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_routes_need_the_token_and_live_views_have_every_stage() {
    let (world, _dir, server, api) = setup().await;
    for path in [
        "/api/v1/status",
        "/api/v1/top",
        "/metrics",
        "/api/v1/reports/hourly",
        "/api/v1/stragglers",
    ] {
        let (s, _) = get_auth(&format!("{api}{path}"), None).await;
        assert_eq!(s, 401, "{path} without a token");
    }
    // Two wrong tokens (five from one client would throttle it, this test's client included).
    for path in ["/api/v1/status", "/metrics"] {
        let (s, _) = get_auth(&format!("{api}{path}"), Some("wrong-token-wrong-token")).await;
        assert_eq!(s, 401, "{path} with a wrong token");
    }
    let (s, _) = post_auth(
        &format!("{api}/api/v1/stragglers/give-up"),
        json!({"domain": "d3.test"}),
    )
    .await;
    assert_eq!(s, 200);
    let (s, _) = get_auth(&format!("{api}/healthz"), None).await;
    assert_eq!(s, 200);
    let (s, _) = get_auth(&format!("{api}/unsubscribe/{LIST}/m1@d1.test/bad"), None).await;
    assert_ne!(s, 401, "unsubscribe links stay public");
    let (s, page) = get_auth(&format!("{api}/"), None).await;
    assert!(
        s == 200 && page.as_str().is_some_and(|p| p.contains("admin token")),
        "{page}"
    );

    // Log in with the form: a cookie, then the dashboard and its API.
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let bad = client
        .post(format!("{api}/login"))
        .form(&[("token", "nope")])
        .send()
        .await
        .expect("login");
    assert_eq!(bad.status().as_u16(), 401);
    let ok = client
        .post(format!("{api}/login"))
        .form(&[("token", TOKEN)])
        .send()
        .await
        .expect("login");
    assert_eq!(ok.status().as_u16(), 303);
    let cookie = ok.headers()["set-cookie"]
        .to_str()
        .expect("cookie")
        .split(';')
        .next()
        .expect("kv")
        .to_string();
    assert!(cookie.starts_with("herald_admin="));
    let page = client
        .get(format!("{api}/"))
        .header("cookie", &cookie)
        .send()
        .await
        .expect("page");
    assert!(page.text().await.expect("text").contains("rate-chart"));

    let resp = reqwest::Client::new()
        .post(format!("{api}/api/v1/lists/{LIST}/posts"))
        .bearer_auth(TOKEN)
        .body(post_body())
        .send()
        .await
        .expect("post");
    let post = resp.json::<Injected>().await.expect("injected").post;
    wait_known_state(&api, &post).await;
    let top = client
        .get(format!("{api}/api/v1/top"))
        .header("cookie", &cookie)
        .send()
        .await
        .expect("top");
    let top: Top = top.json().await.expect("the /api/v1/top view");
    assert_eq!(
        top.totals,
        Totals {
            delivered: 200,
            failed: 100,
            deferred: 100
        }
    );
    assert_eq!(top.rates.len(), 300, "per-second rates, 5 minutes");
    let lanes: Vec<&str> = top.lanes.iter().map(|l| l.lane.as_str()).collect();
    assert_eq!(lanes.get(..2), Some(&["fast", "slow"][..]));
    assert!(
        top.down.iter().any(|d| d.destination == "mx.d3.test"),
        "{:?}",
        top.down
    );
    assert!(top.process.rss_bytes.unwrap_or(0) > 0);
    let stages: Vec<&str> = top
        .internals
        .stages
        .iter()
        .map(|s| s.stage.as_str())
        .collect();
    assert_eq!(
        stages,
        ["jobs_send", "report_queue", "spool_record", "copy_bytes"]
    );
    assert!(top.internals.stages.get(1).is_some_and(|s| s.count >= 300));
    assert!(top.slowest.iter().any(|c| c.class == "d0.test"));

    let (_, metrics) = get_auth(&format!("{api}/metrics"), Some(TOKEN)).await;
    let metrics = metrics.as_str().expect("text").to_string();
    for want in [
        "herald_copies_total{outcome=\"failed\"} 100",
        "herald_smtp_reply_seconds_count{class=\"d0.test\"} ",
        "herald_stage_wait_seconds_bucket{le=\"+Inf\",stage=\"report_queue\"}",
        "herald_lock_acquisitions_total{lock=\"stats_pending\"}",
        "herald_channel_depth{channel=\"jobs\"}",
        "herald_spool_group_commit_avg_records",
        "herald_delivery_latency_seconds_count 200",
    ] {
        assert!(metrics.contains(want), "{want} missing");
    }
    // Every series the example Grafana dashboard queries exists.
    let grafana = include_str!("../../docs/grafana-herald.json");
    for name in grafana.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        if name.starts_with("herald_") {
            assert!(
                metrics.contains(&format!("\n{name}")),
                "{name} (docs/grafana-herald.json) not in /metrics"
            );
        }
    }
    server.stop().await;
    world.shutdown().await;
}
