#!/usr/bin/env bash
# End-to-end tests with real clients: starts `latentgate serve` on its
# embedded default (a fresh data dir: the demo model made at first start, a
# local CA) on a free port, then runs the openai SDK tests with the CA trusted
# through NODE_EXTRA_CA_CERTS (billing's too), Codex CLI through a custom
# Responses provider, GET /metrics (with a metrics token set), and curl's
# view of the SSE framing.
# dashboard.test.mjs (ctest e2e_dashboard) runs on a server of its own:
# run.sh BINARY dashboard.test.mjs; it needs Chromium (scripts/install-deps.sh)
# and skips (77) without it. Its screenshots go to $LG_ARTIFACTS_DIR (default:
# the build directory's test-artifacts/).
# Usage: run.sh LATENTGATE_BINARY [TEST.mjs ...]  (default: all but the dashboard's)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
binary=$1
if [[ " ${*:2} " == *" dashboard.test.mjs "* ]]; then
  chromium=${LG_CHROMIUM:-/usr/bin/chromium}
  if [[ ! -x $chromium ]] || ! command -v certutil >/dev/null; then
    echo "e2e: $chromium or certutil not found (scripts/install-deps.sh installs chromium and libnss3-tools): the dashboard test is SKIPPED"
    exit 77
  fi
  export LG_ARTIFACTS_DIR=${LG_ARTIFACTS_DIR:-$(cd "$(dirname "$binary")/.." && pwd)/test-artifacts}
fi
# The pinned npm packages (installed once by ctest's e2e_npm_install first).
"$here/install.sh" || exit $?
data=$(mktemp -d /tmp/lg-e2e-XXXXXX)
log=$data.log
export LG_ADMIN_KEY=e2e-admin-key-0123456789
export LG_METRICS_TOKEN=e2e-metrics-token-0123456789
# Every client here is on 127.0.0.1, and clients keep idle connections open:
# budgets.test.mjs's 64 concurrent SDK requests leave 64 in fetch's pool,
# and the test's next admin call (node:https, a pool of its own) met the
# per-address cap (64, meant for one client: docs/security.md) and was
# closed at accept (ECONNRESET, once, in a CI run). The cap is edge_test's
# to test; here one address stands for many clients.
LATENTGATE_SERVER_MAX_CONNECTIONS_PER_ADDRESS=1024 \
LATENTGATE_ADMIN_KEY=$LG_ADMIN_KEY LATENTGATE_SERVER_METRICS_TOKEN=$LG_METRICS_TOKEN "$binary" serve --data-dir "$data" --listen 127.0.0.1:0 >"$log" 2>&1 &
pid=$!
cleanup() { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$data" "$log"; }
trap cleanup EXIT
for _ in $(seq 1 600); do
  grep -q "serving .* at https://" "$log" && break
  kill -0 "$pid" 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.2
done
line=$(grep -m1 "serving .* at https://" "$log") || { cat "$log"; exit 1; }
export LG_URL=$(sed -E 's#.* at (https://[^ ]+)/v1.*#\1#' <<<"$line")
export LG_MODEL=$(sed -E 's#.*serving ([^ ]+) at.*#\1#' <<<"$line")
export NODE_EXTRA_CA_CERTS=$data/tls/ca.crt
status=0
shift
if [[ $# -gt 0 ]]; then
  node --test --test-concurrency=1 "${@/#/$here/}" || status=1
else
  node --test --test-concurrency=1 "$here/openai_sdk.test.mjs" "$here/billing.test.mjs" "$here/budgets.test.mjs" "$here/codex.test.mjs" "$here/metrics.test.mjs" "$here/structured.test.mjs" || status=1
  "$here/curl_sse.sh" || status=1
fi
[[ $status == 0 ]] || { echo "--- server log"; tail -50 "$log"; }
exit $status
