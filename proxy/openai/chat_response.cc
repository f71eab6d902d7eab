#include "proxy/openai/chat_response.h"

#include <algorithm>

#include "common/unix_time.h"
#include "proxy/openai/ids.h"
#include "proxy/openai/logprobs.h"
#include "proxy/openai/sse.h"

namespace lg::proxy::openai {

using nlohmann::json;

namespace {

void appendString(json& object, const char* key, std::string_view text) {
  json& field = object[key];
  if (!field.is_string()) field = "";
  field.get_ref<std::string&>().append(text);
}

}  // namespace

ChatResponder::ChatResponder(ChatResponderOptions options) : o_(std::move(options)), parser_(o_.parser) {
  if (o_.meta.id.empty()) o_.meta.id = newId("chatcmpl-");
  if (o_.meta.created == 0) o_.meta.created = unixSeconds();
}

json ChatResponder::chunk(json choices) const {
  json c = json{{"id", o_.meta.id},
                {"object", "chat.completion.chunk"},
                {"created", o_.meta.created},
                {"model", o_.meta.model},
                {"system_fingerprint", o_.meta.system_fingerprint.empty() ? json(nullptr)
                                                                          : json(o_.meta.system_fingerprint)},
                {"choices", std::move(choices)}};
  if (o_.include_usage) c["usage"] = nullptr;
  return c;
}

std::string ChatResponder::start() {
  if (!o_.stream || started_) return {};
  started_ = true;
  json choice = json{{"index", 0},
                     {"delta", json{{"role", "assistant"}, {"content", ""}}},
                     {"logprobs", nullptr},
                     {"finish_reason", nullptr}};
  return sseData(chunk(json::array({std::move(choice)})));
}

void ChatResponder::apply(const std::vector<OutputPiece>& pieces, json* delta) {
  using Kind = OutputPiece::Kind;
  for (const OutputPiece& p : pieces) {
    switch (p.kind) {
      case Kind::kReasoning:
        reasoning_ += p.text;
        if (delta) appendString(*delta, "reasoning_content", p.text);
        break;
      case Kind::kContent:
        content_ += p.text;
        if (delta) appendString(*delta, "content", p.text);
        break;
      case Kind::kToolCallBegin: {
        json call = json{{"id", p.id}, {"type", "function"}, {"function", json{{"name", p.name}, {"arguments", ""}}}};
        if (delta) {
          json d = call;
          d["index"] = p.tool_index;
          (*delta)["tool_calls"].push_back(std::move(d));
        }
        tool_calls_.push_back(std::move(call));
        break;
      }
      case Kind::kToolCallArguments: {
        if (p.tool_index < 0 || static_cast<size_t>(p.tool_index) >= tool_calls_.size()) break;
        appendString(tool_calls_[p.tool_index]["function"], "arguments", p.text);
        if (delta) {
          json& calls = (*delta)["tool_calls"];
          if (calls.is_array() && !calls.empty() && calls.back()["index"] == p.tool_index) {
            appendString(calls.back()["function"], "arguments", p.text);
          } else {
            calls.push_back(json{{"index", p.tool_index}, {"function", json{{"arguments", p.text}}}});
          }
        }
        break;
      }
      case Kind::kToolCallEnd:
        break;
    }
  }
}

ResponderOutput ChatResponder::onEvent(const serving::StreamEvent& event) {
  ResponderOutput out;
  if (done_) {
    out.done = true;
    return out;
  }
  out.body = start();
  const bool was_reasoning = parser_.inReasoning();
  pieces_.clear();
  parser_.push(event.text, pieces_);
  if (was_reasoning || parser_.inReasoning()) usage_.reasoning_tokens += static_cast<int64_t>(event.token_ids.size());
  if (o_.logprobs && o_.tokenizer != nullptr) {
    for (const serving::SampledToken& t : event.logprobs) logprobs_.push_back(chatLogprob(*o_.tokenizer, t));
  }
  if (event.final) {
    ResponderOutput end = finish(event);
    out.body += end.body;
    out.done = true;
    out.error = std::move(end.error);
    return out;
  }
  if (!o_.stream) {
    apply(pieces_, nullptr);
    return out;
  }
  json delta = json::object();
  apply(pieces_, &delta);
  if (delta.empty() && logprobs_.empty()) return out;
  json choice = json{{"index", 0},
                     {"delta", std::move(delta)},
                     {"logprobs", logprobs_.empty() ? json(nullptr) : json{{"content", logprobs_}, {"refusal", nullptr}}},
                     {"finish_reason", nullptr}};
  logprobs_ = json::array();
  out.body += sseData(chunk(json::array({std::move(choice)})));
  return out;
}

ResponderOutput ChatResponder::finish(const serving::StreamEvent& event) {
  ResponderOutput out;
  done_ = true;
  out.done = true;
  if (std::optional<ApiError> error = finalEventError(event, o_.params, o_.retry)) {
    if (o_.stream) {
      out.body = sseErrorData(*error);
      out.body += kSseDone;
    }
    out.error = std::move(error);
    return out;
  }
  parser_.finish(pieces_);  // after the final event's own pieces
  usage_.add(event.usage);
  usage_.reasoning_tokens = std::min(usage_.reasoning_tokens, usage_.completion_tokens);
  const bool called = parser_.toolCallCount() > 0;
  const std::string_view reason = finishReasonText(event.finish_reason, called);

  if (o_.stream) {
    json delta = json::object();
    apply(pieces_, &delta);
    json choice = json{{"index", 0},
                       {"delta", std::move(delta)},
                       {"logprobs", logprobs_.empty() ? json(nullptr) : json{{"content", logprobs_}, {"refusal", nullptr}}},
                       {"finish_reason", reason}};
    out.body = sseData(chunk(json::array({std::move(choice)})));
    if (o_.include_usage) {
      json last = chunk(json::array());
      last["usage"] = usageJson(usage_, UsageStyle::kChat, o_.cost);
      out.body += sseData(last);
    }
    out.body += kSseDone;
    return out;
  }

  apply(pieces_, nullptr);
  json message = json{{"role", "assistant"},
                      {"content", content_.empty() && called ? json(nullptr) : json(content_)},
                      {"refusal", nullptr}};
  if (!reasoning_.empty()) message["reasoning_content"] = reasoning_;
  if (called) message["tool_calls"] = tool_calls_;
  json choice = json{{"index", 0},
                     {"message", std::move(message)},
                     {"logprobs", o_.logprobs ? json{{"content", logprobs_}, {"refusal", nullptr}} : json(nullptr)},
                     {"finish_reason", reason}};
  json body = json{{"id", o_.meta.id},
                   {"object", "chat.completion"},
                   {"created", o_.meta.created},
                   {"model", o_.meta.model},
                   {"system_fingerprint", o_.meta.system_fingerprint.empty() ? json(nullptr)
                                                                             : json(o_.meta.system_fingerprint)},
                   {"choices", json::array({std::move(choice)})},
                   {"usage", usageJson(usage_, UsageStyle::kChat, o_.cost)}};
  out.body = jsonText(body);
  return out;
}

}  // namespace lg::proxy::openai
