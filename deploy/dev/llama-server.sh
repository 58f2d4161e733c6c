#!/usr/bin/env bash
# Builds llama.cpp's `llama-server` once per machine and prints where it is, for the test suite
# (test/e2e/llamacpp-nodes.test.ts) and `ZML_REAL_NODE=llamacpp ./deploy/dev/up.sh`.
#
# The source is the llama.cpp tree that the npm package node-llama-cpp ships as a git bundle
# (`llama/gitRelease.bundle`), pinned below: `npm pack` fetches it from the npm registry without
# running any install script, `git clone` opens the bundle, and cmake with Debian's g++ builds
# only the server, CPU only, statically linked. The binary is cached under
#   ${XDG_CACHE_HOME:-~/.cache}/zml/llama-server/<node-llama-cpp version>/llama-server
# and reused while it is there. A build takes a few minutes to a quarter of an hour on 2 cores.
#
#   llama-server.sh                    build unless cached; print the binary's path (last line)
#   llama-server.sh --prebuilt FILE    put an llama-server already built from this same source
#                                      into the cache instead of building (it must run)
#   llama-server.sh --print-path       print where the binary is or would be; build nothing
#
# Anything that goes wrong stops it with a message and a non-zero status: nothing is skipped.
set -euo pipefail

NODE_LLAMA_CPP_VERSION=3.21.1
cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/zml/llama-server"
cache_dir="$cache_root/$NODE_LLAMA_CPP_VERSION"
binary="$cache_dir/llama-server"

say() { echo "› llama-server: $*" >&2; }
fail() {
  echo "✗ llama-server: $*" >&2
  exit 1
}

prebuilt=""
case "${1:-}" in
  "") ;;
  --print-path)
    echo "$binary"
    exit 0
    ;;
  --prebuilt)
    prebuilt="${2:-}"
    [ -n "$prebuilt" ] || fail "--prebuilt needs the path of an llama-server binary"
    ;;
  *) fail "unknown argument '$1' (use --prebuilt FILE or --print-path)" ;;
esac

# A binary is usable when it starts and tells its version.
usable() { "$1" --version >/dev/null 2>&1; }

if [ -x "$binary" ] && usable "$binary"; then
  say "cached ($("$binary" --version 2>&1 | grep -m1 '^version' || echo 'version unknown')): $binary"
  echo "$binary"
  exit 0
fi

mkdir -p "$cache_dir"
# One build at a time per machine: a second run waits for the first and then reuses its binary.
exec 9>"$cache_dir/.lock"
if ! flock -n 9; then
  say "another build is running; waiting for it"
  flock 9
  if [ -x "$binary" ] && usable "$binary"; then
    say "built by the other run: $binary"
    echo "$binary"
    exit 0
  fi
fi

if [ -n "$prebuilt" ]; then
  [ -x "$prebuilt" ] || fail "$prebuilt is not an executable file"
  usable "$prebuilt" || fail "$prebuilt does not run (--version failed)"
  cp "$prebuilt" "$binary.partial"
  mv "$binary.partial" "$binary"
  {
    echo "source: copied from $prebuilt by llama-server.sh --prebuilt"
    "$binary" --version 2>&1
  } >"$cache_dir/BUILD-INFO"
  say "cached a prebuilt binary: $binary"
  echo "$binary"
  exit 0
fi

say "not built yet on this machine: building it once from node-llama-cpp@$NODE_LLAMA_CPP_VERSION"
say "(the end-to-end tests run real llama.cpp servers; the binary is cached for later runs)"

# Tools: git and a C++ toolchain with cmake, from Debian when missing.
missing=()
command -v git >/dev/null 2>&1 || missing+=(git)
command -v cmake >/dev/null 2>&1 || missing+=(cmake)
command -v g++ >/dev/null 2>&1 || missing+=(g++)
command -v make >/dev/null 2>&1 || missing+=(make)
command -v npm >/dev/null 2>&1 || fail "npm is missing: install Node.js first (see README.md)"
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]} (Debian packages, to build llama-server)"
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; elif command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    fail "${missing[*]} missing and this user cannot install packages: install them"
  fi
  $SUDO apt-get update -qq || fail "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null ||
    fail "could not install ${missing[*]}"
fi

work=$(mktemp -d "$cache_root/build-XXXXXX")
log="$work/build.log"
keep_log() {
  # Leaves the log where the failure message says it is.
  [ -f "$log" ] && cp "$log" "$cache_dir/last-failed-build.log" || true
  rm -rf "$work"
}
trap keep_log EXIT
started=$(date +%s)
elapsed() { echo "$(($(date +%s) - started)) s"; }

say "1/4 fetching node-llama-cpp@$NODE_LLAMA_CPP_VERSION from the npm registry (npm pack, no install scripts)"
(cd "$work" && npm pack "node-llama-cpp@$NODE_LLAMA_CPP_VERSION" --silent >>"$log" 2>&1) ||
  fail "npm pack failed; log: $cache_dir/last-failed-build.log"
tar -xzf "$work"/node-llama-cpp-*.tgz -C "$work" package/llama/gitRelease.bundle ||
  fail "the package has no llama/gitRelease.bundle"

say "2/4 opening the llama.cpp source bundle (git clone)"
git clone -q "$work/package/llama/gitRelease.bundle" "$work/src" >>"$log" 2>&1 ||
  fail "git clone of the bundle failed; log: $cache_dir/last-failed-build.log"
commit=$(git -C "$work/src" rev-parse --short HEAD)
say "   llama.cpp commit $commit"

say "3/4 configuring (cmake: Release, CPU only, static, no web UI, no TLS, no curl)"
cmake -S "$work/src" -B "$work/build" \
  -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
  -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF \
  >>"$log" 2>&1 || fail "cmake configure failed; log: $cache_dir/last-failed-build.log"

jobs="${ZML_BUILD_JOBS:-$(nproc)}"
say "4/4 compiling llama-server with $jobs job(s); this is the long step (minutes). Progress:"
# make prints "[ NN%]" on each step: say each new tenth, and otherwise a new percentage at
# most once a minute (some single files take minutes), with the time taken so far.
last_tenth=-1
said_percent=-1
last_said=$(date +%s)
set +e
cmake --build "$work/build" --target llama-server -j "$jobs" 2>&1 | tee -a "$log" |
  while IFS= read -r line; do
    if [[ $line =~ ^\[\ *([0-9]+)%\] ]]; then
      percent=${BASH_REMATCH[1]}
      tenth=$((percent / 10))
      now=$(date +%s)
      if [ "$tenth" -gt "$last_tenth" ] || { [ "$percent" -gt "$said_percent" ] && [ $((now - last_said)) -ge 60 ]; }; then
        last_tenth=$tenth
        said_percent=$percent
        last_said=$now
        say "   $percent% after $(elapsed)"
      fi
    fi
  done
status=${PIPESTATUS[0]}
set -e
[ "$status" -eq 0 ] || fail "compilation failed (status $status); log: $cache_dir/last-failed-build.log"

built="$work/build/bin/llama-server"
usable "$built" || fail "the built llama-server does not run; log: $cache_dir/last-failed-build.log"
cp "$built" "$binary.partial"
mv "$binary.partial" "$binary"
{
  echo "source: node-llama-cpp@$NODE_LLAMA_CPP_VERSION llama/gitRelease.bundle, commit $commit"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) in $(elapsed)"
  "$binary" --version 2>&1
} >"$cache_dir/BUILD-INFO"
rm -f "$log" "$cache_dir/last-failed-build.log"
say "built in $(elapsed): $binary"
echo "$binary"
