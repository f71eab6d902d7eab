#!/usr/bin/env bash
# The gateway benchmarks of docs/benchmarks.md, one run each:
#   models:   GET /v1/models requests per second, latentgate serve against
#             nginx (Debian package) serving the same JSON over TLS with the
#             same certificate, the same number of worker threads, wrk as the
#             client; alternated ROUNDS times, medians and the ratio reported.
#   overhead: gateway_bench --mode overhead (1, 8 and 64 keep-alive TLS
#             connections; client latency minus the engine's Server-Timing total).
#   alone:    the same requests against instant_gateway, the server object over
#             an engine that answers at once (bench/gateway/instant_backend.h):
#             the gateway's own cost, billing included, with the cores its own.
#   agent:    gateway_bench --mode agent on the bench preset: the cache on with
#             reply ids off (cache.reply_ids_max_bytes=0) and on, then the cache
#             off (cache.enabled=false): TTFT, throughput and the hit rate through
#             HTTP, and whether the replies with and without the cache are the same.
#   redis:    what admission through Redis adds (issue 23): instant_gateway with
#             a key budget and per-minute limits, counted in memory and then
#             through a private redis-server (limits.redis_url), alternated
#             ROUNDS times at 64 connections (REDIS_CONNECTIONS); the medians
#             of the overhead p50, of the client's latency p50 and of the
#             throughput.
#   kvevents: what publishing KV events costs (issue 24): gateway_bench --mode
#             agent with 16 sessions (decode at batch 16) on the demo preset,
#             without and with cache.kv_events (a subscriber reading every
#             message), alternated ROUNDS times; the medians of the output
#             tokens per second and their ratio. KV_MODEL: a model directory
#             instead (the bench preset, whose replies run to max_tokens: decode
#             at batch 16 throughout; the demo preset's replies end early);
#             KV_TURNS: turns per session (12).
#   insights: what the cache insights cost (issue 25: at most 2% of the
#             gateway's overhead p50): instant_gateway with the miss-ratio
#             curves and the eviction record on (the defaults) and off
#             (cache.mrc_max_samples=0, cache.evicted_blocks_tracked=0; the
#             per-request miss classification always runs), alternated ROUNDS
#             times at INSIGHTS_CONNECTIONS (1: requests do not queue behind
#             each other, so the medians are the gateway's own cost), each
#             request's prompt INSIGHTS_PROMPT_WORDS (1000) words after its
#             own opening, so that all of its 16 full blocks miss, are
#             classified and reach the curves (and evictions fill the record); the
#             medians of the overhead p50, of the client's latency p50 (the
#             lookup, where the insights run, is inside Server-Timing's total,
#             so only the latency holds them) and of the throughput, and their
#             on/off ratios.
# Usage: scripts/bench-gateway.sh [models] [overhead] [alone] [agent] [redis] [kvevents] [insights]   (default: all but redis, kvevents and insights)
# Env: LG_BUILD_DIR (build/), LG_BENCH_MODEL (the bench preset, made in
# /tmp/lg-bench if missing), ROUNDS (3), SECONDS_EACH (10), LG_BENCH_TMP (/tmp:
# where the servers' data directories go; /dev/shm puts the ledger on tmpfs).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${LG_BUILD_DIR:-$root/build}
bin=$build/cli/latentgate
bench=$build/bench/gateway/gateway_bench
rounds=${ROUNDS:-3}
secs=${SECONDS_EACH:-10}
instant=$build/bench/gateway/instant_gateway
what=${*:-models overhead alone agent}
command -v wrk >/dev/null && command -v nginx >/dev/null || LG_EXTRA_PACKAGES="wrk nginx-light" "$root/scripts/install-deps.sh"
work=$(mktemp -d "${LG_BENCH_TMP:-/tmp}/lg-bench-gateway-XXXXXX")
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
admin=bench-admin-key-0123456789

