#!/usr/bin/env bash
# Runs the Autobahn|Testsuite fuzzing client (every WebSocket conformance
# case) against a switchyard JSON-RPC WebSocket listener in its diagnostic
# echo mode (`echo = true`: the same accept, upgrade, framing, driver and
# outbox as any listener, with each message answered by itself).
#
#   scripts/autobahn.sh            # all cases except 12.* and 13.*
#   AUTOBAHN_CASES='1.*,2.*' scripts/autobahn.sh
#
# The testsuite is Python 2 code. The script finds a Python 2.7
# ($AUTOBAHN_PYTHON, python2.7 / python2 on PATH, or pyenv's 2.7.x),
# makes its own virtualenv in target/autobahn/venv and installs pinned
# versions there from PyPI. It fails, saying why, when no Python 2.7 exists.
#
# Cases 12.* and 13.* test permessage-deflate, which switchyard does not
# negotiate (a client offering it gets a connection without it); they
# would all be UNIMPLEMENTED, so they are excluded.
#
# Exits non-zero when any case ends other than OK, NON-STRICT or
# INFORMATIONAL. Reports: target/autobahn/reports/index.html.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
work="$root/target/autobahn"
mkdir -p "$work"

find_python2() {
  if [ -n "${AUTOBAHN_PYTHON:-}" ]; then echo "$AUTOBAHN_PYTHON"; return; fi
  for c in python2.7 python2; do
    if p="$(command -v "$c" 2>/dev/null)" && "$p" -c 'import sys; sys.exit(sys.version_info[:2] != (2, 7))' 2>/dev/null; then
      echo "$p"; return
    fi
  done
  local pyenv_root="${PYENV_ROOT:-$HOME/.pyenv}"
  for p in "$pyenv_root"/versions/2.7*/bin/python2.7; do
    if [ -x "$p" ]; then echo "$p"; return; fi
  done
  return 1
}

if ! py2="$(find_python2)"; then
  echo "autobahn: no Python 2.7 found (the Autobahn testsuite is Python 2 code)." >&2
  echo "autobahn: install one (e.g. 'pyenv install 2.7.18') or set AUTOBAHN_PYTHON." >&2
  exit 1
fi
echo "== python 2: $py2 ($("$py2" --version 2>&1))"

venv="$work/venv"
if [ ! -x "$venv/bin/wstest" ]; then
  echo "== virtualenv in $venv"
  "$py2" -m pip install --quiet --disable-pip-version-check --target "$work/virtualenv" virtualenv==20.15.1
  PYTHONPATH="$work/virtualenv" "$py2" -m virtualenv --quiet "$venv"
  echo "== pip install autobahntestsuite"
  "$venv/bin/pip" install --quiet --disable-pip-version-check autobahntestsuite==25.10.1
fi

echo "== cargo build --release --bin switchyard"
cargo build --release --bin switchyard

port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
cat >"$work/switchyard.toml" <<EOF
# The echo listener Autobahn talks to. Messages up to 16 MiB (case 9.*
# sends that much); loopback only.
[listeners.echo]
dialect = "jsonrpc-ws"
address = "127.0.0.1:$port"
path = "/"
echo = true
max_message_bytes = 20000000
# The outbox's byte budget must hold a maximal message.
outbox_max_bytes = 20000000
EOF

cases="${AUTOBAHN_CASES:-*}"
cases_json="$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1].split(",")))' "$cases")"
cat >"$work/fuzzingclient.json" <<EOF
{
  "outdir": "$work/reports",
  "servers": [{"agent": "switchyard", "url": "ws://127.0.0.1:$port/"}],
  "cases": $cases_json,
  "exclude-cases": ["12.*", "13.*"],
  "exclude-agent-cases": {}
}
EOF

rm -rf "$work/reports"
echo "== switchyard on 127.0.0.1:$port"
"$root/target/release/switchyard" run --config "$work/switchyard.toml" >"$work/switchyard.log" 2>&1 &
gateway=$!
trap 'kill "$gateway" 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  if python3 -c 'import socket,sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1)' "$port" 2>/dev/null; then
    break
  fi
  if ! kill -0 "$gateway" 2>/dev/null; then
    echo "autobahn: switchyard exited; its log:" >&2
    cat "$work/switchyard.log" >&2
    exit 1
  fi
  sleep 0.1
done

echo "== wstest -m fuzzingclient (cases: $cases)"
(cd "$work" && "$venv/bin/wstest" -m fuzzingclient -s "$work/fuzzingclient.json") >"$work/wstest.log" 2>&1

python3 "$root/scripts/autobahn_summary.py" "$work/reports/index.json"
