#!/usr/bin/env bash
# Brings the whole system up with a simulated demo fleet. See README.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash deploy/dev/bootstrap.sh
exec npm run --silent up
