#!/usr/bin/env bash
# Installs LatentGate's build and test dependencies from Debian 12 packages.
# Idempotent and non-interactive: packages already present are not touched, and
# apt-get runs only when something is missing. Needs root (or sudo).
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libboost1.81-dev libssl-dev librocksdb-dev nlohmann-json3-dev libspdlog-dev
  libpcre2-dev libxxhash-dev libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev
  libvalijson-dev json-schema-test-suite  # grammar_test: an independent JSON Schema validator and the official suite
  python3-prometheus-client  # metrics_test reads /metrics with Prometheus' own parser too
  chromium libnss3-tools     # e2e_dashboard: the dashboard in headless Chromium, the local CA trusted through certutil
  libpq-dev libpqxx-dev libhiredis-dev  # billing/postgres (the ledger of record), Redis clients (docs/dependencies.md)
  postgresql redis-server    # tests start private instances of both (tests/support/); no service is started or used
  libzmq3-dev                # cache/kv_events: vLLM-format KV events over ZMQ PUB and ROUTER sockets
  python3-zmq python3-msgpack python3-cbor2  # kv_events_test: an independent subscriber and llm-d's key computation
  ${LG_EXTRA_PACKAGES:-}
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  sudo_cmd=()
  if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
  echo "install-deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
