// The grammar engine: masks against brute force (exactness), random
// generation validated by valijson, refusals naming the keyword, limits,
// rollback, the cache and the tool-call grammar.
#include <chrono>

#include "tests/text/grammar/grammar_test_support.h"
#include "text/grammar/grammar_cache.h"
#include "text/grammar/token_table.h"

namespace lg::text::grammar {
namespace {

using testing::allowedIds;
using testing::bruteMask;
using testing::generate;
using testing::mustBuild;
using testing::validates;
using OJson = nlohmann::ordered_json;

const char* kShellTool = R"({
  "type": "object",
  "properties": {
    "command": {"type": "array", "items": {"type": "string"}},
    "workdir": {"type": "string"},
    "timeout_ms": {"type": "integer"}
  },
  "required": ["command", "workdir", "timeout_ms"],
  "additionalProperties": false
})";

const char* kRecursive = R"({
  "$defs": {
    "node": {
      "type": "object",
      "properties": {
        "name": {"type": "string", "maxLength": 12},
        "kind": {"enum": ["file", "dir"]},
        "size": {"type": "integer", "minimum": 0, "maximum": 4096},
        "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 3}
      },
      "required": ["name", "kind"],
      "additionalProperties": false
    }
  },
  "$ref": "#/$defs/node"
})";

const char* kMixed = R"({
  "type": "object",
  "properties": {
    "id": {"type": "string", "format": "uuid"},
    "when": {"type": "string", "format": "date-time"},
    "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]{1,5}$"}, "minItems": 1, "maxItems": 3},
    "score": {"type": ["number", "null"]},
    "level": {"type": "integer", "exclusiveMinimum": -5, "maximum": 120},
    "mode": {"anyOf": [{"const": "fast"}, {"type": "boolean"}]},
    "pair": {"type": "array", "items": [{"type": "string"}, {"type": "integer"}], "additionalItems": false},
    "extra": {"type": "object", "additionalProperties": {"type": "integer"}}
  },
  "required": ["id", "tags", "level"],
  "additionalProperties": false
})";

std::vector<std::pair<std::string, nlohmann::json>> schemas() {
  return {{"shell", nlohmann::json::parse(kShellTool)},
          {"recursive", nlohmann::json::parse(kRecursive)},
          {"mixed", nlohmann::json::parse(kMixed)},
          {"open", nlohmann::json::parse(R"({"type":"object","properties":{"a":{"type":"string"}},"required":["a"]})")},
          {"any", nlohmann::json::parse("{}")}};
}

// (a) Exactness on the small vocabulary: many states, every one compared.
TEST(GrammarExactness, SmallVocabularyMatchesBruteForce) {
  auto vocab = testing::smallVocabulary();
  int states = 0, allowed_total = 0;
  for (const auto& [name, schema] : schemas()) {
    auto g = mustBuild(Grammar::fromJsonSchema(OJson::parse(schema.dump())));
    ASSERT_TRUE(g) << name;
    for (unsigned seed = 0; seed < 6; ++seed) {
      std::mt19937 rng(seed);
      Matcher m(g, vocab);
      std::vector<uint32_t> mask(vocab->maskWords());
      std::string text;
      generate(m, rng, &text, 120, 0.2, [&](Matcher& mm) {
        mm.fillNextTokenMask(mask);
        const std::vector<uint32_t> brute = bruteMask(mm);
        ASSERT_EQ(mask, brute) << name << " seed " << seed << " after " << mm.acceptedCount() << " tokens";
        ++states;
        allowed_total += static_cast<int>(allowedIds(mask, vocab->size()).size());
      });
    }
  }
  std::printf("exactness (small vocabulary): %d states, %d allowed tokens in all\n", states, allowed_total);
  EXPECT_GT(states, 200);
}

