#!/usr/bin/env bash
# Routing by prefix across three replicas (issue 24; docs/benchmarks.md): the
# cache hit rate of gateway_bench --mode agent with several teams (each team's
# sessions share its own system prompt), in one invocation:
#   single:      one replica (the baseline);
#   round-robin: three replicas, each request to the next in turn;
#   nginx-hash:  three replicas behind nginx, `hash $http_authorization
#                consistent` (a team's key always lands on the same replica);
#   oracle:      three replicas; per request the conversation is rendered to
#                token ids by /v1/chat/completions/render, scored by an index
#                of llm-d's (tests/integration/kv_events/llmd_index.py serve)
#                fed by every replica's KV events, and sent to the replica
#                holding its longest prefix (ties in turn);
#   oracle-speculative: the same with llm-d's speculative indexing (the
#                precise scorer's speculativeIndexing, speculativeTTL 2 s): the
#                index counts a request's blocks as held by the replica it was
#                sent to until that replica's events say so, so a team's
#                sessions that start together follow the first one.
#   oracle-prefix-hash: the oracle, equal scores (no replica holds the prefix
#                yet, or several do) broken by a hash of the prompt's first
#                block instead of in turn, so a team's sessions that start
#                together land on one replica.
# Every run starts its replicas on fresh data directories (empty cache, disk
# tier included) and its own index, so no run warms another; the workload is
# the same in every run. ROUNDS rounds of the six; medians per route.
#
# The replicas share their API keys through one private PostgreSQL
# (billing.postgres_url): nginx hashes the Authorization header, so a team's
# one key must be valid on whichever replica it picks. Keys are made once, on
# a setup server that also makes the TLS certificate every replica and nginx
# present.
#
# Usage: scripts/bench-routing.sh
# Env: LG_BUILD_DIR (build/), ROUNDS (3), TEAMS (4), SESSIONS_PER_TEAM (3),
# TURNS (4), SYSTEM_WORDS (600), TURN_WORDS (60), REPLY_TOKENS (32),
# LG_LLMD_INDEX (the index script), LG_BENCH_TMP (/tmp), ENGINE_THREADS (1).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${LG_BUILD_DIR:-$root/build}
bin=$build/cli/latentgate
bench=$build/bench/gateway/gateway_bench
index=${LG_LLMD_INDEX:-$root/tests/integration/kv_events/llmd_index.py}
rounds=${ROUNDS:-3}
teams=${TEAMS:-4}
sessions=$((teams * ${SESSIONS_PER_TEAM:-3}))
turns=${TURNS:-4}
system_words=${SYSTEM_WORDS:-600}
turn_words=${TURN_WORDS:-60}
reply_tokens=${REPLY_TOKENS:-32}
threads=${ENGINE_THREADS:-1}
pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
for f in "$bin" "$bench" "$index"; do [[ -e $f ]] || { echo "bench-routing: $f is missing" >&2; exit 2; }; done
command -v nginx >/dev/null && [[ -x $pg_bin/initdb ]] && /usr/bin/python3 -c 'import zmq, msgpack, cbor2' 2>/dev/null ||
  LG_EXTRA_PACKAGES="nginx-light" "$root/scripts/install-deps.sh"
pg_bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)

