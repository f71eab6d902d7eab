#!/usr/bin/env bash
# curl's view of a streamed chat completion: raw SSE framing (each event one
# "data: " line and a blank line), a usage chunk, and "data: [DONE]" last.
# Needs LG_URL, LG_MODEL, LG_ADMIN_KEY and NODE_EXTRA_CA_CERTS (the CA) from run.sh.
set -euo pipefail
ca=$NODE_EXTRA_CA_CERTS
key=$(curl -sS --cacert "$ca" "$LG_URL/admin/keys" -H "Authorization: Bearer $LG_ADMIN_KEY" \
  -d '{"team": "curl", "name": "sse"}' | sed -E 's/.*"key":"([^"]+)".*/\1/')
out=$(curl -sS -N --cacert "$ca" "$LG_URL/v1/chat/completions" -H "Authorization: Bearer $key" \
  -H 'content-type: application/json' \
  -d "{\"model\": \"$LG_MODEL\", \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"max_tokens\": 5, \"stream\": true, \"stream_options\": {\"include_usage\": true}}")
fail() { echo "curl_sse: $1"; printf '%s\n' "$out" | head -40; exit 1; }
# Every non-empty line is a data line or an SSE comment; events end with a blank line.
grep -vE '^(data: .+|: .*|)$' <<<"$out" && fail "a line that is not SSE"
[[ $(grep -c '^data: ' <<<"$out") -ge 7 ]] || fail "expected a role chunk, 5 tokens, a usage chunk and [DONE]"
[[ $(grep '^data: ' <<<"$out" | tail -1) == 'data: [DONE]' ]] || fail "[DONE] is not last"
grep -q '"prompt_cache_hit_tokens"' <<<"$out" || fail "no usage chunk"
awk 'BEGIN{prev=""} /^data: /{ if (prev != "" && prev !~ /^$/) bad=1 } {prev=$0} END{exit bad}' <<<"$out" ||
  fail "two events without a blank line between them"
echo "curl_sse: ok"