// (a) Exactness on the real 129k DeepSeek V3 vocabulary, fewer states.
TEST(GrammarExactness, V3VocabularyMatchesBruteForce) {
  auto vocab = testing::v3Vocabulary();
  int states = 0;
  for (const auto& [name, schema] : schemas()) {
    if (name == "any" || name == "open") continue;
    auto g = mustBuild(Grammar::fromJsonSchema(OJson::parse(schema.dump())));
    ASSERT_TRUE(g);
    std::mt19937 rng(7);
    Matcher m(g, vocab);
    std::vector<uint32_t> mask(vocab->maskWords());
    std::string text;
    int step = 0;
    generate(m, rng, &text, 40, 0.0, [&](Matcher& mm) {
      if (step++ % 5 != 0) return;
      mm.fillNextTokenMask(mask);
      ASSERT_EQ(mask, bruteMask(mm)) << name << " after " << mm.acceptedCount() << " tokens";
      ++states;
    });
  }
  std::printf("exactness (DeepSeek V3 vocabulary): %d states\n", states);
  EXPECT_GT(states, 8);
}

// (a) Exactness after Grammar::prepare: every table is built up front (with
// the shared builder, not the lazy one), masks still equal brute force, and
// no mask call builds a table.
TEST(GrammarExactness, PreparedMatchesBruteForceAndBuildsNothingLater) {
  for (const auto& vocab : {testing::smallVocabulary(), testing::v3Vocabulary()}) {
    const bool small = vocab->size() < 1000;
    for (const auto& [name, schema] : schemas()) {
      if (!small && (name == "any" || name == "open")) continue;
      auto g = mustBuild(Grammar::fromJsonSchema(OJson::parse(schema.dump())));
      ASSERT_TRUE(g) << name;
      auto table = g->prepare(vocab);
      EXPECT_EQ(table, g->tokenTable(vocab));
      EXPECT_EQ(table, g->prepare(vocab));  // idempotent
      const size_t built = table->builtCount();
      EXPECT_EQ(built, table->classCount()) << name;
      EXPECT_LE(table->classCount(), g->automaton().nodes.size());
      int states = 0;
      for (unsigned seed = 0; seed < (small ? 4u : 1u); ++seed) {
        std::mt19937 rng(seed + 11);
        Matcher m(g, vocab);
        std::vector<uint32_t> mask(vocab->maskWords());
        std::string text;
        int step = 0;
        generate(m, rng, &text, small ? 120 : 40, 0.1, [&](Matcher& mm) {
          if (!small && step++ % 5 != 0) return;
          mm.fillNextTokenMask(mask);
          ASSERT_EQ(mask, bruteMask(mm)) << name << " seed " << seed << " after " << mm.acceptedCount() << " tokens";
          ++states;
        });
      }
      EXPECT_GT(states, 0) << name;
      EXPECT_EQ(table->builtCount(), built) << name << ": a mask call built a table after prepare";
    }
  }
}

// (b) Random generation validates with valijson.
TEST(GrammarGeneration, OutputsValidate) {
  auto vocab = testing::v3Vocabulary();
  int ok = 0;
  for (const auto& [name, schema] : schemas()) {
    auto g = mustBuild(Grammar::fromJsonSchema(OJson::parse(schema.dump())));
    ASSERT_TRUE(g);
    for (unsigned seed = 0; seed < 4; ++seed) {
      std::mt19937 rng(seed * 31 + 1);
      Matcher m(g, vocab);
      std::string text;
      ASSERT_TRUE(generate(m, rng, &text, 300, 0.5)) << name << ": stuck after " << text;
      if (!m.canEnd()) continue;  // cut at the length limit
      std::string why;
      EXPECT_TRUE(validates(schema, text, &why)) << name << ": " << text << "\n" << why;
      ++ok;
    }
  }
  EXPECT_GT(ok, 5);
}

