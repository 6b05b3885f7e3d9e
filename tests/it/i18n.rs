//! The languages of generated mail, as a subscriber meets them: a list set to
//! German (`language = "de"`, over the API as the CLI and the web pages set it) sends its
//! double opt-in confirmation in German through the simulated Internet — the German text,
//! the command word `confirm` and the link intact, so confirming by reply or by link works as
//! in English — while an English list on the same server writes English; the list's public
//! subscribe page is German too. A language Herald does not ship is refused with a problem
//! naming `settings.language`, and nothing changes.

use crate::support;

use herald_sim::{Profile, World};
use serde_json::json;
use std::time::Duration;
use support::*;

/// The first of `rcpt`'s messages, newest first, that `pick` takes (subject and text
/// parsed), waiting up to 30 s for one.
async fn newest<T>(world: &World, rcpt: &str, pick: impl Fn(&str, &str) -> Option<T>) -> T {
    wait_until_some(&format!("such mail reaching {rcpt}"), || {
        let snapshot = world.recorder().snapshot();
        snapshot.copies_for(rcpt).iter().rev().find_map(|c| {
            let raw = c.message.clone()?;
            let msg = mail_parser::MessageParser::default().parse(&raw[..])?;
            pick(msg.subject().unwrap_or_default(), &msg.body_text(0)?)
        })
    })
    .await
}

/// Subject and text of the last message `rcpt` received, waiting for it.
async fn mail_to(world: &World, rcpt: &str) -> (String, String) {
    newest(world, rcpt, |subject, text| {
        Some((subject.to_string(), text.to_string()))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_german_list_mails_its_subscribers_in_german() {
    let world = World::start(world_config(&[Profile::Normal], true))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let server = TestServer::start(server_config(&world, dir.path().to_path_buf())).await;
    let api = server.api.clone();
    create_list(&api, "de@lists.test", json!({"language": "de"})).await;
    create_list(&api, "en@lists.test", json!({})).await;

    for (list, who) in [
        ("de@lists.test", "anna@d0.test"),
        ("en@lists.test", "bob@d0.test"),
    ] {
        let (st, body) = http(
            "POST",
            &format!("{api}/api/v1/lists/{list}/subscribe"),
            Some(json!({"address": who})),
        )
        .await;
        assert_eq!(st, 202, "{body}");
    }
    let (subject, text) = mail_to(&world, "anna@d0.test").await;
    assert!(subject.starts_with("confirm "), "{subject}");
    assert!(
        text.contains("anna@d0.test in die Liste de@lists.test einzutragen"),
        "{text}"
    );
    assert!(
        text.contains("Zum Bestätigen öffnen Sie diesen Link"),
        "{text}"
    );
    let link = text
        .split_whitespace()
        .find(|w| w.contains("/confirm/"))
        .expect("the link");
    assert!(
        link.ends_with(subject.trim_start_matches("confirm ")),
        "{link}"
    );
    let (_, english) = mail_to(&world, "bob@d0.test").await;
    assert!(
        english.contains("asked to subscribe bob@d0.test to the list en@lists.test"),
        "{english}"
    );

    // The link works as in English: a browser's POST confirms, and the welcome-less member is in.
    let resp = reqwest::Client::new()
        .post(link)
        .send()
        .await
        .expect("confirm");
    assert!(resp.status().is_success(), "{}", resp.status());
    let (st, body) = http(
        "GET",
        &format!("{api}/api/v1/lists/de@lists.test/members/anna@d0.test"),
        None,
    )
    .await;
    assert_eq!(st, 200, "{body}");

    // The public subscribe page speaks the list's language too, error next to the field included.
    let client = reqwest::Client::new();
    let page = client
        .get(format!("{api}/subscribe/de@lists.test"))
        .send()
        .await
        .expect("page")
        .text()
        .await
        .expect("text");
    assert!(page.contains("<html lang=\"de\">"), "{page}");
    assert!(page.contains("Ihre E-Mail-Adresse"), "{page}");
    assert!(page.contains(">Abonnieren</button>"), "{page}");
    let resp = client
        .post(format!("{api}/subscribe/de@lists.test"))
        .form(&[("email", "kein at"), ("t", "x")])
        .send()
        .await
        .expect("post");
    assert_eq!(resp.status(), 400);
    let page = resp.text().await.expect("text");
    assert!(
        page.contains("An diese E-Mail-Adresse können wir nicht schreiben."),
        "{page}"
    );
    let english = client
        .get(format!("{api}/subscribe/en@lists.test"))
        .send()
        .await
        .expect("page")
        .text()
        .await
        .expect("text");
    assert!(
        english.contains("<html lang=\"en\">") && english.contains("Your e-mail address"),
        "{english}"
    );

    // A language Herald does not ship: refused, naming the setting; the list keeps German.
    let (st, body) = http(
        "PATCH",
        &format!("{api}/api/v1/lists/de@lists.test"),
        Some(json!({"language": "xx"})),
    )
    .await;
    assert_eq!(st, 400, "{body}");
    assert_eq!(body["field"], "settings.language", "{body}");
    let (_, list) = http("GET", &format!("{api}/api/v1/lists/de@lists.test"), None).await;
    assert_eq!(list["settings"]["language"], "de", "{list}");

    server.stop().await;
    world.shutdown().await;
}

const TOKEN: &str = "admin-token-i18n-0123456789abcdef";

/// (status, body) with the admin token, from the local client.
async fn admin(
    method: &str,
    url: &str,
    body: Option<serde_json::Value>,
) -> (u16, serde_json::Value) {
    let client = reqwest::Client::new();
    let mut req = match method {
        "GET" => client.get(url),
        "POST" => client.post(url),
        "PUT" => client.put(url),
        "PATCH" => client.patch(url),
        "DELETE" => client.delete(url),
        other => panic!("method {other}"),
    };
    req = req.bearer_auth(TOKEN);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.expect("request");
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
    )
}

/// A subscriber's browser: a loopback source the server does not treat as local, asking for
/// German pages.
fn german_browser() -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::ACCEPT_LANGUAGE,
        reqwest::header::HeaderValue::from_static("de-DE,de;q=0.9,en;q=0.5"),
    );
    reqwest::Client::builder()
        .local_address(std::net::IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 2)))
        .default_headers(headers)
        .build()
        .expect("client")
}

