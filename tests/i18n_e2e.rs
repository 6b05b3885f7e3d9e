//! Issue 15 item 7, the languages of generated mail, as a subscriber meets them: a list set to
//! German (`language = "de"`, over the API as the CLI and the web pages set it) sends its
//! double opt-in confirmation in German through the simulated Internet — the German text,
//! the command word `confirm` and the link intact, so confirming by reply or by link works as
//! in English — while an English list on the same server writes English; the list's public
//! subscribe page is German too. A language Herald does not ship is refused with a problem
//! naming `settings.language`, and nothing changes.

mod support;

use herald_sim::{Profile, World};
use serde_json::json;
use std::time::{Duration, Instant};
use support::*;

/// The text of the last message `rcpt` received, waiting for it.
async fn mail_to(world: &World, rcpt: &str) -> (String, String) {
    let start = Instant::now();
    loop {
        let snapshot = world.recorder().snapshot();
        let copies = snapshot.copies_for(rcpt);
        if let Some(raw) = copies.iter().rev().find_map(|c| c.message.clone()) {
            let msg = mail_parser::MessageParser::default()
                .parse(&raw[..])
                .expect("parses");
            return (
                msg.subject().unwrap_or_default().to_string(),
                msg.body_text(0).expect("text").to_string(),
            );
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no mail reached {rcpt}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
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
