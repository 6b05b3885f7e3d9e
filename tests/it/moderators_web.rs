//! Who is a list's moderator on the web: the same answer as moderation by mail and as the
//! member table (one rule, `List::is_moderator`: ASCII letters without case, other letters of
//! a UTF-8 local part exactly). The server has `http.admin_token` set and treats only
//! 127.0.0.1 as local; the browser connects from 127.0.0.6, which the server sees as remote.
//!
//! A list names `jörg@d1.test` as its moderator. A sign-in link asked for `JÖRG@d1.test` (a
//! non-ASCII letter in another case: another mailbox, which as a member would be a second
//! member) is not sent; one asked for `JöRG@d1.test` (ASCII letters only) is, and signing in
//! with it gives the moderator role on that list.

use crate::support;
use crate::support::accounts;

use accounts::*;
use herald_api_types::accounts::AuditView;
use herald_sim::{Profile, World};
use serde_json::json;
use std::time::Duration;
use support::*;

const LIST: &str = "utf8@lists.test";
const MODERATOR: &str = "jörg@d1.test";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moderators_are_recognised_on_the_web_by_the_member_rule() {
    let world = World::start(world_config(&[Profile::Normal, Profile::Normal], true))
        .await
        .expect("world");
    let (server, _dir) = server_for_remote_browsers(&world).await;
    let api = server.api.clone();
    let (st, v) = token_call(
        "POST",
        &format!("{api}/api/v1/lists"),
        Some(json!({"address": LIST, "settings": {"moderators": [MODERATOR]}})),
    )
    .await;
    assert_eq!(st, 201, "{v}");
    let b = browser(6);
    let ask = |who: &'static str| {
        b.post(format!("{api}/login/link"))
            .form(&[("address", who)])
            .send()
    };
    assert_eq!(ask("JÖRG@d1.test").await.expect("ask").status(), 200);
    assert_eq!(ask("JöRG@d1.test").await.expect("ask").status(), 200);
    let link = wait_for("the sign-in mail", Duration::from_secs(30), || {
        sign_in_links(&world, "JöRG@d1.test").first().cloned()
    })
    .await;
    // Both requests are audited under the account key (newest first); one link was sent.
    let audit: Vec<AuditView> = get_token(&format!("{api}/api/v1/audit?limit=500")).await;
    let outcomes: Vec<&str> = audit
        .iter()
        .filter(|e| e.actor == MODERATOR && e.action == "login.link_request")
        .map(|e| e.outcome.as_str())
        .collect();
    assert_eq!(outcomes, ["sent", "no account"]);
    assert!(sign_in_links(&world, "JÖRG@d1.test").is_empty());
    // Signed in, the moderator holds the role the list's setting gives.
    let resp = b.post(&link).send().await.expect("post");
    assert_eq!(resp.status(), 303);
    let session = Session {
        client: b.clone(),
        cookie: session_cookie(resp.headers()),
        origin: api.to_string(),
    };
    let me = session.me().await;
    let roles: Vec<(&str, &str)> = me
        .roles
        .iter()
        .map(|r| (r.list.as_str(), r.role.as_str()))
        .collect();
    assert_eq!(roles, [(LIST, "moderator")]);
    server.stop().await;
    world.shutdown().await;
}
