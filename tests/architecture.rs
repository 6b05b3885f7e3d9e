//! The house's shape, checked on every `cargo test`: data flows one way between
//! crates, and no crate has an import circle between its modules.
//!
//! 1. **Crates:** every workspace crate has a place in [`FLOW`], upstream first. A crate's normal
//!    dependencies may only name crates earlier in the list (dev-dependencies are free: tests may
//!    use anything, e.g. the simulated Internet). A new crate must be placed in the list, which
//!    is the point: placing it is deciding what it may know.
//! 2. **Modules:** inside each crate, the graph "top-level module A names `crate::B`" has no
//!    cycle. Submodules count as their top-level module; `super::` is a child reaching its parent
//!    and is not an edge between siblings.
//! 3. **The table:** ARCHITECTURE.md's table has a row for every workspace crate, and its
//!    "depends on" column names exactly each crate's herald dependencies as `cargo metadata`
//!    reads them, so the map a newcomer reads cannot drift from the house.
//! 4. **One writer of member state:** the directory's member-writing methods ([`MEMBER_WRITES`])
//!    are called, outside the directory itself and outside tests, only from the member
//!    lifecycle (`crates/lists/src/membership.rs`), so every door changes members the same way.
//!
//! Read from `cargo metadata` and the sources, so the test sees what the compiler sees.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The pipeline, upstream first (ARCHITECTURE.md draws it). Vocabulary and libraries come
/// before the stages that use them; the composition root and the binary come last.
const FLOW: &[&str] = &[
    "herald-types",
    "herald-i18n",
    "herald-smtp",
    "herald-auth",
    "herald-sim",
    "herald-store",
    "herald-directory",
    "herald-spool",
    "herald-telemetry",
    "herald-api-types",
    "herald-stage",
    "herald-guard",
    "herald-content-filter",
    "herald-inbound",
    "herald-enqueue",
    "herald-fanout",
    "herald-routing",
    "herald-egress",
    "herald-smtp-client",
    "herald-scheduler",
    "herald-lists",
    "herald-complaints",
    "herald-bounce",
    "herald-archive",
    "herald-backup",
    "herald-doctor",
    "herald-digest",
    "herald-tlsrpt",
    "herald-import",
    "herald-imap",
    "herald-accounts",
    "herald-cluster",
    "herald-shards",
    "herald-knowledge",
    "herald-webadmin",
    "herald-api",
    "herald-config",
    "herald-host",
    "herald-server",
    "herald-bench",
    "herald-fuzz",
    "herald-pg-harness",
    "herald",
];

/// Pairs the FLOW order would allow but the design forbids: the bounce stage learns of our own
/// failures as `types::FailedCopy` values, not from the scheduler's internals; the API reads
/// tokens from `types`, not from the render library; and the stages below.
const FORBIDDEN: &[(&str, &str)] = &[
    ("herald-bounce", "herald-scheduler"),
    ("herald-api", "herald-fanout"),
    // Stages side by side learn of each other through the vocabulary (`types`) or the spool,
    // never by importing each other: a disabled member is a `types::DisabledMember`, the
    // Message-ID store is the spool's. (Bounce calls the member lifecycle in `lists`, which sits
    // below it; `lists` never learns of bounce.)
    ("herald-lists", "herald-bounce"),
    ("herald-scheduler", "herald-enqueue"),
];

/// The directory's methods that write member state: a member's row, status, settings,
/// consent, bounce score, or (through suppression and erasure) every membership of an address.
/// `delete_list` is not here: it ends a list, not a membership.
const MEMBER_WRITES: &[&str] = &[
    "add_member",
    "add_members",
    "add_member_consented",
    "remove_member",
    "set_member_status",
    "record_consent",
    "reset_bounces",
    "reset_bounce_score",
    "apply_bounce",
    "set_delivery",
    "set_display_name",
    "set_member_language",
    "set_moderated",
    "set_skip_if_addressed",
    "import_members",
    "import_csv",
    "import_suppression",
    "suppress",
    "erase_person",
];

