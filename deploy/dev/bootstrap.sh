#!/usr/bin/env bash
# Makes a fresh machine ready, doing only what is missing (safe to run again):
#   bootstrap.sh              what running ZML needs (up.sh): nats-server (Debian package) and
#                             the npm workspace, which brings its own Node 24 (the `node`
#                             devDependency) ahead of the system Node on every npm script's PATH;
#   bootstrap.sh --for-tests  that, plus what the test suite needs (test.sh): Debian's Python
#                             test tools, Chromium, promtool, kubectl, and the C++ toolchain
#                             (git, cmake, g++, make) that builds llama-server.
set -euo pipefail
cd "$(dirname "$0")/../.."
for_tests=false
[ "${1:-}" = "--for-tests" ] && for_tests=true

# Installs Debian packages (root, or through sudo); $1 says what they are for.
apt_install() {
  local why=$1
  shift
  echo "› installing $* (Debian packages, $why)"
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; elif command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "$* missing and this user cannot install packages: install them ($why)" >&2
    exit 1
  fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@" >/dev/null
}

if ! command -v nats-server >/dev/null 2>&1 && [ ! -x /usr/sbin/nats-server ] && [ -z "${NATS_URL:-}" ]; then
  apt_install "or set NATS_URL" nats-server
fi

# The local CA and server certificate of the bus (libs/bus-auth) are made with openssl.
if ! command -v openssl >/dev/null 2>&1; then
  apt_install "the bus's local TLS certificates" openssl
fi

if $for_tests; then
  # The Python SDK (libs/python-sdk) is tested on Debian's Python with Debian's httpx, cryptography,
  # pytest and mypy, so no Python package index is needed.
  if ! /usr/bin/python3 -c "import httpx, pytest, cryptography" >/dev/null 2>&1 || ! command -v mypy >/dev/null 2>&1; then
    apt_install "the Python SDK's tests" python3-httpx python3-cryptography python3-pytest mypy
  fi
  # Debian's Chromium, for the allowlist page's browser test (playwright-core drives it; no
  # browser is ever downloaded by npm).
  if [ ! -x /usr/bin/chromium ]; then
    apt_install "the allowlist page's browser test" chromium
  fi
  # promtool checks the Prometheus alert rules; only it is needed, not the exporters that
  # Debian's prometheus package recommends.
  if ! command -v promtool >/dev/null 2>&1; then
    apt_install "promtool for the alert rules' tests" --no-install-recommends prometheus
  fi
  # kubectl renders the Kubernetes manifests (`kubectl kustomize deploy/k8s`, offline) for
  # deploy/test/k8s.test.ts. Debian ships it as `kubernetes-client`; any kubectl already on
  # the PATH will do.
  if ! command -v kubectl >/dev/null 2>&1; then
    apt_install "kubectl for the Kubernetes manifests' tests" kubernetes-client
  fi
  # The end-to-end tests run real llama.cpp servers, built from source once per machine by
  # deploy/dev/llama-server.sh (test.sh runs it): git, cmake and Debian's g++.
  llama_tools=()
  for tool in git cmake g++ make; do command -v "$tool" >/dev/null 2>&1 || llama_tools+=("$tool"); done
  if [ ${#llama_tools[@]} -gt 0 ]; then
    apt_install "building llama-server for the end-to-end tests" "${llama_tools[@]}"
  fi
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

# Packages imported as built JavaScript (`dist/`), as their users do: the README's
# `@zml/client` example, and other workspaces. `turbo` rebuilds them before checks; this
# makes the example and single test runs work right away too.
if [ ! -f libs/client/dist/index.js ]; then
  echo "› building @zml/client"
  npm run --silent build -w @zml/client
fi
