#!/usr/bin/env bash
# bench/tls.sh: "TLS everywhere" (what TLS costs when every receiver offers it) — mailman-8k (8,000 members at one domain, a
# 10 KB personalized post) with plaintext receivers and with every receiver on STARTTLS
# (`TLS=yes`: a certificate for its name from the world's CA, session tickets), for Herald and
# Postfix (`smtp_tls_security_level = may`), ROUNDS rounds alternating plaintext and TLS; prints
# the medians of copies/s (delivered / t100), TLS as a share of plaintext, and the receivers'
# full and resumed handshakes.
#
#   sudo bench/tls.sh                 # 3 rounds, Herald and Postfix
#   ROUNDS=3 POSTFIX=no sudo -E bench/tls.sh
#
# Each round is two `bench/run.sh mailman-8k` runs (XVERP=no), whose results directories are
# kept under $OUT (default bench/results/tls-<time>/).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
ROUNDS=${ROUNDS:-3}
OUT=${OUT:-$HERE/results/tls-$(date +%Y%m%d-%H%M%S)}
export POSTFIX=${POSTFIX:-yes} XVERP=no CARGO_TARGET_DIR=$TARGET

if [ "${SKIP_BUILD:-}" != 1 ]; then
  (cd "$ROOT" && cargo build --release -q -p herald -p herald-bench)
fi
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd) # absolute: Postfix reads the world's ca.pem from a directory of its own
for r in $(seq "$ROUNDS"); do
  for mode in plain tls; do
    tls=no
    [ "$mode" = tls ] && tls=yes
    RESULTS="$OUT/$mode-$r" TLS=$tls SKIP_BUILD=1 "$HERE/run.sh" mailman-8k >"$OUT/$mode-$r.log" 2>&1 ||
      { echo "round $r $mode failed; see $OUT/$mode-$r.log" >&2; exit 1; }
  done
done

median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
rate() { # <report.json>: delivered / t100, copies per second
  jq -r 'if .t100_ms then .delivered * 1000 / .t100_ms else 0 end' "$1"
}
{
  head -2 "$OUT/plain-1/machine.txt"
  printf 'rounds: %s\n\n' "$ROUNDS"
  printf '| system | plaintext copies/s | TLS copies/s | TLS / plaintext | per round (plain; TLS) | TLS handshakes full / resumed (per round) |\n'
  printf '|---|---:|---:|---:|---|---|\n'
  for sys in herald postfix; do
    [ -f "$OUT/plain-1/text-10k/$sys/report.json" ] || continue
    plain=() tlsr=() hs=()
    for r in $(seq "$ROUNDS"); do
      plain+=("$(rate "$OUT/plain-$r/text-10k/$sys/report.json")")
      tlsr+=("$(rate "$OUT/tls-$r/text-10k/$sys/report.json")")
      hs+=("$(jq -r '"\(.tls_full_handshakes)/\(.tls_resumed_handshakes)"' \
        "$OUT/tls-$r/text-10k/$sys/world/status.json")")
    done
    p=$(printf '%s\n' "${plain[@]}" | median)
    t=$(printf '%s\n' "${tlsr[@]}" | median)
    printf '| %s | %.0f | %.0f | %.0f %% | %s; %s | %s |\n' "$sys" "$p" "$t" \
      "$(echo "scale=4; 100 * $t / $p" | bc)" \
      "$(printf '%.0f ' "${plain[@]}")" "$(printf '%.0f ' "${tlsr[@]}")" "${hs[*]}"
  done
} | tee "$OUT/table.md"