# start_server NAME [serve flags...]: sets url, port, key, ca. With
# LG_SERVER=instant, the server over an engine that answers at once.
start_server() {
  local name=$1; shift
  local cmd=("$bin" serve)
  [[ ${LG_SERVER:-} == instant ]] && cmd=("$instant")
  # Every benchmark connection comes from 127.0.0.1: no per-address cap.
  LATENTGATE_SERVER_MAX_CONNECTIONS_PER_ADDRESS=0 LATENTGATE_ADMIN_KEY=$admin "${cmd[@]}" --data-dir "$work/$name" --listen 127.0.0.1:0 "$@" >"$work/$name.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 1200); do grep -q "serving .* at https://" "$work/$name.log" && break; sleep 0.25; done
  url=$(grep -m1 -o "https://[^ ]*/v1" "$work/$name.log" | sed 's#/v1$##')
  port=${url##*:}
  ca=$work/$name/tls/ca.crt
  key=$(curl -sf --cacert "$ca" "$url/admin/keys" -H "Authorization: Bearer $admin" -d '{"team": "bench", "name": "bench"}' |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["key"])')
}
stop_servers() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; pids=(); }

wrk_rps() {  # wrk_rps URL [header] -> requests/s
  wrk -t1 -c64 -d"${secs}s" --latency ${2:+-H "$2"} "$1" | awk '/^Requests\/sec/ {print $2}'
}
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

if [[ " $what " == *" models "* || " $what " == *" overhead "* ]]; then
  start_server demo
  echo "server: latentgate serve (demo model) at $url, $(nproc) cores, $(date -u +%FT%TZ)"
fi

if [[ " $what " == *" models "* ]]; then
  mkdir -p "$work/nginx/www/v1" "$work/nginx/logs"
  chmod o+x "$work" && chmod -R o+rX "$work/nginx"  # nginx workers run as an unprivileged user
  curl -sf --cacert "$ca" "$url/v1/models" -H "Authorization: Bearer $key" >"$work/nginx/www/v1/models"
  chmod o+r "$work/nginx/www/v1/models"
  nginx_port=$((port + 1))
  cat >"$work/nginx/nginx.conf" <<EOF
worker_processes 2;   # latentgate serve's server.io_threads default
daemon off;
pid $work/nginx/nginx.pid;
error_log $work/nginx/logs/error.log;
events { worker_connections 1024; }
http {
  access_log off;
  keepalive_requests 1000000;
  server {
    listen 127.0.0.1:$nginx_port ssl;
    ssl_certificate $work/demo/tls/server.crt;
    ssl_certificate_key $work/demo/tls/server.key;
    ssl_protocols TLSv1.2 TLSv1.3;
    root $work/nginx/www;
    location = /v1/models { default_type application/json; }
  }
}
EOF
  nginx -c "$work/nginx/nginx.conf" -p "$work/nginx" 2>"$work/nginx/stderr" &
  pids+=($!)
  for _ in $(seq 1 40); do curl -sf --cacert "$ca" "https://127.0.0.1:$nginx_port/v1/models" >/dev/null && break; sleep 0.25; done
  [[ -s $work/nginx/stderr ]] && cat "$work/nginx/stderr" "$work/nginx/logs/error.log" >&2
  cmp <(curl -sf --cacert "$ca" "https://127.0.0.1:$nginx_port/v1/models") "$work/nginx/www/v1/models"
  : >"$work/lg.rps"; : >"$work/nginx.rps"
  for r in $(seq 1 "$rounds"); do
    lg=$(wrk_rps "$url/v1/models" "Authorization: Bearer $key"); echo "$lg" >>"$work/lg.rps"
    ng=$(wrk_rps "https://127.0.0.1:$nginx_port/v1/models"); echo "$ng" >>"$work/nginx.rps"
    echo "round $r: latentgate $lg req/s, nginx $ng req/s"
  done
  lg=$(median <"$work/lg.rps"); ng=$(median <"$work/nginx.rps")
  python3 -c "import json; print(json.dumps({'bench': 'models_rps', 'connections': 64, 'seconds': $secs, 'rounds': $rounds, 'latentgate_rps_median': $lg, 'nginx_rps_median': $ng, 'ratio': round($lg / $ng, 3)}))"
