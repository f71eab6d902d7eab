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

ChatResponder::ChatResponder(ChatResponderOptions options) : o_(std::move(options)) {
  if (o_.meta.id.empty()) o_.meta.id = newId("chatcmpl-");
  if (o_.meta.created == 0) o_.meta.created = unixSeconds();
  choices_.reserve(std::max<size_t>(o_.choices, 1));
  for (size_t i = 0; i < std::max<size_t>(o_.choices, 1); ++i) choices_.emplace_back(o_.parser);
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

json ChatResponder::logprobsJson(const Choice& c) const {
  return c.logprobs.empty() ? json(nullptr) : json{{"content", c.logprobs}, {"refusal", nullptr}};
}

std::string ChatResponder::start() {
  if (!o_.stream || started_) return {};
  started_ = true;
  std::string out;
  for (size_t i = 0; i < choices_.size(); ++i) {
    json choice = json{{"index", i},
                       {"delta", json{{"role", "assistant"}, {"content", ""}}},
                       {"logprobs", nullptr},
                       {"finish_reason", nullptr}};
    out += sseData(chunk(json::array({std::move(choice)})));
  }
  return out;
}

void ChatResponder::apply(Choice& c, const std::vector<OutputPiece>& pieces, json* delta) {
  using Kind = OutputPiece::Kind;
  for (const OutputPiece& p : pieces) {
    switch (p.kind) {
      case Kind::kReasoning:
        c.reasoning += p.text;
        if (delta) appendString(*delta, "reasoning_content", p.text);
        break;
      case Kind::kContent:
        c.content += p.text;
        if (delta) appendString(*delta, "content", p.text);
        break;
      case Kind::kToolCallBegin: {
        json call = json{{"id", p.id}, {"type", "function"}, {"function", json{{"name", p.name}, {"arguments", ""}}}};
        if (delta) {
          json d = call;
          d["index"] = p.tool_index;
          (*delta)["tool_calls"].push_back(std::move(d));
        }
        c.tool_calls.push_back(std::move(call));
        break;
      }
      case Kind::kToolCallArguments: {
        if (p.tool_index < 0 || static_cast<size_t>(p.tool_index) >= c.tool_calls.size()) break;
        appendString(c.tool_calls[p.tool_index]["function"], "arguments", p.text);
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

ResponderOutput ChatResponder::onEvent(size_t index, const serving::StreamEvent& event) {
  ResponderOutput out;
  if (done_ || index >= choices_.size() || choices_[index].finished) {
    out.done = done_;
    return out;
  }
  Choice& c = choices_[index];
  out.body = start();
  const bool was_reasoning = c.parser.inReasoning();
  pieces_.clear();
  c.parser.push(event.text, pieces_);
  if (was_reasoning || c.parser.inReasoning()) usage_.reasoning_tokens += static_cast<int64_t>(event.token_ids.size());
  if (o_.logprobs && o_.tokenizer != nullptr) {
    for (const serving::SampledToken& t : event.logprobs) c.logprobs.push_back(chatLogprob(*o_.tokenizer, t));
  }
  if (event.final) {
    ResponderOutput end = finish(index, event);
    out.body += end.body;
    out.done = end.done;
    out.error = std::move(end.error);
    return out;
  }
  if (!o_.stream) {
    apply(c, pieces_, nullptr);
    return out;
  }
  json delta = json::object();
  apply(c, pieces_, &delta);
  if (delta.empty() && c.logprobs.empty()) return out;
  json choice = json{{"index", index}, {"delta", std::move(delta)}, {"logprobs", logprobsJson(c)},
                     {"finish_reason", nullptr}};
  c.logprobs = json::array();
  out.body += sseData(chunk(json::array({std::move(choice)})));
  return out;
}

ResponderOutput ChatResponder::finish(size_t index, const serving::StreamEvent& event) {
  ResponderOutput out;
  Choice& c = choices_[index];
  if (std::optional<ApiError> error = finalEventError(event, o_.params, o_.retry)) {
    // One failed choice ends the response.
    done_ = true;
    out.done = true;
    if (o_.stream) {
      out.body = sseErrorData(*error);
      out.body += kSseDone;
    }
    out.error = std::move(error);
    return out;
  }
  c.parser.finish(pieces_);  // after the final event's own pieces
  c.finished = true;
  ++finished_;
  usage_.add(event.usage);
  usage_.reasoning_tokens = std::min(usage_.reasoning_tokens, usage_.completion_tokens);
  const bool called = c.parser.toolCallCount() > 0;
  c.finish_reason = std::string(finishReasonText(event.finish_reason, called));
  const bool all = finished_ == choices_.size();
  done_ = all;
  out.done = all;

  if (o_.stream) {
    json delta = json::object();
    apply(c, pieces_, &delta);
    json choice = json{{"index", index}, {"delta", std::move(delta)}, {"logprobs", logprobsJson(c)},
                       {"finish_reason", c.finish_reason}};
    out.body = sseData(chunk(json::array({std::move(choice)})));
    if (!all) return out;
    if (o_.include_usage) {
      json last = chunk(json::array());
      last["usage"] = usageJson(usage_, UsageStyle::kChat, o_.cost);
      out.body += sseData(last);
    }
    out.body += kSseDone;
    return out;
  }

  apply(c, pieces_, nullptr);
  if (!all) return out;
  json choices = json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    Choice& ci = choices_[i];
    const bool ci_called = !ci.tool_calls.empty();
    json message = json{{"role", "assistant"},
                        {"content", ci.content.empty() && ci_called ? json(nullptr) : json(ci.content)},
                        {"refusal", nullptr}};
    if (!ci.reasoning.empty()) message["reasoning_content"] = ci.reasoning;
    if (ci_called) message["tool_calls"] = ci.tool_calls;
    choices.push_back(json{{"index", i},
                           {"message", std::move(message)},
                           {"logprobs", o_.logprobs ? json{{"content", ci.logprobs}, {"refusal", nullptr}} : json(nullptr)},
                           {"finish_reason", ci.finish_reason}});
  }
  json body = json{{"id", o_.meta.id},
                   {"object", "chat.completion"},
                   {"created", o_.meta.created},
                   {"model", o_.meta.model},
                   {"system_fingerprint", o_.meta.system_fingerprint.empty() ? json(nullptr)
                                                                             : json(o_.meta.system_fingerprint)},
                   {"choices", std::move(choices)},
                   {"usage", usageJson(usage_, UsageStyle::kChat, o_.cost)}};
  out.body = jsonText(body);
  return out;
}

}  // namespace lg::proxy::openai
