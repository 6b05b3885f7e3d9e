#!/usr/bin/env bash
# bench/soak.sh: a busy site's load held against one `herald serve` for DURATION seconds, sampled
# every SAMPLE_EVERY seconds; then IDLE seconds without load (still sampled), Herald stopped,
# and a fresh `herald serve` started on the same data directory to compare its RSS with the
# drained one. Writes results/soak-<time>/ (samples.jsonl, table.md, check.txt, machine.txt).
#
#   bench/soak.sh                                        # 4 hours, a sample every 10 minutes
#   DURATION=1500 SAMPLE_EVERY=60 bench/soak.sh          # 25 minutes, a sample a minute
#   DURATION=120 SAMPLE_EVERY=30 IDLE=60 LIST_SIZES="2000 500 50" bench/soak.sh   # a smoke run
#   HERALD_SERVE=/path/to/older/herald bench/soak.sh     # before/after: another Herald under test
#
# The load (crates/bench/src/soak/): a simulated Internet of 300 domains with the usual trouble
# (WORLD_ARGS: 1 % of members on hung hosts, 1 % refusing, greylisting, slow, throttling,
# tarpits, unknown users); three lists (LIST_SIZES, default 20,000, 5,000 and 500 members)
# posted to in the shares WEIGHTS; SENDERS SMTP connections at RATE posts/s in total (bodies
# MIN_KB–MAX_KB, log-uniform), LMTP_SHARE of them over LMTP; CHURN_RATE membership changes/s
# through the HTTP API; BOUNCE_RATE DSNs/s to members' VERP addresses (the world only answers
# 5xx in the session; asynchronous bounces are sent by the load generator); /api/v1/status and
# /metrics polled every POLL_SECS.
#
# At each sample: Herald's RSS, fds and threads (/proc), its queue gauges (/metrics), spool and
# data-dir bytes on disk, SMTP acceptance latency p50/p99 of the interval (end of DATA to 250),
# copies/s the world accepted in the interval. At the end: the table, the per-hour slopes (least
# squares after the first 20 % of the load), drained-versus-fresh RSS, and soak-check (every
# copy against the posts and the membership changes: missing, duplicates, non-members).
#
# Runs anywhere on 127.0.0.0/8 without privileges: the world takes free ports (its DNS too),
# and Herald is pointed at them. Every wait is bounded; every process started here is stopped
# here; the work directory (data dir, world) is removed at the end unless KEEP_WORK=1.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
HERALD=$TARGET/release/herald
SERVE=${HERALD_SERVE:-$HERALD}
BENCH=$TARGET/release/herald-bench

DURATION=${DURATION:-14400}
SAMPLE_EVERY=${SAMPLE_EVERY:-600}
IDLE=${IDLE:-480}
RATE=${RATE:-2.9}
SENDERS=${SENDERS:-20}
LIST_SIZES=${LIST_SIZES:-20000 5000 500}
WEIGHTS=${WEIGHTS:-2,5,93}
POOL_PERCENT=${POOL_PERCENT:-10}
LMTP_SHARE=${LMTP_SHARE:-0.1}
CHURN_RATE=${CHURN_RATE:-3}
BOUNCE_RATE=${BOUNCE_RATE:-0.4}
MIN_KB=${MIN_KB:-5}
MAX_KB=${MAX_KB:-200}
POLL_SECS=${POLL_SECS:-5}
FRESH_SETTLE=${FRESH_SETTLE:-60}
SEED=${SEED:-42}
WORLD_ARGS=${WORLD_ARGS:---domains 300 --seed $SEED --hung 0.01 --refused 0.01 --greylist 0.02 --greylist-secs 60 --slow 0.03 --slow-delay-ms 500 --throttle 0.05 --tarpit 0.01 --unknown-users 0.005}
# HERALD_TOML: more lines for herald.toml (whole sections, e.g. "[scheduler]\nmax_queued_copies = 5000").
HERALD_TOML=${HERALD_TOML:-}
SMTP=${SMTP:-127.0.0.1:14525}
LMTP=${LMTP:-127.0.0.1:14424}
HTTP=${HTTP:-127.0.0.1:20025}
RESULTS=${RESULTS:-$HERE/results/soak-$(date +%Y%m%d-%H%M%S)}
WORK=${WORK:-/tmp/herald-soak-$$}
DOMAIN=lists.herald.test
NAMES=(soak-big soak-mid soak-small soak-4 soak-5 soak-6)

log() { printf '%s %s\n' "$(date +%T)" "$*" >&2; }

if [ "${SKIP_BUILD:-}" != 1 ]; then
  log "building release binaries"
  # Two builds, not one: built together, the two packages' features unify and `herald` could
  # differ from (and be rebuilt after) a plain `cargo build --release`.
  (cd "$ROOT" && CARGO_TARGET_DIR=$TARGET cargo build --release -q -p herald &&
    CARGO_TARGET_DIR=$TARGET cargo build --release -q -p herald-bench)