fi

if [[ " $what " == *" overhead "* ]]; then
  for c in 1 8 64; do
    "$bench" --mode overhead --port "$port" --key "$key" --ca "$ca" --connections "$c" --seconds "$secs" --label "demo_$c"
  done
fi
stop_servers

if [[ " $what " == *" alone "* ]]; then
  LG_SERVER=instant start_server instant
  echo "server: instant_gateway (the server object, an engine that answers at once) at $url, $(date -u +%FT%TZ)"
  for c in 1 8 64; do
    "$bench" --mode overhead --port "$port" --key "$key" --ca "$ca" --connections "$c" --seconds "$secs" --label "alone_$c"
  done
  stop_servers
fi

if [[ " $what " == *" agent "* ]]; then
  model=${LG_BENCH_MODEL:-/tmp/lg-bench}
  [[ -f $model/model.safetensors ]] || "$bin" model init --preset bench --out "$model" >/dev/null
  # Reply ids (cache.reply_ids_*) off and on with the cache, then the cache off
  # (reply ids on): the prompts the engine sees are the same with and without
  # the cache, so at temperature 0 the replies must be too.
  for run in "on 0 cache_on_reply_ids_off" "on 67108864 cache_on_reply_ids_on" "off 67108864 cache_off_reply_ids_on"; do
    read -r cache reply_bytes label <<<"$run"
    enabled=true; [[ $cache == off ]] && enabled=false
    LATENTGATE_CACHE_ENABLED=$enabled LATENTGATE_CACHE_REPLY_IDS_MAX_BYTES=$reply_bytes start_server "agent-$label" --model "$model"
    "$bench" --mode agent --port "$port" --key "$key" --ca "$ca" --model "$(basename "$model")" \
      --sessions 3 --turns 4 --system-words 1500 --turn-words 60 --reply-tokens 32 --label "$label" \
      --replies-out "$work/replies-$label.json"
    curl -sf --cacert "$ca" "$url/metrics" -H "Authorization: Bearer $admin" | grep -E '^latentgate_reply_ids_(hits|misses|stored|rejected|skipped)' | grep -v ' 0$' | sed "s/^/  $label: /" || true
    stop_servers
  done
  if cmp -s "$work/replies-cache_on_reply_ids_on.json" "$work/replies-cache_off_reply_ids_on.json"; then
    echo "replies with reply ids on: identical with the cache on and off"
  else
    echo "replies with reply ids on: DIFFER between the cache on and off"
  fi
fi

if [[ " $what " == *" kvevents "* ]]; then
  : >"$work/off.tps"; : >"$work/on.tps"
  for r in $(seq 1 "$rounds"); do
    for mode in off on; do
      unset LATENTGATE_CACHE_KV_EVENTS_ENDPOINT LATENTGATE_CACHE_KV_EVENTS_BIND
      sub_pid=
      if [[ $mode == on ]]; then
        ev_port=$(free_port)
        export LATENTGATE_CACHE_KV_EVENTS_ENDPOINT=tcp://127.0.0.1:$ev_port LATENTGATE_CACHE_KV_EVENTS_BIND=true
      fi
      if [[ -n ${KV_MODEL:-} ]]; then start_server "kv-$mode-$r" --model "$KV_MODEL"; else start_server "kv-$mode-$r"; fi
      if [[ $mode == on ]]; then
        # A subscriber that reads (and decodes) every message, as a router does.
        /usr/bin/python3 -c '
import sys, zmq, msgpack
s = zmq.Context().socket(zmq.SUB); s.setsockopt(zmq.SUBSCRIBE, b""); s.connect(sys.argv[1])
n = 0
while True:
    _, _, p = s.recv_multipart(); msgpack.unpackb(p); n += 1