work=$(mktemp -d "${LG_BENCH_TMP:-/tmp}/lg-bench-routing-XXXXXX")
chmod 755 "$work"
pids=()
as_pg=()
[[ $(id -u) == 0 ]] && as_pg=(runuser -u postgres --)
stop_pids() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done; pids=(); }
cleanup() {
  stop_pids
  [[ -f $work/pg/data/postmaster.pid ]] && "${as_pg[@]}" "$pg_bin/pg_ctl" -D "$work/pg/data" stop -m fast >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
admin=$(python3 -c 'import secrets; print(secrets.token_hex(24))')

# A private PostgreSQL: the keys every replica knows.
mkdir -p "$work/pg"
[[ ${#as_pg[@]} -gt 0 ]] && chown postgres "$work/pg"
"${as_pg[@]}" "$pg_bin/initdb" -D "$work/pg/data" -U lg -A trust -E UTF8 --locale=C --no-sync >"$work/pg/initdb.log" 2>&1
pg_port=$(free_port)
"${as_pg[@]}" "$pg_bin/pg_ctl" -D "$work/pg/data" -l "$work/pg/postgres.log" -w -o \
  "-p $pg_port -c listen_addresses=127.0.0.1 -c unix_socket_directories=$work/pg -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
  start >/dev/null
"$pg_bin/createdb" -h 127.0.0.1 -p "$pg_port" -U lg latentgate
pg_url=postgresql://lg@127.0.0.1:$pg_port/latentgate

# write_config DIR PORT EVENTS_PORT REPLAY_PORT (the last two empty: no KV events)
write_config() {
  python3 - "$1" "$2" "$3" "$4" "$admin" "$pg_url" "$threads" "${tls_cert:-}" "${tls_key:-}" >"$1/config.json" <<'EOF'
import json, sys
d, port, ev, rp, admin, pg, threads, cert, key = sys.argv[1:10]
c = {"data_dir": d + "/data", "admin_key": admin, "log": {"level": "info"},
     "engine": {"threads": int(threads)},
     "server": {"listen": "127.0.0.1:" + port, "io_threads": 1, "max_connections_per_address": 0},
     "billing": {"postgres_url": pg}}
if cert:
    c["server"]["tls_cert"], c["server"]["tls_key"] = cert, key
if ev:
    c["cache"] = {"kv_events": {"endpoint": "tcp://127.0.0.1:" + ev, "bind": True,
                                "replay_endpoint": "tcp://127.0.0.1:" + rp, "reannounce_interval_ms": 2000}}
print(json.dumps(c, indent=2))
EOF
}

# serve DIR: latentgate serve with DIR/config.json, waited for.
serve() {
  "$bin" serve --config "$1/config.json" >"$1/serve.log" 2>&1 &
  pids+=($!)
  local pid=$!
  for _ in $(seq 1 600); do
    grep -qs "LatentGate is serving" "$1/serve.log" && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  echo "bench-routing: $1 did not start:" >&2; tail -20 "$1/serve.log" >&2; exit 1
}

# start_replica NAME: a fresh data directory, new ports; sets port, ev_port, rp_port.
start_replica() {
  mkdir -p "$work/$1"
  port=$(free_port); ev_port=$(free_port); rp_port=$(free_port)
  write_config "$work/$1" "$port" "$ev_port" "$rp_port"
  serve "$work/$1"
}

# Setup: a server that makes the certificate (for localhost and 127.0.0.1) and
# one key per team, in PostgreSQL; stopped before the runs.
mkdir -p "$work/setup"
write_config "$work/setup" "$(free_port)" "" ""
serve "$work/setup"
setup_url=$(grep -m1 -o "https://[^ ]*/v1" "$work/setup/serve.log" | sed 's#/v1$##')
ca=$work/setup/data/tls/ca.crt
tls_cert=$work/setup/data/tls/server.crt
tls_key=$work/setup/data/tls/server.key
keys=()
for t in $(seq 1 "$teams"); do
  keys+=("$(curl -sf --cacert "$ca" "$setup_url/admin/keys" -H "Authorization: Bearer $admin" \
            -d "{\"team\": \"team-$t\", \"name\": \"agent\"}" | python3 -c 'import json, sys; print(json.load(sys.stdin)["key"])')")
done
keys_csv=$(IFS=,; echo "${keys[*]}")
stop_pids
echo "bench-routing: $teams teams x $((sessions / teams)) sessions x $turns turns, system prompt $system_words words," \
  "turns $turn_words words, replies $reply_tokens tokens; demo model; $(nproc) cores; $(date -u +%FT%TZ)"

agent() {  # agent LABEL [gateway_bench flags...]
  local label=$1; shift
  "$bench" --mode agent --ca "$ca" --model demo --keys "$keys_csv" --sessions "$sessions" --turns "$turns" \
    --system-words "$system_words" --turn-words "$turn_words" --reply-tokens "$reply_tokens" --label "$label" "$@"
}

results=$work/results.jsonl
: >"$results"
for r in $(seq 1 "$rounds"); do
  # single: one replica.
  start_replica "single-$r"
  line=$(agent "single_$r" --ports "$port" --route first)
  echo "$line" | tee -a "$results"
  stop_pids

  # Three replicas for each of the others.
  for route in round-robin nginx-hash oracle oracle-speculative oracle-prefix-hash; do
    ports=(); pods=(); replays=()
    for i in 0 1 2; do
      start_replica "$route-$r-$i"
      ports+=("$port"); pods+=(--pod "127.0.0.1:$port=tcp://127.0.0.1:$ev_port"); replays+=(--replay "127.0.0.1:$port=tcp://127.0.0.1:$rp_port")
    done
    ports_csv=$(IFS=,; echo "${ports[*]}")
    case $route in
      round-robin)
        line=$(agent "round_robin_$r" --ports "$ports_csv" --route round-robin) ;;
      nginx-hash)
        ndir=$work/nginx-$r
        mkdir -p "$ndir"
        nginx_port=$(free_port)
        {
          [[ $(id -u) == 0 ]] && echo "user root root;"
          cat <<EOF
daemon off;
master_process on;
worker_processes 1;
pid $ndir/nginx.pid;
error_log $ndir/error.log warn;
events { worker_connections 1024; }
http {
  log_format upstream '\$upstream_addr \$status \$request_method \$uri';
  access_log $ndir/access.log upstream;
  client_body_temp_path $ndir/body;
  proxy_temp_path $ndir/proxy;
  fastcgi_temp_path $ndir/fastcgi;
  uwsgi_temp_path $ndir/uwsgi;
  scgi_temp_path $ndir/scgi;
  upstream latentgate {
    hash \$http_authorization consistent;
$(for p in "${ports[@]}"; do echo "    server 127.0.0.1:$p max_fails=0;"; done)
    keepalive 32;
  }
  server {
    listen 127.0.0.1:$nginx_port ssl;
    ssl_certificate $tls_cert;
    ssl_certificate_key $tls_key;
    client_max_body_size 64m;
    location / {
      proxy_pass https://latentgate;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host \$host;
      proxy_ssl_verify on;
      proxy_ssl_trusted_certificate $ca;
      proxy_ssl_name localhost;
      proxy_ssl_server_name on;
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 300s;
    }
  }
}
EOF
        } >"$ndir/nginx.conf"
        nginx -e "$ndir/error.log" -p "$ndir" -c "$ndir/nginx.conf" >"$ndir/nginx.out" 2>&1 &
        pids+=($!)
        for _ in $(seq 1 100); do curl -s -o /dev/null --cacert "$ca" "https://127.0.0.1:$nginx_port/health" && break; sleep 0.1; done
        line=$(agent "nginx_hash_$r" --ports "$nginx_port" --route first)
        # Which replica served each request, from nginx's log.
        line=$(python3 - "$line" "$ndir/access.log" "$ports_csv" <<'EOF'
import json, sys
out = json.loads(sys.argv[1])
ports = sys.argv[3].split(",")
counts = {p: 0 for p in ports}
for l in open(sys.argv[2]):
    addr, status, method, uri = l.split()
    if (method, uri) == ("POST", "/v1/chat/completions") and addr.rsplit(":", 1)[-1] in counts:
        counts[addr.rsplit(":", 1)[-1]] += 1
out["replica_requests"] = [counts[p] for p in ports]
out["replica_requests_from"] = "nginx access log"
print(json.dumps(out))
EOF
)
        ;;
      oracle|oracle-speculative|oracle-prefix-hash)
        oracle_port=$(free_port)
        spec=(); spec_flag=(); label=oracle
        if [[ $route == oracle-speculative ]]; then spec=(--speculative-ttl 2); spec_flag=(--speculate); label=oracle_speculative; fi
        if [[ $route == oracle-prefix-hash ]]; then spec_flag=(--ties prefix-hash); label=oracle_prefix_hash; fi
        /usr/bin/python3 "$index" serve --listen "127.0.0.1:$oracle_port" --model demo "${pods[@]}" "${replays[@]}" --catch-up \
          "${spec[@]}" >"$work/oracle-$r.log" 2>&1 &
        pids+=($!)
        for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$oracle_port/healthz" >/dev/null && break; sleep 0.1; done
        sleep 1  # the SUB sockets' subscriptions reach the publishers
        line=$(agent "${label}_$r" --ports "$ports_csv" --route oracle --oracle "127.0.0.1:$oracle_port" "${spec_flag[@]}")
        curl -sf "http://127.0.0.1:$oracle_port/stats" >"$work/oracle-$r.stats" || true
        python3 -c 'import json, sys; s = json.load(open(sys.argv[1])); print("oracle index:", json.dumps(s["counts"]), "pods:", json.dumps({k: {x: v[x] for x in ("received", "restarts", "gaps", "error_count")} for k, v in s["pods"].items()}))' \
          "$work/oracle-$r.stats" >&2 || true
        ;;
    esac
    echo "$line" | tee -a "$results"
    stop_pids
  done
done

python3 - "$results" "$rounds" <<'EOF'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
order = [("single", "single replica (baseline)"), ("round_robin", "round robin over 3"),
         ("nginx_hash", "nginx `hash $http_authorization consistent` over 3"),
         ("oracle", "longest-prefix oracle over 3 (llm-d index)"),
         ("oracle_speculative", "the oracle with speculative indexing (2 s)"),
         ("oracle_prefix_hash", "the oracle, ties by the first block's hash")]
by = {k: [r for r in runs if r["label"].rsplit("_", 1)[0] == k] for k, _ in order}
med = {k: statistics.median(r["hit_rate"] for r in v) for k, v in by.items() if v}
print()
print("| route | hit rate (median of %s) | vs single, points | hit rate by turn | requests | prompt tokens | cached tokens | requests per replica | errors |" % sys.argv[2])
print("|---|---:|---:|---|---:|---:|---:|---|---:|")
for k, name in order:
    v = by[k]
    if not v:
        continue
    m = sorted(v, key=lambda r: r["hit_rate"])[len(v) // 2]  # the median run's counts
    print("| %s | %.1f%% | %+.1f | %s | %d | %d | %d | %s | %d |" % (
        name, 100 * med[k], 100 * (med[k] - med["single"]), " / ".join("%.0f%%" % (100 * x) for x in m.get("turn_hit_rate", [])),
        m["requests"], m["prompt_tokens"], m["cached_tokens"],
        " / ".join(str(x) for x in m["replica_requests"]), sum(r["errors"] for r in v)))
print()
print("per round, hit rates:", "; ".join("%s %s" % (k, ", ".join("%.1f%%" % (100 * r["hit_rate"]) for r in by[k])) for k, _ in order))
for r in by["oracle"] + by["oracle_speculative"] + by["oracle_prefix_hash"]:
    print("%s: %d of %d requests scored 0 everywhere (sent in turn), %d ties; routing ms p50 %.1f p90 %.1f (render p50 %.1f p90 %.1f, score p50 %.1f p90 %.1f)" % (
        r["label"], r["oracle_zero_scores"], r["requests"], r["oracle_ties"], r["route_ms"]["p50"], r["route_ms"]["p90"],
        r["render_ms"]["p50"], r["render_ms"]["p90"], r["score_ms"]["p50"], r["score_ms"]["p90"]))
for k in ("oracle", "oracle_speculative", "oracle_prefix_hash"):
    if k in med:
        d = 100 * (med[k] - med["single"])
        print("%s - single = %+.1f points: %s (goal: within 5 points)" % (k, d, "met" if abs(d) <= 5 else "missed"))
EOF