fi
for b in "$HERALD" "$SERVE" "$BENCH"; do [ -x "$b" ] || { echo "no $b" >&2; exit 2; }; done
command -v jq >/dev/null || { echo "jq is needed" >&2; exit 2; }

PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  [ "${KEEP_WORK:-}" = 1 ] || rm -rf "$WORK"
}
trap cleanup EXIT

wait_for() { # <what> <seconds> <command...>: retry every 0.2 s until it succeeds.
  local what=$1 secs=$2; shift 2
  local deadline=$(( $(date +%s) + secs ))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || { log "timed out waiting for $what"; return 1; }
    sleep 0.2
  done
}

stop() { # <pid>: SIGTERM, then up to 120 s, then SIGKILL. Prints the seconds it took.
  local pid=$1 t0 i
  t0=$(date +%s.%N)
  kill "$pid" 2>/dev/null || { echo 0; return 0; }
  for i in $(seq 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -0 "$pid" 2>/dev/null && { log "pid $pid still running after 120 s: SIGKILL"; kill -9 "$pid" 2>/dev/null || true; }
  echo "$(date +%s.%N) - $t0" | bc
}

rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }

mkdir -p "$RESULTS" "$WORK"
RESULTS=$(cd "$RESULTS" && pwd) WORK=$(cd "$WORK" && pwd)
read -r -a SIZES <<<"$LIST_SIZES"
[ "${#SIZES[@]}" -le "${#NAMES[@]}" ] || { echo "at most ${#NAMES[@]} lists" >&2; exit 2; }
TOTAL=0
for n in "${SIZES[@]}"; do TOTAL=$(( TOTAL + n + (n * POOL_PERCENT + 99) / 100 )); done

# 1. The world, on free ports; members.csv holds every list's members and pools.
log "starting the simulated world ($TOTAL addresses)"
# shellcheck disable=SC2086
"$HERALD" sim run --run-dir "$WORK/world" --smtp-port 0 --dns-addr 127.0.0.1:0 \
  --check-mime-every 100 --members "$TOTAL" $WORLD_ARGS >"$WORK/world.log" 2>&1 &
WORLD_PID=$!
PIDS+=("$WORLD_PID")
wait_for "the simulated world" 300 test -s "$WORK/world/endpoint.json"
DNS_ADDR=$(jq -r .dns_addr "$WORK/world/endpoint.json")
WORLD_PORT=$(jq -r .smtp_port "$WORK/world/endpoint.json")

# The members in a fixed shuffled order (the world writes them domain by domain), cut into
# each list's members and pool.
tail -n +2 "$WORK/world/members.csv" | shuf --random-source=<(yes "$SEED") >"$WORK/shuffled"
LIST_ARGS=() POOL_ARGS=() ADDRESSES=()
off=0
for i in "${!SIZES[@]}"; do
  n=${SIZES[$i]} p=$(( (SIZES[i] * POOL_PERCENT + 99) / 100 ))
  addr="${NAMES[$i]}@$DOMAIN"
  ADDRESSES+=("$addr")
  { echo "email,name"; sed -n "$((off + 1)),$((off + n))p" "$WORK/shuffled"; } >"$WORK/list-$i.csv"
  { echo "email,name"; sed -n "$((off + n + 1)),$((off + n + p))p" "$WORK/shuffled"; } >"$WORK/pool-$i.csv"
  off=$(( off + n + p ))
  LIST_ARGS+=(--list "$addr=$WORK/list-$i.csv")
  POOL_ARGS+=(--pool "$addr=$WORK/pool-$i.csv")
done

# 2. Herald.
mkdir -p "$WORK/data"
cat >"$WORK/herald.toml" <<EOF
data_dir = "$WORK/data"
hostname = "herald.soak.test"
secret = "herald-soak-secret"
[server]
allow_root = true
[listen]
smtp = "$SMTP"
lmtp = "$LMTP"
http = "$HTTP"
[http]
public_base_url = "http://$HTTP"
# Every sender comes from 127.0.0.1 here; on the Internet they are many clients.
[smtp_in]
max_sessions_per_client = 0
max_sessions_per_network = 0
[dns]
nameservers = ["$DNS_ADDR"]
[delivery]
port = $WORLD_PORT
helo_name = "herald.soak.test"
EOF
[ -n "$HERALD_TOML" ] && printf '%b\n' "$HERALD_TOML" >>"$WORK/herald.toml"

start_herald() { # <log>: starts `herald serve`, sets HPID, waits until it answers.
  "$SERVE" serve --config "$WORK/herald.toml" >>"$1" 2>&1 &
  HPID=$!
  PIDS+=("$HPID")
  wait_for "herald serve" 300 curl -sf "http://$HTTP/healthz"
}