' "tcp://127.0.0.1:$ev_port" &
        sub_pid=$!
        pids+=($sub_pid)
        sleep 0.5
      fi
      line=$("$bench" --mode agent --port "$port" --key "$key" --ca "$ca" --model "$(basename "${KV_MODEL:-demo}")" \
               --sessions 16 --turns "${KV_TURNS:-12}" --system-words 300 --turn-words 40 --reply-tokens 128 \
               --label "kv_events_${mode}_$r")
      echo "$line"
      python3 -c 'import json, sys; print(json.loads(sys.argv[1])["output_tokens_per_s"])' "$line" >>"$work/$mode.tps"
      if [[ $mode == on ]]; then
        curl -sf --cacert "$ca" "$url/metrics" -H "Authorization: Bearer $admin" | grep -E '^latentgate_kv_events_(batches|blocks|dropped)' || true
      fi
      stop_servers
    done
  done
  off_tps=$(median <"$work/off.tps"); on_tps=$(median <"$work/on.tps")
  echo "kv_events: output tokens/s median without $off_tps, with $on_tps: with/without = $(python3 -c "print(f'{$on_tps/$off_tps:.4f}')") ($rounds rounds)"
  unset LATENTGATE_CACHE_KV_EVENTS_ENDPOINT LATENTGATE_CACHE_KV_EVENTS_BIND
fi

if [[ " $what " == *" insights "* ]]; then
  ins_conns=${INSIGHTS_CONNECTIONS:-1}
  for mode in on off; do for m in p50 lat rps; do : >"$work/ins-$mode.$m"; done; done
  for r in $(seq 1 "$rounds"); do
    for mode in on off; do
      if [[ $mode == off ]]; then
        export LATENTGATE_CACHE_MRC_MAX_SAMPLES=0 LATENTGATE_CACHE_EVICTED_BLOCKS_TRACKED=0
      else
        unset LATENTGATE_CACHE_MRC_MAX_SAMPLES LATENTGATE_CACHE_EVICTED_BLOCKS_TRACKED
      fi
      LG_SERVER=instant start_server "insights-$mode-$r"
      line=$("$bench" --mode overhead --port "$port" --key "$key" --ca "$ca" --connections "$ins_conns" --seconds "$secs" \
               --prompt-words "${INSIGHTS_PROMPT_WORDS:-1000}" --label "insights_${mode}_$r")
      echo "$line"
      python3 -c 'import json, sys; print(json.loads(sys.argv[1])["overhead_ms"]["p50"])' "$line" >>"$work/ins-$mode.p50"
      python3 -c 'import json, sys; print(json.loads(sys.argv[1])["latency_ms"]["p50"])' "$line" >>"$work/ins-$mode.lat"
      python3 -c 'import json, sys; print(json.loads(sys.argv[1])["requests_per_s"])' "$line" >>"$work/ins-$mode.rps"
      # The curves are on: they heard the requests (and off: there are none).
      curl -sf --cacert "$ca" "$url/metrics" -H "Authorization: Bearer $admin" | grep -E '^latentgate_cache_mrc_(accesses_total|memory_bytes)' | sed "s/^/  $mode: /" || true
      kill "${pids[-1]}" 2>/dev/null || true; wait "${pids[-1]}" 2>/dev/null || true; unset 'pids[-1]'
    done
  done
  unset LATENTGATE_CACHE_MRC_MAX_SAMPLES LATENTGATE_CACHE_EVICTED_BLOCKS_TRACKED
  python3 - "$work" "$ins_conns" "$secs" "$rounds" <<'PY'
