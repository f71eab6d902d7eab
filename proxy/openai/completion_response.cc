#include "proxy/openai/completion_response.h"

#include "common/unix_time.h"
#include "common/utf8.h"
#include "proxy/openai/ids.h"
#include "proxy/openai/sse.h"

namespace lg::proxy::openai {

using nlohmann::json;

std::string completionEchoText(const CompletionPrompt& prompt, const text::Tokenizer& tokenizer) {
  if (!prompt.is_ids) return prompt.text;
  std::string bytes;
  for (int32_t id : prompt.ids) bytes += tokenizer.tokenBytes(id);
  std::string out;
  utf8::appendLossy(out, bytes);  // as Tokenizer::decode repairs a split character
  return out;
}

CompletionResponder::CompletionResponder(CompletionResponderOptions options) : o_(std::move(options)) {
  if (o_.meta.id.empty()) o_.meta.id = newId("cmpl-");
  if (o_.meta.created == 0) o_.meta.created = unixSeconds();
  choices_.reserve(o_.choices);
  for (size_t i = 0; i < o_.choices; ++i) choices_.push_back(Choice{{}, CompletionLogprobs(*o_.tokenizer), false, false, {}});
}

json CompletionResponder::object(json choices) const {
  json o = json{{"id", o_.meta.id},
                {"object", "text_completion"},
                {"created", o_.meta.created},
                {"model", o_.meta.model},
                {"system_fingerprint", o_.meta.system_fingerprint.empty() ? json(nullptr)
                                                                          : json(o_.meta.system_fingerprint)},
                {"choices", std::move(choices)}};
  return o;
}

ResponderOutput CompletionResponder::onEvent(size_t index, const serving::StreamEvent& event) {
  ResponderOutput out;
  if (done_ || index >= choices_.size() || choices_[index].finished) {
    out.done = done_;
    return out;
  }
  Choice& c = choices_[index];

  if (event.final) {
    if (std::optional<ApiError> error = finalEventError(event, o_.params, o_.retry)) {
      done_ = true;
      out.done = true;
      if (o_.stream) {
        out.body = sseErrorData(*error);
        out.body += kSseDone;
      }
      out.error = std::move(error);
      return out;
    }
  }

  // This event's text and log-probabilities (the prompt's first, with echo).
  std::string text;
  if (!c.started) {
    c.started = true;
    if (index < o_.echo_texts.size()) text = o_.echo_texts[index];
    if (o_.logprobs) {
      for (const serving::PromptLogprob& p : event.prompt_logprobs) c.logprobs.addPrompt(p);
      // Offsets index the choice's text, which starts with the echo.
      if (event.prompt_logprobs.empty()) c.logprobs.advance(text);
    }
  }
  text += event.text;
  if (o_.logprobs) {
    for (const serving::SampledToken& t : event.logprobs) c.logprobs.addGenerated(t);
  }

  if (event.final) {
    c.finished = true;
    ++finished_;
    c.finish_reason = finishReasonText(event.finish_reason, false);
    usage_.add(event.usage);
  }

  if (o_.stream) {
    if (!text.empty() || !c.logprobs.empty() || event.final) {
      json choice = json{{"text", text},
                         {"index", index},
                         {"logprobs", o_.logprobs ? c.logprobs.take() : json(nullptr)},
                         {"finish_reason", event.final ? json(c.finish_reason) : json(nullptr)}};
      json chunk = object(json::array({std::move(choice)}));
      if (o_.include_usage) chunk["usage"] = nullptr;
      out.body = sseData(chunk);
    }
    if (finished_ == choices_.size()) {
      if (o_.include_usage) {
        json last = object(json::array());
        last["usage"] = usageJson(usage_, UsageStyle::kChat, o_.cost);
        out.body += sseData(last);
      }
      out.body += kSseDone;
      done_ = true;
      out.done = true;
    }
    return out;
  }

  c.text += text;
  if (finished_ < choices_.size()) return out;
  json choices = json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    Choice& ci = choices_[i];
    choices.push_back(json{{"text", std::move(ci.text)},
                           {"index", i},
                           {"logprobs", o_.logprobs ? ci.logprobs.take() : json(nullptr)},
                           {"finish_reason", ci.finish_reason}});
  }
  json body = object(std::move(choices));
  body["usage"] = usageJson(usage_, UsageStyle::kChat, o_.cost);
  out.body = jsonText(body);
  done_ = true;
  out.done = true;
  return out;
}

}  // namespace lg::proxy::openai