start_herald "$WORK/herald.log"
for i in "${!ADDRESSES[@]}"; do
  "$SERVE" --server "http://$HTTP" list create "${ADDRESSES[$i]}" --name "Soak $i" \
    --policy anyone >/dev/null
  t=$(date +%s.%N)
  "$SERVE" --server "http://$HTTP" member import "${ADDRESSES[$i]}" "$WORK/list-$i.csv" >/dev/null
  log "  ${ADDRESSES[$i]}: imported ${SIZES[$i]} members in $(echo "$(date +%s.%N) - $t" | bc | cut -c1-6) s"
done

{
  echo "command: DURATION=$DURATION SAMPLE_EVERY=$SAMPLE_EVERY IDLE=$IDLE RATE=$RATE SENDERS=$SENDERS LIST_SIZES=\"$LIST_SIZES\" WEIGHTS=$WEIGHTS CHURN_RATE=$CHURN_RATE BOUNCE_RATE=$BOUNCE_RATE LMTP_SHARE=$LMTP_SHARE MIN_KB=$MIN_KB MAX_KB=$MAX_KB bench/soak.sh"
  echo "world: $WORLD_ARGS"
  echo "herald.toml extra: ${HERALD_TOML:-none}"
  echo "date: $(date -u +%FT%TZ)  commit: $(git -C "$ROOT" rev-parse --short HEAD)  herald under test: $SERVE"
  echo "machine: nproc=$(nproc), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(free -g | awk '/Mem/{print $2}') GB RAM, load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$RESULTS/machine.txt"
cat "$RESULTS/machine.txt" >&2

# 3. The load and the samples (bounded: the soak ends at DURATION + IDLE by itself).
log "load for $DURATION s, then idle for $IDLE s; a sample every $SAMPLE_EVERY s"
timeout $(( DURATION + IDLE + 600 )) "$BENCH" soak --smtp "$SMTP" --lmtp "$LMTP" --http "http://$HTTP" \
  "${LIST_ARGS[@]}" "${POOL_ARGS[@]}" --weights "$WEIGHTS" --senders "$SENDERS" --rate "$RATE" \
  --lmtp-share "$LMTP_SHARE" --min-kb "$MIN_KB" --max-kb "$MAX_KB" --churn-rate "$CHURN_RATE" \
  --bounce-rate "$BOUNCE_RATE" --poll-secs "$POLL_SECS" --duration "$DURATION" --idle "$IDLE" \
  --sample-every "$SAMPLE_EVERY" --pid "$HPID" --data-dir "$WORK/data" \
  --world-dir "$WORK/world" --out "$RESULTS" --seed "$SEED" 2>&1 | tee "$RESULTS/soak.log" >&2

# 4. Drained RSS is the last sample; now the same state in a fresh process.
log "stopping herald (drained RSS $(( $(rss_kb "$HPID") / 1024 )) MB)"
stop_secs=$(stop "$HPID")
log "  stopped in $stop_secs s; starting a fresh herald serve on the same data directory"
start_herald "$WORK/herald-fresh.log"
wait_for "herald /readyz" 300 curl -sf "http://$HTTP/readyz" || true
peak=0
for _ in $(seq "$FRESH_SETTLE"); do
  r=$(rss_kb "$HPID"); [ "$r" -gt "$peak" ] && peak=$r
  sleep 1
done
fresh=$(rss_kb "$HPID")
unfinished=$(curl -sf "http://$HTTP/metrics" | awk '$1 == "herald_unfinished_copies" { print $2 }')
deferred=$(curl -sf "http://$HTTP/metrics" | awk '$1 == "herald_deferred_copies" { print $2 }')
printf '{"rss_kb": %s, "peak_rss_kb": %s, "settle_secs": %s, "unfinished": %s, "deferred": %s, "stop_secs": %s}\n' \
  "$fresh" "$peak" "$FRESH_SETTLE" "${unfinished:-null}" "${deferred:-null}" "$stop_secs" >"$RESULTS/fresh.json"
log "  fresh herald: RSS $(( fresh / 1024 )) MB after $FRESH_SETTLE s (peak $(( peak / 1024 )) MB)"
stop "$HPID" >/dev/null
stop "$WORLD_PID" >/dev/null

# 5. The check and the table.
log "checking every copy against the posts and the membership changes"
"$BENCH" soak-check --dir "$RESULTS" --world-dir "$WORK/world" >/dev/null ||
  log "soak-check failed (see above)"
cp "$WORK/world/status.json" "$RESULTS/world-status.json" 2>/dev/null || true
tail -n 200 "$WORK/herald.log" >"$RESULTS/herald-tail.log" 2>/dev/null || true
grep -ciE ' (error|warn)' "$WORK/herald.log" >"$RESULTS/herald-warnings.count" 2>/dev/null || true
echo
cat "$RESULTS/machine.txt"
echo
"$BENCH" soak-report "$RESULTS"
