// The render budget (ChatRenderOptions): output size, bytes copied and loop
// iterations bound every render, hostile ones are refused quickly and before
// the memory is allocated, and strings accumulated in a loop are appended in
// place (linear, not quadratic) with their trust intact.
//
// This binary replaces the global operator new/delete with a counting one
// (below) so that the tests can measure the peak heap of one render.
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "text/chat/chat_template.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define LG_BUDGET_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define LG_BUDGET_TEST_SANITIZED 1
#endif
#endif

namespace {

std::atomic<size_t> g_heap_now{0};
std::atomic<size_t> g_heap_peak{0};

void* countedAlloc(size_t n) {
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  const size_t now = g_heap_now.fetch_add(malloc_usable_size(p), std::memory_order_relaxed) + malloc_usable_size(p);
  size_t peak = g_heap_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_heap_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
  return p;
}

void countedFree(void* p) noexcept {
  if (p == nullptr) return;
  g_heap_now.fetch_sub(malloc_usable_size(p), std::memory_order_relaxed);
  std::free(p);
}

}  // namespace

void* operator new(size_t n) { return countedAlloc(n); }
void* operator new[](size_t n) { return countedAlloc(n); }
void operator delete(void* p) noexcept { countedFree(p); }
void operator delete[](void* p) noexcept { countedFree(p); }
void operator delete(void* p, size_t) noexcept { countedFree(p); }
void operator delete[](void* p, size_t) noexcept { countedFree(p); }

