#!/usr/bin/env bash
# The billing benchmarks of docs/benchmarks.md ("Billing (issue 12)"), one run each:
#   ledger:   ledger_bench: durable ledger commits per second with group commit
#             at 1/4/16/64 concurrent clients, against the disk's own fsync rate
#             and one commit at a time, on the filesystem of $LG_BENCH_DIR.
#   overhead: bench-gateway.sh overhead: per request, the wait for the ledger
#             entry to be synced (Server-Timing ledger) over the gateway's
#             overhead (client latency minus the engine's time), at 1/8/64
#             keep-alive TLS connections, with a budget on every key (so each
#             request also reserves and settles, as billed requests do).
# Usage: scripts/bench-billing.sh [ledger] [overhead]   (default: both)
# Env: LG_BUILD_DIR (build/), LG_BENCH_DIR (/var/tmp), SECONDS_EACH (10),
# LG_BENCH_TMP (/tmp): the server's data directory for overhead; /dev/shm
# (tmpfs, where an fsync costs nothing) separates billing's own work from the
# disk's.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${LG_BUILD_DIR:-$root/build}
what=${*:-ledger overhead}
echo "$(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"
if [[ " $what " == *" ledger "* ]]; then
  "$build/bench/billing/ledger_bench" --dir "${LG_BENCH_DIR:-/var/tmp}" --seconds "${SECONDS_EACH:-10}" --clients 1,4,16,64
fi
if [[ " $what " == *" overhead "* ]]; then
  LATENTGATE_BILLING_KEY_BUDGET='{"limit": "1000000", "period": "month"}' "$root/scripts/bench-gateway.sh" overhead
fi
