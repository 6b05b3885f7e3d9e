#!/usr/bin/env bash
# bench/intake.sh: durable intake — SENDERS concurrent SMTP senders, each
# posting POSTS_PER_SENDER small posts (KB KB each) to a list address, against Herald and, in the
# same run, against Postfix's smtpd; ROUNDS rounds alternating the two; the medians at the end.
#
#   sudo bench/intake.sh                                   # 100 senders x 100 posts, 3 rounds
#   SENDERS=100 POSTS_PER_SENDER=200 KB=2 ROUNDS=3 POSTFIX=no bench/intake.sh
#   ARCHIVE=off POSTFIX=no bench/intake.sh                 # Herald without the list archive
#   BLOCKING_THREADS=512 bench/intake.sh                   # Herald with [server] blocking_threads = 512
#
# One accepted post = `250` after DATA, and both systems answer it only once the post is on disk
# and fsync'd: Herald's spool group commit, Postfix's cleanup(8) queue file.
#   Herald: `herald serve` with a list (posting policy anyone) WITHOUT members: each post is
#     checked on arrival (SPF/DKIM/DMARC against the simulated world's DNS), spooled (group
#     commit, fsync), recorded for duplicate suppression, archived and expanded — to nobody, so
#     delivery is not the cost. (With one member each post is also a one-copy delivery; those
#     trail far behind the intake and take the CPU it would use: BENCHMARKS.md.)
#   Postfix: a private instance (own queue directory, no chroot) whose smtpd listens on
#     $PF_SMTPD; mail for the list's domain goes to the `discard:` transport, so each post is a
#     queue file written and fsync'd before 250, then removed by the discard agent.
# The client is `herald-bench intake` (crates/bench/src/intake.rs): one connection per sender,
# MAIL/RCPT/DATA pipelined, every post with its own Message-ID; it prints accepted posts/s and
# the p50/p99 of the time from the end of DATA to the 250.
#
# Needs root for Postfix (`postfix start`); Herald and the world run on unprivileged ports.
# Everything listens on 127.0.0.0/8; every process started here is stopped here; the work
# directory is removed at the end.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
HERALD=$TARGET/release/herald
SERVE=${HERALD_SERVE:-$HERALD}
BENCH=$TARGET/release/herald-bench
SENDERS=${SENDERS:-100}
POSTS_PER_SENDER=${POSTS_PER_SENDER:-100}
KB=${KB:-2}
ROUNDS=${ROUNDS:-3}
POSTFIX=${POSTFIX:-yes}
RESULTS=${RESULTS:-$HERE/results/intake-$(date +%Y%m%d-%H%M%S)}
WORK=${WORK:-$TARGET/herald-bench-intake}
LIST=bench@lists.herald.test
# Ports of their own, so a fan-out bench (bench/run.sh) may run beside this one.
HSMTP=127.0.0.1:13525
HTTP=127.0.0.1:19025
PF_SMTPD=127.0.0.1:2527

log() { printf '%s %s\n' "$(date +%T)" "$*" >&2; }

if [ "${SKIP_BUILD:-}" != 1 ]; then
  log "building release binaries"
  (cd "$ROOT" && CARGO_TARGET_DIR=$TARGET cargo build --release -q -p herald -p herald-bench)
fi
if [ "$POSTFIX" = yes ]; then
  [ "$(id -u)" = 0 ] || { echo "run as root for Postfix (or POSTFIX=no)" >&2; exit 2; }
  command -v postfix >/dev/null || { echo "postfix is not installed" >&2; exit 2; }
fi

PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  [ -f "$WORK/pf/etc/main.cf" ] && postfix -c "$WORK/pf/etc" stop >/dev/null 2>&1 || true
}
trap cleanup EXIT

wait_for() { # <what> <seconds> <command...>
  local what=$1 secs=$2; shift 2
  local deadline=$(( $(date +%s) + secs ))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || { log "timed out waiting for $what"; return 1; }
    sleep 0.2
  done
}

