#!/usr/bin/env bash
# Makes the bus credentials of the Kubernetes deployment and prints them as Secrets:
#
#   deploy/k8s/make-secrets.sh <creds-dir> [--batch-account <id> …] | kubectl apply -f -
#
# <creds-dir> is where `zml bus-credentials --tls` keeps the identities (one nkey seed per
# service, the nats-server authorization), the local CA and the server certificate for the
# names the servers are reached by. Keep it safe and out of the repository: seeds already in
# it are kept, so running this again only adds what is missing (e.g. a new --batch-account).
# Extra arguments go to `zml bus-credentials` (--rotate <identity>, --batch-account <id>).
#
# Secrets (namespace zml), each holding only what its pods need:
#   zml-nats-server         auth.conf, server.pem, server-key.pem, ca.pem   (nats)
#   zml-bus-<identity>      <identity>.nk, ca.pem   (intake, dispatcher, health-aggregator,
#                           attestation; admin for the fleet-apply Job and the `zml` CLI)
#   zml-bus-batch-<id>      batch-<id>.nk, ca.pem   (one per --batch-account)
set -euo pipefail
if [ $# -lt 1 ] || [ "${1#-}" != "$1" ]; then
  echo "usage: $0 <creds-dir> [--batch-account <id> …] [--rotate <identity> …]" >&2
  exit 2
fi
# Absolute, before moving to the repository root (where the `zml` CLI runs).
mkdir -p -m 700 "$1"
dir=$(cd "$1" && pwd)
shift
cd "$(dirname "$0")/../.."
namespace=zml
# Every name a client or a peer server dials: the Service (short and qualified), each pod
# behind the headless Service (routes), and loopback for `kubectl port-forward`.
hosts=(nats "nats.$namespace" "nats.$namespace.svc" "nats.$namespace.svc.cluster.local"
  "*.nats-headless.$namespace.svc.cluster.local" localhost 127.0.0.1)
host_args=()
for h in "${hosts[@]}"; do host_args+=(--host "$h"); done

# The CLI reports what it generated and kept; that goes to stderr, the Secrets to stdout.
npm run --silent zml -- bus-credentials --out "$dir" --tls "${host_args[@]}" "$@" >&2

secret() {
  local name=$1
  shift
  echo "---"
  kubectl create secret generic "$name" --namespace "$namespace" "$@" --dry-run=client -o yaml
}

secret zml-nats-server --from-file=auth.conf="$dir/auth.conf" \
  --from-file=server.pem="$dir/tls/server.pem" --from-file=server-key.pem="$dir/tls/server-key.pem" \
  --from-file=ca.pem="$dir/tls/ca.pem"
for seed in "$dir"/*.nk; do
  identity=$(basename "$seed" .nk)
  secret "zml-bus-$identity" --from-file="$identity.nk=$seed" --from-file=ca.pem="$dir/tls/ca.pem"
done
