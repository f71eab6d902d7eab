// Load-time errors, render-time errors on hostile requests, limits and speed.
#include <chrono>
#include <filesystem>
#include <string>

#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "text/chat/chat_template.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define LG_CHAT_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define LG_CHAT_TEST_SANITIZED 1
#endif
#endif

namespace lg::text {
namespace {

using nlohmann::json;

const std::string kFixtures = LG_FIXTURES_DIR;
const std::string kAssets = LG_ASSETS_DIR;

Status loadStatus(std::string_view source) { return ChatTemplate::parse(source, "<s>", "</s>").status(); }

Result<PromptText> render(std::string_view source, const json& messages, const json* extra = nullptr,
                          const json* tools = nullptr) {
  auto tmpl = ChatTemplate::parse(source, "<s>", "</s>");
  if (!tmpl.isOk()) return tmpl.status();
  ChatRenderInput input;
  input.messages = &messages;
  input.extra = extra;
  input.tools = tools;
  return tmpl->render(input);
}

ChatTemplate v3() {
  auto tmpl = ChatTemplate::loadFromDir(kAssets + "/deepseek-v3-tokenizer");
  EXPECT_TRUE(tmpl.isOk()) << tmpl.status().toString();
  return std::move(tmpl).value();
}

Result<PromptText> renderV3(const json& messages) {
  static const ChatTemplate tmpl = v3();
  ChatRenderInput input;
  input.messages = &messages;
  return tmpl.render(input);
}

void expectUnimplemented(std::string_view source, std::string_view construct, int line) {
  const Status s = loadStatus(source);
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented) << source << " -> " << s.toString();
  EXPECT_NE(s.message().find(construct), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("line " + std::to_string(line)), std::string::npos) << s.message();
}

TEST(ChatTemplateLoadTest, UnsupportedConstructsFailAtLoadNamingThemAndTheLine) {
  expectUnimplemented("{% macro f(x) %}{{ x }}{% endmacro %}", "'macro'", 1);
  expectUnimplemented("a\n{% call f() %}x{% endcall %}", "'call'", 2);
  expectUnimplemented("a\nb\n{% include 'other.jinja' %}", "'include'", 3);
  expectUnimplemented("{% import 'm.jinja' as m %}", "'import'", 1);
  expectUnimplemented("{% from 'm.jinja' import x %}", "'from'", 1);
  expectUnimplemented("{% extends 'base.jinja' %}", "'extends'", 1);
  expectUnimplemented("\n{% block body %}x{% endblock %}", "'block'", 2);
  expectUnimplemented("{% filter upper %}x{% endfilter %}", "'filter'", 1);
  expectUnimplemented("{% with a = 1 %}{{ a }}{% endwith %}", "'with'", 1);
  expectUnimplemented("{{ 'x' | wordwrap(3) }}", "'wordwrap'", 1);
  expectUnimplemented("\n\n\n{{ messages | selectattr('role') | list }}", "'selectattr'", 4);
  expectUnimplemented("{% if x is escaped %}{% endif %}", "'escaped'", 1);
  expectUnimplemented("{{ 'a,b'.partition(',') }}", "'partition'", 1);
  expectUnimplemented("{{ strftime_now('%Y') }}", "'strftime_now'", 1);
  expectUnimplemented("{% for x in y recursive %}{{ loop(x) }}{% endfor %}", "recursive", 1);
  expectUnimplemented("{{ f(*args) }}", "'f'", 1);
  expectUnimplemented("{{ range(*args) }}", "*args", 1);
  expectUnimplemented("x\n{% raw %}{{ y }}{% endraw %}", "raw", 2);
}

TEST(ChatTemplateLoadTest, SyntaxErrorsNameTheLine) {
  const char* cases[][2] = {
      {"line1\n{% if x %}\nnever closed", "line 3"},
      {"{{ 1 + }}", "line 1"},
      {"\n\n{{ x ]] }}", "line 3"},
      {"{% endfor %}", "line 1"},
      {"{% for x in %}{% endfor %}", "line 1"},
      {"a\n{# unterminated comment", "line 2"},
      {"{{ 'unterminated }}", "line 1"},
      {"{% break %}", "line 1"},
      {"{% set 1 = 2 %}", "line 1"},
      {"{{ x is defined is none }}", "line 1"},
  };
  for (const auto& [source, line] : cases) {
    const Status s = loadStatus(source);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << source << " -> " << s.toString();
    EXPECT_NE(s.message().find(line), std::string::npos) << source << " -> " << s.message();
  }
}

TEST(ChatTemplateLoadTest, DeepNestingIsRejectedNotOverflowed) {
  EXPECT_FALSE(loadStatus("{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}").isOk());
  EXPECT_FALSE(loadStatus("{{ " + std::string(100000, '[') + std::string(100000, ']') + " }}").isOk());
  EXPECT_FALSE(loadStatus("{{ " + std::string(100000, '-') + "1 }}").isOk());
  std::string chain = "{{ 1";
  for (int i = 0; i < 50000; ++i) chain += " + 1";
  EXPECT_FALSE(loadStatus(chain + " }}").isOk());
  std::string ifs;
  for (int i = 0; i < 10000; ++i) ifs += "{% if true %}";
  EXPECT_FALSE(loadStatus(ifs).isOk());
  EXPECT_FALSE(loadStatus("\xff\xfe invalid utf-8").isOk());
}

TEST(ChatTemplateLoadTest, LoadsNamedTemplateListsAndAddedTokenObjects) {
  const auto dir = std::filesystem::temp_directory_path() / ("lg_chat_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const json config = {
      {"bos_token", {{"__type", "AddedToken"}, {"content", "<B>"}}},
      {"eos_token", "<E>"},
      {"chat_template", json::array({{{"name", "tool_use"}, {"template", "tools"}},
                                     {{"name", "default"}, {"template", "{{ bos_token }}x{{ eos_token }}"}}})}};
  ASSERT_TRUE(writeFileAtomic((dir / "tokenizer_config.json").string(), config.dump()).isOk());
  auto tmpl = ChatTemplate::loadFromDir(dir.string());
  ASSERT_TRUE(tmpl.isOk()) << tmpl.status().toString();
  const json messages = json::array();
  ChatRenderInput input;
  input.messages = &messages;
  auto out = tmpl->render(input);
  ASSERT_TRUE(out.isOk());
  EXPECT_EQ(out->text, "<B>x<E>");
  EXPECT_EQ(out->trusted, (std::vector<ByteRange>{{0, 7}}));

  // A standalone chat_template.jinja wins over the config entry.
  ASSERT_TRUE(writeFileAtomic((dir / "chat_template.jinja").string(), "file:{{ eos_token }}").isOk());
  auto from_file = ChatTemplate::loadFromDir(dir.string());
  ASSERT_TRUE(from_file.isOk()) << from_file.status().toString();
  auto file_out = from_file->render(input);
  ASSERT_TRUE(file_out.isOk());
  EXPECT_EQ(file_out->text, "file:<E>");
  std::filesystem::remove(dir / "chat_template.jinja");

  ASSERT_TRUE(writeFileAtomic((dir / "tokenizer_config.json").string(), R"({"bos_token": "<B>"})").isOk());
  EXPECT_EQ(ChatTemplate::loadFromDir(dir.string()).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(writeFileAtomic((dir / "tokenizer_config.json").string(), R"({"chat_template": "{% macro m() %}{% endmacro %}"})").isOk());
  const Status bad = ChatTemplate::loadFromDir(dir.string()).status();
  EXPECT_EQ(bad.code(), StatusCode::kUnimplemented);
  EXPECT_NE(bad.message().find("'macro'"), std::string::npos) << bad.message();
  std::filesystem::remove_all(dir);
  EXPECT_FALSE(ChatTemplate::loadFromDir(dir.string()).isOk());
}

TEST(ChatTemplateRenderTest, RaiseExceptionIsARenderError) {
  const json messages = json::array({{{"role", "narrator"}, {"content", "x"}}});
  auto out = render(
      "{% for m in messages %}{% if m.role not in ['user', 'assistant'] %}"
      "{{ raise_exception('Unsupported role: ' ~ m.role) }}{% endif %}{% endfor %}",
      messages);
  ASSERT_FALSE(out.isOk());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("Unsupported role: narrator"), std::string::npos) << out.status().message();
}

TEST(ChatTemplateRenderTest, HostileMessagesAreErrorsNotCrashes) {
  const json hostile[] = {
      json::array({{{"role", "user"}, {"content", 42}}}),
      json::array({{{"role", "user"}, {"content", json::array({1, 2})}}}),
      json::array({{{"role", "user"}, {"content", {{"nested", "object"}}}}}),
      json::array({{{"role", "user"}}}),
      json::array({{{"role", "assistant"}, {"content", nullptr}, {"tool_calls", "not a list"}}}),
      json::array({{{"role", "assistant"}, {"content", nullptr}, {"tool_calls", json::array({42})}}}),
      json::array({{{"role", "assistant"}, {"content", nullptr}, {"tool_calls", json::array({{{"type", "function"}}})}}}),
      json::array({{{"role", "tool"}, {"content", nullptr}}}),
  };
  for (const json& messages : hostile) {
    auto out = renderV3(messages);
    EXPECT_FALSE(out.isOk()) << messages.dump() << " rendered " << out->text;
    if (!out.isOk()) {
      EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument) << out.status().toString();
      EXPECT_NE(out.status().message().find("line "), std::string::npos) << out.status().message();
    }
  }
  // Not an array at all.
  const json not_array = {{"role", "user"}};
  EXPECT_EQ(renderV3(not_array).status().code(), StatusCode::kInvalidArgument);
  // Odd but valid: messages that are not objects or lack a role render as Jinja2 does (skipped).
  auto skipped = renderV3(json::array({"just a string", 7, nullptr, {{"content", "no role"}}}));
  ASSERT_TRUE(skipped.isOk()) << skipped.status().toString();
  EXPECT_EQ(skipped->text, "<｜begin▁of▁sentence｜><｜Assistant｜>");
}

