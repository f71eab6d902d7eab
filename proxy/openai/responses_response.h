// ResponsesResponder: a /v1/responses request's scheduler events as OpenAI's
// `response` object, or as its stream of typed events, each with a
// `sequence_number` counting from 0:
//
//   response.created, response.in_progress                       (start())
//   per output item, in order:
//     reasoning (the reply's <think> text, as a `reasoning` item with
//     `reasoning_text` content):
//       response.output_item.added, response.content_part.added,
//       response.reasoning_text.delta..., response.reasoning_text.done,
//       response.content_part.done, response.output_item.done
//     message:
//       response.output_item.added, response.content_part.added,
//       response.output_text.delta..., response.output_text.done,
//       response.content_part.done, response.output_item.done
//     function_call (one per tool call, call_id "call_..."; a namespace
//     tool's function with `namespace` and its own `name`):
//       response.output_item.added, response.function_call_arguments.delta...,
//       response.function_call_arguments.done, response.output_item.done
//     custom_tool_call (a call of a custom tool: `input`, the text of the
//     one argument the model wrote, custom_tool_input.h):
//       response.output_item.added, response.custom_tool_call_input.delta...,
//       response.custom_tool_call_input.done, response.output_item.done
//   response.completed | response.incomplete (max_output_tokens) | response.failed
//
// With `include: ["message.output_text.logprobs"]` (options.logprobs) each
// output_text part carries the log-probabilities of the tokens of its text,
// in OpenAI's shape ({token, logprob, bytes, top_logprobs}); each
// response.output_text.delta those of its delta's tokens, and
// response.output_text.done all of the part's, as OpenAI's ResponseLogProb
// (no bytes). Reasoning and tool-call tokens are in no output_text, so their
// log-probabilities are not reported. Without it, `logprobs` is [].
//
// The final response object carries `usage` (input_tokens,
// input_tokens_details.cached_tokens, output_tokens,
// output_tokens_details.reasoning_tokens, total_tokens) and repeats the
// request's settings (ParsedResponsesRequest::echo). No `data: [DONE]`.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "proxy/openai/custom_tool_input.h"
#include "proxy/openai/logprobs.h"
#include "proxy/openai/output_parser.h"
#include "proxy/openai/request_types.h"
#include "proxy/openai/responder.h"
#include "proxy/openai/usage.h"

namespace lg::proxy::openai {

struct ResponsesResponderOptions {
  ResponseMeta meta;  // id "resp_..."
  bool stream = false;
  nlohmann::json echo = nlohmann::json::object();  // ParsedResponsesRequest::echo
  OutputParserOptions parser;
  bool logprobs = false;                       // include message.output_text.logprobs (top_logprobs come with the events)
  const text::Tokenizer* tokenizer = nullptr;  // token text for logprobs; required when logprobs
  ParamNames params{"input", "max_output_tokens", "top_logprobs"};
  RetryAfter retry;
  UsageCostHook cost;
  // The tools that are not plain functions, by the name the model calls them
  // (FunctionTool::name): namespace tools' functions and custom tools
  // (toolOrigins()). A call of any other name is a plain function_call.
  std::map<std::string, ToolOrigin, std::less<>> tool_origins;
};

// ResponsesResponderOptions::tool_origins of a request's tools.
std::map<std::string, ToolOrigin, std::less<>> toolOrigins(const std::vector<FunctionTool>& tools);

class ResponsesResponder final : public Responder {
 public:
  explicit ResponsesResponder(ResponsesResponderOptions options);

  // Streaming: response.created and response.in_progress, to send as soon as
  // the request is accepted (called by the first onEvent otherwise).
  std::string start() override;

  ResponderOutput onEvent(const serving::StreamEvent& event);
  // One choice only: `choice` is 0.
  ResponderOutput onEvent(size_t /*choice*/, const serving::StreamEvent& event) override { return onEvent(event); }

  const std::string& id() const { return o_.meta.id; }

  // The final response object once the request finished (status
  // "completed" or "incomplete", as sent to the client); null before, and
  // after a failure. What a server stores for GET and previous_response_id.
  const nlohmann::json& finalResponse() const { return final_; }

 private:
  enum class ItemKind : uint8_t { kNone, kReasoning, kMessage, kFunctionCall, kCustomCall };

  nlohmann::json responseObject(std::string_view status) const;
  void emit(std::string_view type, nlohmann::json event);  // adds type + sequence_number, appends to out_
  void apply(const std::vector<OutputPiece>& pieces);
  void openItem(ItemKind kind, const OutputPiece* call);
  void closeItem(bool complete);
  // `offset`: where the text starts in the reply's text (OutputPiece::source_offset).
  void appendText(ItemKind kind, std::string_view text, size_t offset);
  void appendCustomInput(std::string_view text);  // the open custom tool call's decoded input
  nlohmann::json callItem(std::string_view status) const;  // the open call as its output item

  ResponsesResponderOptions o_;
  DeepSeekOutputParser parser_;
  std::optional<TokenTextSpans> token_spans_;  // with logprobs
  bool started_ = false;
  bool done_ = false;
  int64_t sequence_ = 0;
  std::string out_;  // SSE bytes of the event being handled
  UsageCounts usage_;
  nlohmann::json output_ = nlohmann::json::array();  // finished items
  nlohmann::json final_;                             // finalResponse()
  // The open item.
  ItemKind open_ = ItemKind::kNone;
  std::string item_id_;
  std::string item_text_;  // its text or arguments so far
  // A message's logprobs so far, as its output_text part and as the
  // streaming events write them.
  nlohmann::json item_logprobs_ = nlohmann::json::array();
  nlohmann::json item_event_logprobs_ = nlohmann::json::array();
  std::string call_id_, call_name_, call_namespace_;  // call_name_: its name in call_namespace_, if any
  CustomToolInputDecoder custom_input_;              // a custom tool call's input
  int32_t open_tool_index_ = -1;
  bool called_tools_ = false;
};

}  // namespace lg::proxy::openai
