#!/usr/bin/env bash
# Brings the whole system up with a simulated demo fleet. See README.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash deploy/dev/bootstrap.sh
# A real llama.cpp node (ZML_REAL_NODE=llamacpp) needs llama-server: built once per machine
# (minutes, with progress) and cached, or the launcher stops here saying why.
if [ "${ZML_REAL_NODE:-}" = "llamacpp" ]; then
  bash deploy/dev/llama-server.sh >/dev/null
fi
# The project's own Node 24 (the `node` devDependency), run directly rather than through
# `npm run`: npm answers Ctrl-C by dying of SIGINT itself, while the launcher stops everything
# it started and exits 0.
exec node_modules/.bin/node deploy/dev/up.ts
