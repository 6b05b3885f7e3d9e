#!/usr/bin/env bash
# The versioned API against its own OpenAPI document: schemathesis (from PyPI,
# pinned, in a virtualenv under target/) generates requests for every operation in
# /api/v1/openapi.json and sends them to a real server — `herald demo --serve`, a simulated
# Internet and a list of members, with an admin token — and fails on any 5xx, any status,
# media type, header or body the document does not allow, any method not refused with 405,
# and any operation that answers without the token.
#
# Left out: GET /api/v1/backup (a tar of the whole data directory per call; tests/it/backup.rs
# covers it) and the two message/rfc822 uploads, which schemathesis cannot serialize (the e2e
# tests post real messages to them). The negative/positive data checks are not run: the
# document names formats and ranges, but not every cross-field rule a handler enforces.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
venv="$target/schemathesis-venv"
if [ ! -x "$venv/bin/st" ]; then
    if ! python3 -m venv "$venv" 2>/dev/null; then
        # Debian ships venv separately; CI installs it as it installs rspamd and PostgreSQL.
        SUDO=""
        [ "$(id -u)" = 0 ] || SUDO=sudo
        $SUDO apt-get update && $SUDO apt-get install -y python3-venv
        rm -rf "$venv"
        python3 -m venv "$venv"
    fi
    "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==4.32.5"
fi
cargo build --quiet --bin herald
work="$(mktemp -d)"
token="api-fuzz-token-$(date +%s%N)"
"$target/debug/herald" demo --members 200 --domains 10 --size-kb 2 --data-dir "$work/data" \
    --serve --serve-secs 900 --admin-token "$token" > "$work/server.log" 2>&1 &
server=$!
# The server dies of the kill: its status must not become this script's (set -e).
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true; rm -rf "$work"' EXIT
url=""
for _ in $(seq 1 240); do
    url="$(grep -m1 -o 'dashboard: http://[^ ]*' "$work/server.log" | cut -d' ' -f2 || true)"
    [ -n "$url" ] && break
    if ! kill -0 $server 2>/dev/null; then
        echo "herald demo exited early:" >&2
        cat "$work/server.log" >&2
        exit 1
    fi
    sleep 0.5
done
[ -n "$url" ] || { echo "herald demo did not start serving" >&2; cat "$work/server.log" >&2; exit 1; }
echo "schemathesis against ${url}api/v1/openapi.json"
# Two passes. Wrong admin tokens are throttled per client (five per 15 minutes, then 429 for any
# token from that client), and the ignored_auth check sends wrong tokens: run with it, the rest
# of the operations would mostly see 429. So every other check runs first with the right token,
# then ignored_auth alone (a refusal, 401 or 429, is what it wants).
run_st() {
    "$venv/bin/st" --config-file .ci/schemathesis.toml run "${url}api/v1/openapi.json" \
        -H "Authorization: Bearer $token" \
        --exclude-path /api/v1/backup \
        --exclude-path-regex '^/api/v1/lists/\{list\}/(posts|held)$' \
        --workers 1 "$@"
}
run_st --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,response_headers_conformance,unsupported_method,missing_required_header \
    --max-examples "${API_FUZZ_EXAMPLES:-50}" --phases examples,coverage,fuzzing
run_st --checks ignored_auth --max-examples 5 --phases examples,fuzzing