namespace lg::text {
namespace {

using nlohmann::json;

const std::string kAssets = LG_ASSETS_DIR;
const std::string kBos = "<｜begin▁of▁sentence｜>";

// Peak heap growth and wall time of one call.
struct Measured {
  double seconds = 0;
  double peak_mib = 0;
};

template <typename F>
Measured measure(F&& f) {
  const size_t base = g_heap_now.load();
  g_heap_peak.store(base);
  const auto start = std::chrono::steady_clock::now();
  f();
  Measured m;
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  m.peak_mib = static_cast<double>(g_heap_peak.load() - base) / (1 << 20);
  return m;
}

// Timing bounds hold only in optimized builds without sanitizers.
constexpr bool kTimed =
#if defined(NDEBUG) && !defined(LG_BUDGET_TEST_SANITIZED)
    true;
#else
    false;
#endif

const ChatTemplate& v3() {
  static const ChatTemplate tmpl = [] {
    auto t = ChatTemplate::loadFromDir(kAssets + "/deepseek-v3-tokenizer");
    if (!t.isOk()) std::abort();
    return std::move(t).value();
  }();
  return tmpl;
}

Result<PromptText> renderV3(const json& messages, const ChatRenderOptions& options = {}) {
  ChatRenderInput input;
  input.messages = &messages;
  return v3().render(input, options);
}

Result<PromptText> render(std::string_view source, const json& messages, const ChatRenderOptions& options = {}) {
  auto tmpl = ChatTemplate::parse(source, "<BOS>", "<EOS>");
  if (!tmpl.isOk()) return tmpl.status();
  ChatRenderInput input;
  input.messages = &messages;
  return tmpl->render(input, options);
}

void expectRefused(const Result<PromptText>& out, std::string_view limit) {
  ASSERT_FALSE(out.isOk()) << "rendered " << out->text.size() << " bytes";
  EXPECT_EQ(out.status().code(), StatusCode::kResourceExhausted) << out.status().toString();
  EXPECT_NE(out.status().message().find(limit), std::string::npos) << out.status().message();
}

// n system messages "s0", "s1", ... then one user turn.
json manySystemMessages(int n, size_t content_bytes = 0) {
  json messages = json::array();
  for (int i = 0; i < n; ++i) {
    std::string content = "s" + std::to_string(i);
    if (content.size() < content_bytes) content.resize(content_bytes, '.');
    messages.push_back({{"role", "system"}, {"content", content}});
  }
  messages.push_back({{"role", "user"}, {"content", "hi"}});
  return messages;
}

// What the V3 template must produce for manySystemMessages(n), built the
// straightforward way: the system prompts joined with a trusted "\n\n".
PromptText expectedV3(const json& messages) {
  PromptText p;
  p.append(kBos, true);
  bool first = true;
  for (const json& m : messages) {
    if (m["role"] != "system") continue;
    if (!first) p.append("\n\n", true);
    p.append(m["content"].get<std::string>(), false);
    first = false;
  }
  p.append("<｜User｜>", true);
  p.append("hi", false);
  p.append("<｜Assistant｜>", true);
  return p;
}

TEST(ChatTemplateBudgetTest, SmallInstanceMatchesTheStraightforwardRendering) {
  const json messages = manySystemMessages(1000);
  auto out = renderV3(messages);
  ASSERT_TRUE(out.isOk()) << out.status().toString();
  const PromptText expected = expectedV3(messages);
  EXPECT_TRUE(out->text == expected.text);
  EXPECT_TRUE(out->trusted == expected.trusted) << out->trusted.size() << " ranges vs " << expected.trusted.size();
}

// The hostile case: 10^5 small system messages with the real V3
// template, which concatenates them into ns.system_prompt one by one. It
// took minutes of copying before appends were made in place.
TEST(ChatTemplateBudgetTest, HundredThousandSystemMessagesRenderInLinearTime) {
  const json messages = manySystemMessages(100000);
  Result<PromptText> out = internalError("not run");
  ChatRenderStats stats;
  ChatRenderOptions options;
  options.stats = &stats;
  const Measured m = measure([&] { out = renderV3(messages, options); });
  ASSERT_TRUE(out.isOk()) << out.status().toString();
  std::printf("V3 template, 100,000 system messages: %.3f s, peak heap +%.1f MiB, %zu bytes out, %llu bytes charged, "
              "%lld iterations\n",
              m.seconds, m.peak_mib, out->text.size(), static_cast<unsigned long long>(stats.copied_bytes),
              static_cast<long long>(stats.loop_iterations));
  const PromptText expected = expectedV3(messages);
  EXPECT_TRUE(out->text == expected.text);
  EXPECT_TRUE(out->trusted == expected.trusted);
  // Linear: the bytes charged are a small multiple of the output, not ~n^2.
  EXPECT_LT(stats.copied_bytes, 40 * out->text.size());
  if (kTimed) {
    EXPECT_LT(m.seconds, 2.0);
    EXPECT_LT(m.peak_mib, 64.0);
  }
}

// A normal conversation charges a few times its output: the 8x default
// leaves room.
TEST(ChatTemplateBudgetTest, NormalConversationUsesAFractionOfTheBudget) {
  json messages = json::array({{{"role", "system"}, {"content", "You are a helpful assistant."}}});
  for (int i = 0; i < 100; ++i) {
    messages.push_back({{"role", i % 2 ? "assistant" : "user"},
                        {"content", "Message number " + std::to_string(i) + " with a little bit of text in it."}});
  }
  ChatRenderStats stats;
  ChatRenderOptions options;
  options.stats = &stats;
  auto out = renderV3(messages, options);
  ASSERT_TRUE(out.isOk()) << out.status().toString();
  std::printf("V3 template, 101 messages: %zu bytes out, %llu bytes charged (%.1fx)\n", out->text.size(),
              static_cast<unsigned long long>(stats.copied_bytes),
              static_cast<double>(stats.copied_bytes) / static_cast<double>(out->text.size()));
  EXPECT_LT(stats.copied_bytes, 8 * out->text.size());
  EXPECT_EQ(stats.loop_iterations, 2 * 101);
}

// 10^5 system messages of 100 bytes make a 10 MB system prompt: refused at
// max_output_bytes once the accumulated string reaches 8 MiB, quickly.
TEST(ChatTemplateBudgetTest, OversizedSystemPromptIsRefusedQuickly) {
  const json messages = manySystemMessages(100000, 100);
  Result<PromptText> out = internalError("not run");
  const Measured m = measure([&] { out = renderV3(messages); });
  std::printf("V3 template, 100,000 x 100-byte system messages: refused in %.3f s, peak heap +%.1f MiB\n", m.seconds,
              m.peak_mib);
  expectRefused(out, "max_output_bytes");
  if (kTimed) {
    EXPECT_LT(m.seconds, 1.0);
    // The 8 MiB string (its buffer grows by doubling) and the loop's items.
    EXPECT_LT(m.peak_mib, 40.0);
  }
}

// Prepending cannot be done in place: each step copies the whole string.
// 10^5 steps would copy ~50 GB; the copy budget stops it after ~64 MiB.
TEST(ChatTemplateBudgetTest, QuadraticCopyingIsRefusedAtTheCopyBudget) {
  const json messages = manySystemMessages(100000, 10);
  Result<PromptText> out = internalError("not run");
  ChatRenderStats stats;
  ChatRenderOptions options;
  options.stats = &stats;
  const Measured m = measure([&] {
    out = render("{% set ns = namespace(s='') %}{% for m in messages %}{% set ns.s = m.content + ns.s %}{% endfor %}"
                 "{{ ns.s }}",
                 messages, options);
  });
  std::printf("prepend loop over 100,000 messages: refused in %.3f s after %lld iterations, peak heap +%.1f MiB\n",
              m.seconds, static_cast<long long>(stats.loop_iterations), m.peak_mib);
  expectRefused(out, "max_copied_bytes");
  EXPECT_LE(stats.copied_bytes, options.max_copied_bytes);
  EXPECT_LT(stats.loop_iterations, 10000);
  if (kTimed) {
    EXPECT_LT(m.seconds, 1.0);
    EXPECT_LT(m.peak_mib, 8.0);
  }
}

// Operations whose result size is known are refused before building anything;
// the others stop as soon as their output or allocations pass a limit.
TEST(ChatTemplateBudgetTest, BlowUpsAreRefusedBeforeTheyAllocate) {
  struct Case {
    const char* name;
    std::string source;
    json messages;
    const char* limit;
    double max_peak_mib;
  };
  json nested = json::array({1});
  for (int i = 0; i < 100; ++i) nested = json::array({nested, 2});
  json wide = json::array();
  for (int i = 0; i < 1000; ++i) wide.push_back(nested);
  const Case cases[] = {
      {"repeat", "{{ 'abc' * 1000000000 }}", json::array(), "max_output_bytes", 1.0},
      {"split", "{{ messages[0].content.split(',') | length }}",
       json::array({{{"role", "user"}, {"content", std::string(4u << 20, ',')}}}), "max_copied_bytes", 72.0},
      {"tojson indent", "{{ messages | tojson(indent=1000) }}", json::array({{{"role", "user"}, {"content", wide}}}),
       "max_output_bytes", 40.0},
      {"repr", "{{ messages[0].content | string }}",
       json::array({{{"role", "user"}, {"content", json::array({std::string(3u << 20, '\x01')})}}}),
       "max_output_bytes", 48.0},
      {"replace", "{{ messages[0].content.replace('', '0123456789') }}",
       json::array({{{"role", "user"}, {"content", std::string(1u << 20, 'a')}}}), "max_output_bytes", 40.0},
      {"join", "{% set ns = namespace(l=[]) %}{% for i in range(2000) %}{% set ns.l = ns.l + [messages[0].content] %}"
               "{% endfor %}{{ ns.l | join }}",
       json::array({{{"role", "user"}, {"content", std::string(8192, 'j')}}}), "max_output_bytes", 40.0},
  };
  for (const Case& c : cases) {
    Result<PromptText> out = internalError("not run");
    const Measured m = measure([&] { out = render(c.source, c.messages); });
    std::printf("%-14s refused in %.3f s, peak heap +%.1f MiB: %s\n", c.name, m.seconds, m.peak_mib,
                out.isOk() ? "rendered" : out.status().message().c_str());
    SCOPED_TRACE(c.name);
    expectRefused(out, c.limit);
    if (kTimed) {
      EXPECT_LT(m.seconds, 1.0);
      EXPECT_LT(m.peak_mib, c.max_peak_mib);
    }
  }
}

TEST(ChatTemplateBudgetTest, OptionsSetTheLimits) {
  const json messages = manySystemMessages(20);
  ChatRenderOptions small_output;
  small_output.max_output_bytes = 100;
  expectRefused(renderV3(messages, small_output), "max_output_bytes");
  ChatRenderOptions small_copy;
  small_copy.max_copied_bytes = 500;
  expectRefused(renderV3(messages, small_copy), "max_copied_bytes");
  ChatRenderOptions few_iterations;
  few_iterations.max_loop_iterations = 20;  // the template loops over the 21 messages twice
  expectRefused(renderV3(messages, few_iterations), "max_loop_iterations");
  ChatRenderOptions enough;
  enough.max_output_bytes = 1000;
  enough.max_copied_bytes = 4000;
  enough.max_loop_iterations = 42;
  auto ok = renderV3(messages, enough);
  ASSERT_TRUE(ok.isOk()) << ok.status().toString();
  EXPECT_TRUE(ok->text == expectedV3(messages).text);
}

// In-place appends must be invisible: other holders of the old string keep
// it, scoping is Jinja2's, errors come in Jinja2's order, trust is exact.
TEST(ChatTemplateBudgetTest, InPlaceAppendsKeepValueSemantics) {
  const json messages = json::array({{{"role", "user"}, {"content", "U"}}, {{"role", "user"}, {"content", "V"}}});
  struct Case {
    const char* source;
    const char* expected;
  };
  const Case cases[] = {
      // A copy taken before the append keeps the old value.
      {"{% set x = 'a' %}{% set y = x %}{% set x = x + 'b' %}{{ x }},{{ y }}", "ab,a"},
      {"{% set ns = namespace(s='') %}{% for m in messages %}{% set old = ns.s %}"
       "{% set ns.s = ns.s + m.content + '|' %}[{{ old }}]{% endfor %}{{ ns.s }}",
       "[][U|]U|V|"},
      // The string appended to itself.
      {"{% set x = 'a' ~ 'b' %}{% set x = x + x %}{% set x = x ~ x ~ '!' %}{{ x }}", "abababab!"},
      {"{% set ns = namespace(s='ab') %}{% set ns.s = ns.s + ns.s[1:] + ns.s %}{{ ns.s }}", "abbab"},
      // A loop body's assignment shadows the outer variable: it is not appended to.
      {"{% set x = 'a' %}{% for i in range(2) %}{% set x = x + 'b' %}{{ x }}{% endfor %}{{ x }}", "ababa"},
      {"{% for i in range(3) %}{% set x = 'q' %}{% set x = x + 'r' %}{{ x }}{% endfor %}", "qrqrqr"},
      // Lists.
      {"{% set ns = namespace(l=[]) %}{% for i in range(4) %}{% set keep = ns.l %}{% set ns.l = ns.l + [i] %}"
       "{{ keep | length }}{% endfor %}{{ ns.l }}",
       "0123[0, 1, 2, 3]"},
      {"{% set l = (1, 2) %}{% set m = l %}{% set l = l + (3,) %}{{ l }}{{ m }}", "(1, 2, 3)(1, 2)"},
      // Not strings or lists: the plain path.
      {"{% set n = 1 %}{% set n = n + 2 + 3 %}{{ n }}", "6"},
      {"{% set n = 1 %}{% set n = n ~ 2 ~ 'x' %}{{ n }}", "12x"},
      // `{{ a + b }}` writes string operands straight to the output; other types add as usual.
      {"{{ 'a' + messages[0].content + 'b' }}|{{ 1 + 2 }}|{{ [1] + [2] }}|{{ 'x' ~ (1 + 2) }}|{{ (1 + 2) ~ 'x' }}", "aUb|3|[1, 2]|x3|3x"},
      // Slices walk the string once (no per-code-point tables); huge steps do not overflow.
      {"{% set s = 'a\u00e9\u20ac\U0001F600b' %}{{ s[::-1] }}|{{ s[::2] }}|{{ s[1:4] }}|{{ s[-2:-5:-1] }}|"
       "{{ s[::9223372036854775807] }}|{{ s[::-9223372036854775807] }}|{{ 'abc'[5:1] }}|{{ 'abc'[1:] }}|"
       "{{ [1, 2, 3, 4, 5][::-2] }}|{{ [1, 2, 3][::-9223372036854775807 - 1] }}",
       "b\U0001F600\u20ac\u00e9a|a\u20acb|\u00e9\u20ac\U0001F600|\U0001F600\u20ac\u00e9|a|b||bc|[5, 3, 1]|[3]"},
  };
  for (const Case& c : cases) {
    auto out = render(c.source, messages);
    ASSERT_TRUE(out.isOk()) << c.source << ": " << out.status().toString();
    EXPECT_EQ(out->text, c.expected) << c.source;
  }
  // Jinja2 evaluates left to right: `s + 1` fails before `undefined.x` is looked at.
  auto order = render("{% set ns = namespace(s='a') %}{% set ns.s = ns.s + 1 + nothing.x %}", messages);
  ASSERT_FALSE(order.isOk());
  EXPECT_NE(order.status().message().find("can only concatenate str"), std::string::npos) << order.status().message();
  auto undefined_first = render("{% set ns = namespace(s='a') %}{% set ns.s = ns.s + nothing.x + 1 %}", messages);
  ASSERT_FALSE(undefined_first.isOk());
  EXPECT_NE(undefined_first.status().message().find("'nothing' is undefined"), std::string::npos)
      << undefined_first.status().message();
}

TEST(ChatTemplateBudgetTest, InPlaceAppendsKeepPerByteTrustMerged) {
  const json messages = json::array({{{"role", "user"}, {"content", "ab"}}, {{"role", "user"}, {"content", "cd"}}});
  auto out = render(
      "{% set ns = namespace(s='') %}{% for m in messages %}"
      "{% set ns.s = ns.s + '<' %}{% set ns.s = ns.s ~ '>' %}{% set ns.s = ns.s + m.content %}"
      "{% set keep = ns.s %}{% set ns.s = ns.s + '.' + '.' %}{% endfor %}{{ ns.s }}{{ bos_token }}",
      messages);
  ASSERT_TRUE(out.isOk()) << out.status().toString();
  EXPECT_EQ(out->text, "<>ab..<>cd..<BOS>");
  // "<>" and ".." and "<>" merge into single trusted ranges around the client bytes.
  const std::vector<ByteRange> expected = {{0, 2}, {4, 8}, {10, 17}};
  EXPECT_TRUE(out->trusted == expected);
}

}  // namespace
}  // namespace lg::text