import json, statistics, sys
work, conns, secs, rounds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
def med(mode, m): return statistics.median(float(x) for x in open(f"{work}/ins-{mode}.{m}") if x.strip())
out = {'bench': 'cache_insights', 'connections': conns, 'seconds': secs, 'rounds': rounds}
for m, name in (('p50', 'overhead_p50_ms'), ('lat', 'latency_p50_ms'), ('rps', 'requests_per_s')):
    on, off = med('on', m), med('off', m)
    out[name + '_on'], out[name + '_off'], out[name + '_on_over_off'] = on, off, round(on / off, 4) if off else None
print(json.dumps(out))
PY
fi

if [[ " $what " == *" redis "* ]]; then
  redis_port=$(free_port)
  redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" >"$work/redis.log" 2>&1 &
  pids+=($!)
  redis_pid=$!
  for _ in $(seq 1 100); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  # Limits high enough never to refuse: the work of checking them is measured.
  export LATENTGATE_BILLING_KEY_BUDGET='{"limit": "1000000", "period": "month"}'
  export LATENTGATE_LIMITS_KEY_REQUESTS_PER_MINUTE=100000000 LATENTGATE_LIMITS_KEY_TOKENS_PER_MINUTE=100000000000
  redis_conns=${REDIS_CONNECTIONS:-64}
  : >"$work/mem.p50"; : >"$work/redis.p50"; : >"$work/mem.lat"; : >"$work/redis.lat"; : >"$work/mem.rps"; : >"$work/redis.rps"
  for r in $(seq 1 "$rounds"); do
    for mode in mem redis; do
      if [[ $mode == redis ]]; then export LATENTGATE_LIMITS_REDIS_URL=redis://127.0.0.1:$redis_port; else unset LATENTGATE_LIMITS_REDIS_URL; fi
      LG_SERVER=instant start_server "limits-$mode-$r"
      line=$("$bench" --mode overhead --port "$port" --key "$key" --ca "$ca" --connections "$redis_conns" --seconds "$secs" --label "limits_${mode}_$r")
      echo "$line"
      python3 -c 'import json, sys; print(json.loads(sys.argv[1])["overhead_ms"]["p50"])' "$line" >>"$work/$mode.p50"
      python3 -c 'import json, sys; print(json.loads(sys.argv[1])["latency_ms"]["p50"])' "$line" >>"$work/$mode.lat"
      python3 -c 'import json, sys; print(json.loads(sys.argv[1])["requests_per_s"])' "$line" >>"$work/$mode.rps"
      kill "${pids[-1]}" 2>/dev/null || true; wait "${pids[-1]}" 2>/dev/null || true; unset 'pids[-1]'
    done
  done
  unset LATENTGATE_LIMITS_REDIS_URL LATENTGATE_BILLING_KEY_BUDGET LATENTGATE_LIMITS_KEY_REQUESTS_PER_MINUTE LATENTGATE_LIMITS_KEY_TOKENS_PER_MINUTE
  mem=$(median <"$work/mem.p50"); red=$(median <"$work/redis.p50")
  mem_lat=$(median <"$work/mem.lat"); red_lat=$(median <"$work/redis.lat")
  mem_rps=$(median <"$work/mem.rps"); red_rps=$(median <"$work/redis.rps")
  # overhead_ms is the client's latency less the engine's Server-Timing total,
  # which includes the request's wait in the scheduler's queue: at 64
  # closed-loop connections that wait shrinks by what admission now waits,
  # so the client's own latency and the throughput are reported beside it.
  python3 -c "import json; print(json.dumps({'bench': 'redis_admission', 'connections': $redis_conns, 'seconds': $secs, 'rounds': $rounds, 'overhead_p50_ms_memory': $mem, 'overhead_p50_ms_redis': $red, 'added_overhead_p50_ms': round($red - $mem, 3), 'latency_p50_ms_memory': $mem_lat, 'latency_p50_ms_redis': $red_lat, 'added_latency_p50_ms': round($red_lat - $mem_lat, 3), 'requests_per_s_memory': $mem_rps, 'requests_per_s_redis': $red_rps}))"
fi
