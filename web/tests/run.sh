#!/usr/bin/env bash
# The dashboard's and the web administration's browser tests, as CI runs them: Debian's chromium + playwright-core from npm (a
# pinned lock file, installed locally with `npm ci`), against the debug `herald` binary.
# With CI=true a missing browser is installed, and any failure fails the run; outside CI a
# missing chromium or node skips the test with a message.
set -euo pipefail
cd "$(dirname "$0")"
root="$(cd ../.. && pwd)"

if ! command -v chromium >/dev/null 2>&1; then
    if [ "${CI:-}" = "true" ]; then
        apt-get update && apt-get install -y chromium
    else
        echo "dashboard test skipped: no chromium (apt-get install chromium; CI installs it)"
        exit 0
    fi
fi
if ! command -v npm >/dev/null 2>&1; then
    if [ "${CI:-}" = "true" ]; then
        echo "dashboard test: node/npm missing in CI" >&2
        exit 1
    fi
    echo "dashboard test skipped: no node/npm"
    exit 0
fi
npm ci --no-audit --no-fund --silent
target="${CARGO_TARGET_DIR:-$root/target}"
(cd "$root" && cargo build --quiet --bin herald)
HERALD_BIN="$target/debug/herald" SCREENSHOT="$root/target/dashboard.png" node dashboard.test.mjs
HERALD_BIN="$target/debug/herald" SCREENSHOT="$root/target/webadmin.png" node webadmin.test.mjs