stop() { # <pid>: SIGTERM, then up to 60 s, then SIGKILL.
  local pid=$1 i
  kill "$pid" 2>/dev/null || return 0
  for i in $(seq 300); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
  kill -9 "$pid" 2>/dev/null || true
}

intake() { # <smtp addr> <out.json>
  "$BENCH" intake --to "$1" --rcpt "$LIST" --senders "$SENDERS" --posts "$POSTS_PER_SENDER" \
    --kb "$KB" --timeout-secs 900 >"$2"
  log "  $(cat "$2")"
}

run_herald() { # <dir>
  local dir=$1 wpid hpid
  mkdir -p "$dir/data"
  "$HERALD" sim run --run-dir "$dir/world" --smtp-port 0 --dns-addr 127.0.0.1:0 \
    --check-mime-every 100 --domains 1 >"$dir/world.log" 2>&1 &
  wpid=$!
  PIDS+=("$wpid")
  wait_for "the simulated world" 60 test -s "$dir/world/endpoint.json"
  cat >"$dir/herald.toml" <<EOF
data_dir = "$dir/data"
hostname = "herald.bench.test"
secret = "herald-bench-secret"
[server]
allow_root = true
# BLOCKING_THREADS=n: the runtime's blocking pool that size (0: Herald's default, 2 x cores, >= 4).
blocking_threads = ${BLOCKING_THREADS:-0}
[listen]
smtp = "$HSMTP"
http = "$HTTP"
[http]
public_base_url = "http://$HTTP"
# Every sender comes from 127.0.0.1 here; on the Internet they are 100 clients (Postfix
# exempts \$mynetworks from its per-client limits by default).
[smtp_in]
max_sessions_per_client = 0
max_sessions_per_network = 0
[dns]
nameservers = ["$(jq -r .dns_addr "$dir/world/endpoint.json")"]
[delivery]
port = $(jq -r .smtp_port "$dir/world/endpoint.json")
helo_name = "herald.bench.test"
EOF
  # ARCHIVE=off: Herald without the list archive (what the archive costs the intake).
  if [ "${ARCHIVE:-on}" = off ]; then
    printf '[archive]\nenabled = false\n' >>"$dir/herald.toml"
  fi
  "$SERVE" serve --config "$dir/herald.toml" >"$dir/herald.log" 2>&1 &
  hpid=$!
  PIDS+=("$hpid")
  wait_for "herald serve" 60 curl -sf "http://$HTTP/healthz"
  "$SERVE" --server "http://$HTTP" list create "$LIST" --name Bench --policy anyone >/dev/null
  intake "$HSMTP" "$dir/intake.json"
  # The stop with the backlog the intake left (posts still to archive and fan out): SIGTERM to
  # exit, in seconds (bounded; the rest is resumed from the spool).
  local t0=$(date +%s.%N)
  stop "$hpid"
  local took=$(echo "$(date +%s.%N) - $t0" | bc)
  log "  herald stopped in ${took} s"
  jq --argjson s "$took" '. + {stop_secs: $s}' "$dir/intake.json" >"$dir/intake.json.tmp" &&
    mv "$dir/intake.json.tmp" "$dir/intake.json"
  stop "$wpid"
  rm -rf "$dir/data" "$dir/world/events.jsonl"
}