/// The one file outside the directory that may call [`MEMBER_WRITES`].
const MEMBER_LIFECYCLE: &str = "crates/lists/src/membership.rs";

struct Package {
    name: String,
    src: PathBuf,
    deps: Vec<String>,
}

fn workspace_packages() -> Vec<Package> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata is JSON");
    let mut packages = Vec::new();
    for p in meta["packages"].as_array().expect("packages") {
        let name = p["name"].as_str().expect("name").to_string();
        let manifest = PathBuf::from(p["manifest_path"].as_str().expect("manifest path"));
        let deps = p["dependencies"]
            .as_array()
            .expect("dependencies")
            .iter()
            .filter(|d| d["kind"].is_null()) // normal dependencies only
            .filter_map(|d| d["name"].as_str())
            .filter(|n| n.starts_with("herald"))
            .map(str::to_string)
            .collect();
        let dir = manifest.parent().expect("manifest dir");
        packages.push(Package {
            name,
            src: dir.join("src"),
            deps,
        });
    }
    packages
}

#[test]
fn every_crate_depends_only_on_crates_upstream_of_it() {
    let rank: BTreeMap<&str, usize> = FLOW.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let mut wrong = Vec::new();
    for p in workspace_packages() {
        let Some(&mine) = rank.get(p.name.as_str()) else {
            wrong.push(format!(
                "{} has no place in FLOW (tests/architecture.rs)",
                p.name
            ));
            continue;
        };
        for d in &p.deps {
            match rank.get(d.as_str()) {
                Some(_) if FORBIDDEN.contains(&(p.name.as_str(), d.as_str())) => {
                    wrong.push(format!("{} must not depend on {d}", p.name))
                }
                Some(&theirs) if theirs < mine => {}
                Some(_) => wrong.push(format!(
                    "{} depends on {d}, which is downstream of it",
                    p.name
                )),
                None => wrong.push(format!(
                    "{} depends on {d}, which has no place in FLOW",
                    p.name
                )),
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "the one-way rule is broken:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_crate_has_an_import_circle_between_its_modules() {
    let mut circles = Vec::new();
    for p in workspace_packages() {
        let root = if p.src.join("lib.rs").exists() {
            p.src.join("lib.rs")
        } else {
            p.src.join("main.rs")
        };
        if !root.exists() {
            continue;
        }
        let graph = module_graph(&p.src, &root);
        if let Some(cycle) = find_cycle(&graph) {
            circles.push(format!("{}: {}", p.name, cycle.join(" -> ")));
        }
    }
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_architecture_table_names_each_crates_dependencies() {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("ARCHITECTURE.md"))
            .expect("ARCHITECTURE.md is readable");
    let table = dependency_table(&doc);
    let mut wrong = Vec::new();
    for p in workspace_packages() {
        let Some(listed) = table.get(&p.name) else {
            wrong.push(format!("{} has no row", p.name));
            continue;
        };
        let actual: BTreeSet<String> = p.deps.iter().cloned().collect();
        if *listed != actual {
            let missing: Vec<_> = actual.difference(listed).collect();
            let extra: Vec<_> = listed.difference(&actual).collect();
            wrong.push(format!(
                "{}: the table lacks {missing:?} and names {extra:?}",
                p.name
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "ARCHITECTURE.md's \"depends on\" column differs from Cargo.toml:\n{}",
        wrong.join("\n")
    );
}

/// The "crate | owns | depends on" table of ARCHITECTURE.md: package name → the herald
/// packages its last column names (`—` for none; a parenthesis after a name says why).
fn dependency_table(doc: &str) -> BTreeMap<String, BTreeSet<String>> {
    let rows = doc
        .lines()
        .skip_while(|l| !l.starts_with("| crate | owns | depends on |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'));
    let mut table = BTreeMap::new();
    for row in rows {
        let cells = table_cells(row);
        let (Some(first), Some(last)) = (cells.first(), cells.last()) else {
            continue;
        };
        let ticked: Vec<&str> = first.split('`').skip(1).step_by(2).collect();
        let name = match ticked.iter().find(|t| t.starts_with("herald")) {
            Some(full) => full.to_string(),
            None => format!("herald-{}", ticked.first().copied().unwrap_or_default()),
        };
        let deps = top_level_commas(last)
            .iter()
            .map(|d| d.split('(').next().unwrap_or("").trim().trim_matches('`'))
            .filter(|d| !d.is_empty() && *d != "—")
            .map(|d| format!("herald-{d}"))
            .collect();
        table.insert(name, deps);
    }
    table
}

/// The cells of a Markdown table row (`\\|` is a pipe inside a cell).
fn table_cells(row: &str) -> Vec<String> {
    let mut cells = vec![String::new()];
    let mut escaped = false;
    for c in row.trim().trim_start_matches('|').chars() {
        match c {
            '|' if !escaped => cells.push(String::new()),
            _ => cells.last_mut().expect("a cell").push(c),
        }
        escaped = c == '\\';
    }
    cells.retain(|c| !c.trim().is_empty());
    cells.into_iter().map(|c| c.trim().to_string()).collect()
}

/// `a, b (x, y), c` → `["a", "b (x, y)", "c"]`.
fn top_level_commas(cell: &str) -> Vec<String> {
    let mut items = vec![String::new()];
    let mut depth = 0usize;
    for c in cell.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                items.push(String::new());
                continue;
            }
            _ => {}
        }
        items.last_mut().expect("an item").push(c);
    }
    items
}

#[test]
fn only_the_member_lifecycle_writes_member_state() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for p in workspace_packages() {
        if p.name == "herald-directory" || !p.src.exists() {
            continue; // the store defines the writes; its own callers are its business
        }
        for file in rust_files(&p.src) {
            let rel = file.strip_prefix(root).unwrap_or(&file);
            let rel = rel.to_string_lossy().replace('\\', "/");
            if rel == MEMBER_LIFECYCLE || is_test_file(&rel) {
                continue;
            }
            let text = std::fs::read_to_string(&file).expect("source is UTF-8");
            for (line, method) in member_writes(&text) {
                found.push(format!("{rel}:{line} calls {method}"));
            }
        }
    }
    assert!(
        found.is_empty(),
        "member state is written outside {MEMBER_LIFECYCLE} (call herald_lists::Membership):\n{}",
        found.join("\n")
    );
}

/// Test-only files: a `tests.rs` module or anything under a `tests/` folder.
fn is_test_file(rel: &str) -> bool {
    rel.ends_with("/tests.rs") || rel.contains("/tests/")
}

/// (line number, method) of every `.method(` call of [`MEMBER_WRITES`] in production code:
/// line comments are skipped, and so is the item after a top-level `#[cfg(test)]` (one line
/// ending in `;`, or a block up to its closing `}` in the first column).
fn member_writes(text: &str) -> Vec<(usize, &'static str)> {
    let mut out = Vec::new();
    let mut skipping = None::<bool>; // Some(true): inside a test block; Some(false): next item
    for (i, raw) in text.lines().enumerate() {
        match skipping {
            Some(true) => {
                if raw.starts_with('}') {
                    skipping = None;
                }
                continue;
            }
            Some(false) if raw.starts_with("#[") => continue,
            Some(false) => {
                skipping = (!raw.trim_end().ends_with(';') && !raw.trim_end().ends_with('}'))
                    .then_some(true);
                continue;
            }
            None if raw.starts_with("#[cfg(test)]") => {
                skipping = Some(false);
                continue;
            }
            None => {}
        }
        let code = raw.split("//").next().unwrap_or("");
        for method in MEMBER_WRITES {
            if code.contains(&format!(".{method}(")) {
                out.push((i + 1, *method));
            }
        }
    }
    out
}

/// Top-level module → the top-level modules its files name through `crate::`.
fn module_graph(src: &Path, root: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in rust_files(src) {
        if file == root {
            continue; // the crate root declares and re-exports everything: not a stage
        }
        let rel = file.strip_prefix(src).expect("under src");
        let top = rel
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .map(|s| s.trim_end_matches(".rs").to_string())
            .expect("a module name");
        let text = std::fs::read_to_string(&file).expect("source is UTF-8");
        let node = graph.entry(top.clone()).or_default();
        for target in crate_paths(&text) {
            if target != top {
                node.insert(target);
            }
        }
    }
    graph
}

/// The first segment after each `crate::` (and each name in `use crate::{a, b::{c, d}}`, over
/// several lines too), skipping line comments so that docs may mention any module.
fn crate_paths(text: &str) -> BTreeSet<String> {
    let code: String = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = BTreeSet::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        let after = &rest[at + "crate::".len()..];
        if let Some(group) = after.strip_prefix('{') {
            for item in top_level_items(group) {
                let name = item.split("::").next().unwrap_or("").trim();
                if is_module_name(name) {
                    out.insert(name.to_string());
                }
            }
        } else {
            let name: String = after
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if is_module_name(&name) && after[name.len()..].starts_with("::") {
                out.insert(name);
            }
        }
        rest = after;
    }
    out
}

/// The comma-separated items of a `{…}` group whose opening brace was just consumed, nested
/// groups kept whole.
fn top_level_items(group: &str) -> Vec<String> {
    let mut items = vec![String::new()];
    let mut depth = 0usize;
    for c in group.chars() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(String::new());
                continue;
            }
            _ => {}
        }
        if let Some(last) = items.last_mut() {
            last.push(c);
        }
    }
    items
}