/// The `/manage/` or `/confirm/` link in the newest mail to `rcpt` holding one.
async fn link_in_mail(world: &World, rcpt: &str, path: &str) -> String {
    newest(world, rcpt, |_, text| {
        text.split_whitespace()
            .find(|w| w.contains(path))
            .map(str::to_string)
    })
    .await
}

/// Waits until `rcpt` has received more than `before` messages.
async fn more_mail(world: &World, rcpt: &str, before: usize) {
    wait_until_some(&format!("new mail reaching {rcpt}"), || {
        (world.recorder().snapshot().copies_for(rcpt).len() > before).then_some(())
    })
    .await;
}

/// A list's own words: a list owner rewords a message for their list (the API refuses a
/// text with a field the message does not have, naming `text`), the next confirmation mail
/// carries the list's own wording; the confirmation page a remote browser opens (admin token
/// set) speaks the list's language; a member's own language wins over the list's for mail and
/// for their subscriptions page, where they change it themselves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_members_language_and_the_lists_own_words_reach_mail_and_pages() {
    let world = World::start(world_config(&[Profile::Normal], true))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = server_config(&world, dir.path().to_path_buf());
    config.http.admin_token = TOKEN.into();
    config.http.local_clients = vec!["127.0.0.1".into()];
    // One address gets four confirmations and links here (subscribe, unsubscribe, the
    // subscriptions link, unsubscribe again); the default of three a day is tested elsewhere.
    config.notice_limits.confirmations_per_address_per_day = 10;
    let server = TestServer::start(config).await;
    let api = server.api.clone();
    let list = "de@lists.test";
    let (st, body) = admin(
        "POST",
        &format!("{api}/api/v1/lists"),
        Some(json!({"address": list, "settings": {"language": "de"}})),
    )
    .await;
    assert_eq!(st, 201, "{body}");

    // The owner's wording: refused with a field the message lacks, then stored.
    let texts = format!("{api}/api/v1/lists/{list}/texts");
    let (st, body) = admin(
        "PUT",
        &format!("{texts}/confirmation-text/de"),
        Some(json!({"text": "Hallo { $who }, Ihr Passwort: { $password }"})),
    )
    .await;
    assert_eq!(st, 400, "{body}");
    assert_eq!(body["field"], "text", "{body}");
    let (st, body) = admin(
        "PUT",
        &format!("{texts}/no-such-message/de"),
        Some(json!({"text": "x"})),
    )
    .await;
    assert_eq!(
        (st, body["field"].as_str()),
        (400, Some("message")),
        "{body}"
    );
    let own = "Hallo { $who }! Willkommen bei { $list }.\nBitte bestätigen Sie hier:\n\n  { $url }";
    let (st, body) = admin(
        "PUT",
        &format!("{texts}/confirmation-text/de"),
        Some(json!({"text": own})),
    )
    .await;
    assert_eq!(st, 204, "{body}");
    let (st, body) = admin("GET", &texts, None).await;
    assert_eq!(st, 200, "{body}");
    let entry = body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .find(|m| m["id"] == "confirmation-text")
        .expect("listed");
    assert_eq!(
        entry["fields"],
        json!(["action", "list", "url", "who"]),
        "{entry}"
    );
    assert_eq!(entry["overrides"][0]["text"], own, "{entry}");
    assert!(entry["shipped"].as_str().expect("shipped").contains("$url"));

    // The next confirmation goes out in the list's own words.
    let (st, body) = admin(
        "POST",
        &format!("{api}/api/v1/lists/{list}/subscribe"),
        Some(json!({"address": "anna@d0.test"})),
    )
    .await;
    assert_eq!(st, 202, "{body}");
    let (subject, text) = mail_to(&world, "anna@d0.test").await;
    assert!(subject.starts_with("confirm "), "{subject}");
    assert!(
        text.contains("Hallo anna@d0.test! Willkommen bei de@lists.test."),
        "{text}"
    );
    let link = link_in_mail(&world, "anna@d0.test", "/confirm/").await;

    // The page a remote browser opens is German; GET changes nothing, POST confirms.
    let browser = german_browser();
    let page = browser.get(&link).send().await.expect("get");
    assert_eq!(page.status(), 200);
    let page = page.text().await.expect("text");
    assert!(page.contains("<html lang=\"de\">"), "{page}");
    assert!(
        page.contains("anna@d0.test in de@lists.test eintragen?"),
        "{page}"
    );
    let done = browser.post(&link).send().await.expect("post");
    assert_eq!(done.status(), 200);
    let done = done.text().await.expect("text");
    assert!(
        done.contains("ist jetzt in de@lists.test eingetragen"),
        "{done}"
    );

    // The member's own language: refused when not shipped, then English.
    let member = format!("{api}/api/v1/lists/{list}/members/anna@d0.test");
    let (st, body) = admin("PATCH", &member, Some(json!({"language": "xx"}))).await;
    assert_eq!(
        (st, body["field"].as_str()),
        (400, Some("language")),
        "{body}"
    );
    let (st, body) = admin("PATCH", &member, Some(json!({"language": "en"}))).await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(body["language"], "en", "{body}");
    // Mail to them is English now (the list's German text is German only).
    let before = world.recorder().snapshot().copies_for("anna@d0.test").len();
    let (st, body) = admin(
        "POST",
        &format!("{api}/api/v1/lists/{list}/unsubscribe"),
        Some(json!({"address": "anna@d0.test"})),
    )
    .await;
    assert_eq!(st, 202, "{body}");
    more_mail(&world, "anna@d0.test", before).await;
    let (_, text) = mail_to(&world, "anna@d0.test").await;
    assert!(
        text.contains("asked to unsubscribe anna@d0.test from the list de@lists.test"),
        "{text}"
    );

    // Their subscriptions page: the German browser's first page is German (no member known);
    // the member's page follows the member's choice (English), and they switch it back.
    let manage = format!("{api}/manage");
    let ask = browser.get(&manage).send().await.expect("ask");
    let ask = ask.text().await.expect("text");
    assert!(
        ask.contains("Ihre Abonnements") && ask.contains("Link zusenden"),
        "{ask}"
    );
    let t = ask
        .split("name=\"t\" value=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("form token")
        .to_string();
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let sent = browser
        .post(&manage)
        .form(&[("email", "anna@d0.test"), ("t", &t)])
        .send()
        .await
        .expect("post");
    assert_eq!(sent.status(), 200);
    let link = link_in_mail(&world, "anna@d0.test", "/manage/").await;
    let page = browser.get(&link).send().await.expect("page");
    let page = page.text().await.expect("text");
    assert!(page.contains("<html lang=\"en\">"), "{page}");
    assert!(page.contains("Subscriptions of anna@d0.test"), "{page}");
    assert!(
        page.contains("<option value=\"en\" lang=\"en\" selected>"),
        "{page}"
    );
    let saved = browser
        .post(&link)
        .form(&[("list", list), ("action", "save"), ("language", "de")])
        .send()
        .await
        .expect("save");
    assert_eq!(saved.status(), 200);
    let saved = saved.text().await.expect("text");
    assert!(saved.contains("<html lang=\"de\">"), "{saved}");
    assert!(
        saved.contains("Ihre Einstellungen für de@lists.test sind gespeichert."),
        "{saved}"
    );
    let (_, detail) = admin("GET", &format!("{member}/detail"), None).await;
    assert_eq!(detail["language"], "de", "{detail}");
    // A language that is not shipped is refused there too, and nothing changes.
    let bad = browser
        .post(&link)
        .form(&[("list", list), ("action", "save"), ("language", "xx")])
        .send()
        .await
        .expect("save");
    assert_eq!(bad.status(), 400);
    let (_, detail) = admin("GET", &format!("{member}/detail"), None).await;
    assert_eq!(detail["language"], "de", "{detail}");

    // Back to the shipped text: the owner removes theirs.
    let (st, _) = admin("DELETE", &format!("{texts}/confirmation-text/de"), None).await;
    assert_eq!(st, 204);
    let (st, _) = admin("DELETE", &format!("{texts}/confirmation-text/de"), None).await;
    assert_eq!(st, 404);

    // The goodbye (`send_goodbye`): after a confirmed unsubscribe, in the member's language
    // (German again); a link scanner's GET of the confirmation sends nothing.
    let (st, body) = admin(
        "PATCH",
        &format!("{api}/api/v1/lists/{list}"),
        Some(json!({"send_goodbye": true})),
    )
    .await;
    assert_eq!(st, 200, "{body}");
    let before = world.recorder().snapshot().copies_for("anna@d0.test").len();
    let (st, body) = admin(
        "POST",
        &format!("{api}/api/v1/lists/{list}/unsubscribe"),
        Some(json!({"address": "anna@d0.test"})),
    )
    .await;
    assert_eq!(st, 202, "{body}");
    more_mail(&world, "anna@d0.test", before).await;
    let link = link_in_mail(&world, "anna@d0.test", "/confirm/").await;
    let scanned = browser.get(&link).send().await.expect("scanner");
    assert_eq!(scanned.status(), 200);
    let after_request = world.recorder().snapshot().copies_for("anna@d0.test").len();
    let done = browser.post(&link).send().await.expect("confirm");
    assert_eq!(done.status(), 200);
    more_mail(&world, "anna@d0.test", after_request).await;
    let (subject, text) = mail_to(&world, "anna@d0.test").await;
    assert_eq!(subject, "Sie haben de@lists.test verlassen", "{text}");
    assert!(
        text.contains("anna@d0.test ist nicht mehr Mitglied"),
        "{text}"
    );
    let (st, _) = admin("GET", &member, None).await;
    assert_eq!(st, 404, "anna is no longer a member");

    server.stop().await;
    world.shutdown().await;
}

