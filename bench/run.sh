#!/usr/bin/env bash
# bench/run.sh <scenario>: one scenario against Herald and, on a fresh instance of the same
# simulated world, against Postfix; prints the comparison table (results/<scenario>-<time>/).
#
#   bench/run.sh mailman-8k | internet-100k | big-post | million | ten-million | herald-100k | hostile
#   DKIM=rsa|ed25519 [ARC=no] POSTFIX=no bench/run.sh mailman-8k   # Herald signing every copy
#   ARCHIVE=off POSTFIX=no bench/run.sh mailman-8k                 # Herald without the archive
#   TLS=yes bench/run.sh mailman-8k     # every receiver offers STARTTLS with a certificate for its
#                                       # name from the world's CA (bench/tls.sh: plain vs TLS)
#
# Needs root (receivers on port 25 and the world's DNS on 127.0.0.53:53, because Postfix only
# uses the system resolver; a private mount namespace gives Postfix its own /etc/resolv.conf, so
# nothing else on the machine is affected). Installs Postfix from Debian if absent. Everything
# listens on 127.0.0.0/8. Every wait is bounded; every process started here is stopped here.
#
# Per system and post:
#   1. `herald sim run` (its own process) starts the world and writes members.csv;
#   2. Herald: `herald serve` + `herald list create` + `herald member import`, then t0 and
#      `herald post`. Postfix: a private instance, then t0 and `herald-bench feed` submitting one
#      personalized copy per member (rendered by Herald's fan-out crate: the same bytes);
#      Postfix XVERP: the same, 500 recipients per message with XVERP (no personalization).
#   3. wait until the world has a copy for every deliverable member (or the scenario's timeout);
#   4. `herald sim report` (counts, t50/t95/t100, curve.png/svg), CPU and RSS from /proc.
set -euo pipefail

SCENARIO=${1:?usage: bench/run.sh <scenario>}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
SPEC="$HERE/scenarios/$SCENARIO.sh"
[ -f "$SPEC" ] || { echo "no scenario $SPEC" >&2; exit 2; }
# shellcheck source=/dev/null
source "$SPEC"
# TLS=yes: every receiver offers STARTTLS, each with a certificate for its own
# name issued by the world's CA (<world>/ca.pem), resuming sessions by tickets. Herald is told to
# trust that CA (so every certificate is verified, as on today's Internet); Postfix uses `may`.
TLS=${TLS:-no}
if [ "$TLS" = yes ]; then
  WORLD_ARGS="$WORLD_ARGS --starttls 1 --tls-ca"
fi

TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
HERALD=$TARGET/release/herald
# HERALD_SERVE=<another herald binary>: the Herald under test (serve, list, member, post), e.g. an
# older build for a before/after comparison; the world and its reports stay this tree's.
SERVE=${HERALD_SERVE:-$HERALD}
BENCH=$TARGET/release/herald-bench
RESULTS=${RESULTS:-$HERE/results/$SCENARIO-$(date +%Y%m%d-%H%M%S)}
WORK=${WORK:-/tmp/herald-bench-$SCENARIO}
LIST=bench@lists.herald.test
SECRET=herald-bench-secret
HTTP=127.0.0.1:18025
PF_SMTPD=127.0.0.1:2526
DNS=127.0.0.53:53
FOOTER='--
You get this as {{name}} <{{email}}>. Unsubscribe: {{unsubscribe_url}}'
PREFIX='[bench]'

log() { printf '%s %s\n' "$(date +%T)" "$*" >&2; }
now_ms() { date +%s%3N; }

if [ "${SKIP_BUILD:-}" != 1 ]; then
  log "building release binaries"
  (cd "$ROOT" && CARGO_TARGET_DIR=$TARGET cargo build --release -q -p herald -p herald-bench)
