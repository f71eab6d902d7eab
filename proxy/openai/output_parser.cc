#include "proxy/openai/output_parser.h"

#include <algorithm>

#include "proxy/openai/ids.h"

namespace lg::proxy::openai {

namespace {

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kCallsBegin = "<｜tool▁calls▁begin｜>";
constexpr std::string_view kCallsEnd = "<｜tool▁calls▁end｜>";
constexpr std::string_view kCallBegin = "<｜tool▁call▁begin｜>";
constexpr std::string_view kCallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kSep = "<｜tool▁sep｜>";
constexpr std::string_view kFence = "```";

// A call header or name longer than this is not a call (function names are
// at most 64 characters; "function" is 8).
constexpr size_t kMaxHeader = 256;
// White space held back before a possible marker (it is trimmed when the
// marker comes). Bounded so that a flood of spaces streams instead of being
// rescanned on every delta.
constexpr size_t kMaxHeldSpace = 64;
// The longest ```json line taken as an argument fence.
constexpr size_t kMaxFenceLine = 16;

bool isSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::string_view trimRight(std::string_view s) {
  while (!s.empty() && isSpace(s.back())) s.remove_suffix(1);
  return s;
}
std::string_view trim(std::string_view s) {
  while (!s.empty() && isSpace(s.front())) s.remove_prefix(1);
  return trimRight(s);
}
size_t leadingSpace(std::string_view s) {
  size_t n = 0;
  while (n < s.size() && isSpace(s[n])) ++n;
  return n;
}

// Length of the longest proper suffix of `s` that is a prefix of `marker`.
size_t partialMarker(std::string_view s, std::string_view marker) {
  const size_t max = std::min(s.size(), marker.size() - 1);
  for (size_t n = max; n > 0; --n) {
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

// How much of the end of `s` to hold back: a partial marker, the white space
// before it, and (for arguments) a closing ``` fence with its white space:
// all of it is trimmed if a marker follows. Every held byte is ASCII, so the
// text released before it ends on a character boundary.
size_t holdBack(std::string_view s, std::initializer_list<std::string_view> markers, bool fence) {
  size_t hold = 0;
  for (std::string_view m : markers) hold = std::max(hold, partialMarker(s, m));
  auto extendSpace = [&] {
    size_t n = 0;
    while (hold < s.size() && n < kMaxHeldSpace && isSpace(s[s.size() - hold - 1])) ++hold, ++n;
  };
  extendSpace();
  if (fence) {
    size_t ticks = 0;
    while (hold < s.size() && ticks < kFence.size() && s[s.size() - hold - 1] == '`') ++hold, ++ticks;
    if (ticks > 0) extendSpace();
  }
  return hold;
}

// The argument text of a finished call: without trailing white space and the
// closing fence of a ```json block.
std::string_view finalArgs(std::string_view s, bool fenced) {
  s = trimRight(s);
  if (fenced && s.size() >= kFence.size() && s.substr(s.size() - kFence.size()) == kFence) {
    s.remove_suffix(kFence.size());
    s = trimRight(s);
  }
  return s;
}

// A plausible function name: no markers, no line breaks, not empty.
bool plausibleName(std::string_view name) {
  return !name.empty() && name.size() <= kMaxHeader && name.find('\n') == std::string_view::npos &&
         name.find("<｜") == std::string_view::npos;
}

}  // namespace

DeepSeekOutputParser::DeepSeekOutputParser(OutputParserOptions options) : options_(options) {
  if (options_.starts_in_reasoning) {
    state_ = State::kReasoningLead;
  } else if (!options_.reasoning) {
    state_ = State::kContent;
  }
}

void DeepSeekOutputParser::emitText(OutputPiece::Kind kind, std::string_view text, size_t offset,
                                    std::vector<OutputPiece>& out) {
  if (text.empty()) return;
  if (kind == OutputPiece::Kind::kToolCallArguments && ignoring_call_) return;
  const int32_t index = kind == OutputPiece::Kind::kToolCallArguments ? calls_ - 1 : -1;
  // Content on both sides of a call past max_tool_calls (which emits no
  // pieces) is not one run of the pushed text: it stays two pieces, so that
  // each piece's source_offset holds.
  if (!out.empty() && out.back().kind == kind && out.back().tool_index == index &&
      out.back().source_offset + out.back().text.size() == offset) {
    out.back().text.append(text);
    return;
  }
  OutputPiece piece;
  piece.kind = kind;
  piece.text.assign(text);
  piece.source_offset = offset;
  piece.tool_index = index;
  out.push_back(std::move(piece));
}

void DeepSeekOutputParser::consume(size_t n) {
  buf_.erase(0, n);
  buf_offset_ += n;
}

void DeepSeekOutputParser::appendRaw(std::string_view text, size_t offset) {
  if (raw_.empty()) raw_offset_ = offset;
  raw_.append(text);
}

void DeepSeekOutputParser::beginCall(std::string name, std::vector<OutputPiece>& out) {
  raw_.clear();  // the call is committed: its text is never returned as content
  fenced_ = false;
  ignoring_call_ = options_.max_tool_calls >= 0 && calls_ >= options_.max_tool_calls;
  if (ignoring_call_) return;
  OutputPiece piece;
  piece.kind = OutputPiece::Kind::kToolCallBegin;
  piece.tool_index = calls_;
  piece.id = newId("call_");
  piece.name = std::move(name);
  out.push_back(std::move(piece));
  ++calls_;
}

void DeepSeekOutputParser::endCall(std::string_view args, size_t offset, std::vector<OutputPiece>& out, bool cut) {
  emitText(OutputPiece::Kind::kToolCallArguments, args, offset, out);
  if (!ignoring_call_) {
    OutputPiece piece;
    piece.kind = OutputPiece::Kind::kToolCallEnd;
    piece.tool_index = calls_ - 1;
    piece.cut = cut;
    out.push_back(std::move(piece));
  }
  ignoring_call_ = false;
  fenced_ = false;
}

void DeepSeekOutputParser::malformed(std::vector<OutputPiece>& out) {
  emitText(OutputPiece::Kind::kContent, raw_, raw_offset_, out);
  raw_.clear();
  state_ = State::kContent;
}

void DeepSeekOutputParser::push(std::string_view text, std::vector<OutputPiece>& out) {
  if (state_ == State::kDone) return;
  buf_.append(text);
  while (step(out)) {
  }
}

bool DeepSeekOutputParser::step(std::vector<OutputPiece>& out) {
  using Kind = OutputPiece::Kind;
  const std::string_view b = buf_;
  switch (state_) {
    case State::kStart: {
      const size_t ws = leadingSpace(b);
      const std::string_view rest = b.substr(ws);
      if (rest.empty()) return false;
      if (rest.starts_with(kThinkOpen)) {
        consume(ws + kThinkOpen.size());
        state_ = State::kReasoningLead;
        return true;
      }
      if (kThinkOpen.starts_with(rest)) return false;  // "<thi": wait
      state_ = State::kContent;
      return true;
    }
    case State::kReasoningLead:
    case State::kContentLead: {
      consume(leadingSpace(b));
      if (buf_.empty()) return false;
      state_ = state_ == State::kReasoningLead ? State::kReasoning : State::kContent;
      return true;
    }
    case State::kReasoning: {
      const size_t close = b.find(kThinkClose);
      if (close != std::string_view::npos) {
        emitText(Kind::kReasoning, trimRight(b.substr(0, close)), buf_offset_, out);
        consume(close + kThinkClose.size());
        state_ = State::kContentLead;
        return true;
      }
      const size_t keep = b.size() - holdBack(b, {kThinkClose}, false);
      emitText(Kind::kReasoning, b.substr(0, keep), buf_offset_, out);
      consume(keep);
      return false;
    }
    case State::kContent: {
      if (!options_.tool_calls) {
        emitText(Kind::kContent, b, buf_offset_, out);
        consume(b.size());
        return false;
      }
      // The model sometimes omits the section marker; a lone call-begin opens one too.
      const size_t section = b.find(kCallsBegin);
      const size_t call = b.find(kCallBegin);
      const size_t at = std::min(section, call);
      if (at != std::string_view::npos) {
        const std::string_view before = b.substr(0, at);
        const std::string_view kept = trimRight(before);
        emitText(Kind::kContent, kept, buf_offset_, out);
        const std::string_view marker = at == section ? kCallsBegin : kCallBegin;
        raw_.clear();
        appendRaw(b.substr(kept.size(), at + marker.size() - kept.size()), buf_offset_ + kept.size());
        consume(at + marker.size());
        state_ = at == section ? State::kSection : State::kCallHeader;
        return true;
      }
      const size_t keep = b.size() - holdBack(b, {kCallsBegin, kCallBegin}, false);
      emitText(Kind::kContent, b.substr(0, keep), buf_offset_, out);
      consume(keep);
      return false;
    }
    case State::kSection: {
      const size_t ws = leadingSpace(b);
      if (ws > 0) {
        appendRaw(b.substr(0, ws), buf_offset_);
        consume(ws);
        return true;
      }
      if (b.empty()) return false;
      if (b.starts_with(kCallBegin)) {
        appendRaw(kCallBegin, buf_offset_);
        consume(kCallBegin.size());
        state_ = State::kCallHeader;
        return true;
      }
      if (b.starts_with(kCallsEnd)) {
        raw_.clear();
        consume(kCallsEnd.size());
        state_ = State::kContentLead;
        return true;
      }
      if (kCallBegin.starts_with(b) || kCallsEnd.starts_with(b)) return false;
      malformed(out);
      return true;
    }
    case State::kCallHeader: {
      const size_t sep = b.find(kSep);
      if (sep == std::string_view::npos) {
        // Another marker before the separator, or too long a header: not a call.
        const bool other_marker = b.find("<｜") != std::string_view::npos &&
                                  b.find("<｜") + kSep.size() <= b.size();
        if (other_marker || b.size() > kMaxHeader + kSep.size()) {
          malformed(out);
          return true;
        }
        return false;
      }
      const std::string_view header = trim(b.substr(0, sep));
      if (options_.syntax == ToolCallSyntax::kV3 && header == "function") {
        appendRaw(b.substr(0, sep + kSep.size()), buf_offset_);
        consume(sep + kSep.size());
        state_ = State::kCallName;
        return true;
      }
      if (!plausibleName(header)) {
        malformed(out);
        return true;
      }
      std::string name(header);
      consume(sep + kSep.size());
      beginCall(std::move(name), out);
      state_ = State::kCallArgs;
      return true;
    }
    case State::kCallName: {
      // The name ends at the line break (or, if the model wrote no
      // arguments, at the call's end marker).
      const size_t nl = b.find('\n');
      const size_t end = b.find(kCallEnd);
      const size_t at = std::min(nl, end);
      if (at == std::string_view::npos) {
        if (b.size() > kMaxHeader + kCallEnd.size() ||
            (b.find("<｜") != std::string_view::npos && partialMarker(b, kCallEnd) == 0)) {
          malformed(out);
          return true;
        }
        return false;
      }
      const std::string_view name = trim(b.substr(0, at));
      if (!plausibleName(name)) {
        malformed(out);
        return true;
      }
      std::string n(name);
      consume(at == nl ? nl + 1 : at);  // the end marker stays for kCallArgs
      beginCall(std::move(n), out);
      state_ = at == nl ? State::kCallFence : State::kCallArgs;
      return true;
    }
    case State::kCallFence: {
      if (b.starts_with(kFence)) {
        // "```json\n" (or "```\n"): a fence line is short; the same bound
        // applies whether the line arrives whole or in pieces.
        const size_t nl = b.find('\n');
        if (nl != std::string_view::npos && nl < kMaxFenceLine) {
          consume(nl + 1);
          fenced_ = true;
          state_ = State::kCallArgs;
          return true;
        }
        if (nl == std::string_view::npos && b.size() < kMaxFenceLine) return false;  // still coming
      } else if (kFence.starts_with(b)) {
        return false;  // empty, "`" or "``"
      }
      state_ = State::kCallArgs;  // arguments without a fence
      return true;
    }
    case State::kCallArgs: {
      const size_t end = b.find(kCallEnd);
      const size_t all_end = b.find(kCallsEnd);
      const size_t at = std::min(end, all_end);
      if (at != std::string_view::npos) {
        endCall(finalArgs(b.substr(0, at), fenced_), buf_offset_, out);
        const bool section_over = at == all_end && at != end;
        consume(at + (section_over ? kCallsEnd.size() : kCallEnd.size()));
        state_ = section_over ? State::kContentLead : State::kSection;
        return true;
      }
      const size_t keep = b.size() - holdBack(b, {kCallEnd, kCallsEnd}, true);
      emitText(Kind::kToolCallArguments, b.substr(0, keep), buf_offset_, out);
      consume(keep);
      return false;
    }
    case State::kDone:
      return false;
  }
  return false;
}

void DeepSeekOutputParser::finish(std::vector<OutputPiece>& out) {
  using Kind = OutputPiece::Kind;
  switch (state_) {
    case State::kStart:
    case State::kContent:
      emitText(Kind::kContent, buf_, buf_offset_, out);
      break;
    case State::kReasoningLead:
    case State::kReasoning:
      emitText(Kind::kReasoning, trimRight(buf_), buf_offset_, out);  // reasoning cut off (length): all of it is reasoning
      break;
    case State::kContentLead:
      break;
    case State::kSection:
    case State::kCallHeader:
    case State::kCallName:
      // The stream ended before a call was named: the section is text.
      appendRaw(buf_, buf_offset_);
      malformed(out);
      break;
    case State::kCallFence:
      // Cut inside the fence line ("```js"): the arguments had not begun.
      endCall("", buf_offset_, out, /*cut=*/true);
      break;
    case State::kCallArgs: {
      // Cut inside the end marker (held back as a possible marker): the
      // marker's start is not argument text.
      std::string_view args = buf_;
      args.remove_suffix(std::max(partialMarker(args, kCallEnd), partialMarker(args, kCallsEnd)));
      endCall(finalArgs(args, fenced_), buf_offset_, out, /*cut=*/true);
      break;
    }
    case State::kDone:
      return;
  }
  consume(buf_.size());
  raw_.clear();
  state_ = State::kDone;
}

}  // namespace lg::proxy::openai
