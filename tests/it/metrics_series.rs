//! The `/metrics` contract: every series name, label name and fixed label value, metric type
//! and HELP text a running server exposes, checked against `tests/golden/metrics_series.txt`.
//!
//! The Grafana dashboard (`docs/grafana-herald.json`), the web dashboard, the end-to-end tests
//! and `bench/` read these names; a change to the exposition code (e.g. moving it onto a
//! library) must leave this list unchanged, or change the golden file on purpose. Values are
//! not compared. Labels whose values come from traffic (destination classes, locks first used)
//! appear only once seen, so the server here is fresh and idle: what it shows is the fixed part.
//!
//! `/metrics` is OpenMetrics text written by `prometheus-client`: a counter's `HELP`/`TYPE`
//! name has no `_total` (its samples keep it), bucket bounds read `le="1.0"` and come first in
//! a labelled histogram's label set (order has no meaning to Prometheus), and a family
//! with no series yet (the per-destination table of an idle server) is left out entirely.
//!
//! Bless after an intended change: `HERALD_BLESS=1 cargo test --test it metrics_series::`.

use crate::support;

use herald_sim::World;
use std::collections::BTreeSet;
use std::path::Path;
use support::*;

const GOLDEN: &str = "tests/golden/metrics_series.txt";

/// One line per family (`TYPE`, `HELP`) and per series (name and labels, no value), sorted.
fn series_shape(exposition: &str) -> Vec<String> {
    let mut shape = BTreeSet::new();
    for line in exposition.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            shape.insert(format!("TYPE {rest}"));
        } else if let Some(rest) = line.strip_prefix("# HELP ") {
            shape.insert(format!("HELP {rest}"));
        } else if line.starts_with('#') || line.is_empty() {
            continue;
        } else {
            let (series, _value) = line.rsplit_once(' ').expect("series and value");
            shape.insert(format!("SERIES {series}"));
        }
    }
    shape.into_iter().collect()
}

#[tokio::test]
async fn metrics_exposition_keeps_every_series_type_and_help() {
    let world = World::start(world_config(&[], false)).await.expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let server = TestServer::start(server_config(&world, dir.path().join("data"))).await;
    let resp = reqwest::get(format!("{}/metrics", server.api))
        .await
        .expect("GET /metrics");
    assert_eq!(resp.status().as_u16(), 200);
    let text = resp.text().await.expect("body");
    server.stop().await;
    world.shutdown().await;

    let shape = series_shape(&text).join("\n") + "\n";
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join(GOLDEN);
    if std::env::var_os("HERALD_BLESS").is_some() {
        std::fs::write(&golden, &shape).expect("write golden");
    }
    let want = std::fs::read_to_string(&golden).expect("golden file (HERALD_BLESS=1 writes it)");
    if shape != want {
        let got: BTreeSet<&str> = shape.lines().collect();
        let wanted: BTreeSet<&str> = want.lines().collect();
        let gone: Vec<_> = wanted.difference(&got).collect();
        let new: Vec<_> = got.difference(&wanted).collect();
        panic!("/metrics changed.\nmissing now: {gone:#?}\nnew: {new:#?}");
    }
}
