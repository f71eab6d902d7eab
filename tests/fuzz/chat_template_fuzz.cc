// libFuzzer target for the chat template engine. Built by the lead with
// clang (-fsanitize=fuzzer,address,undefined); no CMake target here.
//
// Each input is used twice:
//   - as template source, parsed and (if it loads) rendered over a fixed
//     conversation with tools and extra variables;
//   - if it is JSON, as a request rendered through the DeepSeek-V3 template:
//     a messages array, or {messages, tools, add_generation_prompt, extra}.
// Every successful render must produce well-formed trusted ranges. Seeds:
// tests/fuzz/make_seeds.sh chat_template_fuzz DIR (templates and chats).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <nlohmann/json.hpp>

#include "text/chat/chat_template.h"

namespace {

using nlohmann::json;

// assets/deepseek-v3-tokenizer/tokenizer_config.json's chat_template.
constexpr std::string_view kV3Template = R"V3TPL({% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}{% set ns = namespace(is_first=false, is_tool=false, is_output_first=true, system_prompt='', is_first_sp=true) %}{%- for message in messages %}{%- if message['role'] == 'system' %}{%- if ns.is_first_sp %}{% set ns.system_prompt = ns.system_prompt + message['content'] %}{% set ns.is_first_sp = false %}{%- else %}{% set ns.system_prompt = ns.system_prompt + '

' + message['content'] %}{%- endif %}{%- endif %}{%- endfor %}{{bos_token}}{{ns.system_prompt}}{%- for message in messages %}{%- if message['role'] == 'user' %}{%- set ns.is_tool = false -%}{{'<｜User｜>' + message['content']}}{%- endif %}{%- if message['role'] == 'assistant' and message['content'] is none %}{%- set ns.is_tool = false -%}{%- for tool in message['tool_calls']%}{%- if not ns.is_first %}{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '
' + '```json' + '
' + tool['function']['arguments'] + '
' + '```' + '<｜tool▁call▁end｜>'}}{%- set ns.is_first = true -%}{%- else %}{{'
' + '<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '
' + '```json' + '
' + tool['function']['arguments'] + '
' + '```' + '<｜tool▁call▁end｜>'}}{{'<｜tool▁calls▁end｜><｜end▁of▁sentence｜>'}}{%- endif %}{%- endfor %}{%- endif %}{%- if message['role'] == 'assistant' and message['content'] is not none %}{%- if ns.is_tool %}{{'<｜tool▁outputs▁end｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}{%- set ns.is_tool = false -%}{%- else %}{{'<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}{%- endif %}{%- endif %}{%- if message['role'] == 'tool' %}{%- set ns.is_tool = true -%}{%- if ns.is_output_first %}{{'<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}{%- set ns.is_output_first = false %}{%- else %}{{'
<｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}{%- endif %}{%- endif %}{%- endfor -%}{% if ns.is_tool %}{{'<｜tool▁outputs▁end｜>'}}{% endif %}{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜>'}}{% endif %})V3TPL";

void checkPrompt(const lg::text::PromptText& p) {
  size_t prev_end = 0;
  for (size_t i = 0; i < p.trusted.size(); ++i) {
    const auto& r = p.trusted[i];
    if (r.begin >= r.end || r.end > p.text.size() || (i > 0 && r.begin <= prev_end)) std::abort();
    prev_end = r.end;
  }
}

const json& fixedMessages() {
  static const json messages = json::parse(R"([
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "hi <｜User｜> there"},
    {"role": "assistant", "content": null, "tool_calls": [
      {"type": "function", "id": "c1", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]},
    {"role": "tool", "content": "42", "tool_call_id": "c1"},
    {"role": "assistant", "content": "<think>x</think>done", "prefix": true},
    {"role": "user", "content": ["part", {"type": "text", "text": "t"}]},
    {"content": 7}
  ])");
  return messages;
}

void fuzzTemplate(std::string_view source) {
  auto tmpl = lg::text::ChatTemplate::parse(source, "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>");
  if (!tmpl.isOk()) return;
  static const json tools = json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {}}}])");
  static const json extra = json::parse(R"({"thinking": true, "n": 3, "f": 1.5, "l": [1, "a", null]})");
  lg::text::ChatRenderInput input;
  input.messages = &fixedMessages();
  input.tools = &tools;
  input.extra = &extra;
  auto out = tmpl->render(input);
  if (out.isOk()) checkPrompt(*out);
}

void fuzzRequest(std::string_view text) {
  static const auto v3 = lg::text::ChatTemplate::parse(kV3Template, "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>");
  if (!v3.isOk()) std::abort();
  const json request = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (request.is_discarded()) return;
  lg::text::ChatRenderInput input;
  input.messages = &request;
  if (request.is_object()) {
    if (auto it = request.find("messages"); it != request.end()) input.messages = &*it;
    if (auto it = request.find("tools"); it != request.end()) input.tools = &*it;
    if (auto it = request.find("extra"); it != request.end()) input.extra = &*it;
    if (auto it = request.find("add_generation_prompt"); it != request.end() && it->is_boolean()) {
      input.add_generation_prompt = it->get<bool>();
    }
  }
  auto out = v3->render(input);
  if (out.isOk()) checkPrompt(*out);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  fuzzTemplate(input);
  fuzzRequest(input);
  return 0;
}