TEST(ChatTemplateRenderTest, DeeplyNestedJsonIsBoundedInTojson) {
  json deep = json::array();
  for (int i = 0; i < 5000; ++i) {
    json next = json::array();
    next.push_back(std::move(deep));
    deep = std::move(next);
  }
  const json messages = json::array({{{"role", "user"}, {"content", deep}}});
  auto out = render("{% for m in messages %}{{ m.content | tojson }}{{ m.content == m.content }}{% endfor %}", messages);
  ASSERT_FALSE(out.isOk());
  EXPECT_NE(out.status().message().find("nested deeper"), std::string::npos) << out.status().message();
  // The V3 template never looks inside, so the same request renders up to its own type error.
  EXPECT_FALSE(renderV3(messages).isOk());
}

TEST(ChatTemplateRenderTest, HugeStringsAndLoopsHitLimits) {
  // 4 MiB of content fits the default 8 MiB output; 9 MiB does not.
  const std::string big(4u << 20, 'a');
  const json messages = json::array({{{"role", "user"}, {"content", big}}});
  auto ok = renderV3(messages);
  ASSERT_TRUE(ok.isOk()) << ok.status().toString();
  EXPECT_EQ(ok->text.size(), big.size() + std::string("<｜begin▁of▁sentence｜><｜User｜><｜Assistant｜>").size());
  auto too_big = renderV3(json::array({{{"role", "user"}, {"content", std::string(9u << 20, 'a')}}}));
  ASSERT_FALSE(too_big.isOk());
  EXPECT_EQ(too_big.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(too_big.status().message().find("max_output_bytes"), std::string::npos) << too_big.status().message();

  // 4 MiB doubled ten times would be 4 GiB: stopped at the string limit.
  auto grow = render("{% set ns = namespace(s=messages[0].content) %}{% for i in range(10) %}"
                     "{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s | length }}",
                     messages);
  ASSERT_FALSE(grow.isOk());
  EXPECT_EQ(grow.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(grow.status().message().find("max_output_bytes"), std::string::npos) << grow.status().message();

  auto repeat = render("{{ 'x' * 1000000000 }}", json::array());
  ASSERT_FALSE(repeat.isOk());
  EXPECT_EQ(repeat.status().code(), StatusCode::kResourceExhausted);

  auto range = render("{% for i in range(1000000) %}{% endfor %}", json::array());
  ASSERT_FALSE(range.isOk());
  EXPECT_NE(range.status().message().find("range too big"), std::string::npos);

  auto iterations = render("{% for i in range(100000) %}{% for j in range(100) %}{% endfor %}{% endfor %}", json::array());
  ASSERT_FALSE(iterations.isOk());
  EXPECT_EQ(iterations.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(iterations.status().message().find("max_loop_iterations"), std::string::npos);

  json many = json::array();
  for (int i = 0; i < 20000; ++i) many.push_back({{"role", i % 2 ? "assistant" : "user"}, {"content", "m"}});
  auto long_chat = renderV3(many);
  ASSERT_TRUE(long_chat.isOk()) << long_chat.status().toString();
}

TEST(ChatTemplateRenderTest, ArithmeticErrorsAreReported) {
  EXPECT_FALSE(render("{{ 1 / 0 }}", json::array()).isOk());
  EXPECT_FALSE(render("{{ 1 // 0 }}", json::array()).isOk());
  EXPECT_FALSE(render("{{ 9223372036854775807 + 1 }}", json::array()).isOk());
  EXPECT_FALSE(render("{{ 2 ** 64 }}", json::array()).isOk());
  EXPECT_FALSE(render("{{ 1 < 'a' }}", json::array()).isOk());
  EXPECT_FALSE(render("{{ undefined_var.attr }}", json::array()).isOk());
  EXPECT_FALSE(render("{{ 'a' + undefined_var }}", json::array()).isOk());
  EXPECT_FALSE(render("{% set x = 1 %}{% set x.y = 2 %}", json::array()).isOk());
  EXPECT_FALSE(render("{% set a, b = [1] %}", json::array()).isOk());
  EXPECT_FALSE(render("{{ 'a,b'.split('') }}", json::array()).isOk());
  EXPECT_EQ(render("{{ '%s' % 1 }}", json::array()).status().code(), StatusCode::kUnimplemented);
  // Undefined is printable and falsy, as in Jinja2.
  auto undef = render("[{{ nothing }}]{{ nothing is defined }}{{ nothing | length }}{% for x in nothing %}x{% endfor %}",
                      json::array());
  ASSERT_TRUE(undef.isOk());
  EXPECT_EQ(undef->text, "[]False0");
}

TEST(ChatTemplateRenderTest, ReservedAndMalformedInputs) {
  const json messages = json::array();
  const json reserved = {{"messages", json::array()}};
  EXPECT_EQ(render("x", messages, &reserved).status().code(), StatusCode::kInvalidArgument);
  const json not_object = json::array({1});
  EXPECT_EQ(render("x", messages, &not_object).status().code(), StatusCode::kInvalidArgument);
  const json bad_tools = json::array({"not an object"});
  EXPECT_EQ(render("x", messages, nullptr, &bad_tools).status().code(), StatusCode::kInvalidArgument);
  const json tools = json::array({{{"type", "function"}}});
  auto out = render("{{ tools is none }}{{ documents is none }}{{ tools | length }}", messages, nullptr, &tools);
  ASSERT_TRUE(out.isOk());
  EXPECT_EQ(out->text, "FalseTrue1");
  auto no_tools = render("{{ tools is defined }}{{ tools is none }}", messages);
  ASSERT_TRUE(no_tools.isOk());
  EXPECT_EQ(no_tools->text, "TrueTrue");
}

TEST(ChatTemplateRenderTest, RendersAHundredMessagesWellUnderAMillisecond) {
  json messages = json::array({{{"role", "system"}, {"content", "You are a helpful assistant."}}});
  for (int i = 0; i < 100; ++i) {
    messages.push_back({{"role", i % 2 ? "assistant" : "user"},
                        {"content", "Message number " + std::to_string(i) + " with a little bit of text in it."}});
  }
  const ChatTemplate tmpl = v3();
  ChatRenderInput input;
  input.messages = &messages;
  ASSERT_TRUE(tmpl.render(input).isOk());
  constexpr int kRuns = 200;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kRuns; ++i) ASSERT_TRUE(tmpl.render(input).isOk());
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / kRuns;
  std::printf("V3 template, 101 messages: %.1f us per render\n", us);
  // Timing is only meaningful in optimized builds without sanitizers; the
  // bound is generous for shared machines (typical is ~0.15 ms).
#if defined(NDEBUG) && !defined(LG_CHAT_TEST_SANITIZED)
  EXPECT_LT(us, 1000.0);
#endif
}

}  // namespace
}  // namespace lg::text
