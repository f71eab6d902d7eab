// StructuredOutput: a request's output rules (response_format, vLLM's
// structured outputs, tool_choice and strict tools) compiled to a grammar
// (text/grammar/) and handed to the scheduler as a TokenConstraintFactory:
// each sequence gets its own matcher, and every sampled token obeys it
// (docs/grammar.md, docs/openai-api.md "Structured output").
//
// Which rules constrain a chat reply:
//   - tool_choice "required" or a named function: the reply is tool calls in
//     DeepSeek's syntax (at least one; the named function; at most one when
//     parallel_tool_calls is false), arguments matching their schema when the
//     tool is strict, any JSON object otherwise;
//   - else a response format (json_object, json_schema, regex, choice): the
//     reply is that;
//   - else, tool_choice "auto" with a strict tool: free text until the model
//     opens a tool call, constrained from there;
//   - else nothing: free text, no matcher.
// Compiled grammars are cached by their canonical text (the grammar
// engine's cache), so a repeated schema costs a lookup.
//
// Thread-safety: every method may be called from any thread at once.
#pragma once

#include <memory>
#include <optional>
#include <string_view>

#include "proxy/openai/api_error.h"
#include "proxy/openai/output_parser.h"
#include "proxy/openai/request_types.h"
#include "serving/token_constraint.h"
#include "text/grammar/grammar.h"
#include "text/grammar/vocabulary.h"
#include "text/tokenizer/tokenizer.h"

namespace lg::text::grammar {
class GrammarCache;
}

namespace lg::proxy {

class StructuredOutput {
 public:
  // Builds the vocabulary's byte table once (the tokenizer's every token).
  explicit StructuredOutput(const text::Tokenizer& tokenizer, text::grammar::Limits limits = {});
  ~StructuredOutput();

  // The constraint for a chat reply (chat completions, Responses); an empty
  // factory: free text. `raw_body` is the request as sent: schemas are read
  // from it again with their keys in the client's order (the parsed body
  // sorts them), since properties are generated in that order.
  openai::ApiResult<serving::TokenConstraintFactory> forChat(const openai::ChatPrompt& prompt,
                                                             openai::ToolCallSyntax syntax,
                                                             std::string_view raw_body) const;
  // Each sequence's matcher over a compiled (and prepared) grammar: what
  // forChat and forFormat hand the scheduler (the decode benchmark too).
  static serving::TokenConstraintFactory constraintFor(std::shared_ptr<const text::grammar::Grammar> grammar,
                                                       std::shared_ptr<const text::grammar::Vocabulary> vocab);
  // The constraint of a response format alone (completions).
  openai::ApiResult<serving::TokenConstraintFactory> forFormat(const openai::ResponseFormat& format,
                                                               std::string_view raw_body) const;

 private:
  openai::ApiResult<std::shared_ptr<const text::grammar::Grammar>> compileFormat(const openai::ResponseFormat& format,
                                                                                 std::string_view raw_body) const;
  serving::TokenConstraintFactory factoryFor(std::shared_ptr<const text::grammar::Grammar> grammar) const;

  std::shared_ptr<const text::grammar::Vocabulary> vocab_;
  text::grammar::Limits limits_;
  std::unique_ptr<text::grammar::GrammarCache> cache_;
};

}  // namespace lg::proxy
