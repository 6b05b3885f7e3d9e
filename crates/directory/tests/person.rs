//! One person's data (GDPR articles 15 and 17) through the directory's public
//! API on a real SQLite file: the export holds every kind of row that names the address, and
//! after erasure no column of any table does — checked by walking the schema, so a table added
//! later that stores addresses fails this test until erasure covers it.

#[macro_use]
mod common;
use common::{Kind, Store};
use herald_directory::{
    Consent, ConsentSource, DirectoryError, NewBounce, NewMember, SuppressionSource,
};
use herald_types::{Address, ListSettings};

fn a(s: &str) -> Address {
    Address::parse(s).expect("address")
}

const PERSON: &str = "Alice.Person@Example.org";

/// Every table and column of the database (either backend) whose rows hold `needle` (any
/// case). PostgreSQL's `address_key` columns are the folded address itself (generated from
/// it), so they are reported as their `address` column.
fn tables_holding(store: &Store, needle: &str) -> Vec<String> {
    match store.path() {
        Some(path) => sqlite_tables_holding(path, needle),
        None => pg_tables_holding(store, needle),
    }
}

fn pg_tables_holding(store: &Store, needle: &str) -> Vec<String> {
    let mut c = store.pg_client();
    let columns: Vec<(String, String)> = c
        .query(
            "SELECT table_name::TEXT, column_name::TEXT FROM information_schema.columns \
             WHERE table_schema = 'public' ORDER BY table_name, ordinal_position",
            &[],
        )
        .expect("columns")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let tables: std::collections::BTreeSet<&String> = columns.iter().map(|(t, _)| t).collect();
    assert!(
        tables.len() >= 10,
        "the schema walk sees the tables: {tables:?}"
    );
    let mut holding = Vec::new();
    for (t, col) in &columns {
        let n: i64 = c
            .query_one(
                &format!(
                    "SELECT COUNT(*) FROM \"{t}\" WHERE lower(CAST(\"{col}\" AS TEXT)) LIKE $1"
                ),
                &[&format!("%{}%", needle.to_lowercase())],
            )
            .expect("count")
            .get(0);
        if n > 0 {
            let col = col.strip_suffix("_key").unwrap_or(col);
            let name = format!("{t}.{col}");
            if !holding.contains(&name) {
                holding.push(name);
            }
        }
    }
    holding
}

fn sqlite_tables_holding(path: &std::path::Path, needle: &str) -> Vec<String> {
    let conn = rusqlite::Connection::open(path).expect("open");
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
        .expect("tables")
        .query_map([], |r| r.get(0))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    assert!(
        tables.len() >= 10,
        "the schema walk sees the tables: {tables:?}"
    );
    let mut holding = Vec::new();
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
                        "SELECT COUNT(*) FROM \"{t}\" WHERE lower(CAST(\"{c}\" AS TEXT)) LIKE ?1"
                    ),
                    [format!("%{}%", needle.to_lowercase())],
                    |r| r.get(0),
                )
                .expect("count");
            if n > 0 {
                holding.push(format!("{t}.{c}"));
            }
        }
    }
    holding
}

fn export_holds_everything_and_erasure_leaves_only_a_hash_that_keeps_refusing(kind: Kind) {
    let store = Store::fresh(kind);
    let d = store.open();
    let dev = d
        .create_list(&a("dev@l.test"), &ListSettings::default())
        .expect("list");
    let ann = d
        .create_list(&a("ann@l.test"), &ListSettings::default())
        .expect("list");
    let mut m = NewMember::new(a(PERSON));
    m.display_name = Some("Alice Person".into());
    m.fields.insert("city".into(), "Lyon".into());
    d.add_member_consented(
        dev.id,
        &m,
        &Consent::now(ConsentSource::Web, Some("198.51.100.7")),
    )
    .expect("member");
    d.add_member(ann.id, &NewMember::new(a("alice.person@example.org")))
        .expect("member");
    d.add_member(dev.id, &NewMember::new(a("bob@example.org")))
        .expect("another member");
    let bounce = NewBounce {
        kind: "hard".into(),
        weight: 1.0,
        status: Some("5.1.1".into()),
        diagnostic: "user unknown".into(),
        source: "dsn",
        post: None,
        at_ms: 1_000,
    };
    d.apply_bounce(dev.id, Some(&a(PERSON)), &bounce, herald_bounce::score)
        .expect("bounce");
    d.suppress(
        Some(ann.id),
        &a(PERSON),
        "asked by phone",
        SuppressionSource::Operator,
    )
    .expect("suppress");
    d.add_ban(Some(ann.id), PERSON).expect("ban");

    let export = d.person(&a(PERSON)).expect("export");
    assert_eq!(export.memberships.len(), 2, "{export:?}");
    let on_dev = export
        .memberships
        .iter()
        .find(|m| m.list == "dev@l.test")
        .expect("dev membership");
    assert_eq!(on_dev.display_name.as_deref(), Some("Alice Person"));
    assert_eq!(on_dev.fields.get("city").map(String::as_str), Some("Lyon"));
    let consent = on_dev.consent.as_ref().expect("consent");
    assert_eq!(
        (consent.source, consent.client.as_deref()),
        (ConsentSource::Web, Some("198.51.100.7"))
    );
    assert_eq!(export.bounce_events.len(), 1);
    assert_eq!(export.bounce_events[0].diagnostic, "user unknown");
    assert_eq!(export.bounce_scores.len(), 1);
    assert_eq!(export.suppressions.len(), 1);
    assert_eq!(export.bans.len(), 1);
    assert_eq!(export.erased_at_ms, None);
    assert!(!tables_holding(&store, PERSON).is_empty());

    let erased = d.erase_person(&a(PERSON)).expect("erase");
    assert_eq!(
        (
            erased.memberships,
            erased.bounce_events,
            erased.bounce_scores,
            erased.suppressions,
            erased.bans
        ),
        (2, 1, 1, 1, 1)
    );
    drop(d);
    assert_eq!(
        tables_holding(&store, PERSON),
        Vec::<String>::new(),
        "after erasure no table may hold the address"
    );
    assert_eq!(tables_holding(&store, "alice.person"), Vec::<String>::new());
    assert_eq!(
        tables_holding(&store, "bob@example.org"),
        ["members.address"]
    );

    let d = store.open();
    let after = d.person(&a(PERSON)).expect("export after");
    assert!(after.memberships.is_empty() && after.bounce_events.is_empty());
    assert!(after.erased_at_ms.is_some());
    // Every add path refuses the erased address, in any case; an unrelated one is fine.
    for list in [dev.id, ann.id] {
        match d.add_member(list, &NewMember::new(a("ALICE.PERSON@example.ORG"))) {
            Err(e @ DirectoryError::Refused { .. }) => {
                assert!(e.to_string().contains("erased"), "{e}")
            }
            other => panic!("an erased address was re-added: {other:?}"),
        }
    }
    let report = d
        .import_csv(
            dev.id,
            "email,name\nalice.person@example.org,Again\ncarol@example.org,Carol\n".as_bytes(),
            &mut |_| {},
        )
        .expect("import");
    assert_eq!(report.rejected.len(), 1, "{report:?}");
    assert!(report.rejected[0].reason.contains("erased"), "{report:?}");
    // Erasing again, or someone never seen, is harmless.
    d.erase_person(&a(PERSON)).expect("idempotent");
    d.erase_person(&a("nobody@example.org")).expect("unknown");
}

both!(export_holds_everything_and_erasure_leaves_only_a_hash_that_keeps_refusing,);
