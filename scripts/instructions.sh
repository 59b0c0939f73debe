#!/usr/bin/env bash
# Instructions per request on the gateway's thread, for every path of the
# allocation bench (benches/allocs.rs), beside its allocations per request.
#
#   scripts/instructions.sh                      # every path
#   INSTR_CASES='in place,holon' scripts/instructions.sh
#   INSTR_REQUESTS=2000 scripts/instructions.sh  # fewer measured requests
#   INSTR_CASES=minimal scripts/instructions.sh  # floor M, the minimal gateway
#                                                # (benches/minimal/gateway.rs), not run by default
#   ALLOCS_TELEMETRY=logs scripts/instructions.sh  # with the binary's log subscriber
#   ALLOCS_TELEMETRY=otel scripts/instructions.sh  # and span export on
#
# Each path runs alone under callgrind (valgrind's instruction counter:
# the same count on a busy machine as on an idle one). Collection is off
# at start and toggled on only inside the bench's `measured_requests`
# (`--toggle-collect`, which callgrind tracks per thread): thread G, the
# gateway's current-thread runtime, from the end of the warm-up until the
# client has every measured reply. The client's and the daemon's threads
# are never counted, so nothing is subtracted.
#
# The bench is built with `cargo bench --bench allocs --no-run` (the bench
# profile: optimised, with line tables for callgrind_annotate). Profiles
# stay in target/instructions/<path>.out; read one with
#   callgrind_annotate --inclusive=yes target/instructions/in-place.out
#
# Needs valgrind (callgrind); fails saying so when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v valgrind >/dev/null 2>&1; then
  echo "scripts/instructions.sh needs valgrind (callgrind); it is not on PATH" >&2
  exit 1
fi

requests="${INSTR_REQUESTS:-5000}"
cases="${INSTR_CASES:-in place,waiting,holon,Sideband JSON,Sideband CBOR,NDJSON → JSON-RPC,NDJSON → holon,NDJSON → Sideband}"
out=target/instructions
mkdir -p "$out"

bin="$(cargo bench --bench allocs --no-run 2>&1 | tee "$out/build.log" \
  | sed -n 's/.*Executable .*(\(.*allocs-[0-9a-f]*\)).*/\1/p' | tail -1)"
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
  echo "could not build the allocs bench; see $out/build.log" >&2
  exit 1
fi

echo "instructions and allocations on the gateway's thread per request: $requests measured requests per path, telemetry: ${ALLOCS_TELEMETRY:-no subscriber}"
echo
echo "| path | instructions / request | allocations / request | bytes / request |"
echo "|---|---|---|---|"
IFS=',' read -ra words <<<"$cases"
for word in "${words[@]}"; do
  word="$(echo "$word" | sed 's/^ *//; s/ *$//')"
  slug="$(echo "$word" | tr 'A-Z' 'a-z' | sed 's/[^a-z0-9]\{1,\}/-/g; s/^-//; s/-$//')${ALLOCS_TELEMETRY:+-$ALLOCS_TELEMETRY}"
  ALLOCS_CASES="$word" ALLOCS_REQUESTS="$requests" valgrind --tool=callgrind \
    --collect-atstart=no --toggle-collect='*measured_requests*' \
    --callgrind-out-file="$out/$slug.out" "$bin" >"$out/$slug.txt" 2>"$out/$slug.log" || {
    echo "the bench failed for '$word'; see $out/$slug.log" >&2
    exit 1
  }
  total="$(sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$out/$slug.out" | tail -1)"
  row="$(grep "^| $word" "$out/$slug.txt" | head -1)"
  name="$(echo "$row" | cut -d'|' -f2 | sed 's/^ *//; s/ *$//')"
  allocs="$(echo "$row" | cut -d'|' -f4 | tr -d ' ')"
  bytes="$(echo "$row" | cut -d'|' -f5 | tr -d ' ')"
  awk -v n="$name" -v t="$total" -v r="$requests" -v a="$allocs" -v b="$bytes" \
    'BEGIN { printf "| %s | %.0f | %s | %s |\n", n, t / r, a, b }'
done
