#!/usr/bin/env bash
# Coverage-guided fuzzing on stable Rust: builds the libFuzzer targets in fuzz/ with
# SanitizerCoverage flags (stable -C options, no -Z, no nightly) and runs each target for a
# bounded time. Fails on the first crash, timeout or out-of-memory and prints the reproducer.
#
#   .ci/fuzz.sh                      # every target, FUZZ_SECONDS (default 60) each
#   .ci/fuzz.sh smtp_session         # one target
#   FUZZ_SECONDS=600 .ci/fuzz.sh     # a longer local run
#
# Needs only what `.ci/run` needs (Rust and a C++ compiler): libfuzzer-sys builds libFuzzer
# from its bundled sources. See fuzz/README.md for why libFuzzer and how to reproduce a crash.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${FUZZ_SECONDS:-60}"
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(smtp_session footer_splice bounce_parse)

# An explicit --target keeps RUSTFLAGS off build scripts and proc macros (instrumented, they
# would not load into rustc); a target dir of its own keeps the normal build's cache intact.
host="$(rustc -vV | sed -n 's/^host: //p')"
export CARGO_TARGET_DIR="${FUZZ_TARGET_DIR:-target/fuzz}"
export RUSTFLAGS="-Cpasses=sancov-module \
 -Cllvm-args=-sanitizer-coverage-level=4 \
 -Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
 -Cllvm-args=-sanitizer-coverage-pc-table \
 -Cllvm-args=-sanitizer-coverage-trace-compares \
 --cfg fuzzing"

# The `fuzz` profile (Cargo.toml): release with debug assertions and overflow checks.
echo "== fuzz: build (${host}, SanitizerCoverage, the fuzz profile: release with debug assertions)"
cargo build --locked --profile fuzz -p herald-fuzz --features libfuzzer --bins --target "$host"
bin_dir="$CARGO_TARGET_DIR/$host/fuzz"

max_len() {
    case "$1" in
        footer_splice) echo 8192 ;;
        *) echo 16384 ;;
    esac
}

for t in "${targets[@]}"; do
    seeds="fuzz/corpus/$t"
    work="$CARGO_TARGET_DIR/corpus/$t"      # new inputs go here, never into the committed seeds
    artifacts="$CARGO_TARGET_DIR/artifacts/$t"
    mkdir -p "$work" "$artifacts"
    echo "== fuzz: $t for ${seconds}s"
    log="$CARGO_TARGET_DIR/$t.log"
    if ! "$bin_dir/$t" "$work" "$seeds" \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -max_len="$(max_len "$t")" -artifact_prefix="$artifacts/" \
        -print_final_stats=1 >"$log" 2>&1; then
        tail -n 60 "$log"
        echo "FUZZ FAILURE in $t. Reproducer(s):"
        ls -1 "$artifacts"/* 2>/dev/null || true
        echo "Replay: $bin_dir/$t <file>; then add it under fuzz/regressions/$t/ (cargo test replays it)."
        exit 1
    fi
    grep -E '^(stat::number_of_executed_units|stat::new_units_added)|^Done ' "$log" || tail -n 3 "$log"
done
echo "== fuzz: no crash"
