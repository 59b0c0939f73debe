#!/usr/bin/env bash
# Runs every cargo-fuzz target (or the ones named) for SECONDS each (default
# 600), one after another, seeded from fuzz/seeds/ and with the JSON/CBOR
# dictionary, and prints each target's last libFuzzer status line
# (executions, coverage, corpus size). A crash or hang stops the run with
# the reproducer in fuzz/artifacts/<target>/.
#
#   scripts/fuzz.sh [SECONDS] [TARGET ...]
#
# Needs the nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-600}
shift || true
command -v cargo-fuzz >/dev/null || {
    echo "cargo-fuzz is not installed: run 'cargo install cargo-fuzz'" >&2
    exit 1
}
rustup run nightly rustc --version >/dev/null 2>&1 || {
    echo "the nightly toolchain is missing: run 'rustup toolchain install nightly'" >&2
    exit 1
}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || mapfile -t targets < <(cargo +nightly fuzz list)

for t in "${targets[@]}"; do
    mkdir -p "fuzz/corpus/$t"
    log="fuzz/artifacts/$t.log"
    mkdir -p fuzz/artifacts
    echo "== $t (${seconds} s)"
    cargo +nightly fuzz run "$t" "fuzz/corpus/$t" "fuzz/seeds/$t" -- \
        -dict=fuzz/json_cbor.dict -max_total_time="$seconds" -timeout=10 \
        -rss_limit_mb=2048 -print_final_stats=1 >"$log" 2>&1 || {
        echo "   FAILED: see $log"
        tail -30 "$log"
        exit 1
    }
    grep -E '^#[0-9]+' "$log" | tail -1 | sed 's/^/   /'
    grep -E 'stat::number_of_executed_units|stat::peak_rss_mb' "$log" | sed 's/^/   /'
    echo "   corpus: $(find "fuzz/corpus/$t" -type f | wc -l) files"
done