TEST(Grammar, RollbackRestoresState) {
  auto vocab = testing::smallVocabulary();
  auto g = mustBuild(Grammar::fromJsonSchema(nlohmann::json::parse(kShellTool)));
  Matcher m(g, vocab);
  std::vector<uint32_t> before(vocab->maskWords()), after(vocab->maskWords());
  m.fillNextTokenMask(before);
  ASSERT_TRUE(m.acceptBytes("{\"command\":[\"l"));
  ASSERT_TRUE(m.acceptBytes("s\"]"));
  EXPECT_FALSE(m.acceptBytes("}"));  // workdir is required
  m.rollback(2);
  m.fillNextTokenMask(after);
  EXPECT_EQ(before, after);
  EXPECT_EQ(m.acceptedCount(), 0);
  // nlohmann::json sorts keys: alphabetical order.
  ASSERT_TRUE(m.acceptBytes("{\"command\":[],\"timeout_ms\":100,\"workdir\":\"/\"}"));
  EXPECT_TRUE(m.canEnd());
  EXPECT_TRUE(m.mustEnd());
}

TEST(Grammar, WhitespaceIsBounded) {
  auto vocab = testing::smallVocabulary();
  auto compact = mustBuild(Grammar::fromJsonSchema(nlohmann::json::parse(kShellTool)));
  Matcher m(compact, vocab);
  EXPECT_FALSE(m.acceptBytes("{ "));
  Limits l;
  l.max_whitespace = 2;
  auto loose = mustBuild(Grammar::fromJsonSchema(nlohmann::json::parse(kShellTool), l));
  Matcher m2(loose, vocab);
  EXPECT_TRUE(m2.acceptBytes("{ \n"));
  EXPECT_FALSE(m2.acceptBytes(" "));
}

struct Refusal {
  const char* schema;
  const char* keyword;
  const char* path;
};

