// StructuredOutput (proxy/gateway/structured_output.h) over the real
// DeepSeek-V3 tokenizer: which request rules make which reply grammar, the
// two steps (describe is free, ready() only after compile()), and that a
// schema error names the parameter the client sent it in. The grammar's own
// exactness is text/grammar's tests'; here each constraint is driven with the
// token ids the tokenizer makes of a whole reply.
#include "proxy/gateway/structured_output.h"

#include <gtest/gtest.h>

#include "tests/proxy/gateway/deepseek_v3_text.h"

namespace lg::proxy {
namespace {

using json = nlohmann::json;

using v3::tokenizer;

const StructuredOutput& structured() {
  static const StructuredOutput kStructured(tokenizer());
  return kStructured;
}

constexpr const char* kAnswer =
    R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":false})";
constexpr const char* kWeatherCall =
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>weather\n```json\n{\"city\":\"Oslo\"}\n```"
    "<｜tool▁call▁end｜><｜tool▁calls▁end｜>";

openai::ChatPrompt promptWith(bool format, bool tools) {
  openai::ChatPrompt p;
  if (format) {
    p.response_format.kind = openai::ResponseFormat::Kind::kJsonSchema;
    p.response_format.schema = json::parse(kAnswer);
    p.response_format.param = "response_format.json_schema.schema";
  }
  if (tools) {
    openai::FunctionTool t;
    t.name = "weather";
    t.parameters = json::parse(R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]})");
    t.strict = true;
    p.tools.push_back(t);
  }
  return p;
}

// Whether the constraint accepts the whole text (as the tokenizer encodes
// it) and may end after it.
bool accepts(const serving::TokenConstraintFactory& factory, const std::string& text) {
  auto ids = tokenizer().encode(text);
  if (!ids.isOk()) return false;
  std::unique_ptr<serving::TokenConstraint> c = factory();
  for (int32_t id : *ids) {
    if (!c->accept(id)) return false;
  }
  return c->canEnd();
}

serving::TokenConstraintFactory mustCompile(const ReplyConstraint& reply) {
  auto f = structured().compile(reply);
  EXPECT_TRUE(f.isOk()) << (f.isOk() ? "" : f.error().message);
  return f.isOk() ? *f : serving::TokenConstraintFactory();
}

TEST(StructuredOutputTest, FreeTextHasNoConstraint) {
  auto reply = structured().describeChat(promptWith(false, false), {}, "{}");
  ASSERT_TRUE(reply.isOk());
  EXPECT_FALSE(reply->constrained());
  auto ready = structured().ready(*reply);
  ASSERT_TRUE(ready.has_value());
  EXPECT_FALSE(*ready);  // an empty factory: no matcher
}

TEST(StructuredOutputTest, AutoToolsWithAFormatGiveTheFormatOrACall) {
  auto reply = structured().describeChat(promptWith(true, true), {}, "{}");
  ASSERT_TRUE(reply.isOk());
  ASSERT_TRUE(reply->constrained());
  EXPECT_FALSE(structured().ready(*reply).has_value()) << "not compiled yet";
  const serving::TokenConstraintFactory f = mustCompile(*reply);
  ASSERT_TRUE(f);
  EXPECT_TRUE(structured().ready(*reply).has_value()) << "compiled and prepared: ready at no cost";
  EXPECT_TRUE(accepts(f, R"({"a":12})"));
  EXPECT_TRUE(accepts(f, kWeatherCall));
  EXPECT_FALSE(accepts(f, "It is sunny."));
  // Without tools the format alone; with tool_choice "none" too.
  openai::ChatPrompt none = promptWith(true, true);
  none.tool_choice.mode = openai::ToolChoice::Mode::kNone;
  const serving::TokenConstraintFactory g = mustCompile(*structured().describeChat(none, {}, "{}"));
  EXPECT_TRUE(accepts(g, R"({"a":12})"));
  EXPECT_FALSE(accepts(g, kWeatherCall));
}

TEST(StructuredOutputTest, AnOpenThinkIsReasonedThroughBeforeTheRules) {
  openai::OutputParserOptions r1;
  r1.starts_in_reasoning = true;  // R1's generation prompt ends with "<think>\n"
  const serving::TokenConstraintFactory f = mustCompile(*structured().describeChat(promptWith(true, false), r1, "{}"));
  EXPECT_TRUE(accepts(f, "The answer needs an integer.\n</think>\n\n{\"a\":3}"));
  EXPECT_FALSE(accepts(f, "{\"a\":3}")) << "the reasoning must close first";
  EXPECT_FALSE(accepts(f, "thinking</think>\n\nSure: {\"a\":3}"));
  const serving::TokenConstraintFactory plain = mustCompile(*structured().describeChat(promptWith(true, false), {}, "{}"));
  EXPECT_FALSE(accepts(plain, "hm</think>{\"a\":3}"));
}

TEST(StructuredOutputTest, AToolSchemaErrorNamesTheToolAsTheClientSentIt) {
  openai::ChatPrompt p = promptWith(false, true);
  p.tool_choice.mode = openai::ToolChoice::Mode::kRequired;
  openai::FunctionTool bad;
  bad.name = "lookup";
  bad.strict = true;
  bad.parameters = json::parse(R"({"type":"object","properties":{"q":{"not":{}}}})");
  p.tools.push_back(bad);
  const auto errorFor = [&](const json& body) {
    auto reply = structured().describeChat(p, {}, body.dump());
    EXPECT_TRUE(reply.isOk());
    auto f = structured().compile(*reply);
    EXPECT_FALSE(f.isOk());
    return f.isOk() ? openai::ApiError{} : f.error();
  };
  // Chat nests each function; Responses does not.
  const json chat = {{"tools", json::array({{{"type", "function"}, {"function", {{"name", "weather"}}}},
                                            {{"type", "function"}, {"function", {{"name", "lookup"}}}}})}};
  const openai::ApiError c = errorFor(chat);
  EXPECT_EQ(c.param, "tools[1].function.parameters");
  EXPECT_NE(c.message.find("/properties/q/not"), std::string::npos) << c.message;
  EXPECT_NE(c.message.find("'not'"), std::string::npos) << c.message;
  const json responses = {{"tools", json::array({{{"type", "function"}, {"name", "weather"}},
                                                 {{"type", "function"}, {"name", "lookup"}}})}};
  EXPECT_EQ(errorFor(responses).param, "tools[1].parameters");
}

}  // namespace
}  // namespace lg::proxy
