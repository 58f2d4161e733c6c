#!/usr/bin/env bash
# Runs every check: typecheck, lint, unit tests and end-to-end tests. See README.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash deploy/dev/bootstrap.sh --for-tests
exec npm run --silent check
