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
  -d "{\"model\": \"$LG_MODEL\", \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"max_tokens\": 5, \"temperature\": 0, \"stream\": true, \"stream_options\": {\"include_usage\": true}}")
fail() { echo "curl_sse: $1"; printf '%s\n' "$out" | head -40; exit 1; }
# Every non-empty line is a data line or an SSE comment; events end with a blank line.
grep -vE '^(data: .+|: .*|)$' <<<"$out" && fail "a line that is not SSE"
# The demo model may end its reply early (finish_reason "stop"), so the number
# of content chunks is checked against the usage chunk, not assumed to be 5.
grep '^data: ' <<<"$out" | sed 's/^data: //' | node -e '
  const events = require("fs").readFileSync(0, "utf8").trim().split("\n");
  if (events.pop() !== "[DONE]") throw new Error("[DONE] is not last");
  const chunks = events.map((e) => JSON.parse(e));
  if (chunks[0].choices[0]?.delta?.role !== "assistant") throw new Error("the first chunk does not carry the role");
  const finishes = chunks.flatMap((c) => c.choices).filter((c) => c.finish_reason);
  if (finishes.length !== 1) throw new Error("expected exactly one finish_reason");
  const usage = chunks.at(-1).usage;
  if (!usage || chunks.at(-1).choices.length !== 0) throw new Error("the last chunk is not the usage chunk");
  const content = chunks.flatMap((c) => c.choices).filter((c) => c.delta?.content).length;
  const reason = finishes[0].finish_reason, n = usage.completion_tokens;
  if (reason === "length" ? n !== 5 : !(reason === "stop" && n >= 1 && n <= 5))
    throw new Error(`finish_reason ${reason} with ${n} completion tokens`);
  if (content > n) throw new Error(`${content} content chunks for ${n} tokens`);
' || fail "expected a role chunk, content, one finish_reason, a usage chunk and [DONE]"
[[ $(grep '^data: ' <<<"$out" | tail -1) == 'data: [DONE]' ]] || fail "[DONE] is not last"
grep -q '"prompt_cache_hit_tokens"' <<<"$out" || fail "no usage chunk"
awk 'BEGIN{prev=""} /^data: /{ if (prev != "" && prev !~ /^$/) bad=1 } {prev=$0} END{exit bad}' <<<"$out" ||
  fail "two events without a blank line between them"
echo "curl_sse: ok"
