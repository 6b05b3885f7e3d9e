//! A person's data, exported and erased (GDPR articles 15 and 17), as an
//! operator does it: with `http.admin_token` set, through the real `herald` CLI. The person is a
//! member of two lists (one with a name, a field and recorded consent), posts to one (so the
//! archive holds their post and the delivery log their copies). The export shows all of it;
//! `herald member erase` removes it; afterwards no table of the directory or the archive holds
//! the address, and neither the API, the CLI's CSV import nor a second erase brings it back.

use crate::support;

use herald_sim::{Profile, World};
use support::*;

const TOKEN: &str = "s3cret-admin-token";
const DEV: &str = "dev@lists.test";
const ANN: &str = "ann@lists.test";
const PERSON: &str = "alice@d0.test";

fn cli(server: &TestServer, args: &[&str]) -> String {
    herald_cli(&server.api, Some(TOKEN), args)
}

/// Runs the CLI expecting failure; returns stderr.
fn cli_fails(server: &TestServer, args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(args)
        .env("HERALD_SERVER", &server.api)
        .env("HERALD_ADMIN_TOKEN", TOKEN)
        .output()
        .expect("run herald");
    assert!(!out.status.success(), "herald {args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Every `table.column` of the SQLite file at `path` with a row holding `needle` (any case).
fn holding(path: &std::path::Path, needle: &str) -> Vec<String> {
    let conn = rusqlite::Connection::open(path).expect("open");
    let tables: Vec<String> = conn
        .prepare(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' \
             AND sql NOT LIKE 'CREATE VIRTUAL%' AND name NOT LIKE 'fts_%'",
        )
        .expect("tables")
        .query_map([], |r| r.get(0))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    let mut out = Vec::new();
    for t in tables {
        let cols: Vec<String> = conn
            .prepare(&format!("SELECT name FROM pragma_table_info('{t}')"))
            .expect("columns")
            .query_map([], |r| r.get(0))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows");
        for c in cols {
            let n: i64 = conn
                .query_row(
                    &format!(
                        "SELECT COUNT(*) FROM \"{t}\" WHERE instr(lower(CAST(\"{c}\" AS TEXT)), ?1) > 0"
                    ),
                    [needle.to_lowercase()],
                    |r| r.get(0),
                )
                .expect("count");
            if n > 0 {
                out.push(format!("{t}.{c}"));
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_exports_and_erases_a_person_everywhere() {
    let world = World::start(world_config(&[Profile::Normal], true))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let mut config = server_config(&world, data.clone());
    config.http.admin_token = TOKEN.into();
    let server = TestServer::start(config).await;

    cli(&server, &["list", "create", DEV, "--policy", "anyone"]);
    cli(&server, &["list", "create", ANN, "--policy", "anyone"]);
    cli(
        &server,
        &[
            "member",
            "add",
            DEV,
            PERSON,
            "--name",
            "Alice Example",
            "--field",
            "city=Lyon",
        ],
    );
    cli(&server, &["member", "add", DEV, "bob@d0.test"]);
    let csv = dir.path().join("ann.csv");
    std::fs::write(&csv, "email,name\nALICE@d0.test,Alice\n").expect("csv");
    cli(
        &server,
        &["member", "import", ANN, csv.to_str().expect("utf-8 path")],
    );

    // Alice posts to dev: the archive keeps her post, the delivery log her own copy.
    let (mut smtp, _) = Smtp::connect(server.smtp).await;
    smtp.cmd("EHLO client.outside.test").await;
    let reply = smtp
        .send_mail(
            PERSON,
            &[DEV],
            format!("From: Alice Example <{PERSON}>\r\nSubject: my plans\r\nMessage-ID: <alice-1@d0.test>\r\n\r\nSee you.\r\n").as_bytes(),
        )
        .await;
    let post = queued_id(&reply);
    let export = wait_until_some(&format!("post {post} archived and logged"), || {
        let out = cli(&server, &["member", "export", PERSON]);
        let e: herald_api_types::people::PersonExport =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
        (!e.archived_posts.is_empty() && !e.delivery_log.is_empty()).then_some(e)
    })
    .await;
    assert_eq!(export.memberships.len(), 2, "{export:?}");
    let dev = export
        .memberships
        .iter()
        .find(|m| m.list == DEV)
        .expect("dev membership");
    assert_eq!(dev.display_name.as_deref(), Some("Alice Example"));
    assert_eq!(dev.fields.get("city").map(String::as_str), Some("Lyon"));
    assert_eq!(dev.consent_source.as_deref(), Some("admin"));
    let ann = export
        .memberships
        .iter()
        .find(|m| m.list == ANN)
        .expect("ann membership");
    assert_eq!(ann.consent_source.as_deref(), Some("import"));
    assert_eq!(export.archived_posts.len(), 1);
    assert_eq!(export.archived_posts[0].subject, "my plans");
    assert!(
        export
            .delivery_log
            .iter()
            .all(|l| l.to_lowercase().contains("to=<alice@d0.test>")),
        "{:?}",
        export.delivery_log
    );
    assert_eq!(export.erased_at_ms, None);

    // Erasure needs --yes; then it is done and said.
    let refused = cli_fails(&server, &["member", "erase", PERSON]);
    assert!(refused.contains("--yes"), "{refused}");
    let out = cli(&server, &["member", "erase", PERSON, "--yes"]);
    assert!(out.contains("2 memberships"), "{out}");
    assert!(out.contains("1 archived posts"), "{out}");

    let after: herald_api_types::people::PersonExport =
        serde_json::from_str(&cli(&server, &["member", "export", PERSON])).expect("json");
    assert!(after.memberships.is_empty() && after.archived_posts.is_empty());
    assert!(after.erased_at_ms.is_some());
    // Nobody brings the address back: not an administrator, not an import.
    let again = cli_fails(&server, &["member", "add", DEV, "Alice@D0.test"]);
    assert!(again.contains("erased"), "{again}");
    std::fs::write(
        &csv,
        "email,name\nalice@d0.test,Alice\ncarol@d0.test,Carol\n",
    )
    .expect("csv");
    let report = cli(
        &server,
        &["member", "import", ANN, csv.to_str().expect("utf-8 path")],
    );
    assert!(report.contains("erased"), "{report}");
    cli(&server, &["member", "erase", PERSON, "--yes"]);
    server.stop().await;

    for db in ["herald.db", "archive.db"] {
        assert_eq!(
            holding(&data.join(db), PERSON),
            Vec::<String>::new(),
            "{db} still holds the erased address"
        );
    }
    assert_eq!(
        holding(&data.join("herald.db"), "bob@d0.test"),
        ["members.address"]
    );
    world.shutdown().await;
}