fi
[ "$(id -u)" = 0 ] || { echo "run as root (port 25, port 53, mount namespace)" >&2; exit 2; }
if [ "$POSTFIX" = yes ] && ! command -v postfix >/dev/null; then
  log "installing postfix from Debian"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postfix >/dev/null
fi

PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  [ -f "$WORK/pf/etc/main.cf" ] && postfix -c "$WORK/pf/etc" stop >/dev/null 2>&1 || true
}
trap cleanup EXIT

# wait_for <what> <seconds> <command...>: retry the command every 0.2 s until it succeeds.
wait_for() {
  local what=$1 secs=$2; shift 2
  local deadline=$(( $(date +%s) + secs ))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || { log "timed out waiting for $what"; return 1; }
    sleep 0.2
  done
}

# stop <pid>: SIGTERM, then wait up to 60 s (SIGKILL after that).
stop() {
  local pid=$1 i
  kill "$pid" 2>/dev/null || return 0
  for i in $(seq 300); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
  kill -9 "$pid" 2>/dev/null || true
}

start_world() { # <dir>
  local dir=$1
  # shellcheck disable=SC2086
  "$HERALD" sim run --run-dir "$dir/world" --smtp-port 25 --dns-addr "$DNS" \
    --check-mime-every 100 --members "$MEMBERS" $WORLD_ARGS >"$dir/world.log" 2>&1 &
  WORLD_PID=$!
  PIDS+=("$WORLD_PID")
  wait_for "the simulated world" 120 test -s "$dir/world/endpoint.json"
}

