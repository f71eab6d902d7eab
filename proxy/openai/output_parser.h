// DeepSeekOutputParser: turns a DeepSeek model's generated text, as it
// streams (serving::StreamEvent::text deltas), into what OpenAI clients read:
// reasoning (DeepSeek's `reasoning_content`), content, and tool calls.
//
// The model writes, after optional reasoning and content:
//
//   <think>REASONING</think>CONTENT
//   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
//   ```json
//   ARGUMENTS
//   ```<｜tool▁call▁end｜>
//   <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME2 ... <｜tool▁call▁end｜><｜tool▁calls▁end｜>
//
// (the DeepSeek-V3 / R1 format, exactly as their chat templates render past
// calls), or, from V3.1 on, `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGUMENTS<｜tool▁call▁end｜>`.
// The markers are added tokens the scheduler decodes into the text
// (special tokens are not skipped), so they can arrive split across deltas;
// the parser holds back any tail that could still become a marker.
//
// Output is a sequence of pieces, in order: reasoning text, content text, and
// for each call a begin (id "call_...", name), argument chunks, and an end. A
// call is announced as soon as its name is complete and its arguments stream
// as they come (without the ```json fence). Every text piece is a run of the
// pushed text as it was (`source_offset` says where it starts), so a caller
// can tell which generated tokens produced it (the Responses API's
// output_text logprobs cover the content's tokens only).
//
// Malformed tool-call text never fails: text of a tool-call section that does
// not lead to a named call (no call marker, no separator, an implausible name,
// the stream ending before the name) is returned as content, markers
// included. A call whose name was announced stays a call; if the stream ends
// inside its arguments it ends with what arrived (as OpenAI truncates
// arguments at the length limit), less the start of an end marker the stream
// was cut in (a model may spell a marker with several ordinary tokens), and
// its end piece says it was cut.
//
// Not thread-safe: one parser per reply.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lg::proxy::openai {

// How a call's header (the text between call-begin and the separator) is
// read. kV3: "function" introduces a NAME line and a fenced argument block;
// any other header is taken as the name (V3.1 style), so both formats parse.
// kV31: the header is always the name.
enum class ToolCallSyntax : uint8_t { kV3, kV31 };

struct OutputParserOptions {
  bool reasoning = true;             // a reply that starts with <think> has reasoning until </think>
  bool starts_in_reasoning = false;  // the prompt already opened <think> (R1's template): reasoning from the start
  bool tool_calls = false;           // extract tool calls (the request has tools it lets the model call)
  int32_t max_tool_calls = -1;       // -1: no limit; 1 for parallel_tool_calls = false (later calls are dropped)
  ToolCallSyntax syntax = ToolCallSyntax::kV3;
};

struct OutputPiece {
  enum class Kind : uint8_t { kReasoning, kContent, kToolCallBegin, kToolCallArguments, kToolCallEnd };
  Kind kind = Kind::kContent;
  std::string text;         // reasoning, content or argument text
  size_t source_offset = 0;  // text pieces: where `text` starts in all the text pushed so far
  int32_t tool_index = -1;  // tool pieces: the call's index in the reply (0, 1, ...)
  std::string id;           // kToolCallBegin: "call_..."
  std::string name;         // kToolCallBegin
  bool cut = false;         // kToolCallEnd: the stream ended before the call's end marker (max_tokens, a stop)
};

class DeepSeekOutputParser {
 public:
  explicit DeepSeekOutputParser(OutputParserOptions options = {});

  // Appends the pieces the new text completes to `out` (text pieces of one
  // kind that are adjacent in `out` and in the pushed text are merged).
  void push(std::string_view text, std::vector<OutputPiece>& out);
  // End of stream: whatever is held back, and the end of an unterminated call.
  void finish(std::vector<OutputPiece>& out);

  bool inReasoning() const { return state_ == State::kReasoningLead || state_ == State::kReasoning; }
  int32_t toolCallCount() const { return calls_; }  // calls announced so far

 private:
  enum class State : uint8_t {
    kStart,          // before the first non-space text: is it <think>?
    kReasoningLead,  // after <think>: leading white space is dropped
    kReasoning,
    kContentLead,    // after </think> or <｜tool▁calls▁end｜>: leading white space is dropped
    kContent,
    kSection,        // inside <｜tool▁calls▁begin｜>, between calls
    kCallHeader,     // after <｜tool▁call▁begin｜>, until <｜tool▁sep｜>
    kCallName,       // V3: after "function<｜tool▁sep｜>", until the end of the name line
    kCallFence,      // V3: an optional ```json line
    kCallArgs,       // until <｜tool▁call▁end｜>
    kDone,           // finished
  };

  bool step(std::vector<OutputPiece>& out);  // one transition; false when it needs more text
  // `text` starts at `offset` of the pushed text.
  void emitText(OutputPiece::Kind kind, std::string_view text, size_t offset, std::vector<OutputPiece>& out);
  void consume(size_t n);                       // drops n bytes from the front of buf_
  void appendRaw(std::string_view text, size_t offset);
  void beginCall(std::string name, std::vector<OutputPiece>& out);
  void endCall(std::string_view args, size_t offset, std::vector<OutputPiece>& out, bool cut = false);
  void malformed(std::vector<OutputPiece>& out);  // the section so far becomes content

  OutputParserOptions options_;
  State state_ = State::kStart;
  std::string buf_;  // text received and not yet classified
  std::string raw_;  // the current tool-call section's text since its last complete call (for malformed())
  size_t buf_offset_ = 0;  // where buf_ starts in the pushed text
  size_t raw_offset_ = 0;  // where raw_ starts in the pushed text
  int32_t calls_ = 0;
  bool ignoring_call_ = false;  // the current call is past max_tool_calls: parsed, not reported
  bool fenced_ = false;         // the current call's arguments opened a ``` block
};

}  // namespace lg::proxy::openai
