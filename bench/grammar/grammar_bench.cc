// Grammar benchmark: schema compile time (cold, then through GrammarCache),
// and the time of fillNextTokenMask per decode step on the DeepSeek V3
// vocabulary (129,280 ids), over random generations that sample allowed
// tokens. Reports p50/p99 per schema, warm (token tables built) and the first
// generation separately. Usage: grammar_bench [--runs N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "text/grammar/grammar_cache.h"
#include "text/grammar/matcher.h"
#include "text/tokenizer/bpe_tokenizer.h"

using namespace lg::text;
using namespace lg::text::grammar;
using Clock = std::chrono::steady_clock;

namespace {

const char* kShellTool = R"({"type":"object","properties":{"command":{"type":"array","items":{"type":"string"}},
  "workdir":{"type":"string"},"timeout_ms":{"type":"integer"}},"required":["command","workdir","timeout_ms"],
  "additionalProperties":false})";
const char* kRecursive = R"({"$defs":{"node":{"type":"object","properties":{"name":{"type":"string"},
  "kind":{"enum":["file","dir","link"]},"size":{"type":"integer","minimum":0},
  "children":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["name","kind","children"],
  "additionalProperties":false}},"$ref":"#/$defs/node"})";

double pct(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 20;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--runs") runs = std::stoi(argv[i + 1]);
  }
  auto text = lg::readFile(std::string(LG_SOURCE_DIR) + "/assets/deepseek-v3-tokenizer/tokenizer.json");
  auto tok = BpeTokenizer::fromJson(nlohmann::json::parse(*text));
  auto t0 = Clock::now();
  auto vocab = Vocabulary::fromTokenizer(*tok.value());
  std::printf("vocabulary: %d ids, built in %.1f ms\n", vocab->size(),
              std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  GrammarCache cache;
  for (auto [name, schema_text] : {std::pair{"shell tool", kShellTool}, std::pair{"recursive $ref", kRecursive}}) {
    const auto schema = nlohmann::ordered_json::parse(schema_text);
    t0 = Clock::now();
    auto g = cache.jsonSchema(schema);
    const double compile_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    t0 = Clock::now();
    auto g2 = cache.jsonSchema(schema);
    const double repeat_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (auto* e = std::get_if<GrammarError>(&g)) {
      std::printf("%s: %s\n", name, e->toString().c_str());
      return 1;
    }
    auto grammar = std::get<std::shared_ptr<const Grammar>>(g);
    std::vector<double> first, warm;
    std::vector<uint32_t> mask(vocab->maskWords());
    std::mt19937 rng(1);
    size_t tokens = 0;
    t0 = Clock::now();
    for (int r = 0; r < runs; ++r) {
      Matcher m(grammar, vocab);
      for (int step = 0; step < 200 && !m.mustEnd(); ++step) {
        const auto s0 = Clock::now();
        m.fillNextTokenMask(mask);
        const double us = std::chrono::duration<double, std::micro>(Clock::now() - s0).count();
        (r == 0 ? first : warm).push_back(us);
        std::vector<int32_t> ids;
        for (int32_t i = 0; i < vocab->size(); ++i) {
          if (mask[static_cast<size_t>(i) / 32] >> (i % 32) & 1) ids.push_back(i);
        }
        if (ids.empty() || (m.canEnd() && rng() % 4 == 0)) break;
        if (step > 24) {  // steer towards closing so that outputs end
          std::vector<int32_t> closing;
          for (int32_t id : ids) {
            if (vocab->bytes(id).find_first_of("\"]}") != std::string_view::npos) closing.push_back(id);
          }
          if (!closing.empty()) ids.swap(closing);
        }
        if (!m.accept(ids[rng() % ids.size()])) return 2;
        ++tokens;
      }
    }
    const double table_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    std::printf("%s: compile %.3f ms, repeat (cached) %.4f ms; masks: first generation (token tables built "
                "lazily) p50 %.1f us p99 %.1f us max %.1f us over %zu steps; warm p50 %.1f us p99 %.1f us over "
                "%zu steps (%zu tokens, %.0f ms in all)\n",
                name, compile_ms, repeat_ms, pct(first, 0.5), pct(first, 0.99), pct(first, 1.0), first.size(),
                pct(warm, 0.5), pct(warm, 0.99), warm.size(), tokens, table_ms);
  }
  return 0;
}
