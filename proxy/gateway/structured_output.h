// StructuredOutput: a request's output rules (response_format, vLLM's
// structured outputs, tool_choice and strict tools) compiled to a grammar
// (text/grammar/) and handed to the scheduler as a TokenConstraintFactory:
// each sequence gets its own matcher, and every sampled token obeys it
// (docs/grammar.md, docs/openai-api.md "Structured output").
//
// Which rules constrain a chat reply (text/grammar's ReplySpec):
//   - tool_choice "required" or a named function: the reply is tool calls in
//     DeepSeek's syntax (at least one; the named function; at most one when
//     parallel_tool_calls is false), arguments matching their schema when the
//     tool is strict, any JSON object otherwise;
//   - tool_choice "auto" with a response format (json_object, json_schema,
//     regex, choice): either content in that format or tool calls;
//   - a response format alone: the content is that;
//   - tool_choice "auto" with a strict tool: free text until the model
//     opens a tool call, constrained from there;
//   - else nothing: free text, no matcher.
// When the prompt opens the reply's reasoning (R1's template, V3.1 in
// thinking mode), the reasoning comes first, free, up to "</think>".
//
// Two steps, so that no I/O thread compiles: describe*() reads the request's
// rules (cheap, and where a request's errors in them are found first);
// ready() hands out the constraint when its grammar is compiled and
// prepared; compile() does the work (milliseconds for a new schema, up to a
// tenth of a second for free text before tool calls on a 129k vocabulary),
// which the gateway runs on its blocking pool. Compiled grammars are cached
// by their canonical text (the grammar engine's cache), so a repeated
// schema costs a lookup.
//
// Thread-safety: every method may be called from any thread at once.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

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

// A request's reply rules, described but not compiled.
struct ReplyConstraint {
  std::optional<text::grammar::ReplySpec> spec;  // none: free text, no matcher
  std::string cache_key;                         // the spec's canonical text and the limits
  std::string content_param;                     // names the format in errors: "response_format.json_schema.schema"
  std::vector<std::string> tool_params;          // names each tool's parameters in errors: "tools[2].function.parameters"
  bool constrained() const { return spec.has_value(); }
};

class StructuredOutput {
 public:
  // Builds the vocabulary's byte table once (the tokenizer's every token).
  explicit StructuredOutput(const text::Tokenizer& tokenizer, text::grammar::Limits limits = {});
  ~StructuredOutput();

  // A chat reply's rules (chat completions, Responses). `raw_body` is the
  // request as sent: schemas are read from it again with their keys in the
  // client's order (the parsed body sorts them), since properties are
  // generated in that order.
  openai::ApiResult<ReplyConstraint> describeChat(const openai::ChatPrompt& prompt,
                                                  const openai::OutputParserOptions& output,
                                                  std::string_view raw_body) const;
  // A response format alone (completions).
  openai::ApiResult<ReplyConstraint> describeFormat(const openai::ResponseFormat& format,
                                                    std::string_view raw_body) const;
  // The constraint at no cost: none when nothing is constrained, or when the
  // grammar is compiled and prepared; else nullopt (compile() it).
  std::optional<serving::TokenConstraintFactory> ready(const ReplyConstraint& reply) const;
  // Compiles (or finds) and prepares the grammar: a 400 for rules it cannot
  // follow (naming the keyword and where it is).
  openai::ApiResult<serving::TokenConstraintFactory> compile(const ReplyConstraint& reply) const;

  // Each sequence's matcher over a compiled (and prepared) grammar: what
  // compile() hands the scheduler (the decode benchmark too).
  static serving::TokenConstraintFactory constraintFor(std::shared_ptr<const text::grammar::Grammar> grammar,
                                                       std::shared_ptr<const text::grammar::Vocabulary> vocab);

 private:
  std::shared_ptr<const text::grammar::Vocabulary> vocab_;
  text::grammar::Limits limits_;
  std::unique_ptr<text::grammar::GrammarCache> cache_;
};

}  // namespace lg::proxy
