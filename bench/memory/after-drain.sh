#!/usr/bin/env bash
# bench/memory/after-drain.sh <herald-binary> <outdir> <members> <posts> <rate>
#
# Memory after a load with dead hosts, against a fresh process holding the same state
# (BENCHMARKS.md, "Memory after a drain"): a simulated world of 300 domains (1 % hung, 1 % refused,
# greylisting, slow), one list of <members>, <posts> SMTP posts of 5-200 KB at <rate> a second
# (post_load.py), then the live queue drains, IDLE seconds (default 120) pass, and a fresh
# `herald serve` starts on the same data directory. RSS and the queue gauges every 10 s in
# <outdir>/samples.txt. Fixed ports (world 2526, DNS 127.0.0.55:5354, Herald 13525/13424/13080),
# all on 127.0.0.0/8; no root needed. For a heap profile, build with `--features system-alloc`
# and run the server under heaptrack.
set -euo pipefail
H=$1; OUT=$2; MEMBERS=$3; POSTS=$4; RATE=$5
rm -rf "$OUT"; mkdir -p "$OUT/data"
DNS=127.0.0.55:5354; PORT=2526; HTTP=127.0.0.1:13080
"$H" sim run --run-dir "$OUT/world" --smtp-port $PORT --dns-addr $DNS --members $MEMBERS \
  --domains 300 --seed 42 --hung 0.01 --refused 0.01 --greylist 0.02 --slow 0.02 --unknown-users 0.005 \
  >"$OUT/world.log" 2>&1 &
WPID=$!
for i in $(seq 120); do [ -s "$OUT/world/endpoint.json" ] && break; sleep 0.5; done
cat >"$OUT/herald.toml" <<T
data_dir = "$OUT/data"
hostname = "herald.mem.test"
secret = "0123456789abcdef0123456789abcdef"
[server]
allow_root = true
[listen]
smtp = "127.0.0.1:13525"
lmtp = "127.0.0.1:13424"
http = "$HTTP"
[http]
public_base_url = "http://$HTTP"
[dns]
nameservers = ["$DNS"]
[delivery]
port = $PORT
helo_name = "herald.mem.test"
T
rss() { awk '/VmRSS/{print $2}' /proc/$1/status; }
metric() { curl -s http://$HTTP/metrics | awk -v m="$1" '$1==m{print $2}'; }
"$H" serve --config "$OUT/herald.toml" >"$OUT/herald.log" 2>&1 &
HPID=$!
for i in $(seq 120); do curl -sf http://$HTTP/healthz >/dev/null && break; sleep 0.5; done
"$H" --server http://$HTTP list create load@lists.herald.test --name Load --policy anyone >/dev/null
"$H" --server http://$HTTP member import load@lists.herald.test "$OUT/world/members.csv" >/dev/null
echo "start rss $(rss $HPID) kB"
( while kill -0 $HPID 2>/dev/null; do echo "$(date +%s) rss=$(rss $HPID) unfinished=$(metric herald_unfinished_copies) deferred=$(metric herald_deferred_copies) posts=$(metric herald_deferred_posts) inmem=$(metric herald_deferred_posts_in_memory)"; sleep 10; done ) >"$OUT/samples.txt" &
SPID=$!
python3 "$(dirname "$0")/post_load.py" load@lists.herald.test $POSTS $RATE
echo "after load rss $(rss $HPID) kB"
# wait for live work to drain: unfinished copies equal deferred ones (only parked left)
for i in $(seq 180); do u=$(metric herald_unfinished_copies); d=$(metric herald_deferred_copies); [ "${u%.*}" -le 50 ] && break; sleep 5; done
echo "drained (unfinished=$u deferred=$d) rss $(rss $HPID) kB"
sleep ${IDLE:-120}
grep -E "^(Rss|Anonymous|Private_Dirty)" /proc/$HPID/smaps_rollup || true
echo "idle rss $(rss $HPID) kB unfinished=$(metric herald_unfinished_copies) deferred=$(metric herald_deferred_copies) posts=$(metric herald_deferred_posts) inmem=$(metric herald_deferred_posts_in_memory)"
kill $HPID; wait $HPID || true
"$H" serve --config "$OUT/herald.toml" >"$OUT/herald2.log" 2>&1 &
HPID=$!
for i in $(seq 120); do curl -sf http://$HTTP/healthz >/dev/null && break; sleep 0.5; done
sleep 60
echo "fresh rss $(rss $HPID) kB unfinished=$(metric herald_unfinished_copies) deferred=$(metric herald_deferred_copies)"
kill $HPID; wait $HPID || true
kill $SPID $WPID 2>/dev/null || true
