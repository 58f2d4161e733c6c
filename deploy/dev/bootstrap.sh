#!/usr/bin/env bash
# Makes a fresh machine ready: nats-server and promtool (Debian packages) and the npm workspace, which
# brings its own Node 24 (the `node` devDependency) ahead of the system Node on every npm
# script's PATH. Safe to run again: it only does what is missing.
set -euo pipefail
cd "$(dirname "$0")/../.."

# Debian packages the tests need: nats-server (unless NATS_URL names one), and promtool
# (from `prometheus`) to check the alerting rules in deploy/prometheus.
packages=()
if ! command -v nats-server >/dev/null 2>&1 && [ ! -x /usr/sbin/nats-server ] && [ -z "${NATS_URL:-}" ]; then
  packages+=(nats-server)
fi
if ! command -v promtool >/dev/null 2>&1; then packages+=(prometheus); fi
if [ "${#packages[@]}" -gt 0 ]; then
  echo "› installing ${packages[*]} (Debian packages)"
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; elif command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "${packages[*]} missing and this user cannot install packages; install them (or set NATS_URL for nats-server)" >&2
    exit 1
  fi
  $SUDO apt-get update -qq
  # --no-install-recommends: only promtool is needed, not the exporters Debian suggests.
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
fi

# Debian's Chromium, for the allowlist page's browser test (playwright-core drives it; no
# browser is ever downloaded by npm).
if [ ! -x /usr/bin/chromium ]; then
  echo "› installing chromium (Debian package)"
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; elif command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "chromium is missing and this user cannot install packages; install 'chromium'" >&2
    exit 1
  fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi

if ! command -v npm >/dev/null 2>&1; then
  echo "npm is missing: install Node.js (any version ≥ 20; the project brings its own Node 24)" >&2
  exit 1
fi

# Reinstall when the lock file changed since the last install.
stamp=node_modules/.zml-installed
if [ ! -f "$stamp" ] || [ package-lock.json -nt "$stamp" ] || [ ! -x node_modules/.bin/node ]; then
  echo "› installing dependencies (npm ci)"
  npm ci --no-audit --no-fund --loglevel=error
  touch "$stamp"
fi
