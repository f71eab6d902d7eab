// Request parsing for the three endpoints: every accepted field, what hosted
// tools leave out, and every refusal with the parameter it names.
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "proxy/openai/chat_request.h"
#include "proxy/openai/completion_request.h"
#include "proxy/openai/json_body.h"
#include "proxy/openai/responses_request.h"

namespace lg::proxy::openai {
namespace {

using nlohmann::json;

const ParseLimits kLimits;

json chatBody(json extra = json::object()) {
  json body = {{"model", "deepseek-chat"}, {"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})}};
  for (auto& [k, v] : extra.items()) body[k] = v;
  return body;
}

ParsedChatRequest chatOk(const json& body) {
  ApiResult<ParsedChatRequest> r = parseChatCompletionRequest(body, kLimits);
  EXPECT_TRUE(r.isOk()) << body.dump() << " -> " << (r.isOk() ? "" : r.error().message);
  return r.isOk() ? std::move(*r) : ParsedChatRequest{};
}

struct ErrorCase {
  std::string name;
  json body;
  std::string param;
  std::string code;
};

void expectError(const ApiResult<ParsedChatRequest>& r, const ErrorCase& c) {
  ASSERT_FALSE(r.isOk()) << c.name;
  EXPECT_EQ(r.error().http_status, 400) << c.name;
  EXPECT_EQ(r.error().type, "invalid_request_error") << c.name;
  EXPECT_EQ(r.error().param, c.param) << c.name << ": " << r.error().message;
  EXPECT_EQ(r.error().code, c.code) << c.name << ": " << r.error().message;
  EXPECT_FALSE(r.error().message.empty());
}

// ---------------------------------------------------------------- chat

// vLLM's render route: the chat request plus how the conversation ends.
TEST(ChatRenderRequest, TakesTheEndingsAndRefusesWhatTheChatEndpointRefuses) {
  ApiResult<ParsedChatRenderRequest> plain = parseChatRenderRequest(chatBody(), kLimits);
  ASSERT_TRUE(plain.isOk()) << plain.error().message;
  EXPECT_TRUE(plain->ending.add_generation_prompt);
  EXPECT_FALSE(plain->ending.continue_final_message);
  EXPECT_EQ(plain->chat.model, "deepseek-chat");

  ApiResult<ParsedChatRenderRequest> cont = parseChatRenderRequest(
      chatBody({{"add_generation_prompt", false},
                {"continue_final_message", true},
                {"chat_template", nullptr},
                {"chat_template_kwargs", json::object()},
                {"documents", json::array()},
                {"stream", true}}),
      kLimits);
  ASSERT_TRUE(cont.isOk()) << cont.error().message;
  EXPECT_FALSE(cont->ending.add_generation_prompt);
  EXPECT_TRUE(cont->ending.continue_final_message);
  EXPECT_TRUE(cont->chat.stream);

  const std::vector<ErrorCase> cases = {
      {"ending of the wrong type", chatBody({{"add_generation_prompt", "yes"}}), "add_generation_prompt",
       "invalid_type"},
      {"a template of the client's", chatBody({{"chat_template", "{{ messages }}"}}), "chat_template",
       "unsupported_parameter"},
      {"template variables", chatBody({{"chat_template_kwargs", {{"thinking", true}}}}), "chat_template_kwargs",
       "unsupported_parameter"},
      {"documents", chatBody({{"documents", json::array({{{"text", "d"}}})}}), "documents", "unsupported_parameter"},
      {"a field neither knows", chatBody({{"return_token_offsets", true}}), "return_token_offsets",
       "unknown_parameter"},
      {"the chat parser's own refusals", chatBody({{"temperature", 3}}), "temperature", "invalid_value"},
  };
  for (const ErrorCase& c : cases) {
    ApiResult<ParsedChatRenderRequest> r = parseChatRenderRequest(c.body, kLimits);
    ASSERT_FALSE(r.isOk()) << c.name;
    EXPECT_EQ(r.error().http_status, 400) << c.name;
    EXPECT_EQ(r.error().param, c.param) << c.name << ": " << r.error().message;
    EXPECT_EQ(r.error().code, c.code) << c.name << ": " << r.error().message;
  }
}

TEST(ChatRequest, MinimalBodyGetsDefaults) {
  ParsedChatRequest r = chatOk(chatBody());
  EXPECT_EQ(r.model, "deepseek-chat");
  ASSERT_EQ(r.prompt.messages.size(), 1u);
  EXPECT_EQ(r.prompt.messages[0].role, Role::kUser);
  EXPECT_EQ(r.prompt.messages[0].content, "Hi");
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.include_usage);
  EXPECT_FALSE(r.sampling.requested_max_tokens.has_value());
  EXPECT_EQ(r.sampling.default_max_tokens, 4096);
  EXPECT_EQ(r.sampling.options.temperature, 1.0f);
  EXPECT_EQ(r.sampling.options.top_p, 1.0f);
  EXPECT_FALSE(r.sampling.options.seed.has_value());
  EXPECT_TRUE(r.sampling.options.stop.empty());
  EXPECT_FALSE(r.sampling.options.logprobs);
  EXPECT_TRUE(r.prompt.tools.empty());
  EXPECT_EQ(r.prompt.tool_choice.mode, ToolChoice::Mode::kAuto);
  EXPECT_TRUE(r.prompt.parallel_tool_calls);
  EXPECT_EQ(r.prompt.response_format.kind, ResponseFormat::Kind::kText);
  EXPECT_TRUE(r.hosted_tools.empty());
  EXPECT_FALSE(r.prompt.reasoning.has_value());
  EXPECT_EQ(r.prompt.verbosity, Verbosity::kMedium);
  EXPECT_EQ(r.params.prompt, "messages");
  EXPECT_EQ(r.params.max_tokens, "max_tokens");
}

TEST(ChatRequest, EveryField) {
  ParsedChatRequest r = chatOk(chatBody({{"stream", true},
                                         {"stream_options", {{"include_usage", true}}},
                                         {"max_tokens", 100},
                                         {"temperature", 0.25},
                                         {"top_p", 0.9},
                                         {"top_k", 40},
                                         {"stop", json::array({"\n\n", "END"})},
                                         {"seed", 42},
                                         {"logprobs", true},
                                         {"top_logprobs", 5},
                                         {"n", 1},
                                         {"user", "u-1"},
                                         {"prompt_cache_key", "k"},
                                         {"frequency_penalty", 0},
                                         {"presence_penalty", 0.0},
                                         {"logit_bias", json::object()},
                                         {"safety_identifier", "s-1"},
                                         {"metadata", json::object()},
                                         {"store", false},
                                         {"service_tier", "auto"},
                                         {"prompt_cache_retention", "24h"},
                                         {"prompt_cache_options", {{"mode", "implicit"}, {"ttl", "30m"}}},
                                         {"functions", nullptr},
                                         {"prediction", nullptr}}));
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.sampling.requested_max_tokens, 100);
  EXPECT_FLOAT_EQ(r.sampling.options.temperature, 0.25f);
  EXPECT_FLOAT_EQ(r.sampling.options.top_p, 0.9f);
  EXPECT_EQ(r.sampling.options.top_k, 40);
  EXPECT_EQ(r.sampling.options.stop, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_EQ(r.sampling.options.seed, 42u);
  EXPECT_TRUE(r.sampling.options.logprobs);
  EXPECT_EQ(r.sampling.options.top_logprobs, 5);
  EXPECT_FALSE(r.sampling.options.prompt_logprobs);
  EXPECT_TRUE(r.hosted_tools.empty());
}

TEST(ChatRequest, MaxCompletionTokensIsAnAliasAndNamesErrors) {
  ParsedChatRequest r = chatOk(chatBody({{"max_completion_tokens", 77}}));
  EXPECT_EQ(r.sampling.requested_max_tokens, 77);
  EXPECT_EQ(r.params.max_tokens, "max_completion_tokens");
  r = chatOk(chatBody({{"max_tokens", 10}, {"max_completion_tokens", 20}}));
  EXPECT_EQ(r.sampling.requested_max_tokens, 20);
  r = chatOk(chatBody({{"max_tokens", nullptr}}));
  EXPECT_FALSE(r.sampling.requested_max_tokens.has_value()) << "null is absent";
  r = chatOk(chatBody({{"max_tokens", 50.0}}));
  EXPECT_EQ(r.sampling.requested_max_tokens, 50) << "an integral number is an integer";
}

TEST(ChatRequest, StopAsAString) {
  EXPECT_EQ(chatOk(chatBody({{"stop", "###"}})).sampling.options.stop, std::vector<std::string>{"###"});
  EXPECT_TRUE(chatOk(chatBody({{"stop", ""}})).sampling.options.stop.empty());
  EXPECT_TRUE(chatOk(chatBody({{"stop", nullptr}})).sampling.options.stop.empty());
}

TEST(ChatRequest, NChoices) {
  EXPECT_EQ(chatOk(chatBody({})).n, 1);
  EXPECT_EQ(chatOk(chatBody({{"n", 3}})).n, 3);
}

TEST(ChatRequest, TopPZeroKeepsOnlyTheMostLikelyToken) {
  const ParsedChatRequest r = chatOk(chatBody({{"top_p", 0}}));
  EXPECT_GT(r.sampling.options.top_p, 0.0f);
  EXPECT_LT(r.sampling.options.top_p, 1e-30f);
}

TEST(ChatRequest, PenaltiesBiasAndMinPReachTheSampler) {
  const ParsedChatRequest r = chatOk(chatBody({{"frequency_penalty", 0.5},
                                               {"presence_penalty", -1},
                                               {"repetition_penalty", 1.2},
                                               {"min_p", 0.05},
                                               {"logit_bias", {{"50256", -100}, {"13", 2.5}}}}));
  const serving::SamplingOptions& s = r.sampling.options;
  EXPECT_FLOAT_EQ(s.frequency_penalty, 0.5f);
  EXPECT_FLOAT_EQ(s.presence_penalty, -1.0f);
  EXPECT_FLOAT_EQ(s.repetition_penalty, 1.2f);
  EXPECT_FLOAT_EQ(s.min_p, 0.05f);
  EXPECT_EQ(s.logit_bias, (std::vector<std::pair<int32_t, float>>{{13, 2.5f}, {50256, -100.0f}}));
}

TEST(ChatRequest, ReasoningEffortVerbosityAndHostedSearch) {
  ParsedChatRequest r = chatOk(chatBody({{"reasoning_effort", "high"}, {"verbosity", "low"}}));
  EXPECT_EQ(r.prompt.reasoning, true);
  EXPECT_EQ(r.prompt.reasoning_param, "reasoning_effort");
  EXPECT_EQ(r.prompt.verbosity, Verbosity::kLow);
  for (const char* effort : {"low", "medium", "xhigh", "max"}) {
    EXPECT_EQ(chatOk(chatBody({{"reasoning_effort", effort}})).prompt.reasoning, true) << effort;
  }
  EXPECT_EQ(chatOk(chatBody({{"reasoning_effort", "none"}})).prompt.reasoning, false);
  EXPECT_EQ(chatOk(chatBody({{"reasoning_effort", "minimal"}})).prompt.reasoning, false);
  EXPECT_FALSE(chatOk(chatBody({{"reasoning_effort", nullptr}})).prompt.reasoning.has_value());
  EXPECT_EQ(chatOk(chatBody({{"verbosity", "high"}})).prompt.verbosity, Verbosity::kHigh);
  // web_search_options asks for a hosted tool: skipped, for the gateway's header.
  r = chatOk(chatBody({{"web_search_options", json::object()}}));
  EXPECT_EQ(r.hosted_tools, std::vector<std::string>{"web_search"});
}

TEST(ChatRequest, RolesContentPartsAndToolMessages) {
  json messages = json::array({
      {{"role", "system"}, {"content", "You are terse."}},
      {{"role", "developer"}, {"content", json::array({{{"type", "text"}, {"text", "Rule 1."}},
                                                       {{"type", "text"}, {"text", "Rule 2."}}})}},
      {{"role", "user"}, {"content", json::array({{{"type", "text"}, {"text", "Weather in Paris?"}}})}, {"name", "bob"}},
      {{"role", "assistant"},
       {"content", nullptr},
       {"tool_calls",
        json::array({{{"id", "call_1"},
                      {"type", "function"},
                      {"function", {{"name", "get_weather"}, {"arguments", "{\"city\":\"Paris\"}"}}}}})}},
      {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "22C"}},
      {{"role", "assistant"}, {"content", json::array({{{"type", "text"}, {"text", "It is "}},
                                                       {{"type", "refusal"}, {"refusal", "22C."}}})}},
      {{"role", "assistant"}, {"content", ""}, {"tool_calls", json::array({{{"id", "c2"}, {"function", {{"name", "f"}, {"arguments", "{}"}}}}})}},
      {{"role", "assistant"}},
  });
  const ParsedChatRequest r = chatOk(chatBody({{"messages", messages}}));
  const auto& m = r.prompt.messages;
  ASSERT_EQ(m.size(), 8u);
  EXPECT_EQ(m[0].role, Role::kSystem);
  EXPECT_EQ(m[1].role, Role::kDeveloper);
  EXPECT_EQ(m[1].content, "Rule 1.\nRule 2.") << "text parts are joined with a line break";
  EXPECT_EQ(m[2].content, "Weather in Paris?");
  EXPECT_EQ(m[3].role, Role::kAssistant);
  EXPECT_FALSE(m[3].content.has_value());
  ASSERT_EQ(m[3].tool_calls.size(), 1u);
  EXPECT_EQ(m[3].tool_calls[0], (ToolCall{"call_1", "get_weather", "{\"city\":\"Paris\"}"}));
  EXPECT_EQ(m[4].role, Role::kTool);
  EXPECT_EQ(m[4].tool_call_id, "call_1");
  EXPECT_EQ(m[4].content, "22C");
  EXPECT_EQ(m[5].content, "It is \n22C.");
  EXPECT_FALSE(m[6].content.has_value()) << "\"\" beside tool calls is no content";
  EXPECT_EQ(m[7].content, "") << "an assistant turn with nothing is an empty reply";
}

TEST(ChatRequest, ToolsAndToolChoice) {
  json tools = json::array({
      {{"type", "function"},
       {"function",
        {{"name", "get_weather"},
         {"description", "Current weather"},
         {"parameters", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}},
         {"strict", true}}}},
      {{"type", "function"}, {"function", {{"name", "now"}}}},
  });
  ParsedChatRequest r = chatOk(chatBody({{"tools", tools}, {"parallel_tool_calls", false}}));
  ASSERT_EQ(r.prompt.tools.size(), 2u);
  EXPECT_EQ(r.prompt.tools[0].name, "get_weather");
  EXPECT_EQ(r.prompt.tools[0].description, "Current weather");
  EXPECT_EQ(r.prompt.tools[0].parameters["properties"]["city"]["type"], "string");
  EXPECT_TRUE(r.prompt.tools[1].parameters.is_null());
  EXPECT_FALSE(r.prompt.parallel_tool_calls);
  for (const auto& [choice, mode] : std::vector<std::pair<json, ToolChoice::Mode>>{
           {"none", ToolChoice::Mode::kNone},
           {"auto", ToolChoice::Mode::kAuto},
           {"required", ToolChoice::Mode::kRequired},
           {{{"type", "function"}, {"function", {{"name", "now"}}}}, ToolChoice::Mode::kFunction}}) {
    r = chatOk(chatBody({{"tools", tools}, {"tool_choice", choice}}));
    EXPECT_EQ(r.prompt.tool_choice.mode, mode) << choice.dump();
  }
  EXPECT_EQ(r.prompt.tool_choice.function, "now");
  EXPECT_EQ(chatOk(chatBody({{"tool_choice", "none"}})).prompt.tool_choice.mode, ToolChoice::Mode::kNone)
      << "none and auto need no tools";
}

TEST(ChatRequest, ResponseFormats) {
  using Kind = ResponseFormat::Kind;
  EXPECT_EQ(chatOk(chatBody({{"response_format", {{"type", "text"}}}})).prompt.response_format.kind, Kind::kText);
  EXPECT_EQ(chatOk(chatBody({{"response_format", {{"type", "json_object"}}}})).prompt.response_format.kind,
            Kind::kJsonObject);
  const json schema = {{"type", "object"}, {"properties", {{"a", {{"type", "integer"}}}}}, {"required", {"a"}}};
  const ResponseFormat f = chatOk(chatBody({{"response_format", {{"type", "json_schema"},
      {"json_schema", {{"name", "answer"}, {"schema", schema}, {"strict", true}}}}}})).prompt.response_format;
  EXPECT_EQ(f.kind, Kind::kJsonSchema);
  EXPECT_EQ(f.name, "answer");
  EXPECT_TRUE(f.strict);
  EXPECT_EQ(f.schema, schema);
  EXPECT_EQ(f.param, "response_format.json_schema.schema");
  // vLLM's spellings.
  const ResponseFormat so = chatOk(chatBody({{"structured_outputs", {{"choice", {"yes", "no"}}}}})).prompt.response_format;
  EXPECT_EQ(so.kind, Kind::kChoice);
  EXPECT_EQ(so.choices, (std::vector<std::string>{"yes", "no"}));
  EXPECT_EQ(so.param, "structured_outputs.choice");
  const ResponseFormat re = chatOk(chatBody({{"guided_regex", "[a-z]+"}})).prompt.response_format;
  EXPECT_EQ(re.kind, Kind::kRegex);
  EXPECT_EQ(re.regex, "[a-z]+");
  const ResponseFormat gj = chatOk(chatBody({{"guided_json", schema.dump()}})).prompt.response_format;
  EXPECT_EQ(gj.kind, Kind::kJsonSchema);
  EXPECT_EQ(gj.schema, schema);
}

TEST(ChatRequest, Refusals) {
  const json user = {{"role", "user"}, {"content", "x"}};
  auto withMessage = [&](json m) { return chatBody({{"messages", json::array({m})}}); };
  const json tool = {{"type", "function"}, {"function", {{"name", "f"}}}};
  const std::vector<ErrorCase> cases = {
      {"no model", {{"messages", json::array({user})}}, "model", "missing_required_parameter"},
      {"model not a string", chatBody({{"model", 3}}), "model", "invalid_type"},
      {"no messages", {{"model", "m"}}, "messages", "missing_required_parameter"},
      {"messages not an array", chatBody({{"messages", "hi"}}), "messages", "invalid_type"},
      {"no message", chatBody({{"messages", json::array()}}), "messages", "invalid_value"},
      {"message not an object", chatBody({{"messages", json::array({"hi"})}}), "messages[0]", "invalid_type"},
      {"no role", withMessage({{"content", "x"}}), "messages[0].role", "missing_required_parameter"},
      {"unknown role", withMessage({{"role", "bot"}, {"content", "x"}}), "messages[0].role", "invalid_value"},
      {"function role", withMessage({{"role", "function"}, {"content", "x"}, {"name", "f"}}), "messages[0].role",
       "unsupported_value"},
      {"user without content", withMessage({{"role", "user"}}), "messages[0].content", "missing_required_parameter"},
      {"user content null", withMessage({{"role", "user"}, {"content", nullptr}}), "messages[0].content",
       "missing_required_parameter"},
      {"content a number", withMessage({{"role", "user"}, {"content", 5}}), "messages[0].content", "invalid_type"},
      {"image part",
       withMessage({{"role", "user"},
                    {"content", json::array({{{"type", "text"}, {"text", "look"}},
                                             {{"type", "image_url"}, {"image_url", {{"url", "http://x/y.png"}}}}})}}),
       "messages[0].content[1].type", "unsupported_value"},
      {"audio part",
       withMessage({{"role", "user"}, {"content", json::array({{{"type", "input_audio"}, {"input_audio", json::object()}}})}}),
       "messages[0].content[0].type", "unsupported_value"},
      {"file part", withMessage({{"role", "user"}, {"content", json::array({{{"type", "file"}}})}}),
       "messages[0].content[0].type", "unsupported_value"},
      {"unknown part", withMessage({{"role", "user"}, {"content", json::array({{{"type", "video"}}})}}),
       "messages[0].content[0].type", "invalid_value"},
      {"part without type", withMessage({{"role", "user"}, {"content", json::array({{{"text", "x"}}})}}),
       "messages[0].content[0].type", "missing_required_parameter"},
      {"text part without text", withMessage({{"role", "user"}, {"content", json::array({{{"type", "text"}}})}}),
       "messages[0].content[0].text", "missing_required_parameter"},
      {"text part text a number",
       withMessage({{"role", "user"}, {"content", json::array({{{"type", "text"}, {"text", 1}}})}}),
       "messages[0].content[0].text", "invalid_type"},
      {"refusal part in a user message",
       withMessage({{"role", "user"}, {"content", json::array({{{"type", "refusal"}, {"refusal", "no"}}})}}),
       "messages[0].content[0].type", "invalid_value"},
      {"tool_calls not an array", withMessage({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", "f"}}),
       "messages[0].tool_calls", "invalid_type"},
      {"tool call without id",
       withMessage({{"role", "assistant"}, {"tool_calls", json::array({{{"function", {{"name", "f"}, {"arguments", "{}"}}}}})}}),
       "messages[0].tool_calls[0].id", "missing_required_parameter"},
      {"tool call without name",
       withMessage({{"role", "assistant"}, {"tool_calls", json::array({{{"id", "c"}, {"function", {{"arguments", "{}"}}}}})}}),
       "messages[0].tool_calls[0].function.name", "missing_required_parameter"},
      {"tool call arguments an object",
       withMessage({{"role", "assistant"},
                    {"tool_calls", json::array({{{"id", "c"}, {"function", {{"name", "f"}, {"arguments", {{"a", 1}}}}}}})}}),
       "messages[0].tool_calls[0].function.arguments", "invalid_type"},
      {"tool call of another type",
       withMessage({{"role", "assistant"}, {"tool_calls", json::array({{{"id", "c"}, {"type", "custom"}}})}}),
       "messages[0].tool_calls[0].type", "unsupported_value"},
      {"tool without tool_call_id", withMessage({{"role", "tool"}, {"content", "r"}}), "messages[0].tool_call_id",
       "missing_required_parameter"},
      {"prefix completion", withMessage({{"role", "assistant"}, {"content", "x"}, {"prefix", true}}),
       "messages[0].prefix", "unsupported_parameter"},
      {"temperature too high", chatBody({{"temperature", 2.5}}), "temperature", "invalid_value"},
      {"temperature negative", chatBody({{"temperature", -0.1}}), "temperature", "invalid_value"},
      {"temperature a string", chatBody({{"temperature", "hot"}}), "temperature", "invalid_type"},
      {"top_p above 1", chatBody({{"top_p", 1.5}}), "top_p", "invalid_value"},
      {"n = 129", chatBody({{"n", 129}}), "n", "integer_above_max_value"},
      {"n = 0", chatBody({{"n", 0}}), "n", "integer_below_min_value"},
      {"top_logprobs without logprobs", chatBody({{"top_logprobs", 2}}), "top_logprobs", "invalid_value"},
      {"top_logprobs 21", chatBody({{"logprobs", true}, {"top_logprobs", 21}}), "top_logprobs",
       "integer_above_max_value"},
      {"logprobs a string", chatBody({{"logprobs", "yes"}}), "logprobs", "invalid_type"},
      {"max_tokens 0", chatBody({{"max_tokens", 0}}), "max_tokens", "integer_below_min_value"},
      {"max_tokens 1.5", chatBody({{"max_tokens", 1.5}}), "max_tokens", "invalid_type"},
      {"max_completion_tokens -1", chatBody({{"max_completion_tokens", -1}}), "max_completion_tokens",
       "integer_below_min_value"},
      {"seed a string", chatBody({{"seed", "1"}}), "seed", "invalid_type"},
      {"five stop strings", chatBody({{"stop", json::array({"a", "b", "c", "d", "e"})}}), "stop", "invalid_value"},
      {"stop of numbers", chatBody({{"stop", json::array({1})}}), "stop[0]", "invalid_type"},
      {"empty stop string in a list", chatBody({{"stop", json::array({"a", ""})}}), "stop[1]", "invalid_value"},
      {"stop an object", chatBody({{"stop", json::object()}}), "stop", "invalid_type"},
      {"stream a string", chatBody({{"stream", "true"}}), "stream", "invalid_type"},
      {"stream_options not an object", chatBody({{"stream", true}, {"stream_options", true}}), "stream_options",
       "invalid_type"},
      {"include_usage a string", chatBody({{"stream", true}, {"stream_options", {{"include_usage", "yes"}}}}),
       "stream_options.include_usage", "invalid_type"},
      {"tools not an array", chatBody({{"tools", tool}}), "tools", "invalid_type"},
      {"custom tool", chatBody({{"tools", json::array({{{"type", "custom"}, {"custom", {{"name", "x"}}}}})}}),
       "tools[0].type", "unsupported_value"},
      {"tool without function", chatBody({{"tools", json::array({{{"type", "function"}}})}}), "tools[0].function",
       "missing_required_parameter"},
      {"tool without name", chatBody({{"tools", json::array({{{"type", "function"}, {"function", json::object()}}})}}),
       "tools[0].function.name", "missing_required_parameter"},
      {"tool name with a space",
       chatBody({{"tools", json::array({{{"type", "function"}, {"function", {{"name", "get weather"}}}}})}}),
       "tools[0].function.name", "invalid_value"},
      {"tool name too long",
       chatBody({{"tools", json::array({{{"type", "function"}, {"function", {{"name", std::string(65, 'a')}}}}})}}),
       "tools[0].function.name", "invalid_value"},
      {"parameters not an object",
       chatBody({{"tools", json::array({{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", "{}"}}}}})}}),
       "tools[0].function.parameters", "invalid_type"},
      {"unknown tool_choice", chatBody({{"tools", json::array({tool})}, {"tool_choice", "sometimes"}}), "tool_choice",
       "invalid_value"},
      {"tool_choice names another function",
       chatBody({{"tools", json::array({tool})}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "g"}}}}}}),
       "tool_choice", "invalid_value"},
      {"required without tools", chatBody({{"tool_choice", "required"}}), "tool_choice", "invalid_value"},
      {"tool_choice a number", chatBody({{"tool_choice", 1}}), "tool_choice", "invalid_type"},
      {"parallel_tool_calls a string", chatBody({{"parallel_tool_calls", "no"}}), "parallel_tool_calls",
       "invalid_type"},
      {"json_schema without a name", chatBody({{"response_format", {{"type", "json_schema"}, {"json_schema", json::object()}}}}),
       "response_format.json_schema.name", "missing_required_parameter"},
      {"json_schema without json_schema", chatBody({{"response_format", {{"type", "json_schema"}}}}),
       "response_format.json_schema", "missing_required_parameter"},
      {"json_schema schema a string", chatBody({{"response_format", {{"type", "json_schema"},
          {"json_schema", {{"name", "x"}, {"schema", "{}"}}}}}}), "response_format.json_schema.schema", "invalid_type"},
      {"two constraints", chatBody({{"response_format", {{"type", "json_object"}}}, {"guided_regex", "a"}}),
       "guided_regex", "invalid_value"},
      {"guided_grammar", chatBody({{"guided_grammar", "root ::= \"a\""}}), "guided_grammar", "unsupported_parameter"},
      {"structured_outputs.grammar", chatBody({{"structured_outputs", {{"grammar", "x"}}}}), "structured_outputs.grammar",
       "unsupported_parameter"},
      {"structured_outputs unknown", chatBody({{"structured_outputs", {{"jsonn", "x"}}}}), "structured_outputs.jsonn",
       "unknown_parameter"},
      {"guided_choice empty", chatBody({{"guided_choice", json::array()}}), "guided_choice", "invalid_type"},
      {"response_format without type", chatBody({{"response_format", json::object()}}), "response_format.type",
       "missing_required_parameter"},
      {"logit_bias not an object", chatBody({{"logit_bias", json::array()}}), "logit_bias", "invalid_type"},
      {"logit_bias key not an id", chatBody({{"logit_bias", {{"hello", 1}}}}), "logit_bias", "invalid_value"},
      {"logit_bias out of range", chatBody({{"logit_bias", {{"5", 101}}}}), "logit_bias.5", "invalid_value"},
      {"repetition_penalty 0", chatBody({{"repetition_penalty", 0}}), "repetition_penalty", "invalid_value"},
      {"min_p 2", chatBody({{"min_p", 2}}), "min_p", "invalid_value"},
      {"frequency_penalty 3", chatBody({{"frequency_penalty", 3}}), "frequency_penalty", "invalid_value"},
      {"audio", chatBody({{"audio", {{"voice", "alloy"}}}}), "audio", "unsupported_parameter"},
      {"audio modality", chatBody({{"modalities", json::array({"text", "audio"})}}), "modalities[1]",
       "unsupported_value"},
      // Nothing is accepted without effect: what this server cannot do is refused.
      {"unknown field", chatBody({{"some_future_field", {{"x", 1}}}}), "some_future_field", "unknown_parameter"},
      {"unknown field, null", chatBody({{"chat_template_kwargs", nullptr}}), "chat_template_kwargs",
       "unknown_parameter"},
      {"functions", chatBody({{"functions", json::array({{{"name", "f"}}})}}), "functions", "unsupported_parameter"},
      {"function_call", chatBody({{"function_call", "auto"}}), "function_call", "unsupported_parameter"},
      {"prediction", chatBody({{"prediction", {{"type", "content"}, {"content", "x"}}}}), "prediction",
       "unsupported_parameter"},
      {"moderation", chatBody({{"moderation", {{"model", "omni-moderation-latest"}}}}), "moderation",
       "unsupported_parameter"},
      {"metadata", chatBody({{"metadata", {{"a", "b"}}}}), "metadata", "unsupported_parameter"},
      {"store true", chatBody({{"store", true}}), "store", "unsupported_value"},
      {"service_tier priority", chatBody({{"service_tier", "priority"}}), "service_tier", "unsupported_value"},
      {"service_tier unknown", chatBody({{"service_tier", "gold"}}), "service_tier", "invalid_value"},
      {"user not a string", chatBody({{"user", 5}}), "user", "invalid_type"},
      {"safety_identifier not a string", chatBody({{"safety_identifier", 5}}), "safety_identifier", "invalid_type"},
      {"reasoning_effort unknown", chatBody({{"reasoning_effort", "extreme"}}), "reasoning_effort", "invalid_value"},
      {"verbosity unknown", chatBody({{"verbosity", "loud"}}), "verbosity", "invalid_value"},
      {"web_search_options not an object", chatBody({{"web_search_options", "yes"}}), "web_search_options",
       "invalid_type"},
      {"obfuscation", chatBody({{"stream", true}, {"stream_options", {{"include_obfuscation", true}}}}),
       "stream_options.include_obfuscation", "unsupported_value"},
      {"unknown stream option", chatBody({{"stream", true}, {"stream_options", {{"chunk_size", 4}}}}),
       "stream_options.chunk_size", "unknown_parameter"},
      {"cache retention unknown", chatBody({{"prompt_cache_retention", "forever"}}), "prompt_cache_retention",
       "invalid_value"},
      {"explicit cache breakpoints", chatBody({{"prompt_cache_options", {{"mode", "explicit"}}}}),
       "prompt_cache_options.mode", "unsupported_value"},
      {"cache ttl", chatBody({{"prompt_cache_options", {{"ttl", "2h"}}}}), "prompt_cache_options.ttl",
       "invalid_value"},
  };
  for (const ErrorCase& c : cases) expectError(parseChatCompletionRequest(c.body, kLimits), c);
  // An unsupported value sent as its default is no request for it.
  const ParsedChatRequest r = chatOk(chatBody({{"stream", true},
                                               {"stream_options", {{"include_obfuscation", false}}},
                                               {"store", false},
                                               {"metadata", json::object()},
                                               {"service_tier", "default"},
                                               {"moderation", nullptr}}));
  EXPECT_TRUE(r.stream);
}

TEST(ChatRequest, BodyMustBeAnObject) {
  ApiResult<ParsedChatRequest> r = parseChatCompletionRequest(json::array(), kLimits);
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.error().code, "invalid_json");
}

TEST(ChatRequest, MessageCountLimit) {
  ParseLimits limits;
  limits.max_messages = 2;
  json messages = json::array();
  for (int i = 0; i < 3; ++i) messages.push_back({{"role", "user"}, {"content", "x"}});
  ApiResult<ParsedChatRequest> r = parseChatCompletionRequest(chatBody({{"messages", messages}}), limits);
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.error().param, "messages");
}

// ---------------------------------------------------------------- JSON body

TEST(JsonBody, ParsesObjectsAndRefusesTheRest) {
  EXPECT_TRUE(parseJsonBody(R"({"model": "m", "x": [1, {"y": "[[[["}]})", kLimits).isOk());
  for (std::string_view bad : {"", "{", "[1, 2]", "\"s\"", "{\"a\": 1,}", "{\"a\": \"\xff\"}"}) {
    ApiResult<json> r = parseJsonBody(bad, kLimits);
    ASSERT_FALSE(r.isOk()) << bad;
    EXPECT_EQ(r.error().http_status, 400);
    EXPECT_EQ(r.error().code, "invalid_json");
  }
  std::string deep = "{\"a\": " + std::string(1000, '[') + std::string(1000, ']') + "}";
  ApiResult<json> r = parseJsonBody(deep, kLimits);
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.error().message.find("64 levels"), std::string::npos);
  std::string ok = "{\"a\": " + std::string(60, '[') + std::string(60, ']') + "}";
  EXPECT_TRUE(parseJsonBody(ok, kLimits).isOk());
}

// ---------------------------------------------------------------- completions

json completionBody(json extra = json::object()) {
  json body = {{"model", "m"}, {"prompt", "Once upon a time"}};
  for (auto& [k, v] : extra.items()) body[k] = v;
  return body;
}

ParsedCompletionRequest completionOk(const json& body) {
  ApiResult<ParsedCompletionRequest> r = parseCompletionRequest(body, kLimits);
  EXPECT_TRUE(r.isOk()) << body.dump() << " -> " << (r.isOk() ? "" : r.error().message);
  return r.isOk() ? std::move(*r) : ParsedCompletionRequest{};
}

TEST(CompletionRequest, PromptShapes) {
  ParsedCompletionRequest r = completionOk(completionBody());
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_FALSE(r.prompts[0].is_ids);
  EXPECT_EQ(r.prompts[0].text, "Once upon a time");
  EXPECT_EQ(r.sampling.default_max_tokens, 16) << "OpenAI's default for /v1/completions";

  r = completionOk(completionBody({{"prompt", json::array({"a", "b", "c"})}}));
  ASSERT_EQ(r.prompts.size(), 3u);
  EXPECT_EQ(r.prompts[2].text, "c");

  r = completionOk(completionBody({{"prompt", json::array({1, 2, 3})}}));
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_TRUE(r.prompts[0].is_ids);
  EXPECT_EQ(r.prompts[0].ids, (std::vector<int32_t>{1, 2, 3}));

  r = completionOk(completionBody({{"prompt", json::array({json::array({1, 2}), json::array({3})})}}));
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_EQ(r.prompts[1].ids, std::vector<int32_t>{3});
}

TEST(CompletionRequest, EchoLogprobsAndScoring) {
  ParsedCompletionRequest r =
      completionOk(completionBody({{"echo", true}, {"logprobs", 3}, {"max_tokens", 0}, {"seed", 7}, {"stop", "\n"}}));
  EXPECT_TRUE(r.echo);
  EXPECT_EQ(r.logprobs, 3);
  EXPECT_TRUE(r.sampling.options.logprobs);
  EXPECT_EQ(r.sampling.options.top_logprobs, 3);
  EXPECT_TRUE(r.sampling.options.prompt_logprobs);
  EXPECT_EQ(r.sampling.requested_max_tokens, 0);
  EXPECT_EQ(r.sampling.options.seed, 7u);
  EXPECT_EQ(r.sampling.options.stop, std::vector<std::string>{"\n"});

  r = completionOk(completionBody({{"logprobs", 0}, {"stream", true}, {"stream_options", {{"include_usage", true}}},
                                   {"suffix", ""}, {"best_of", 1}, {"n", 1}, {"user", "u"}}));
  EXPECT_EQ(r.logprobs, 0);
  EXPECT_FALSE(r.sampling.options.prompt_logprobs);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
}

TEST(CompletionRequest, Refusals) {
  const std::vector<ErrorCase> cases = {
      {"no prompt", {{"model", "m"}}, "prompt", "missing_required_parameter"},
      {"prompt a number", completionBody({{"prompt", 5}}), "prompt", "invalid_type"},
      {"empty list", completionBody({{"prompt", json::array()}}), "prompt", "invalid_value"},
      {"mixed strings and ids", completionBody({{"prompt", json::array({"a", 1})}}), "prompt[1]", "invalid_type"},
      {"ids then a string", completionBody({{"prompt", json::array({1, "a"})}}), "prompt[1]", "invalid_type"},
      {"negative id", completionBody({{"prompt", json::array({-1})}}), "prompt[0]", "integer_below_min_value"},
      {"fractional id", completionBody({{"prompt", json::array({1.5})}}), "prompt[0]", "invalid_type"},
      {"empty id list", completionBody({{"prompt", json::array({json::array({1}), json::array()})}}), "prompt[1]",
       "invalid_value"},
      {"list of objects", completionBody({{"prompt", json::array({json::object()})}}), "prompt[0]", "invalid_type"},
      {"suffix", completionBody({{"suffix", "end"}}), "suffix", "unsupported_parameter"},
      {"best_of = 2", completionBody({{"best_of", 2}}), "best_of", "unsupported_value"},
      {"best_of = 3", completionBody({{"best_of", 3}}), "best_of", "unsupported_value"},
      {"logprobs 6", completionBody({{"logprobs", 6}}), "logprobs", "integer_above_max_value"},
      {"logprobs true", completionBody({{"logprobs", true}}), "logprobs", "invalid_type"},
      {"max_tokens 0 without echo", completionBody({{"max_tokens", 0}}), "max_tokens", "integer_below_min_value"},
      {"max_tokens 0 with echo only", completionBody({{"max_tokens", 0}, {"echo", true}}), "max_tokens",
       "integer_below_min_value"},
      {"echo a string", completionBody({{"echo", "yes"}}), "echo", "invalid_type"},
      {"temperature 9", completionBody({{"temperature", 9}}), "temperature", "invalid_value"},
      {"unknown field", completionBody({{"messages", json::array()}}), "messages", "unknown_parameter"},
      {"a chat-only field", completionBody({{"response_format", {{"type", "json_object"}}}}), "response_format",
       "unknown_parameter"},
      {"user not a string", completionBody({{"user", 1}}), "user", "invalid_type"},
      {"obfuscation", completionBody({{"stream", true}, {"stream_options", {{"include_obfuscation", true}}}}),
       "stream_options.include_obfuscation", "unsupported_value"},
  };
  for (const ErrorCase& c : cases) {
    ApiResult<ParsedCompletionRequest> r = parseCompletionRequest(c.body, kLimits);
    ASSERT_FALSE(r.isOk()) << c.name;
    EXPECT_EQ(r.error().param, c.param) << c.name << ": " << r.error().message;
    EXPECT_EQ(r.error().code, c.code) << c.name << ": " << r.error().message;
  }
  ParseLimits limits;
  limits.max_completion_prompts = 2;
  ApiResult<ParsedCompletionRequest> r =
      parseCompletionRequest(completionBody({{"prompt", json::array({"a", "b", "c"})}}), limits);
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.error().param, "prompt");
}

// ---------------------------------------------------------------- responses

json responsesBody(json extra = json::object()) {
  json body = {{"model", "deepseek-chat"}, {"input", "Hello"}};
  for (auto& [k, v] : extra.items()) body[k] = v;
  return body;
}

ParsedResponsesRequest responsesOk(const json& body) {
  ApiResult<ParsedResponsesRequest> r = parseResponsesRequest(body, kLimits);
  EXPECT_TRUE(r.isOk()) << body.dump() << " -> " << (r.isOk() ? "" : r.error().message);
  return r.isOk() ? std::move(*r) : ParsedResponsesRequest{};
}

TEST(ResponsesRequest, StringInputAndDefaults) {
  const ParsedResponsesRequest r = responsesOk(responsesBody());
  ASSERT_EQ(r.prompt.messages.size(), 1u);
  EXPECT_EQ(r.prompt.messages[0].role, Role::kUser);
  EXPECT_EQ(r.prompt.messages[0].content, "Hello");
  EXPECT_TRUE(r.store);
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.previous_response_id.has_value());
  EXPECT_EQ(r.params.prompt, "input");
  EXPECT_EQ(r.params.max_tokens, "max_output_tokens");
  EXPECT_EQ(r.echo["instructions"], nullptr);
  EXPECT_EQ(r.echo["tools"], json::array());
  EXPECT_EQ(r.echo["tool_choice"], "auto");
  EXPECT_EQ(r.echo["temperature"], 1.0);
  EXPECT_EQ(r.echo["top_p"], 1.0);
  EXPECT_EQ(r.echo["text"], (json{{"format", {{"type", "text"}}}}));
  EXPECT_EQ(r.echo["truncation"], "disabled");
  EXPECT_EQ(r.echo["store"], true);
  EXPECT_EQ(r.echo["parallel_tool_calls"], true);
}

// The shape of a Codex CLI request (npm @openai/codex, "responses" wire API):
// long instructions, a developer message, function tools and a namespace of
// functions beside hosted ones,
// store: false, reasoning, include of encrypted reasoning, a cache key, and a
// previous turn replayed as items (reasoning, function_call, its output).
json codexBody() {
  const std::string instructions = "You are Codex, a coding agent. " + std::string(40000, 'x');
  return {
      {"model", "deepseek-chat"},
      {"instructions", instructions},
      {"input",
       json::array({
           {{"type", "message"}, {"role", "developer"},
            {"content", json::array({{{"type", "input_text"}, {"text", "<permissions>workspace-write</permissions>"}}})}},
           {{"type", "message"}, {"role", "user"},
            {"content", json::array({{{"type", "input_text"}, {"text", "<environment_context>cwd=/repo</environment_context>"}}})}},
           {{"type", "message"}, {"role", "user"},
            {"content", json::array({{{"type", "input_text"}, {"text", "List the files."}}})}},
           {{"type", "reasoning"}, {"id", "rs_1"}, {"summary", json::array()}, {"encrypted_content", "gAAAA..."}},
           {{"type", "function_call"}, {"id", "fc_1"}, {"call_id", "call_a"}, {"name", "shell"},
            {"arguments", "{\"command\":[\"ls\"]}"}},
           {{"type", "function_call"}, {"call_id", "call_b"}, {"name", "shell"}, {"arguments", "{\"command\":[\"pwd\"]}"}},
           {{"type", "function_call_output"}, {"call_id", "call_a"}, {"output", "README.md\nsrc"}},
           {{"type", "function_call_output"}, {"call_id", "call_b"}, {"output", "/repo"}},
           {{"type", "message"}, {"role", "assistant"},
            {"content", json::array({{{"type", "output_text"}, {"text", "Two files."}, {"annotations", json::array()}}})}},
           {{"role", "user"}, {"content", "Now run the tests."}},
           {{"type", "local_shell_call"}, {"call_id", "x"}, {"action", json::object()}},
       })},
      {"tools",
       json::array({
           {{"type", "function"}, {"name", "shell"}, {"description", "Runs a shell command."}, {"strict", false},
            {"parameters", {{"type", "object"}, {"properties", {{"command", {{"type", "array"}}}}}, {"required", json::array({"command"})}}}},
           {{"type", "function"}, {"name", "update_plan"}, {"description", "Updates the plan."},
            {"parameters", {{"type", "object"}, {"properties", json::object()}}}},
           {{"type", "namespace"}, {"name", "multi_agent_v1"}, {"description", "Tools for spawning and managing sub-agents."},
            {"tools", json::array({{{"type", "function"}, {"name", "close_agent"}, {"description", "Close an agent."},
                                    {"strict", false},
                                    {"parameters", {{"type", "object"}, {"properties", {{"target", {{"type", "string"}}}}},
                                                    {"required", json::array({"target"})},
                                                    {"additionalProperties", false}}}}})}},
           {{"type", "web_search"}},
           {{"type", "local_shell"}},
           {{"type", "web_search"}},
           {{"type", "mcp"}, {"server_label", "x"}},
       })},
      {"tool_choice", "auto"},
      {"parallel_tool_calls", false},
      {"reasoning", {{"effort", "medium"}, {"summary", "auto"}}},
      {"store", false},
      {"stream", true},
      {"include", json::array({"reasoning.encrypted_content"})},
      {"prompt_cache_key", "0198-session"},
      {"text", {{"verbosity", "medium"}}},
  };
}

TEST(ResponsesRequest, CodexRequest) {
  const json body = codexBody();
  const ParsedResponsesRequest r = responsesOk(body);
  EXPECT_TRUE(r.stream);
  EXPECT_FALSE(r.store);
  EXPECT_EQ(r.prompt_cache_key, "0198-session");
  EXPECT_FALSE(r.prompt.parallel_tool_calls);
  EXPECT_EQ(r.hosted_tools,
            (std::vector<std::string>{"input item local_shell_call", "web_search", "local_shell", "mcp"}));
  EXPECT_TRUE(r.ignored.empty());
  ASSERT_EQ(r.prompt.tools.size(), 3u);
  EXPECT_EQ(r.prompt.tools[0].name, "shell");
  EXPECT_EQ(r.prompt.tools[0].parameters["required"], json::array({"command"}));
  EXPECT_EQ(r.prompt.tools[2].name, "multi_agent_v1.close_agent") << "Codex's namespace is offered, not skipped";

  const auto& m = r.prompt.messages;
  ASSERT_EQ(m.size(), 9u);
  EXPECT_EQ(m[0].role, Role::kSystem);
  EXPECT_EQ(m[0].content, body["instructions"].get<std::string>());
  EXPECT_EQ(m[1].role, Role::kDeveloper);
  EXPECT_EQ(m[2].role, Role::kUser);
  EXPECT_EQ(m[3].content, "List the files.");
  EXPECT_EQ(m[4].role, Role::kAssistant) << "the reasoning item is skipped; the two calls form one turn";
  EXPECT_FALSE(m[4].content.has_value());
  ASSERT_EQ(m[4].tool_calls.size(), 2u);
  EXPECT_EQ(m[4].tool_calls[0], (ToolCall{"call_a", "shell", "{\"command\":[\"ls\"]}"}));
  EXPECT_EQ(m[4].tool_calls[1].id, "call_b");
  EXPECT_EQ(m[5].role, Role::kTool);
  EXPECT_EQ(m[5].tool_call_id, "call_a");
  EXPECT_EQ(m[5].content, "README.md\nsrc");
  EXPECT_EQ(m[6].tool_call_id, "call_b");
  EXPECT_EQ(m[7].role, Role::kAssistant);
  EXPECT_EQ(m[7].content, "Two files.");
  EXPECT_EQ(m[8].role, Role::kUser) << "an easy input message: a role, no type";
  EXPECT_EQ(m[8].content, "Now run the tests.");
}

TEST(ResponsesRequest, EchoRepeatsTheRequestSettings) {
  json body = codexBody();
  body["temperature"] = 0.3;
  body["max_output_tokens"] = 500;
  body["previous_response_id"] = "resp_prev";
  body["metadata"] = {{"k", "v"}};
  body["truncation"] = "auto";
  const ParsedResponsesRequest r = responsesOk(body);
  EXPECT_EQ(r.echo["instructions"], body["instructions"]);
  // Hosted tools are echoed as sent; function tools gain the fields OpenAI's
  // schema requires (strict: the Responses API's default is true).
  json tools = body["tools"];
  for (json& t : tools) {
    if (t["type"] == "function" && !t.contains("strict")) t["strict"] = true;
  }
  EXPECT_EQ(r.echo["tools"], tools);
  EXPECT_EQ(r.echo["temperature"], 0.3);
  EXPECT_EQ(r.echo["max_output_tokens"], 500);
  EXPECT_EQ(r.echo["previous_response_id"], "resp_prev");
  EXPECT_EQ(r.echo["reasoning"], body["reasoning"]);
  EXPECT_EQ(r.echo["store"], false);
  EXPECT_EQ(r.echo["metadata"], body["metadata"]);
  EXPECT_EQ(r.echo["truncation"], "auto");
  EXPECT_EQ(r.echo["parallel_tool_calls"], false);
  EXPECT_EQ(r.echo["prompt_cache_key"], "0198-session");
  EXPECT_EQ(r.echo["text"]["format"]["type"], "text");
  EXPECT_EQ(r.previous_response_id, "resp_prev");
  EXPECT_EQ(r.sampling.requested_max_tokens, 500);
}

TEST(ResponsesRequest, ToolChoiceFormatsAndCustomCalls) {
  json tools = json::array({{{"type", "function"}, {"name", "f"}}});
  ParsedResponsesRequest r = responsesOk(responsesBody(
      {{"tools", tools}, {"tool_choice", {{"type", "function"}, {"name", "f"}}}, {"text", {{"format", {{"type", "json_object"}}}}}}));
  EXPECT_EQ(r.prompt.tool_choice.mode, ToolChoice::Mode::kFunction);
  EXPECT_EQ(r.prompt.tool_choice.function, "f");
  EXPECT_EQ(r.prompt.response_format.kind, ResponseFormat::Kind::kJsonObject);
  r = responsesOk(responsesBody({{"text", {{"format", {{"type", "json_schema"}, {"name", "x"}, {"strict", true},
                                                         {"schema", {{"type", "string"}}}}}}}}));
  EXPECT_EQ(r.prompt.response_format.kind, ResponseFormat::Kind::kJsonSchema);
  EXPECT_EQ(r.prompt.response_format.schema, (json{{"type", "string"}}));
  EXPECT_EQ(r.prompt.response_format.param, "text.format.schema");
  r = responsesOk(responsesBody({{"tools", tools},
                                 {"tool_choice", {{"type", "web_search_preview"}}},
                                 {"include", json::array({"web_search_call.action.sources", "reasoning.encrypted_content"})}}));
  EXPECT_EQ(r.prompt.tool_choice.mode, ToolChoice::Mode::kAuto);
  EXPECT_EQ(r.hosted_tools, (std::vector<std::string>{"tool_choice web_search_preview",
                                                      "include web_search_call.action.sources"}));
  EXPECT_TRUE(r.ignored.empty());
  r = responsesOk(responsesBody(
      {{"input", json::array({{{"type", "custom_tool_call"}, {"call_id", "c"}, {"name", "apply_patch"}, {"input", "*** Begin Patch"}},
                              {{"type", "custom_tool_call_output"}, {"call_id", "c"}, {"output", "Done"}}})}}));
  ASSERT_EQ(r.prompt.messages.size(), 2u);
  EXPECT_EQ(r.prompt.messages[0].tool_calls[0].arguments, "{\"input\":\"*** Begin Patch\"}")
      << "as the model writes a custom tool's input";
  EXPECT_EQ(r.prompt.messages[1].content, "Done");
  r = responsesOk(responsesBody({{"top_logprobs", 3}, {"background", false}}));
  EXPECT_EQ(r.ignored, std::vector<std::string>{"top_logprobs"});
}

// Namespace and custom tools run at the client: they are offered to the
// model (a namespace's functions as "NS.NAME", a custom tool as a function of
// one string, "input"), never skipped with the hosted tools.
TEST(ResponsesRequest, NamespaceAndCustomToolsAreOffered) {
  const json tools = json::array({
      {{"type", "custom"}, {"name", "apply_patch"}, {"description", "Edits files."}},
      {{"type", "custom"}, {"name", "digits"},
       {"format", {{"type", "grammar"}, {"syntax", "regex"}, {"definition", "^[0-9]+$"}}}},
      {{"type", "namespace"}, {"name", "crm"}, {"description", "Customer records."},
       {"tools", json::array({{{"type", "function"}, {"name", "get_customer"}, {"description", "One customer."},
                               {"parameters", {{"type", "object"}, {"properties", {{"id", {{"type", "string"}}}}}}}},
                              {{"type", "custom"}, {"name", "note"}, {"format", {{"type", "text"}}}}})}},
      {{"type", "web_search"}},
  });
  ParsedResponsesRequest r = responsesOk(responsesBody({{"tools", tools}}));
  EXPECT_EQ(r.hosted_tools, std::vector<std::string>{"web_search"});
  ASSERT_EQ(r.prompt.tools.size(), 4u);
  const json input_schema = {{"type", "object"},
                             {"properties", {{"input", {{"type", "string"}}}}},
                             {"required", json::array({"input"})},
                             {"additionalProperties", false}};
  const FunctionTool& patch = r.prompt.tools[0];
  EXPECT_EQ(patch.name, "apply_patch");
  EXPECT_EQ(patch.description, "Edits files.");
  EXPECT_EQ(patch.parameters, input_schema);
  EXPECT_TRUE(patch.strict);
  EXPECT_EQ(patch.origin, (ToolOrigin{"", "", true}));
  EXPECT_EQ(patch.param, "tools[0]");
  const FunctionTool& digits = r.prompt.tools[1];
  EXPECT_EQ(digits.parameters["properties"]["input"]["pattern"], "^(?:[0-9]+)$")
      << "the whole input matches; the definition's own anchors are the wrapper's";
  const FunctionTool& get = r.prompt.tools[2];
  EXPECT_EQ(get.name, "crm.get_customer");
  EXPECT_EQ(get.description, "One customer.");
  EXPECT_EQ(get.parameters["properties"]["id"]["type"], "string");
  EXPECT_FALSE(get.strict) << "a namespace's function is strict only when it says so";
  EXPECT_EQ(get.origin, (ToolOrigin{"crm", "Customer records.", false}));
  EXPECT_EQ(get.param, "tools[2].tools[0]");
  const FunctionTool& note = r.prompt.tools[3];
  EXPECT_EQ(note.name, "crm.note");
  EXPECT_EQ(note.origin, (ToolOrigin{"crm", "Customer records.", true}));
  EXPECT_EQ(note.param, "tools[2].tools[1]");
  EXPECT_EQ(r.echo["tools"][2], tools[2]) << "echoed as sent";

  // A regex's escaped dollar stays the regex's.
  r = responsesOk(responsesBody({{"tools", json::array({{{"type", "custom"}, {"name", "price"},
                                                         {"format", {{"type", "grammar"}, {"syntax", "regex"},
                                                                     {"definition", "[0-9]+\\$"}}}}})}}));
  EXPECT_EQ(r.prompt.tools[0].parameters["properties"]["input"]["pattern"], "^(?:[0-9]+\\$)$");

  // Tool choices name them: a custom tool by {type: custom}, a namespace's
  // function by its own name (or "NS.NAME").
  r = responsesOk(responsesBody({{"tools", tools}, {"tool_choice", {{"type", "custom"}, {"name", "apply_patch"}}}}));
  EXPECT_EQ(r.prompt.tool_choice.mode, ToolChoice::Mode::kFunction);
  EXPECT_EQ(r.prompt.tool_choice.function, "apply_patch");
  EXPECT_EQ(r.hosted_tools, std::vector<std::string>{"web_search"}) << "a custom tool's choice is not a hosted tool's";
  r = responsesOk(responsesBody({{"tools", tools}, {"tool_choice", {{"type", "function"}, {"name", "get_customer"}}}}));
  EXPECT_EQ(r.prompt.tool_choice.function, "crm.get_customer");
  r = responsesOk(responsesBody({{"tools", tools}, {"tool_choice", {{"type", "function"}, {"name", "crm.get_customer"}}}}));
  EXPECT_EQ(r.prompt.tool_choice.function, "crm.get_customer");
  r = responsesOk(responsesBody({{"tools", tools}, {"tool_choice", {{"type", "custom"}, {"name", "note"}}}}));
  EXPECT_EQ(r.prompt.tool_choice.function, "crm.note");
  r = responsesOk(responsesBody(
      {{"tools", tools},
       {"tool_choice", {{"type", "allowed_tools"}, {"mode", "required"},
                        {"tools", json::array({{{"type", "custom"}, {"name", "digits"}},
                                               {{"type", "function"}, {"name", "get_customer"}}})}}}}));
  ASSERT_EQ(r.prompt.tools.size(), 2u);
  EXPECT_EQ(r.prompt.tools[0].name, "digits");
  EXPECT_EQ(r.prompt.tools[1].name, "crm.get_customer");

  // Their calls come back as the model wrote them.
  r = responsesOk(responsesBody(
      {{"tools", tools},
       {"input", json::array({{{"type", "function_call"}, {"call_id", "c1"}, {"namespace", "crm"},
                               {"name", "get_customer"}, {"arguments", "{\"id\":\"7\"}"}},
                              {{"type", "custom_tool_call"}, {"call_id", "c2"}, {"namespace", "crm"}, {"name", "note"},
                               {"input", "line \"one\"\n"}},
                              {{"type", "function_call_output"}, {"call_id", "c1"}, {"output", "Ada"}},
                              {{"type", "custom_tool_call_output"}, {"call_id", "c2"}, {"output", "ok"}}})}}));
  ASSERT_EQ(r.prompt.messages.size(), 3u);
  ASSERT_EQ(r.prompt.messages[0].tool_calls.size(), 2u);
  EXPECT_EQ(r.prompt.messages[0].tool_calls[0], (ToolCall{"c1", "crm.get_customer", "{\"id\":\"7\"}"}));
  EXPECT_EQ(r.prompt.messages[0].tool_calls[1], (ToolCall{"c2", "crm.note", "{\"input\":\"line \\\"one\\\"\\n\"}"}));
}

TEST(ResponsesRequest, OutputTextLogprobsIncludeAsksForLogprobsWithTopLogprobsAlternatives) {
  ParsedResponsesRequest r = responsesOk(
      responsesBody({{"include", json::array({"reasoning.encrypted_content", "message.output_text.logprobs"})},
                     {"top_logprobs", 4}}));
  EXPECT_TRUE(r.sampling.options.logprobs);
  EXPECT_EQ(r.sampling.options.top_logprobs, 4);
  EXPECT_TRUE(r.ignored.empty());
  EXPECT_EQ(r.echo["top_logprobs"], 4);

  r = responsesOk(responsesBody({{"include", json::array({"message.output_text.logprobs"})}}));
  EXPECT_TRUE(r.sampling.options.logprobs);
  EXPECT_EQ(r.sampling.options.top_logprobs, 0);
  EXPECT_EQ(r.echo["top_logprobs"], 0);

  // Without the include nothing reports logprobs: top_logprobs is accepted
  // (as OpenAI does), costs nothing and is named as ignored.
  r = responsesOk(responsesBody({{"top_logprobs", 20}}));
  EXPECT_FALSE(r.sampling.options.logprobs);
  EXPECT_EQ(r.sampling.options.top_logprobs, 0);
  EXPECT_EQ(r.ignored, std::vector<std::string>{"top_logprobs"});
  EXPECT_EQ(r.echo["top_logprobs"], 20);
  r = responsesOk(responsesBody());
  EXPECT_FALSE(r.sampling.options.logprobs);
  EXPECT_TRUE(r.ignored.empty());
}

TEST(ResponsesRequest, ReasoningVerbosityMetadataAndIdentifiers) {
  ParsedResponsesRequest r = responsesOk(responsesBody({{"reasoning", {{"effort", "low"}, {"summary", "auto"},
                                                                      {"mode", "standard"}, {"context", "current_turn"}}},
                                                        {"text", {{"verbosity", "high"}}},
                                                        {"metadata", {{"ticket", "T-1"}}},
                                                        {"user", "u"},
                                                        {"safety_identifier", "s"},
                                                        {"client_metadata", {{"session_id", "x"}}},
                                                        {"service_tier", "auto"},
                                                        {"prompt_cache_retention", "in_memory"},
                                                        {"stream", true},
                                                        {"stream_options", {{"include_obfuscation", false}}}}));
  EXPECT_EQ(r.prompt.reasoning, true);
  EXPECT_EQ(r.prompt.reasoning_param, "reasoning.effort");
  EXPECT_EQ(r.prompt.verbosity, Verbosity::kHigh);
  EXPECT_EQ(r.echo["metadata"], (json{{"ticket", "T-1"}})) << "kept with the stored response";
  EXPECT_EQ(r.echo["text"]["verbosity"], "high");
  EXPECT_EQ(responsesOk(responsesBody({{"reasoning", {{"effort", "none"}}}})).prompt.reasoning, false);
  EXPECT_FALSE(responsesOk(responsesBody({{"reasoning", {{"summary", "auto"}}}})).prompt.reasoning.has_value())
      << "Codex's reasoning: no effort, the template's default";

  json many = json::object();
  for (int i = 0; i < 17; ++i) many["k" + std::to_string(i)] = "v";
  ApiResult<ParsedResponsesRequest> refused = parseResponsesRequest(responsesBody({{"metadata", many}}), kLimits);
  ASSERT_FALSE(refused.isOk());
  EXPECT_EQ(refused.error().param, "metadata");
}

TEST(ResponsesRequest, AllowedToolsLeaveOnlyTheirFunctionsInThePrompt) {
  const json tools = json::array({{{"type", "function"}, {"name", "f"}},
                                  {{"type", "function"}, {"name", "g"}},
                                  {{"type", "web_search"}}});
  ParsedResponsesRequest r = responsesOk(responsesBody(
      {{"tools", tools},
       {"tool_choice", {{"type", "allowed_tools"}, {"mode", "required"},
                        {"tools", json::array({{{"type", "function"}, {"name", "g"}}, {{"type", "web_search"}}})}}}}));
  ASSERT_EQ(r.prompt.tools.size(), 1u);
  EXPECT_EQ(r.prompt.tools[0].name, "g");
  EXPECT_EQ(r.prompt.tool_choice.mode, ToolChoice::Mode::kRequired);
  EXPECT_EQ(r.echo["tools"].size(), 3u) << "the echo repeats the tools as sent";
  r = responsesOk(responsesBody(
      {{"tools", tools},
       {"tool_choice", {{"type", "allowed_tools"}, {"mode", "auto"}, {"tools", json::array({{{"type", "function"}, {"name", "f"}}})}}}}));
  ASSERT_EQ(r.prompt.tools.size(), 1u);
  EXPECT_EQ(r.prompt.tools[0].name, "f");
  EXPECT_EQ(r.prompt.tool_choice.mode, ToolChoice::Mode::kAuto);
}

TEST(ResponsesRequest, Refusals) {
  auto withInput = [](json input) { return responsesBody({{"input", input}}); };
  const std::vector<ErrorCase> cases = {
      {"no input", {{"model", "m"}}, "input", "missing_required_parameter"},
      {"input a number", withInput(3), "input", "invalid_type"},
      {"item not an object", withInput(json::array({"hi"})), "input[0]", "invalid_type"},
      {"unknown item type", withInput(json::array({{{"type", "magic"}}})), "input[0].type", "invalid_value"},
      {"item_reference", withInput(json::array({{{"type", "item_reference"}, {"id", "msg_1"}}})), "input[0].type",
       "unsupported_value"},
      {"tool role", withInput(json::array({{{"role", "tool"}, {"content", "x"}}})), "input[0].role", "invalid_value"},
      {"message without content", withInput(json::array({{{"role", "user"}}})), "input[0].content",
       "missing_required_parameter"},
      {"image part",
       withInput(json::array({{{"role", "user"}, {"content", json::array({{{"type", "input_image"}, {"image_url", "x"}}})}}})),
       "input[0].content[0].type", "unsupported_value"},
      {"file part",
       withInput(json::array({{{"role", "user"}, {"content", json::array({{{"type", "input_file"}, {"file_id", "f"}}})}}})),
       "input[0].content[0].type", "unsupported_value"},
      {"function_call without call_id",
       withInput(json::array({{{"type", "function_call"}, {"name", "f"}, {"arguments", "{}"}}})), "input[0].call_id",
       "missing_required_parameter"},
      {"function_call arguments an object",
       withInput(json::array({{{"type", "function_call"}, {"call_id", "c"}, {"name", "f"}, {"arguments", json::object()}}})),
       "input[0].arguments", "invalid_type"},
      {"function_call_output without output", withInput(json::array({{{"type", "function_call_output"}, {"call_id", "c"}}})),
       "input[0].output", "missing_required_parameter"},
      {"only skipped items", withInput(json::array({{{"type", "reasoning"}, {"summary", json::array()}}})), "input",
       "invalid_value"},
      {"background", responsesBody({{"background", true}}), "background", "unsupported_parameter"},
      {"prompt template", responsesBody({{"prompt", {{"id", "pmpt_1"}}}}), "prompt", "unsupported_parameter"},
      {"conversation", responsesBody({{"conversation", "conv_1"}}), "conversation", "unsupported_parameter"},
      {"tool without type", responsesBody({{"tools", json::array({{{"name", "f"}}})}}), "tools[0].type",
       "missing_required_parameter"},
      {"function tool bad name", responsesBody({{"tools", json::array({{{"type", "function"}, {"name", "a.b"}}})}}),
       "tools[0].name", "invalid_value"},
      {"function tool without name", responsesBody({{"tools", json::array({{{"type", "function"}}})}}),
       "tools[0].name", "missing_required_parameter"},
      {"json_schema without name", responsesBody({{"text", {{"format", {{"type", "json_schema"}, {"schema", json::object()}}}}}}),
       "text.format.name", "missing_required_parameter"},
      {"format of another type", responsesBody({{"text", {{"format", {{"type", "yaml"}}}}}}), "text.format.type",
       "invalid_value"},
      {"truncation", responsesBody({{"truncation", "middle"}}), "truncation", "invalid_value"},
      {"max_output_tokens 0", responsesBody({{"max_output_tokens", 0}}), "max_output_tokens",
       "integer_below_min_value"},
      {"instructions a list", responsesBody({{"instructions", json::array()}}), "instructions", "invalid_type"},
      {"tool_choice function not among tools", responsesBody({{"tool_choice", {{"type", "function"}, {"name", "f"}}}}),
       "tool_choice", "invalid_value"},
      {"include of numbers", responsesBody({{"include", json::array({1})}}), "include[0]", "invalid_type"},
      {"top_logprobs 21", responsesBody({{"include", json::array({"message.output_text.logprobs"})}, {"top_logprobs", 21}}),
       "top_logprobs", "integer_above_max_value"},
      {"top_logprobs -1", responsesBody({{"top_logprobs", -1}}), "top_logprobs", "integer_below_min_value"},
      {"reasoning a string", responsesBody({{"reasoning", "high"}}), "reasoning", "invalid_type"},
      // Nothing is accepted without effect: what this server cannot do is refused.
      {"unknown field", responsesBody({{"messages", json::array()}}), "messages", "unknown_parameter"},
      {"a chat-only field", responsesBody({{"stop", "x"}}), "stop", "unknown_parameter"},
      {"context_management", responsesBody({{"context_management", json::array({{{"type", "compaction"}}})}}),
       "context_management", "unsupported_parameter"},
      {"moderation", responsesBody({{"moderation", {{"model", "omni-moderation-latest"}}}}), "moderation",
       "unsupported_parameter"},
      {"reasoning effort unknown", responsesBody({{"reasoning", {{"effort", "huge"}}}}), "reasoning.effort",
       "invalid_value"},
      {"reasoning summary", responsesBody({{"reasoning", {{"summary", "detailed"}}}}), "reasoning.summary",
       "unsupported_value"},
      {"reasoning generate_summary", responsesBody({{"reasoning", {{"generate_summary", "concise"}}}}),
       "reasoning.generate_summary", "unsupported_value"},
      {"reasoning mode pro", responsesBody({{"reasoning", {{"mode", "pro"}}}}), "reasoning.mode", "unsupported_value"},
      {"reasoning of all turns", responsesBody({{"reasoning", {{"context", "all_turns"}}}}), "reasoning.context",
       "unsupported_value"},
      {"reasoning unknown key", responsesBody({{"reasoning", {{"budget", 100}}}}), "reasoning.budget",
       "unknown_parameter"},
      {"text unknown key", responsesBody({{"text", {{"style", "x"}}}}), "text.style", "unknown_parameter"},
      {"text.verbosity unknown", responsesBody({{"text", {{"verbosity", "loud"}}}}), "text.verbosity",
       "invalid_value"},
      {"include of an unknown entry", responsesBody({{"include", json::array({"everything"})}}), "include[0]",
       "invalid_value"},
      {"include of input images", responsesBody({{"include", json::array({"message.input_image.image_url"})}}),
       "include[0]", "unsupported_value"},
      {"metadata of numbers", responsesBody({{"metadata", {{"n", 1}}}}), "metadata.n", "invalid_type"},
      {"metadata value too long", responsesBody({{"metadata", {{"k", std::string(513, 'v')}}}}), "metadata.k",
       "invalid_value"},
      {"service_tier flex", responsesBody({{"service_tier", "flex"}}), "service_tier", "unsupported_value"},
      {"client_metadata a string", responsesBody({{"client_metadata", "x"}}), "client_metadata", "invalid_type"},
      {"obfuscation", responsesBody({{"stream", true}, {"stream_options", {{"include_obfuscation", true}}}}),
       "stream_options.include_obfuscation", "unsupported_value"},
      {"allowed_tools naming no tool",
       responsesBody({{"tools", json::array({{{"type", "function"}, {"name", "f"}}})},
                      {"tool_choice", {{"type", "allowed_tools"}, {"mode", "auto"},
                                       {"tools", json::array({{{"type", "function"}, {"name", "g"}}})}}}}),
       "tool_choice.tools", "invalid_value"},
      {"lark grammar",
       responsesBody({{"tools", json::array({{{"type", "custom"}, {"name", "x"},
                                              {"format", {{"type", "grammar"}, {"syntax", "lark"}, {"definition", "start: /a/"}}}}})}}),
       "tools[0].format.syntax", "unsupported_value"},
      {"grammar of another syntax",
       responsesBody({{"tools", json::array({{{"type", "custom"}, {"name", "x"},
                                              {"format", {{"type", "grammar"}, {"syntax", "peg"}, {"definition", "a"}}}}})}}),
       "tools[0].format.syntax", "invalid_value"},
      {"grammar without definition",
       responsesBody({{"tools", json::array({{{"type", "custom"}, {"name", "x"},
                                              {"format", {{"type", "grammar"}, {"syntax", "regex"}}}}})}}),
       "tools[0].format.definition", "missing_required_parameter"},
      {"custom format of another type",
       responsesBody({{"tools", json::array({{{"type", "custom"}, {"name", "x"}, {"format", {{"type", "json"}}}}})}}),
       "tools[0].format.type", "invalid_value"},
      {"custom tool bad name", responsesBody({{"tools", json::array({{{"type", "custom"}, {"name", "a b"}}})}}),
       "tools[0].name", "invalid_value"},
      {"namespace without tools", responsesBody({{"tools", json::array({{{"type", "namespace"}, {"name", "ns"}}})}}),
       "tools[0].tools", "missing_required_parameter"},
      {"namespace of a hosted tool",
       responsesBody({{"tools", json::array({{{"type", "namespace"}, {"name", "ns"},
                                              {"tools", json::array({{{"type", "web_search"}}})}}})}}),
       "tools[0].tools[0].type", "invalid_value"},
      {"namespace bad name",
       responsesBody({{"tools", json::array({{{"type", "namespace"}, {"name", "a.b"}, {"tools", json::array()}}})}}),
       "tools[0].name", "invalid_value"},
      {"two tools of one name",
       responsesBody({{"tools", json::array({{{"type", "function"}, {"name", "f"}}, {{"type", "custom"}, {"name", "f"}}})}}),
       "tools[1].name", "invalid_value"},
      {"tool_choice custom naming a function",
       responsesBody({{"tools", json::array({{{"type", "function"}, {"name", "f"}}})},
                      {"tool_choice", {{"type", "custom"}, {"name", "f"}}}}),
       "tool_choice", "invalid_value"},
      {"tool_choice naming a function two namespaces have",
       responsesBody({{"tools", json::array({{{"type", "namespace"}, {"name", "a"}, {"tools", json::array({{{"type", "function"}, {"name", "f"}}})}},
                                             {{"type", "namespace"}, {"name", "b"}, {"tools", json::array({{{"type", "function"}, {"name", "f"}}})}}})},
                      {"tool_choice", {{"type", "function"}, {"name", "f"}}}}),
       "tool_choice", "invalid_value"},
      {"allowed_tools mode", responsesBody({{"tool_choice", {{"type", "allowed_tools"}, {"mode", "some"},
                                                              {"tools", json::array()}}}}),
       "tool_choice.mode", "invalid_value"},
  };
  for (const ErrorCase& c : cases) {
    ApiResult<ParsedResponsesRequest> r = parseResponsesRequest(c.body, kLimits);
    ASSERT_FALSE(r.isOk()) << c.name;
    EXPECT_EQ(r.error().http_status, 400) << c.name;
    EXPECT_EQ(r.error().param, c.param) << c.name << ": " << r.error().message;
    EXPECT_EQ(r.error().code, c.code) << c.name << ": " << r.error().message;
  }
}

}  // namespace
}  // namespace lg::proxy::openai