/// A browser on a remote address (127.0.0.3: not a configured local client) that prefers
/// `accept_language`.
fn remote_browser(accept_language: &'static str) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::ACCEPT_LANGUAGE,
        reqwest::header::HeaderValue::from_static(accept_language),
    );
    reqwest::Client::builder()
        .local_address(std::net::IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 3)))
        .default_headers(headers)
        .build()
        .expect("client")
}

/// (status, body) of a GET from `client`.
async fn page_from(client: &reqwest::Client, url: &str) -> (u16, String) {
    let r = client.get(url).send().await.expect("GET");
    (r.status().as_u16(), r.text().await.expect("body"))
}

/// The archive's pages: a German list's public archive, read from a remote
/// browser that prefers English (admin token set), is written in the list's language with the
/// list's own wording of a page message — listing, message, search, its errors and "no
/// results" — while an English list's archive on the same server stays English and pages that
/// name no list (the index, a private list's "not found") follow the browser's language.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_archive_speaks_the_lists_language_with_its_own_words() {
    let world = World::start(world_config(&[Profile::Normal], true))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = server_config(&world, dir.path().to_path_buf());
    config.http.admin_token = TOKEN.into();
    config.http.local_clients = vec!["127.0.0.1".into()];
    let server = TestServer::start(config).await;
    let api = server.api.clone();
    let (de, en, private) = ("de@lists.test", "en@lists.test", "geheim@lists.test");
    for (list, language) in [(de, "de"), (en, "en"), (private, "de")] {
        let (st, body) = admin(
            "POST",
            &format!("{api}/api/v1/lists"),
            Some(json!({"address": list, "settings": {"language": language}})),
        )
        .await;
        assert_eq!(st, 201, "{body}");
        let (st, body) = admin(
            "POST",
            &format!("{api}/api/v1/lists/{list}/members"),
            Some(json!({"address": "reader@d0.test"})),
        )
        .await;
        assert_eq!(st, 201, "{body}");
    }
    let (st, body) = admin(
        "PUT",
        &format!("{api}/api/v1/lists/{de}/texts/archive-feed/de"),
        Some(json!({"text": "Neues von { $list } als Feed"})),
    )
    .await;
    assert_eq!(st, 400, "a field the message lacks: {body}");
    assert_eq!(body["field"], "text", "{body}");
    // The operator's shell does the same as the web page: a refused text is the error, a good
    // one is stored and shown beside the shipped one.
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .args([
            "texts",
            "set",
            de,
            "archive-feed",
            "de",
            "--text",
            "{ $nobody }",
        ])
        .env("HERALD_SERVER", &api)
        .env("HERALD_ADMIN_TOKEN", TOKEN)
        .output()
        .expect("run herald");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("$nobody"),
        "{stderr}"
    );
    let out = herald_cli(
        &api,
        Some(TOKEN),
        &[
            "texts",
            "set",
            de,
            "archive-feed",
            "de",
            "--text",
            "Unser Feed zum Abonnieren",
        ],
    );
    assert!(out.contains("stored"), "{out}");
    let shown = herald_cli(&api, Some(TOKEN), &["texts", "show", de, "archive-feed"]);
    assert!(
        shown.contains("shipped (de):\n  Atom-Feed")
            && shown.contains("own (de):\n  Unser Feed zum Abonnieren"),
        "{shown}"
    );
    let ls = herald_cli(&api, Some(TOKEN), &["texts", "ls", de]);
    assert!(
        ls.lines()
            .any(|l| l.starts_with("archive-feed") && l.trim_end().ends_with("de")),
        "{ls}"
    );
    {
        // As `herald archive privacy <list> public` does, on the shared store.
        let archive =
            herald_archive::Archive::open(&dir.path().join("archive.db")).expect("archive");
        for list in [de, en] {
            archive
                .set_privacy(list, herald_archive::Privacy::Public)
                .expect("privacy");
        }
    }
    for list in [de, en, private] {
        let tag = format!("hallo-{}", list.split('@').next().unwrap_or("x"));
        let raw = format!(
            "From: p@outside.test\r\nTo: {list}\r\nSubject: {tag}\r\nMessage-ID: <{tag}@outside.test>\r\n\r\nHallo.\r\n"
        );
        let r = reqwest::Client::new()
            .post(format!("{api}/api/v1/lists/{list}/posts"))
            .bearer_auth(TOKEN)
            .body(raw)
            .send()
            .await
            .expect("post");
        assert!(r.status().is_success(), "{}", r.status());
        let injected: herald_api_types::Injected = r.json().await.expect("injected");
        let url = format!("{api}/api/v1/posts/{}", injected.post);
        eventually(Duration::from_secs(60), "the post complete", || async {
            admin("GET", &url, None).await.1["complete"] == true
        })
        .await;
    }

    let browser = remote_browser("en-US,en;q=0.9");
    let base = format!("{api}/archive");
    // The writer runs beside fan-out: wait (bounded) for the post to be listed.
    let months = eventually_some(Duration::from_secs(20), "the post listed", || async {
        let (st, body) = page_from(&browser, &format!("{base}/{de}/")).await;
        (st == 200 && body.contains("eine Nachricht")).then_some(body)
    })
    .await;
    assert!(months.contains("<html lang=\"de\">"), "{months}");
    assert!(months.contains("Unser Feed zum Abonnieren"), "{months}");
    assert!(months.contains("Wörter <input name=\"q\""), "{months}");
    assert!(months.contains(">Suchen</button>"), "{months}");
    let month_href = months
        .split("href=\"")
        .filter_map(|s| s.split('"').next())
        .find(|h| h.ends_with("/") && h.len() == 8)
        .unwrap_or_else(|| panic!("no month link: {months}"))
        .to_string();
    let (st, month) = page_from(&browser, &format!("{base}/{de}/{month_href}")).await;
    assert_eq!(st, 200, "{month}");
    for words in [
        "Diesen Monat herunterladen (mbox)",
        "<th>Datum</th><th>Von</th><th>Betreff</th>",
        ">Thread</a>",
    ] {
        assert!(month.contains(words), "{words}: {month}");
    }
    let (st, message) =
        page_from(&browser, &format!("{base}/{de}/msg/hallo-de@outside.test")).await;
    assert_eq!(st, 200, "{message}");
    assert!(message.contains("Von: p at outside.test"), "{message}");
    assert!(message.contains(">Rohfassung</a>"), "{message}");
    let (st, none) = page_from(&browser, &format!("{base}/{de}/search?q=nirgends")).await;
    assert_eq!(st, 200, "{none}");
    assert!(none.contains("Keine Treffer für „nirgends“"), "{none}");
    let (st, bad) = page_from(&browser, &format!("{base}/{de}/search?q=x&since=gestern")).await;
    assert_eq!(st, 400, "{bad}");
    assert!(
        bad.contains("Seit: „gestern“ ist kein Datum wie 2026-11-24"),
        "{bad}"
    );
    assert!(
        bad.contains("<title>de@lists.test durchsuchen</title>"),
        "{bad}"
    );
    let (st, missing) = page_from(&browser, &format!("{base}/{de}/msg/nie@outside.test")).await;
    assert_eq!(st, 404);
    assert!(
        missing.contains("Nicht gefunden"),
        "the list's language: {missing}"
    );

    // Back to the shipped text from the shell: the page follows at once.
    herald_cli(
        &api,
        Some(TOKEN),
        &["texts", "reset", de, "archive-feed", "de"],
    );
    let (_, months) = page_from(&browser, &format!("{base}/{de}/")).await;
    assert!(
        months.contains(">Atom-Feed</a>") && !months.contains("Unser Feed"),
        "{months}"
    );

    // The English list beside it keeps English, and the German list's text is its own.
    let (st, english) = page_from(&browser, &format!("{base}/{en}/")).await;
    assert_eq!(st, 200, "{english}");
    assert!(english.contains("<html lang=\"en\">"), "{english}");
    assert!(english.contains(">Atom feed</a>"), "{english}");
    assert!(english.contains("one message"), "{english}");

    // No list named, or one the reader may not see: the browser's language, and a private
    // list's answer is the same as for no list at all (it does not show its German).
    let german = remote_browser("de-AT,de;q=0.9");
    for (client, expect) in [(&browser, "Not found"), (&german, "Nicht gefunden")] {
        for list in [private, "nosuch@lists.test"] {
            let (st, body) = page_from(client, &format!("{base}/{list}/")).await;
            assert_eq!(st, 404, "{body}");
            assert!(body.contains(expect), "{list}: {body}");
        }
    }
    let (st, index) = page_from(&german, &format!("{base}/")).await;
    assert_eq!(st, 200, "{index}");
    assert!(index.contains("<title>Archive</title>"), "{index}");
    assert!(
        index.contains("de@lists.test</a> (eine Nachricht)"),
        "{index}"
    );
    assert!(!index.contains(private), "{index}");

    server.stop().await;
    world.shutdown().await;
}
