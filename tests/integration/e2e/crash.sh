#!/usr/bin/env bash
# The ledger through a crash (tests/e2e/crash.test.mjs): starts its own
# `latentgate serve` on a fresh data dir (which makes the local CA, so that
# node can trust it from the start through NODE_EXTRA_CA_CERTS), then the
# test loads it with the openai SDK, kills it with SIGKILL mid-load, starts it
# again on the same data dir and checks the ledger against what the clients
# saw complete.
# Usage: crash.sh LATENTGATE_BINARY
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
binary=$1
# The pinned npm packages (installed once by ctest's e2e_npm_install first).
"$here/install.sh" || exit $?
data=$(mktemp -d /tmp/lg-crash-XXXXXX)
export LG_ADMIN_KEY=e2e-crash-admin-key-0123456789
export LG_BINARY=$binary LG_DATA=$data/data LG_RESTART_PID_FILE=$data/restarted.pid
LATENTGATE_ADMIN_KEY=$LG_ADMIN_KEY "$binary" serve --data-dir "$LG_DATA" --listen 127.0.0.1:0 >"$data/first.log" 2>&1 &
pid=$!
cleanup() {
  kill "$pid" 2>/dev/null || true
  if [[ -f $LG_RESTART_PID_FILE ]]; then kill "$(cat "$LG_RESTART_PID_FILE")" 2>/dev/null || true; fi
  wait 2>/dev/null || true
  rm -rf "$data"
}
trap cleanup EXIT
for _ in $(seq 1 600); do
  grep -q "serving .* at https://" "$data/first.log" && break
  kill -0 "$pid" 2>/dev/null || { cat "$data/first.log"; exit 1; }
  sleep 0.2
done
line=$(grep -m1 "serving .* at https://" "$data/first.log") || { cat "$data/first.log"; exit 1; }
export LG_URL=$(sed -E 's#.* at (https://[^ ]+)/v1.*#\1#' <<<"$line")
export LG_MODEL=$(sed -E 's#.*serving ([^ ]+) at.*#\1#' <<<"$line")
export LG_SERVER_PID=$pid
export NODE_EXTRA_CA_CERTS=$LG_DATA/tls/ca.crt
status=0
node --test "$here/crash.test.mjs" || status=1
[[ $status == 0 ]] || { echo "--- first server log"; tail -30 "$data/first.log"; echo "--- restarted"; tail -30 "$data/restarted.log" 2>/dev/null; }
exit $status
