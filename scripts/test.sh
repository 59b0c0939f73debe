#!/usr/bin/env bash
# The one test command: installs (or finds) what the test suite needs
# besides Rust, then runs the whole suite.
#
#   scripts/test.sh            # everything
#   scripts/test.sh --test pubsub   # arguments go to `cargo test`
#
# What it installs, only when missing (scripts/install-test-tools.sh, with
# apt-get on Debian/Ubuntu, as root or through sudo; idempotent and quick
# when everything is there):
#   - Node.js >= 18 with npm, and tests/node's locked dependencies (npm ci);
#   - Debian's chromium (the browser tests drive it headless);
#   - Debian's nats-server (the JetStream and NATS tests start it on a
#     loopback port in a temp dir).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-test-tools.sh

echo "== cargo test $*"
exec cargo test "$@"