# Waits until every deliverable member has a copy, or the scenario's timeout; writes wall_secs.
wait_done() { # <dir> <t0_ms>
  local dir=$1 t0=$2 deadline=$(( $(date +%s) + TIMEOUT_SECS )) got want
  while :; do
    # Read with bash alone, no process per poll: two jq runs five times a second took ~8 % of
    # the machine's samples during the ten-million fan-out (perf), CPU the run measures.
    local s="" got=0 want=1
    { IFS= read -r -d '' s <"$dir/world/status.json"; } 2>/dev/null || true
    [[ $s =~ \"unique_recipients\":\ *([0-9]+) ]] && got=${BASH_REMATCH[1]}
    [[ $s =~ \"deliverable\":\ *([0-9]+) ]] && want=${BASH_REMATCH[1]}
    if [ "$got" -ge "$want" ] || [ "$EPOCHSECONDS" -ge "$deadline" ]; then break; fi
    sleep 0.2
  done
  echo "scale=3; ($(now_ms) - $t0) / 1000" | bc >"$dir/wall_secs"
  log "  $got of $want deliverable members have a copy after $(cat "$dir/wall_secs") s"
}

finish() { # <dir> <title>: stop the world, write report.json and the charts.
  local dir=$1
  stop "$WORLD_PID"
  "$HERALD" sim report "$dir/world" --json --title "$2" >"$dir/report.json"
  "$HERALD" sim report "$dir/world" --no-chart >"$dir/report.txt"
  # PROFILE_REPORTS="tarpit …": the same report for the members behind each kind of host.
  for kind in ${PROFILE_REPORTS:-}; do
    "$HERALD" sim report "$dir/world" --no-chart --profile "$kind" >"$dir/report-$kind.txt"
  done
}

# CPU seconds (user + system) a process has used so far, from /proc/<pid>/stat (fields 14, 15
# after the command name, which may hold spaces).
cpu_secs() { # <pid>; 0 when the process is gone
  [ -r "/proc/$1/stat" ] || { echo 0; return; }
  sed 's/^.*) //' "/proc/$1/stat" | awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($12 + $13) / hz }'
}

# The machine's busy and idle CPU seconds so far (all cores), from /proc/stat.
machine_secs() {
  awk -v hz="$(getconf CLK_TCK)" '/^cpu / {
    idle = $5 + $6; busy = $2 + $3 + $4 + $7 + $8 + $9
    printf "%.2f %.2f", busy / hz, idle / hz }' /proc/stat
}

run_herald() { # <dir> <post>
  local dir=$1 post=$2 t0
  start_world "$dir"
  mkdir -p "$dir/data"
  cat >"$dir/herald.toml" <<EOF
data_dir = "$dir/data"
hostname = "herald.bench.test"
secret = "$SECRET"
[server]
allow_root = true
[listen]
smtp = "127.0.0.1:12525"
lmtp = "127.0.0.1:12424"
http = "$HTTP"
[http]
public_base_url = "http://$HTTP"
[dns]
nameservers = ["$DNS"]
[delivery]
port = 25
helo_name = "herald.bench.test"
${HERALD_DELIVERY:-}
EOF
  if [ "$TLS" = yes ]; then
    sed -i "/^helo_name = /a tls_ca_file = \"$dir/world/ca.pem\"" "$dir/herald.toml"
  fi
  # DKIM=rsa|ed25519 signs every copy with a fresh key for the list domain (ARC=no: DKIM only).
  # The world does not verify; the cost is what this measures (BENCHMARKS.md).
  if [ -n "${DKIM:-}" ]; then
    "$HERALD" dkim keygen lists.herald.test --algorithm "$DKIM" --out-dir "$dir" >/dev/null
    printf '[dkim."lists.herald.test"]\nselector = "herald"\nkey_file = "%s"\nalgorithm = "%s"\narc = %s\n' \
      "$dir/lists.herald.test.herald.pem" "$DKIM" "$([ "${ARC:-yes}" = no ] && echo false || echo true)" \
      >>"$dir/herald.toml"
  fi
  # Experiments: HERALD_DELIVERY="tarpit_after_secs = 0" adds lines to [delivery] (above);
  # HERALD_SCHEDULER="max_queued_copies = 20000" adds a [scheduler] section.
  if [ -n "${HERALD_SCHEDULER:-}" ]; then
    printf '[scheduler]\n%s\n' "$HERALD_SCHEDULER" >>"$dir/herald.toml"
  fi
  # ARCHIVE=off runs Herald without the list archive (fan-out with and without it).
  if [ "${ARCHIVE:-on}" = off ]; then
    printf '[archive]\nenabled = false\n' >>"$dir/herald.toml"
  fi
  "$SERVE" serve --config "$dir/herald.toml" >"$dir/herald.log" 2>&1 &
  local hpid=$!
  PIDS+=("$hpid")
  wait_for "herald serve" 60 curl -sf "http://$HTTP/healthz"
  "$SERVE" --server "http://$HTTP" list create "$LIST" --name Bench --policy anyone \
    --prefix "$PREFIX" --footer="$FOOTER" >/dev/null
  local import_t0; import_t0=$(now_ms)
  "$SERVE" --server "http://$HTTP" member import "$LIST" "$dir/world/members.csv" >/dev/null
  echo "scale=3; ($(now_ms) - $import_t0) / 1000" | bc >"$dir/import_secs"
  log "  imported $MEMBERS members through the API in $(cat "$dir/import_secs") s"
  "$BENCH" watch --pid "$hpid" --stop-file "$dir/stop" --out "$dir/resources.json" \
    --max-secs $(( TIMEOUT_SECS + 120 )) &
  local wpid=$!
  local w0 h0 m0
  w0=$(cpu_secs "$WORLD_PID"); h0=$(cpu_secs "$hpid"); m0=$(machine_secs)
  t0=$(now_ms); echo "$t0" >"$dir/world/t0"
  "$SERVE" --server "http://$HTTP" post "$LIST" "$post" >/dev/null
  wait_done "$dir" "$t0"
  # From t0 to the last copy: CPU seconds of the world (the receivers, its own process), of
  # Herald, and of the whole machine (busy, idle), so a run says how much of the cores was left.
  local w1 h1 m1
  w1=$(cpu_secs "$WORLD_PID"); h1=$(cpu_secs "$hpid"); m1=$(machine_secs)
  echo "$w0 $w1 $h0 $h1 ${m0% *} ${m1% *} ${m0#* } ${m1#* }" | awk '{
    printf "world_cpu_secs %.2f\nherald_cpu_secs %.2f\nmachine_busy_secs %.2f\nmachine_idle_secs %.2f\n",
      $2 - $1, $4 - $3, $6 - $5, $8 - $7 }' >"$dir/cpu.txt"
  log "  CPU from t0: $(tr '\n' ' ' <"$dir/cpu.txt")"
  touch "$dir/stop"; wait "$wpid" || true
  stop "$hpid"
  finish "$dir" "Herald: $SCENARIO"
}

# The tuning a competent administrator gives a Postfix that fans out list mail.
write_postfix_config() { # <pfdir> <run dir (its world/ca.pem with TLS=yes)>
  local pf=$1
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
# MX lookups by DNS, against the simulated world (resolv.conf in Postfix's mount namespace).
smtp_host_lookup = dns
smtp_dns_support_level = enabled
smtp_tcp_port = 25
smtpd_relay_restrictions = permit_mynetworks, reject
smtpd_recipient_restrictions = permit_mynetworks, reject
smtpd_authorized_verp_clients = 127.0.0.0/8
# Bounces for the list go back to the list manager in real life; here they are discarded.
transport_maps = inline:{lists.herald.test=discard:}
alias_maps =
alias_database =
smtp_tls_security_level = may
# Tuning: enough processes and connections, no inflow throttle, big active queue.
default_process_limit = 500
default_destination_concurrency_limit = 50
initial_destination_concurrency = 10
smtp_destination_concurrency_limit = 50
smtpd_client_connection_count_limit = 0
smtpd_client_message_rate_limit = 0
in_flow_delay = 0
qmgr_message_active_limit = 200000
qmgr_message_recipient_limit = 200000
smtp_connection_cache_on_demand = yes
# Retry like Herald's defaults (60 s first retry) rather than Postfix's 300 s.
queue_run_delay = 30s
minimal_backoff_time = 60s
maximal_backoff_time = 300s
# Timeouts stay at Postfix's defaults (smtp_connect_timeout 30s, smtp_helo_timeout 300s).
EOF
  if [ "$TLS" = yes ]; then
    # What an administrator sending to TLS receivers sets: a client session cache (resumption
    # through tlsmgr) and reuse of TLS connections through tlsproxy (off by default: without
    # it Postfix's connection cache skips TLS sessions).
    cat >>"$pf/etc/main.cf" <<EOF
smtp_tls_session_cache_database = btree:\${data_directory}/smtp_scache
smtp_tls_connection_reuse = yes
smtp_tls_CAfile = $2/world/ca.pem
EOF
  fi
  # master.cf: no chroot (resolv.conf comes from the mount namespace), smtpd on $PF_SMTPD.
  sed -e 's/^smtp\( *inet.*\)$/#&/' /etc/postfix/master.cf |
    awk '$1 !~ /^#/ && NF >= 8 && $5 == "y" { $5 = "n" } { print }' >"$pf/etc/master.cf"
  printf "%s inet n - n - - smtpd\n" "$PF_SMTPD" \
    >>"$pf/etc/master.cf"
  # TLS=yes: smtp_tls_connection_reuse needs the tlsproxy service, commented out in Debian's.
  if [ "$TLS" = yes ]; then echo "tlsproxy unix - - n - 0 tlsproxy" >>"$pf/etc/master.cf"; fi
  echo "nameserver ${DNS%:*}" >"$pf/resolv.conf"
}

run_postfix() { # <dir> <post> <xverp yes|no>
  local dir=$1 post=$2 xverp=$3 pf="$WORK/pf" t0 master
  [ -f "$pf/etc/main.cf" ] && postfix -c "$pf/etc" stop >/dev/null 2>&1 || true
  rm -rf "$pf"
  start_world "$dir"
  write_postfix_config "$pf" "$dir"
  postfix -c "$pf/etc" check
  unshare --mount --propagation private -- sh -c \
    "mount --bind '$pf/resolv.conf' /etc/resolv.conf && postfix -c '$pf/etc' start" >/dev/null 2>&1
  wait_for "postfix" 30 test -s "$pf/queue/pid/master.pid"
  master=$(tr -d ' ' <"$pf/queue/pid/master.pid")
  wait_for "postfix smtpd" 30 bash -c "exec 3<>/dev/tcp/${PF_SMTPD%:*}/${PF_SMTPD#*:}"
  "$BENCH" watch --pid "$master" --tree --stop-file "$dir/stop" --out "$dir/resources.json" \
    --max-secs $(( TIMEOUT_SECS + 120 )) &
  local wpid=$!
  local extra=()
  [ "$xverp" = yes ] && extra=(--xverp)
  t0=$(now_ms); echo "$t0" >"$dir/world/t0"
  "$BENCH" feed --list "$LIST" --members "$dir/world/members.csv" --post "$post" \
    --to "$PF_SMTPD" --conns 8 --name Bench --prefix "$PREFIX" --footer="$FOOTER" \
    --secret "$SECRET" --base-url "http://$HTTP" --timeout-secs "$TIMEOUT_SECS" \
    "${extra[@]}" >"$dir/feed.json"
  log "  fed: $(cat "$dir/feed.json")"
  wait_done "$dir" "$t0"
  touch "$dir/stop"; wait "$wpid" || true
  postfix -c "$pf/etc" stop >/dev/null 2>&1 || true
  cp "$pf/maillog" "$dir/maillog" 2>/dev/null || true
  finish "$dir" "Postfix: $SCENARIO"
}

mkdir -p "$RESULTS" "$WORK"
RESULTS=$(cd "$RESULTS" && pwd) # absolute: Postfix reads world/ca.pem (TLS=yes) from its own cwd
{
  echo "scenario: $SCENARIO  date: $(date -u +%FT%TZ)  commit: $(git -C "$ROOT" rev-parse --short HEAD)"
  echo "machine: nproc=$(nproc), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(free -g | awk '/Mem/{print $2}') GB"
  echo "postfix: $(postconf -h mail_version 2>/dev/null || echo none)"
  echo "herald signing: ${DKIM:-none}${DKIM:+ (arc: ${ARC:-yes})}"
  echo "herald [delivery] extra: ${HERALD_DELIVERY:-none}"
  echo "receivers on TLS: $TLS"
  echo "herald under test: $SERVE"
} >"$RESULTS/machine.txt"
for spec in $POSTS; do
  kind=${spec%%:*} kb=${spec#*:}
  label="$kind-${kb}k"
  base="$RESULTS/$label"
  mkdir -p "$base"
  "$BENCH" post --kind "$kind" --kb "$kb" --list "$LIST" --id "bench-$SCENARIO-$label" \
    --out "$base/post.eml"
  log "$SCENARIO / $label: Herald"
  mkdir -p "$base/herald" && run_herald "$base/herald" "$base/post.eml"
  if [ "$POSTFIX" = yes ]; then
    log "$SCENARIO / $label: Postfix (one personalized copy per member)"
    mkdir -p "$base/postfix" && run_postfix "$base/postfix" "$base/post.eml" no
    if [ "$XVERP" = yes ]; then
      log "$SCENARIO / $label: Postfix XVERP best case (no personalization)"
      mkdir -p "$base/postfix-xverp" && run_postfix "$base/postfix-xverp" "$base/post.eml" yes
    fi
  fi
  echo "== $SCENARIO / $label ($MEMBERS members) =="
  "$BENCH" table "$base"
done
cat "$RESULTS/machine.txt"
rm -rf "$WORK"
