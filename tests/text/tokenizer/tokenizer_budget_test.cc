// The per-request regex budget of the general (PCRE2) pre-tokenizer path:
// hostile inputs that make many regex calls, each well under PCRE2's per-call
// limit, are refused quickly with a clear error; ordinary text stays far
// under the budget; the DeepSeek V3 fast path does not use it.
#include <chrono>
#include <cstdio>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/text/tokenizer/test_support.h"

namespace lg::text::testing {
namespace {

using nlohmann::json;

// V3's vocabulary with a single Split `pattern` (Isolated) before ByteLevel.
std::unique_ptr<BpeTokenizer> withPattern(const std::string& pattern, const TokenizerOptions& options = {}) {
  json j = v3Json();
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       json::array({{{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
                    {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}})}};
  auto t = BpeTokenizer::fromJson(j, options);
  if (!t.isOk()) throw std::runtime_error(t.status().toString());
  return std::move(t).value();
}

struct Timed {
  Result<std::vector<int32_t>> ids = internalError("not run");
  BpeTokenizer::RegexStats stats;
  double seconds = 0;
};

Timed encodeTimed(const BpeTokenizer& t, const std::string& text) {
  Timed r;
  const auto start = std::chrono::steady_clock::now();
  r.ids = t.encode(text, &r.stats);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

void expectRefused(const Timed& r, std::string_view what) {
  ASSERT_FALSE(r.ids.isOk());
  EXPECT_EQ(r.ids.status().code(), StatusCode::kResourceExhausted) << r.ids.status().toString();
  EXPECT_NE(r.ids.status().message().find(what), std::string::npos) << r.ids.status().message();
}

// `\s*[\r\n]+|\s` over a run of spaces: each call scans the rest of the run,
// backs off through it (PCRE2 counts those steps) and matches one space, so
// n spaces cost ~n^2/2 units in n calls, each far under the 10^8 per-call
// limit. 200,000 spaces are ~2*10^10 units (42 s measured with per-call
// limits only); the request's budget (16.8M + 64 per byte) stops it within
// a hundred calls.
TEST(TokenizerRegexBudget, ManyCheapCallsAddUpAndAreRefused) {
  const auto t = withPattern("\\s*[\\r\\n]+|\\s");
  ASSERT_FALSE(t->usesFastPath());
  // Ordinary text through the same pattern is fine.
  auto ok = t->encode("a\n b\r\n  c");
  ASSERT_TRUE(ok.isOk()) << ok.status().toString();

  const Timed r = encodeTimed(*t, std::string(200000, ' '));
  std::printf("\\s*[\\r\\n]+|\\s over 200,000 spaces: refused in %.3f s after %llu calls, %llu units\n", r.seconds,
              static_cast<unsigned long long>(r.stats.calls), static_cast<unsigned long long>(r.stats.units));
  expectRefused(r, "regex_units_per_byte");
  EXPECT_LE(r.stats.units, (uint64_t{1} << 24) + 64 * 200000);
  EXPECT_LT(r.stats.calls, 20000u);
  EXPECT_LT(r.seconds, 2.0);

  // The budget is the request's, not the call's: a larger budget lets the same
  // request go further before it is refused.
  TokenizerOptions generous;
  generous.regex_units_base = uint64_t{1} << 26;
  const Timed further = encodeTimed(*withPattern("\\s*[\\r\\n]+|\\s", generous), std::string(200000, ' '));
  expectRefused(further, "regex_units_per_byte");
  EXPECT_GT(further.stats.calls, r.stats.calls);
}

// A pattern that backtracks exponentially on one call is stopped by the
// request's budget (smaller than the per-call limit for small requests).
TEST(TokenizerRegexBudget, ExponentialBacktrackingIsRefused) {
  const auto t = withPattern("(?:a|aa)*c|a");
  const Timed r = encodeTimed(*t, std::string(64, 'a'));
  std::printf("(?:a|aa)*c|a over 64 a's: refused in %.3f s\n", r.seconds);
  expectRefused(r, "regex budget");
  EXPECT_LT(r.seconds, 2.0);
}

// `\s*\n|\s` over spaces rescans the run on every call but PCRE2's JIT counts
// about one unit per call, so the units do not see the quadratic work: the
// CPU backstop does. 100,000 spaces took 13.5 s unbounded; 200,000 take minutes.
TEST(TokenizerRegexBudget, UncountedScansAreStoppedByTheCpuBackstop) {
  TokenizerOptions quick;
  quick.general_path_cpu_ms_base = 200;
  quick.general_path_cpu_ms_per_mb = 0;
  const auto t = withPattern("\\s*\\n|\\s", quick);
  const Timed r = encodeTimed(*t, std::string(200000, ' '));
  std::printf("\\s*\\n|\\s over 200,000 spaces: refused in %.3f s after %llu calls, %llu units\n", r.seconds,
              static_cast<unsigned long long>(r.stats.calls), static_cast<unsigned long long>(r.stats.units));
  expectRefused(r, "CPU budget");
  EXPECT_LT(r.stats.units, uint64_t{1} << 24);  // the units alone would have let it run
  EXPECT_LT(r.seconds, 10.0);                    // CPU time 0.2 s; wall time is generous for loaded machines
}

// Ordinary text costs a few dozen units per byte at most: well inside the
// default 64 per byte, and a budget of 0 per byte refuses it, so the budget
// is really charged.
TEST(TokenizerRegexBudget, OrdinaryTextStaysWellInsideTheBudget) {
  std::string text;
  while (text.size() < (1u << 20)) {
    text += "The KV cache 压缩 of DeepSeek-V3 (671B) runs at 12,345 tok/s; see https://example.com/x?q=1\n"
            "def f(x):\n    return x ** 2  # 平方\n\t\"quoted\" — naïve café 😀👍🏽 ١٢٣ ①②\r\n";
  }
  const std::string digits(1u << 20, '7');
  for (const std::string* input : {static_cast<const std::string*>(&text), &digits}) {
    const Timed r = encodeTimed(v3General(), *input);
    ASSERT_TRUE(r.ids.isOk()) << r.ids.status().toString();
    const double per_byte = static_cast<double>(r.stats.units) / static_cast<double>(input->size());
    std::printf("V3 general path, %zu bytes: %llu calls, %.1f units per byte, %.3f s\n", input->size(),
                static_cast<unsigned long long>(r.stats.calls), per_byte, r.seconds);
    EXPECT_LT(per_byte, 48.0);
    EXPECT_TRUE(*r.ids == *v3().encode(*input));
  }
  TokenizerOptions none;
  none.allow_fast_path = false;
  none.regex_units_base = 1000;
  none.regex_units_per_byte = 0;
  auto strict = BpeTokenizer::fromJson(v3Json(), none);
  ASSERT_TRUE(strict.isOk());
  expectRefused(encodeTimed(**strict, text), "regex budget");
  // encodePrompt shares one budget across the stretches between added tokens.
  std::string prompt;
  for (int i = 0; i < 200; ++i) prompt += "<｜User｜>hello there, how are you?";
  EXPECT_EQ((*strict)->encodePrompt(allTrusted(prompt)).status().code(), StatusCode::kResourceExhausted);
  // The fast path runs no regex: the budget does not apply.
  none.allow_fast_path = true;
  auto fast = BpeTokenizer::fromJson(v3Json(), none);
  ASSERT_TRUE(fast.isOk());
  ASSERT_TRUE((*fast)->usesFastPath());
  EXPECT_TRUE((*fast)->encode(text).isOk());
}

}  // namespace
}  // namespace lg::text::testing
