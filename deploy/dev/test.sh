#!/usr/bin/env bash
# Runs every check: typecheck, lint, unit tests and end-to-end tests. See README.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash deploy/dev/bootstrap.sh --for-tests
# The end-to-end tests run real llama.cpp servers: build llama-server once per machine (cached
# under ~/.cache/zml/llama-server/; minutes the first time, with progress), or stop here saying why.
bash deploy/dev/llama-server.sh >/dev/null
exec npm run --silent check