/// Modules are snake_case; `crate::Type` (a re-export from the root) is not a module edge.
fn is_module_name(name: &str) -> bool {
    name.chars().next().is_some_and(|c| c.is_ascii_lowercase()) && name != "self"
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("readable source dir") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// A cycle in the graph, as the list of modules around it, if there is one (depth-first search
/// with colours).
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        marks: &mut BTreeMap<String, Mark>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match marks.get(node) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let from = path.iter().position(|n| n == node).unwrap_or(0);
                let mut cycle = path[from..].to_vec();
                cycle.push(node.to_string());
                return Some(cycle);
            }
            None => {}
        }
        marks.insert(node.to_string(), Mark::Open);
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, graph, marks, path) {
                return Some(c);
            }
        }
        path.pop();
        marks.insert(node.to_string(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for node in graph.keys() {
        if let Some(c) = visit(node, graph, &mut marks, &mut Vec::new()) {
            return Some(c);
        }
    }
    None
}

#[test]
fn the_module_scanner_reads_use_groups_and_ignores_comments() {
    let text = "use crate::{\n    actor::{Ctrl, BatchDone},\n    queue,\n};\n// crate::worker is fine here\nlet x = crate::health::HostKey::new();\nuse crate::Config;\n";
    let found: Vec<String> = crate_paths(text).into_iter().collect();
    assert_eq!(found, ["actor", "health", "queue"]);
    let mut g = BTreeMap::new();
    g.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    g.insert("b".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(
        find_cycle(&g),
        Some(vec!["a".into(), "b".into(), "a".into()])
    );
    g.insert("b".to_string(), BTreeSet::new());
    assert_eq!(find_cycle(&g), None);
}

#[test]
fn the_member_write_scanner_skips_comments_and_test_items() {
    let text = "fn f(d: &Directory) {\n    d.remove_member(l, &a)?; // d.set_delivery(l, &a, m)\n    m.unsubscribe(l, &a)?;\n    d\n        .add_member_consented(l, &n, &c)?;\n}\n#[cfg(test)]\nmod golden;\nfn g() { d.suppress(None, &a, r, s); }\n#[cfg(test)]\n#[allow(unused)]\nmod tests {\n    fn t() { d.add_members(l, &ms); }\n}\n";
    assert_eq!(
        member_writes(text),
        [
            (2, "remove_member"),
            (5, "add_member_consented"),
            (9, "suppress")
        ]
    );
    assert!(is_test_file("crates/lists/src/membership/tests.rs"));
    assert!(!is_test_file("crates/api/src/manage.rs"));
}
