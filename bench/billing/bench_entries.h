// The ledger entry the billing benchmarks commit (ledger_bench, drain_bench):
// a chat request's ids, key, team, model, fingerprint, token counts, rates and
// cost, spread over 16 keys, 4 teams and 8 system prompts so that every commit
// updates 4 hourly counters per entry by merges.
#pragma once

#include <cstdint>
#include <string>

#include "billing/ledger.h"
#include "billing/prices.h"
#include "common/unix_time.h"

namespace lg::billing {

// Request ids are "req_<id_prefix><client>_<n>": unique per prefix, client and n.
inline LedgerEntry benchEntry(const std::string& id_prefix, int client, int64_t n) {
  LedgerEntry e;
  e.request_id = "req_" + id_prefix + std::to_string(client) + "_" + std::to_string(n);
  e.response_id = "chatcmpl-" + e.request_id;
  e.key_id = "key_" + std::to_string(client % 16);
  e.team = "team-" + std::to_string(client % 4);
  e.model = "demo";
  e.requested_model = "deepseek-chat";
  e.endpoint = "/v1/chat/completions";
  e.system_prompt = "sp" + std::to_string(client % 8);
  e.start_us = unixMicros();
  e.end_us = e.start_us + 250'000;
  e.ttft_us = 40'000;
  e.hit_tokens_tier0 = 1'536;
  e.miss_tokens = 120 + n % 64;
  e.prompt_tokens = e.hitTokens() + e.miss_tokens;
  e.output_tokens = 200 + n % 100;
  e.prices.rates = kDeepSeekRates;
  e.prices.priced_as = "default";
  e.finish_reason = "stop";
  e.price();
  return e;
}

}  // namespace lg::billing
