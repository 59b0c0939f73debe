#!/usr/bin/env bash
# Installs what the test suite needs besides Rust, when missing:
#   - Node.js >= 18 with npm, and tests/node's locked dependencies
#     (ws, json-rpc-2.0, puppeteer-core) via `npm ci`;
#   - Debian's chromium, which the browser tests drive headless;
#   - Debian's nats-server (JetStream), which the persistent-subscription
#     tests start on a loopback port in a temp dir;
#   - curl (with HTTP/2), the client of the jsonrpc-http listener tests.
# Uses apt-get (Debian/Ubuntu, as root or through sudo). Safe to run again:
# what is present is left alone.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_packages=()
command -v node >/dev/null 2>&1 || apt_packages+=(nodejs)
command -v npm >/dev/null 2>&1 || apt_packages+=(npm)
# tests/stdio_upstream.rs runs tests/fixtures/stdio_tool.py.
command -v python3 >/dev/null 2>&1 || apt_packages+=(python3)
if [ -z "${SWITCHYARD_CHROMIUM:-}" ] && [ ! -x /usr/bin/chromium ] && [ ! -x /usr/bin/chromium-browser ]; then
  apt_packages+=(chromium)
fi
# Debian puts nats-server in /usr/sbin, not on a normal user's PATH (the
# tests look there too).
if [ -z "${SWITCHYARD_NATS_SERVER:-}" ] && ! command -v nats-server >/dev/null 2>&1 \
  && [ ! -x /usr/sbin/nats-server ]; then
  apt_packages+=(nats-server)
fi

if [ -z "${SWITCHYARD_CURL:-}" ] && ! command -v curl >/dev/null 2>&1; then
  apt_packages+=(curl)
fi

if [ "${#apt_packages[@]}" -gt 0 ]; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
  fi
  echo "== apt-get install ${apt_packages[*]}"
  $sudo apt-get update
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends "${apt_packages[@]}"
fi

echo "== node $(node --version), npm $(npm --version)"
echo "== npm ci (tests/node)"
(cd tests/node && npm ci --no-audit --no-fund)

chromium="${SWITCHYARD_CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}"
if [ -z "$chromium" ]; then
  echo "chromium is still missing after apt-get install" >&2
  exit 1
fi
echo "== $("$chromium" --version 2>/dev/null || echo "$chromium")"

nats="${SWITCHYARD_NATS_SERVER:-$(command -v nats-server || { [ -x /usr/sbin/nats-server ] && echo /usr/sbin/nats-server; } || true)}"
if [ -z "$nats" ]; then
  echo "nats-server is still missing after apt-get install" >&2
  exit 1
fi
echo "== $("$nats" --version 2>/dev/null || echo "$nats")"

curl="${SWITCHYARD_CURL:-$(command -v curl || true)}"
if [ -z "$curl" ]; then
  echo "curl is still missing after apt-get install" >&2
  exit 1
fi
echo "== $("$curl" --version 2>/dev/null | head -n 1)"