run_postfix() { # <dir>
  local dir=$1 pf="$WORK/pf"
  [ -f "$pf/etc/main.cf" ] && postfix -c "$pf/etc" stop >/dev/null 2>&1 || true
  rm -rf "$pf"
  mkdir -p "$pf/etc" "$pf/queue" "$pf/data"
  chown postfix "$pf/data"
  cat >"$pf/etc/main.cf" <<EOF
compatibility_level = 3.6
queue_directory = $pf/queue
data_directory = $pf/data
maillog_file = $pf/maillog
maillog_file_prefixes = $pf
myhostname = postfix.bench.herald.test
mydestination =
inet_interfaces = 127.0.0.1
inet_protocols = ipv4
mynetworks = 127.0.0.0/8
relayhost =
smtpd_relay_restrictions = permit_mynetworks, reject
smtpd_recipient_restrictions = permit_mynetworks, reject
# The list's mail is accepted (queue file written and fsync'd), then discarded.
transport_maps = inline:{lists.herald.test=discard:}
alias_maps =
alias_database =
# Intake tuning: enough smtpd processes for every sender, no inflow throttle or client limits.
default_process_limit = 500
smtpd_client_connection_count_limit = 0
smtpd_client_connection_rate_limit = 0
smtpd_client_message_rate_limit = 0
in_flow_delay = 0
EOF
  sed -e 's/^smtp\( *inet.*\)$/#&/' /etc/postfix/master.cf |
    awk '$1 !~ /^#/ && NF >= 8 && $5 == "y" { $5 = "n" } { print }' >"$pf/etc/master.cf"
  printf "%s inet n - n - - smtpd\n" "$PF_SMTPD" >>"$pf/etc/master.cf"
  postfix -c "$pf/etc" check
  postfix -c "$pf/etc" start >/dev/null 2>&1
  wait_for "postfix smtpd" 30 bash -c "exec 3<>/dev/tcp/${PF_SMTPD%:*}/${PF_SMTPD#*:}"
  intake "$PF_SMTPD" "$dir/intake.json"
  postfix -c "$pf/etc" stop >/dev/null 2>&1 || true
  cp "$pf/maillog" "$dir/maillog" 2>/dev/null || true
}

mkdir -p "$RESULTS" "$WORK"
RESULTS=$(cd "$RESULTS" && pwd) WORK=$(cd "$WORK" && pwd)
{
  echo "intake: $SENDERS senders x $POSTS_PER_SENDER posts of $KB KB, $ROUNDS rounds"
  echo "date: $(date -u +%FT%TZ)  commit: $(git -C "$ROOT" rev-parse --short HEAD)"
  echo "machine: nproc=$(nproc), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
  echo "postfix: $(postconf -h mail_version 2>/dev/null || echo none)"
} >"$RESULTS/machine.txt"
for r in $(seq "$ROUNDS"); do
  log "round $r: Herald"
  run_herald "$WORK/herald-$r"
  cp "$WORK/herald-$r/intake.json" "$RESULTS/herald-$r.json"
  if [ "$POSTFIX" = yes ]; then
    log "round $r: Postfix"
    mkdir -p "$WORK/postfix-$r"
    run_postfix "$WORK/postfix-$r"
    cp "$WORK/postfix-$r/intake.json" "$RESULTS/postfix-$r.json"
  fi
done

median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
{
  cat "$RESULTS/machine.txt"
  printf '| system | posts/s (median) | p50 ms | p99 ms | accepted / refused (per round) | posts/s per round | stop s (per round) |\n'
  printf '|---|---:|---:|---:|---|---|---|\n'
  for sys in herald postfix; do
    ls "$RESULTS"/"$sys"-*.json >/dev/null 2>&1 || continue
    files=("$RESULTS"/"$sys"-*.json)
    rate=$(jq -r .posts_per_sec "${files[@]}" | median)
    p50=$(jq -r .p50_ms "${files[@]}" | median)
    p99=$(jq -r .p99_ms "${files[@]}" | median)
    counts=$(jq -r '"\(.accepted)/\(.refused)"' "${files[@]}" | paste -sd' ')
    rates=$(jq -r '.posts_per_sec | floor' "${files[@]}" | paste -sd' ')
    stops=$(jq -r '.stop_secs // "-"' "${files[@]}" | paste -sd' ')
    printf '| %s | %.0f | %.1f | %.1f | %s | %s | %s |\n' "$sys" "$rate" "$p50" "$p99" "$counts" "$rates" "$stops"
  done
} | tee "$RESULTS/table.md"
rm -rf "$WORK"