TEST(Grammar, RefusalsNameKeywordAndPath) {
  const Refusal cases[] = {
      {R"({"type":"object","properties":{"a":{"not":{"type":"string"}}}})", "not", "/properties/a/not"},
      {R"({"type":"array","uniqueItems":true})", "uniqueItems", "/uniqueItems"},
      {R"({"type":"string","format":"uri-template"})", "format", "/format"},
      {R"({"patternProperties":{"^a":{}}})", "patternProperties", "/patternProperties"},
      {R"({"$ref":"http://example.com/x.json"})", "$ref", "/$ref"},
      {R"({"type":"string","minLength":5,"maxLength":2})", "minLength", "/minLength"},
      {R"({"type":"string","pattern":"(?=a)b"})", "pattern", "/pattern"},
      {R"({"oneOf":[{"type":"string"},{"type":"string","maxLength":3}]})", "oneOf", "/oneOf"},
      {R"({"type":"integer","minimum":10,"maximum":3})", "minimum", "/minimum"},
  };
  for (const Refusal& c : cases) {
    auto g = Grammar::fromJsonSchema(nlohmann::json::parse(c.schema));
    ASSERT_TRUE(std::holds_alternative<GrammarError>(g)) << c.schema;
    const GrammarError& e = std::get<GrammarError>(g);
    EXPECT_EQ(e.keyword, c.keyword) << c.schema << ": " << e.toString();
    EXPECT_EQ(e.path, c.path) << c.schema << ": " << e.toString();
  }
}

// (d) Limits: clear errors, quickly.
TEST(Grammar, LimitsGiveClearErrorsQuickly) {
  auto timed = [](const nlohmann::json& s, const Limits& l = {}) {
    const auto t0 = std::chrono::steady_clock::now();
    auto g = Grammar::fromJsonSchema(s, l);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(ms, 2000);
    return g;
  };
  // Deep nesting.
  nlohmann::json deep = {{"type", "string"}};
  for (int i = 0; i < 200; ++i) deep = {{"type", "array"}, {"items", deep}};
  auto g = timed(deep);
  ASSERT_TRUE(std::holds_alternative<GrammarError>(g));
  EXPECT_EQ(std::get<GrammarError>(g).keyword, "(depth)");
  // Huge.
  nlohmann::json huge = {{"type", "object"}, {"properties", nlohmann::json::object()}};
  for (int i = 0; i < 20000; ++i) huge["properties"]["property_" + std::to_string(i)] = {{"type", "string"}};
  g = timed(huge);
  ASSERT_TRUE(std::holds_alternative<GrammarError>(g));
  EXPECT_EQ(std::get<GrammarError>(g).keyword, "(size)");
  // Too many states.
  g = timed(nlohmann::json::parse(R"({"type":"string","maxLength":100000})"));
  ASSERT_TRUE(std::holds_alternative<GrammarError>(g));
  EXPECT_EQ(std::get<GrammarError>(g).keyword, "maxLength");
  // Recursion without a base case.
  g = timed(nlohmann::json::parse(
      R"({"$defs":{"n":{"type":"object","properties":{"next":{"$ref":"#/$defs/n"}},"required":["next"],"additionalProperties":false}},"$ref":"#/$defs/n"})"));
  ASSERT_TRUE(std::holds_alternative<GrammarError>(g));
  EXPECT_NE(std::get<GrammarError>(g).message.find("no finite value"), std::string::npos)
      << std::get<GrammarError>(g).toString();
  // Left recursion.
  g = timed(nlohmann::json::parse(R"({"anyOf":[{"$ref":"#"},{"type":"null"}]})"));
  ASSERT_TRUE(std::holds_alternative<GrammarError>(g));
  // Contradictions.
  g = timed(nlohmann::json::parse(R"({"allOf":[{"type":"string"},{"type":"integer"}]})"));
  ASSERT_TRUE(std::holds_alternative<GrammarError>(g));
  EXPECT_EQ(std::get<GrammarError>(g).keyword, "allOf");
  g = timed(nlohmann::json::parse(
      R"({"type":"object","properties":{"a":{"type":"string"}},"required":["b"],"additionalProperties":false})"));
  ASSERT_TRUE(std::holds_alternative<GrammarError>(g));
  EXPECT_EQ(std::get<GrammarError>(g).keyword, "required");
}

TEST(Grammar, RegexChoicesAndJsonObject) {
  auto vocab = testing::smallVocabulary();
  auto re = mustBuild(Grammar::fromRegex("(ab|c)[0-9]{2}"));
  Matcher m(re, vocab);
  EXPECT_TRUE(m.acceptBytes("ab1"));
  EXPECT_FALSE(m.canEnd());
  EXPECT_TRUE(m.acceptBytes("2"));
  EXPECT_TRUE(m.canEnd());
  EXPECT_TRUE(m.mustEnd());
  auto ch = mustBuild(Grammar::fromChoices({"yes", "no", "not sure"}));
  Matcher c(ch, vocab);
  EXPECT_TRUE(c.acceptBytes("no"));
  EXPECT_TRUE(c.canEnd());
  EXPECT_FALSE(c.mustEnd());
  auto obj = mustBuild(Grammar::anyJsonObject());
  Matcher o(obj, vocab);
  EXPECT_FALSE(o.acceptBytes("[1]"));
  EXPECT_TRUE(o.acceptBytes("{\"a\":[1,{\"b\":null}],\"c\":\"\\u00e9\"}"));
  EXPECT_TRUE(o.canEnd());
}

TEST(GrammarCache, RepeatIsAHit) {
  GrammarCache cache(4);
  auto a = cache.jsonSchema(nlohmann::json::parse(kShellTool));
  auto b = cache.jsonSchema(nlohmann::json::parse(kShellTool));
  EXPECT_EQ(std::get<std::shared_ptr<const Grammar>>(a), std::get<std::shared_ptr<const Grammar>>(b));
  EXPECT_EQ(cache.hits(), 1u);
  EXPECT_EQ(cache.misses(), 1u);
}

// (e) Tool calls: the exact strings the chat template renders and the output
// parser reads.
TEST(GrammarToolCalls, RequiredNamedAndParallel) {
  auto vocab = testing::v3Vocabulary();
  std::vector<ToolSpec> tools(2);
  tools[0].name = "shell";
  tools[0].parameters = OJson::parse(kShellTool);
  tools[0].strict = true;
  tools[1].name = "get_weather";
  tools[1].parameters = OJson::parse(R"({"type":"object","properties":{"city":{"type":"string"}}})");
  const std::string call =
      "<｜tool▁call▁begin｜>function<｜tool▁sep｜>shell\n```json\n"
      "{\"command\":[\"ls\"],\"workdir\":\"/tmp\",\"timeout_ms\":5}\n```<｜tool▁call▁end｜>";
  const std::string weather =
      "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\":\"Paris\",\"x\":1}\n```<｜tool▁call▁end｜>";
  ToolCallOptions required;
  required.choice = ToolCallOptions::Choice::kRequired;
  auto g = mustBuild(Grammar::forToolCalls(tools, required));
  {
    Matcher m(g, vocab);
    EXPECT_FALSE(m.acceptBytes("Sure"));  // required: no free text
    ASSERT_TRUE(m.acceptBytes("<｜tool▁calls▁begin｜>" + call + "\n" + weather + "<｜tool▁calls▁end｜>"));
    EXPECT_TRUE(m.canEnd());
  }
  {
    Matcher m(g, vocab);
    // Strict arguments must match the schema.
    EXPECT_FALSE(m.acceptBytes("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>shell\n```json\n{\"cmd\""));
  }
  ToolCallOptions named = required;
  named.choice = ToolCallOptions::Choice::kNamed;
  named.named = "get_weather";
  named.parallel_tool_calls = false;
  auto gn = mustBuild(Grammar::forToolCalls(tools, named));
  {
    Matcher m(gn, vocab);
    EXPECT_FALSE(m.acceptBytes("<｜tool▁calls▁begin｜>" + call));
    ASSERT_TRUE(m.acceptBytes("<｜tool▁calls▁begin｜>" + weather));
    EXPECT_FALSE(m.acceptBytes("\n"));  // at most one call
    ASSERT_TRUE(m.acceptBytes("<｜tool▁calls▁end｜>"));
    EXPECT_TRUE(m.mustEnd());
  }
  ToolCallOptions automatic;
  auto ga = mustBuild(Grammar::forToolCalls(tools, automatic));
  {
    Matcher m(ga, vocab);
    ASSERT_TRUE(m.acceptBytes("Let me look. <｜tool"));
    EXPECT_TRUE(m.canEnd());  // free text may end
    ASSERT_TRUE(m.acceptBytes("▁calls▁begin｜>"));
    EXPECT_FALSE(m.canEnd());
    EXPECT_FALSE(m.acceptBytes("hello"));  // inside the section: only calls
    ASSERT_TRUE(m.acceptBytes(call + "<｜tool▁calls▁end｜>"));
    EXPECT_TRUE(m.canEnd());
    EXPECT_TRUE(m.mustEnd());
  }
  // The marker is one added token of the V3 vocabulary, and it is allowed.
  {
    Matcher m(ga, vocab);
    std::vector<uint32_t> mask(vocab->maskWords());
    m.fillNextTokenMask(mask);
    EXPECT_TRUE(mask[128806 / 32] >> (128806 % 32) & 1);
    ASSERT_TRUE(m.accept(128806));
    m.fillNextTokenMask(mask);
    EXPECT_TRUE(mask[128808 / 32] >> (128808 % 32) & 1);  // <｜tool▁call▁begin｜>
  }
}

// (f) A whole reply: tool_choice auto with a response format, reasoning
// first, and errors that name their tool.
constexpr const char* kAnswerSchema =
    R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":false})";
const std::string kWeatherCall =
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\":\"Paris\"}\n```"
    "<｜tool▁call▁end｜><｜tool▁calls▁end｜>";

ReplySpec weatherReply() {
  ReplySpec spec;
  ContentFormat answer;
  answer.kind = ContentFormat::Kind::kJsonSchema;
  answer.schema = OJson::parse(kAnswerSchema);
  spec.content = answer;
  spec.tools.resize(1);
  spec.tools[0].name = "get_weather";
  spec.tools[0].parameters = OJson::parse(R"({"type":"object","properties":{"city":{"type":"string"}}})");
  return spec;
}

TEST(GrammarReply, AutoToolsWithAFormatAreTheFormatOrCalls) {
  auto vocab = testing::v3Vocabulary();
  auto g = mustBuild(Grammar::forReply(weatherReply()));
  ASSERT_TRUE(g);
  {
    Matcher m(g, vocab);
    EXPECT_FALSE(m.acceptBytes("Sure"));  // neither the format nor a call
    ASSERT_TRUE(m.acceptBytes("{\"a\":1}"));
    EXPECT_TRUE(m.mustEnd());
  }
  {
    Matcher m(g, vocab);
    ASSERT_TRUE(m.acceptBytes(kWeatherCall));
    EXPECT_TRUE(m.mustEnd());
  }
  {
    Matcher m(g, vocab);
    EXPECT_FALSE(m.acceptBytes("{\"a\":1}" + kWeatherCall));  // content or calls, not both
  }
}

TEST(GrammarReply, ReasoningComesFirstAndFreeThenTheRules) {
  auto vocab = testing::v3Vocabulary();
  ReplySpec spec = weatherReply();
  spec.reasoning_first = true;
  auto g = mustBuild(Grammar::forReply(spec));
  ASSERT_TRUE(g);
  {
    Matcher m(g, vocab);
    ASSERT_TRUE(m.acceptBytes("The user wants {JSON}. </thin"));  // a broken-off marker is reasoning too
    EXPECT_FALSE(m.canEnd());  // the reasoning must close
    ASSERT_TRUE(m.acceptBytes("g> still thinking </think>\n\n"));
    EXPECT_FALSE(m.acceptBytes("\n"));  // two new lines at most
    EXPECT_FALSE(m.acceptBytes("Sure"));
    ASSERT_TRUE(m.acceptBytes("{\"a\":7}"));
    EXPECT_TRUE(m.mustEnd());
  }
  {
    Matcher m(g, vocab);
    ASSERT_TRUE(m.acceptBytes("</think>" + kWeatherCall));  // no reasoning, then a call
    EXPECT_TRUE(m.mustEnd());
  }
  // The masks are exact in the reasoning, at its end and after it (the
  // <think> tokens are added tokens of the V3 vocabulary).
  Matcher m(g, vocab);
  std::vector<uint32_t> mask(vocab->maskWords());
  for (const std::string part : {"Hmm </", "think>", "\n", "{\"a\""}) {
    m.fillNextTokenMask(mask);
    ASSERT_EQ(mask, bruteMask(m)) << "before '" << part << "'";
    ASSERT_TRUE(m.acceptBytes(part)) << part;
  }
  m.fillNextTokenMask(mask);
  ASSERT_EQ(mask, bruteMask(m)) << "at the end";
}

TEST(GrammarReply, AnErrorInAToolsParametersNamesTheTool) {
  ReplySpec spec = weatherReply();
  spec.tools.resize(2);
  spec.tools[1].name = "lookup";
  spec.tools[1].strict = true;
  spec.tools[1].parameters = OJson::parse(R"({"type":"object","properties":{"q":{"not":{"type":"string"}}}})");
  auto g = Grammar::forReply(spec);
  ASSERT_TRUE(std::holds_alternative<GrammarError>(g));
  const GrammarError& e = std::get<GrammarError>(g);
  EXPECT_EQ(e.keyword, "not");
  ASSERT_TRUE(e.tool.has_value());
  EXPECT_EQ(*e.tool, 1u);
  EXPECT_EQ(e.path, "/properties/q/not");
  // A content schema's error names no tool.
  spec.tools.pop_back();
  spec.content->schema = OJson::parse(R"({"type":"object","properties":{"tools":{"not":{}}}})");
  auto c = Grammar::forReply(spec);
  ASSERT_TRUE(std::holds_alternative<GrammarError>(c));
  EXPECT_FALSE(std::get<GrammarError>(c).tool.has_value());
  EXPECT_EQ(std::get<GrammarError>(c).path, "/properties/tools/not");
}

}  // namespace
}  // namespace lg::text::grammar
