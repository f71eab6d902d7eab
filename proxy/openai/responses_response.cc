#include "proxy/openai/responses_response.h"

#include <algorithm>

#include "common/unix_time.h"
#include "proxy/openai/ids.h"
#include "proxy/openai/sse.h"

namespace lg::proxy::openai {

using nlohmann::json;

std::map<std::string, ToolOrigin, std::less<>> toolOrigins(const std::vector<FunctionTool>& tools) {
  std::map<std::string, ToolOrigin, std::less<>> out;
  for (const FunctionTool& t : tools) {
    if (t.origin.custom || !t.origin.ns.empty()) out.emplace(t.name, t.origin);
  }
  return out;
}

ResponsesResponder::ResponsesResponder(ResponsesResponderOptions options)
    : o_(std::move(options)), parser_(o_.parser) {
  if (o_.meta.id.empty()) o_.meta.id = newId("resp_");
  if (o_.meta.created == 0) o_.meta.created = unixSeconds();
  if (!o_.echo.is_object()) o_.echo = json::object();
  if (o_.logprobs && o_.tokenizer != nullptr) token_spans_.emplace(*o_.tokenizer);
}

json ResponsesResponder::responseObject(std::string_view status) const {
  json r = o_.echo;
  r["id"] = o_.meta.id;
  r["object"] = "response";
  r["created_at"] = o_.meta.created;
  r["status"] = status;
  r["background"] = false;
  r["error"] = nullptr;
  r["incomplete_details"] = nullptr;
  r["model"] = o_.meta.model;
  r["output"] = output_;
  r["usage"] = nullptr;
  for (const char* key : {"instructions", "max_output_tokens", "previous_response_id", "user"}) {
    if (!r.contains(key)) r[key] = nullptr;
  }
  if (!r.contains("max_tool_calls")) r["max_tool_calls"] = nullptr;
  if (!r.contains("tools")) r["tools"] = json::array();
  if (!r.contains("tool_choice")) r["tool_choice"] = "auto";
  if (!r.contains("parallel_tool_calls")) r["parallel_tool_calls"] = true;
  if (!r.contains("metadata")) r["metadata"] = json::object();
  if (!r.contains("text")) r["text"] = json{{"format", json{{"type", "text"}}}};
  r["service_tier"] = "default";
  return r;
}

void ResponsesResponder::emit(std::string_view type, json event) {
  event["type"] = type;
  event["sequence_number"] = sequence_++;
  if (o_.stream) out_ += sseEvent(type, event);
}

std::string ResponsesResponder::start() {
  if (!o_.stream || started_) return {};
  started_ = true;
  out_.clear();
  const json response = responseObject("in_progress");
  emit("response.created", json{{"response", response}});
  emit("response.in_progress", json{{"response", response}});
  return std::move(out_);
}

void ResponsesResponder::openItem(ItemKind kind, const OutputPiece* call) {
  const size_t index = output_.size();
  open_ = kind;
  item_text_.clear();
  item_logprobs_ = json::array();
  item_event_logprobs_ = json::array();
  switch (kind) {
    case ItemKind::kReasoning:
      item_id_ = outputItemId("rs_", o_.meta.id, index);
      emit("response.output_item.added",
           json{{"output_index", index},
                {"item", json{{"id", item_id_}, {"type", "reasoning"}, {"summary", json::array()},
                              {"content", json::array()}}}});
      emit("response.content_part.added",
           json{{"item_id", item_id_}, {"output_index", index}, {"content_index", 0},
                {"part", json{{"type", "reasoning_text"}, {"text", ""}}}});
      break;
    case ItemKind::kMessage:
      item_id_ = outputItemId("msg_", o_.meta.id, index);
      emit("response.output_item.added",
           json{{"output_index", index},
                {"item", json{{"id", item_id_}, {"type", "message"}, {"status", "in_progress"}, {"role", "assistant"},
                              {"content", json::array()}}}});
      emit("response.content_part.added",
           json{{"item_id", item_id_}, {"output_index", index}, {"content_index", 0},
                {"part", json{{"type", "output_text"}, {"text", ""}, {"annotations", json::array()},
                              {"logprobs", json::array()}}}});
      break;
    case ItemKind::kFunctionCall:
    case ItemKind::kCustomCall: {
      const bool custom = kind == ItemKind::kCustomCall;
      item_id_ = outputItemId(custom ? "ctc_" : "fc_", o_.meta.id, index);
      call_id_ = call->id;
      call_name_ = call->name;
      call_namespace_.clear();
      if (auto it = o_.tool_origins.find(call->name); it != o_.tool_origins.end() && !it->second.ns.empty()) {
        call_namespace_ = it->second.ns;
        call_name_ = call->name.substr(call_namespace_.size() + 1);
      }
      custom_input_ = CustomToolInputDecoder();
      emit("response.output_item.added", json{{"output_index", index}, {"item", callItem("in_progress")}});
      break;
    }
    case ItemKind::kNone:
      break;
  }
}

void ResponsesResponder::closeItem(bool complete) {
  if (open_ == ItemKind::kNone) return;
  const size_t index = output_.size();
  const char* status = complete ? "completed" : "incomplete";
  json item;
  switch (open_) {
    case ItemKind::kReasoning: {
      const json part = json{{"type", "reasoning_text"}, {"text", item_text_}};
      emit("response.reasoning_text.done",
           json{{"item_id", item_id_}, {"output_index", index}, {"content_index", 0}, {"text", item_text_}});
      emit("response.content_part.done",
           json{{"item_id", item_id_}, {"output_index", index}, {"content_index", 0}, {"part", part}});
      item = json{{"id", item_id_}, {"type", "reasoning"}, {"status", status}, {"summary", json::array()},
                  {"content", json::array({part})}};
      break;
    }
    case ItemKind::kMessage: {
      const json part = json{{"type", "output_text"}, {"text", item_text_}, {"annotations", json::array()},
                             {"logprobs", std::move(item_logprobs_)}};
      emit("response.output_text.done",
           json{{"item_id", item_id_}, {"output_index", index}, {"content_index", 0}, {"text", item_text_},
                {"logprobs", std::move(item_event_logprobs_)}});
      emit("response.content_part.done",
           json{{"item_id", item_id_}, {"output_index", index}, {"content_index", 0}, {"part", part}});
      item = json{{"id", item_id_}, {"type", "message"}, {"status", status}, {"role", "assistant"},
                  {"content", json::array({part})}};
      break;
    }
    case ItemKind::kFunctionCall:
      emit("response.function_call_arguments.done",
           json{{"item_id", item_id_}, {"output_index", index}, {"name", call_name_}, {"arguments", item_text_}});
      item = callItem(status);
      break;
    case ItemKind::kCustomCall:
      appendCustomInput(custom_input_.finish());
      emit("response.custom_tool_call_input.done",
           json{{"item_id", item_id_}, {"output_index", index}, {"input", item_text_}});
      item = callItem(status);
      break;
    case ItemKind::kNone:
      return;
  }
  emit("response.output_item.done", json{{"output_index", index}, {"item", item}});
  output_.push_back(std::move(item));
  open_ = ItemKind::kNone;
  item_text_.clear();
  item_logprobs_ = json::array();
  item_event_logprobs_ = json::array();
}

void ResponsesResponder::appendText(ItemKind kind, std::string_view text, size_t offset) {
  if (text.empty()) return;
  if (open_ != kind) {
    closeItem(true);
    openItem(kind, nullptr);
  }
  item_text_.append(text);
  json delta_logprobs = json::array();
  if (kind == ItemKind::kMessage && token_spans_) {
    for (const serving::SampledToken& t : token_spans_->take(offset, offset + text.size())) {
      item_logprobs_.push_back(chatLogprob(*o_.tokenizer, t));
      json event_logprob = responsesEventLogprob(*o_.tokenizer, t);
      item_event_logprobs_.push_back(event_logprob);
      delta_logprobs.push_back(std::move(event_logprob));
    }
  }
  if (!o_.stream) return;
  const size_t index = output_.size();
  if (kind == ItemKind::kReasoning) {
    emit("response.reasoning_text.delta",
         json{{"item_id", item_id_}, {"output_index", index}, {"content_index", 0}, {"delta", text}});
  } else if (kind == ItemKind::kMessage) {
    emit("response.output_text.delta", json{{"item_id", item_id_}, {"output_index", index}, {"content_index", 0},
                                            {"delta", text}, {"logprobs", std::move(delta_logprobs)}});
  } else if (kind == ItemKind::kFunctionCall) {
    emit("response.function_call_arguments.delta",
         json{{"item_id", item_id_}, {"output_index", index}, {"delta", text}});
  }
}

void ResponsesResponder::appendCustomInput(std::string_view text) {
  if (text.empty()) return;
  item_text_.append(text);
  emit("response.custom_tool_call_input.delta",
       json{{"item_id", item_id_}, {"output_index", output_.size()}, {"delta", text}});
}

json ResponsesResponder::callItem(std::string_view status) const {
  json item;
  if (open_ == ItemKind::kCustomCall) {
    item = json{{"id", item_id_}, {"type", "custom_tool_call"}, {"status", status}, {"call_id", call_id_},
                {"name", call_name_}, {"input", item_text_}};
  } else {
    item = json{{"id", item_id_}, {"type", "function_call"}, {"status", status}, {"call_id", call_id_},
                {"name", call_name_}, {"arguments", item_text_}};
  }
  if (!call_namespace_.empty()) item["namespace"] = call_namespace_;
  return item;
}

void ResponsesResponder::apply(const std::vector<OutputPiece>& pieces) {
  using Kind = OutputPiece::Kind;
  for (const OutputPiece& p : pieces) {
    switch (p.kind) {
      case Kind::kReasoning:
        appendText(ItemKind::kReasoning, p.text, p.source_offset);
        break;
      case Kind::kContent:
        appendText(ItemKind::kMessage, p.text, p.source_offset);
        break;
      case Kind::kToolCallBegin: {
        closeItem(true);
        const auto origin = o_.tool_origins.find(p.name);
        const bool custom = origin != o_.tool_origins.end() && origin->second.custom;
        openItem(custom ? ItemKind::kCustomCall : ItemKind::kFunctionCall, &p);
        open_tool_index_ = p.tool_index;
        called_tools_ = true;
        break;
      }
      case Kind::kToolCallArguments:
        if (p.tool_index != open_tool_index_) break;
        if (open_ == ItemKind::kFunctionCall) appendText(ItemKind::kFunctionCall, p.text, p.source_offset);
        if (open_ == ItemKind::kCustomCall) appendCustomInput(custom_input_.push(p.text));
        break;
      case Kind::kToolCallEnd:
        if ((open_ == ItemKind::kFunctionCall || open_ == ItemKind::kCustomCall) && p.tool_index == open_tool_index_) {
          closeItem(!p.cut);  // a call the stream was cut in is "incomplete" (the Responses API's item status)
        }
        break;
    }
  }
}

ResponderOutput ResponsesResponder::onEvent(const serving::StreamEvent& event) {
  ResponderOutput out;
  if (done_) {
    out.done = true;
    return out;
  }
  out_ = start();
  if (token_spans_) {
    // Before the pieces their text makes are applied.
    for (const serving::SampledToken& t : event.logprobs) token_spans_->add(t);
    if (event.final) token_spans_->finish();
  }
  const bool was_reasoning = parser_.inReasoning();
  std::vector<OutputPiece> pieces;
  parser_.push(event.text, pieces);
  if (was_reasoning || parser_.inReasoning()) usage_.reasoning_tokens += static_cast<int64_t>(event.token_ids.size());

  if (event.final) {
    done_ = true;
    out.done = true;
    if (std::optional<ApiError> error = finalEventError(event, o_.params, o_.retry)) {
      if (o_.stream) {
        apply(pieces);
        json response = responseObject("failed");
        response["error"] = json{{"code", error->code.empty() ? error->type : error->code},
                                 {"message", error->message}};
        emit("response.failed", json{{"response", std::move(response)}});
        out.body = std::move(out_);
      }
      out.error = std::move(error);
      return out;
    }
    parser_.finish(pieces);
    apply(pieces);
    const bool complete = event.finish_reason != serving::FinishReason::kLength;
    closeItem(complete);
    usage_.add(event.usage);
    usage_.reasoning_tokens = std::min(usage_.reasoning_tokens, usage_.completion_tokens);
    json response = responseObject(complete ? "completed" : "incomplete");
    if (!complete) response["incomplete_details"] = json{{"reason", "max_output_tokens"}};
    response["usage"] = usageJson(usage_, UsageStyle::kResponses, o_.cost);
    final_ = response;
    if (o_.stream) {
      emit(complete ? "response.completed" : "response.incomplete", json{{"response", std::move(response)}});
      out.body = std::move(out_);
    } else {
      out.body = jsonText(response);
    }
    return out;
  }
  apply(pieces);
  if (o_.stream) out.body = std::move(out_);
  out_.clear();
  return out;
}

}  // namespace lg::proxy::openai
