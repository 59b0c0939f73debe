#!/usr/bin/env bash
# The whole test suite, RUNS times in a row (default 10), while a CPU burner
# keeps every core busy: the suite must pass every time on a loaded machine,
# as CI's shared 2-core boxes are.
#
#   scripts/stress-tests.sh [RUNS]
#
# Each run is `cargo test --no-fail-fast` (every test binary, even after a
# failure); its output is kept in $STRESS_LOG_DIR (default: a new temp dir); a
# failed run's failing tests are printed. Exits non-zero if any run failed.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=${1:-10}
logs=${STRESS_LOG_DIR:-$(mktemp -d -t switchyard-stress.XXXXXX)}
mkdir -p "$logs"

echo "== building the tests once"
cargo test --no-run --quiet

burners=()
stop_burners() { [ ${#burners[@]} -eq 0 ] || kill "${burners[@]}" 2>/dev/null || true; }
trap stop_burners EXIT
for _ in $(seq "$(nproc)"); do
    (while :; do :; done) &
    burners+=($!)
done
echo "== ${#burners[@]} CPU burners running; $runs runs; logs in $logs"

passed=0
failed=0
for i in $(seq "$runs"); do
    start=$(date +%s)
    if cargo test --no-fail-fast >"$logs/run-$i.log" 2>&1; then
        passed=$((passed + 1))
        echo "run $i: ok ($(($(date +%s) - start)) s)"
    else
        failed=$((failed + 1))
        echo "run $i: FAILED ($(($(date +%s) - start)) s); failing tests:"
        grep -E '^test .* FAILED$|^    [a-z_0-9:]+$|panicked at' "$logs/run-$i.log" | head -20 | sed 's/^/    /'
    fi
done
echo "stress: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
