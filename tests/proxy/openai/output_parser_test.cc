// The DeepSeek output parser: reasoning, content and tool calls from streamed
// text, with markers split at every byte, malformed and unterminated tool-call
// text, both call syntaxes and the parallel_tool_calls limit.
#include "proxy/openai/output_parser.h"

#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace lg::proxy::openai {
namespace {

using Kind = OutputPiece::Kind;

const std::string kCallsBegin = "<｜tool▁calls▁begin｜>";
const std::string kCallsEnd = "<｜tool▁calls▁end｜>";
const std::string kCallBegin = "<｜tool▁call▁begin｜>";
const std::string kCallEnd = "<｜tool▁call▁end｜>";
const std::string kSep = "<｜tool▁sep｜>";

std::string v3Call(const std::string& name, const std::string& args) {
  return kCallBegin + "function" + kSep + name + "\n```json\n" + args + "\n```" + kCallEnd;
}
std::string v31Call(const std::string& name, const std::string& args) {
  return kCallBegin + name + kSep + args + kCallEnd;
}

struct Call {
  std::string id, name, args;
  bool ended = false;
  bool cut = false;  // ended by the end of the stream, not by its end marker
  bool operator==(const Call& o) const {
    return name == o.name && args == o.args && ended == o.ended && cut == o.cut;
  }
};

struct Reply {
  std::string reasoning, content;
  std::vector<Call> calls;
  bool operator==(const Reply& o) const {
    return reasoning == o.reasoning && content == o.content && calls == o.calls;
  }
};

std::ostream& operator<<(std::ostream& os, const Reply& r) {
  os << "{reasoning=[" << r.reasoning << "] content=[" << r.content << "] calls=";
  for (const Call& c : r.calls) os << "(" << c.name << ", [" << c.args << "]" << (c.ended ? "" : " open") << (c.cut ? " cut" : "") << ")";
  return os << "}";
}

// Reassembles pieces, checking that they are well-formed: calls begin in
// order, arguments and ends refer to a begun, open call.
Reply assemble(const std::vector<OutputPiece>& pieces) {
  Reply r;
  for (const OutputPiece& p : pieces) {
    switch (p.kind) {
      case Kind::kReasoning:
        EXPECT_FALSE(p.text.empty());
        r.reasoning += p.text;
        break;
      case Kind::kContent:
        EXPECT_FALSE(p.text.empty());
        r.content += p.text;
        break;
      case Kind::kToolCallBegin:
        EXPECT_EQ(p.tool_index, static_cast<int32_t>(r.calls.size()));
        EXPECT_TRUE(r.calls.empty() || r.calls.back().ended);
        r.calls.push_back({p.id, p.name, "", false});
        break;
      case Kind::kToolCallArguments:
        EXPECT_EQ(p.tool_index + 1, static_cast<int32_t>(r.calls.size()));
        if (!r.calls.empty()) {
          EXPECT_FALSE(r.calls.back().ended);
          r.calls.back().args += p.text;
        }
        break;
      case Kind::kToolCallEnd:
        EXPECT_EQ(p.tool_index + 1, static_cast<int32_t>(r.calls.size()));
        if (!r.calls.empty()) {
          EXPECT_FALSE(r.calls.back().ended);
          r.calls.back().ended = true;
          r.calls.back().cut = p.cut;
        }
        break;
    }
  }
  return r;
}

// Every text piece is the run of the pushed text its source_offset names
// (what the Responses API's output_text logprobs rely on), and runs of one
// piece never overlap the next.
void expectPiecesAreRunsOfTheText(const std::vector<OutputPiece>& pieces, const std::string& text) {
  size_t after_last = 0;
  for (const OutputPiece& p : pieces) {
    if (p.kind == Kind::kToolCallBegin || p.kind == Kind::kToolCallEnd) continue;
    ASSERT_LE(p.source_offset + p.text.size(), text.size()) << p.text;
    EXPECT_EQ(text.substr(p.source_offset, p.text.size()), p.text) << "at " << p.source_offset << " of " << text;
    EXPECT_GE(p.source_offset, after_last) << "pieces come in the order of the text";
    after_last = p.source_offset + p.text.size();
  }
}

Reply parseChunks(const std::vector<std::string>& chunks, OutputParserOptions options) {
  DeepSeekOutputParser parser(options);
  std::vector<OutputPiece> pieces;
  std::string text;
  for (const std::string& c : chunks) {
    parser.push(c, pieces);
    text += c;
  }
  parser.finish(pieces);
  expectPiecesAreRunsOfTheText(pieces, text);
  return assemble(pieces);
}

Reply parse(const std::string& text, OutputParserOptions options) { return parseChunks({text}, options); }

OutputParserOptions withTools() {
  OutputParserOptions o;
  o.tool_calls = true;
  return o;
}

// The reply parsed whole, split in two at every byte, and fed byte by byte.
void expectSplitInvariant(const std::string& text, OutputParserOptions options, const Reply& expected) {
  ASSERT_EQ(parse(text, options), expected) << "whole";
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    ASSERT_EQ(parseChunks({text.substr(0, cut), text.substr(cut)}, options), expected) << "cut at " << cut;
  }
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  ASSERT_EQ(parseChunks(bytes, options), expected) << "byte by byte";
}

TEST(OutputParser, PlainContentPassesThrough) {
  const std::string text = "Hello, world! 你好 <not a marker> `code` ```json\n{}\n```";
  Reply expected{"", text, {}};
  expectSplitInvariant(text, {}, expected);
  expectSplitInvariant(text, withTools(), expected);
}

TEST(OutputParser, ToolCallMarkersAreContentWhenToolsAreOff) {
  const std::string text = "x" + kCallsBegin + v3Call("f", "{}") + kCallsEnd;
  EXPECT_EQ(parse(text, {}), (Reply{"", text, {}}));
}

TEST(OutputParser, V3SingleCallAfterContent) {
  const std::string text =
      "Let me check the weather.\n\n" + kCallsBegin + v3Call("get_weather", "{\"city\": \"Paris\"}") + kCallsEnd;
  Reply expected{"", "Let me check the weather.", {{"", "get_weather", "{\"city\": \"Paris\"}", true}}};
  expectSplitInvariant(text, withTools(), expected);
}

TEST(OutputParser, V3ParallelCallsAsTheTemplateRendersThem) {
  // Exactly the V3 template's rendering of two calls: "\n" between them.
  const std::string text = kCallsBegin + v3Call("get_weather", "{\"city\": \"Paris\"}") + "\n" +
                           v3Call("get_time", "{\"tz\": \"Europe/Paris\", \"fmt\": \"24h\"}") + kCallsEnd;
  Reply expected{"",
                 "",
                 {{"", "get_weather", "{\"city\": \"Paris\"}", true},
                  {"", "get_time", "{\"tz\": \"Europe/Paris\", \"fmt\": \"24h\"}", true}}};
  expectSplitInvariant(text, withTools(), expected);
}

TEST(OutputParser, MultiLineArgumentsKeepTheirText) {
  const std::string args = "{\n  \"code\": \"print(1)\\n```x```\",\n  \"n\": [1, 2]\n}";
  const std::string text = kCallsBegin + v3Call("run", args) + kCallsEnd;
  expectSplitInvariant(text, withTools(), Reply{"", "", {{"", "run", args, true}}});
}

TEST(OutputParser, V31SyntaxParsesUnderBothSettings) {
  const std::string text =
      "ok" + kCallsBegin + v31Call("get_weather", "{\"city\":\"Paris\"}") + v31Call("f2", "{}") + kCallsEnd;
  Reply expected{"", "ok", {{"", "get_weather", "{\"city\":\"Paris\"}", true}, {"", "f2", "{}", true}}};
  expectSplitInvariant(text, withTools(), expected);
  OutputParserOptions v31 = withTools();
  v31.syntax = ToolCallSyntax::kV31;
  expectSplitInvariant(text, v31, expected);
}

TEST(OutputParser, CallIdsAreUniqueAndShaped) {
  const std::string text = kCallsBegin + v3Call("a", "{}") + "\n" + v3Call("b", "{}") + kCallsEnd;
  DeepSeekOutputParser parser(withTools());
  std::vector<OutputPiece> pieces;
  parser.push(text, pieces);
  parser.finish(pieces);
  std::set<std::string> ids;
  for (const OutputPiece& p : pieces) {
    if (p.kind != Kind::kToolCallBegin) continue;
    EXPECT_EQ(p.id.rfind("call_", 0), 0u);
    EXPECT_EQ(p.id.size(), 5u + 24u);
    ids.insert(p.id);
  }
  EXPECT_EQ(ids.size(), 2u);
  EXPECT_EQ(parser.toolCallCount(), 2);
}

TEST(OutputParser, ArgumentsStreamBeforeTheCallEnds) {
  DeepSeekOutputParser parser(withTools());
  std::vector<OutputPiece> pieces;
  parser.push(kCallsBegin + kCallBegin + "function" + kSep + "get_weather", pieces);
  EXPECT_TRUE(pieces.empty()) << "the name is not complete before its line ends";
  parser.push("\n```json\n{\"city\": ", pieces);
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0].kind, Kind::kToolCallBegin);
  EXPECT_EQ(pieces[0].name, "get_weather");
  EXPECT_EQ(pieces[1].kind, Kind::kToolCallArguments);
  EXPECT_EQ(pieces[1].text, "{\"city\":");  // the trailing space waits: it could precede the fence
  pieces.clear();
  parser.push("\"Paris\"}\n``", pieces);
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].text, " \"Paris\"}");
  pieces.clear();
  parser.push("`" + kCallEnd.substr(0, 5), pieces);
  EXPECT_TRUE(pieces.empty());
  parser.push(kCallEnd.substr(5) + kCallsEnd, pieces);
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].kind, Kind::kToolCallEnd);
}

TEST(OutputParser, ReasoningAtTheStart) {
  const std::string text = "<think>\nThe user greets me.\nI greet back.\n</think>\n\nHello!";
  expectSplitInvariant(text, {}, Reply{"The user greets me.\nI greet back.", "Hello!", {}});
  // Leading white space before <think> is allowed.
  EXPECT_EQ(parse("\n<think>r</think>c", {}), (Reply{"r", "c", {}}));
}

TEST(OutputParser, ReasoningOpenedByThePrompt) {
  OutputParserOptions o;
  o.starts_in_reasoning = true;
  expectSplitInvariant("Let me think.\n</think>\n\nThe answer is 4.", o,
                       Reply{"Let me think.", "The answer is 4.", {}});
}

TEST(OutputParser, ReasoningThenToolCall) {
  OutputParserOptions o = withTools();
  const std::string text = "<think>I need the weather.</think>\n\n" + kCallsBegin +
                           v3Call("get_weather", "{\"city\": \"Oslo\"}") + kCallsEnd;
  expectSplitInvariant(text, o, Reply{"I need the weather.", "", {{"", "get_weather", "{\"city\": \"Oslo\"}", true}}});
}

TEST(OutputParser, UnterminatedReasoningIsReasoning) {
  EXPECT_EQ(parse("<think>still thinking when the length limit", {}),
            (Reply{"still thinking when the length limit", "", {}}));
  DeepSeekOutputParser parser;
  std::vector<OutputPiece> pieces;
  parser.push("<think>abc", pieces);
  EXPECT_TRUE(parser.inReasoning());
  parser.push("</think>x", pieces);
  EXPECT_FALSE(parser.inReasoning());
}

TEST(OutputParser, TextThatOnlyLooksLikeThinkIsContent) {
  EXPECT_EQ(parse("<thinking> is a tag", {}), (Reply{"", "<thinking> is a tag", {}}));
  EXPECT_EQ(parse("<thi", {}), (Reply{"", "<thi", {}}));
  EXPECT_EQ(parse("Answer: <think>late</think>", {}), (Reply{"", "Answer: <think>late</think>", {}}));
  OutputParserOptions no_reasoning;
  no_reasoning.reasoning = false;
  EXPECT_EQ(parse("<think>x</think>y", no_reasoning), (Reply{"", "<think>x</think>y", {}}));
}

TEST(OutputParser, MalformedToolTextBecomesContent) {
  const OutputParserOptions o = withTools();
  // A section without a call.
  std::string text = "Sure." + kCallsBegin + "oops, no call here";
  expectSplitInvariant(text, o, Reply{"", text, {}});
  // A header that never reaches the separator.
  text = kCallsBegin + kCallBegin + "function get_weather {\"city\": 1}" + kCallEnd + kCallsEnd;
  EXPECT_EQ(parse(text, o), (Reply{"", text, {}}));
  // A name that is not one.
  text = kCallsBegin + kCallBegin + "function" + kSep + "two words\n```json\n{}\n```" + kCallEnd + kCallsEnd;
  EXPECT_EQ(parse(text, o).calls.size(), 1u) << "a space in a name is odd but harmless";
  text = kCallsBegin + kCallBegin + "function" + kSep + "\n```json\n{}\n```" + kCallEnd + kCallsEnd;
  EXPECT_EQ(parse(text, o), (Reply{"", text, {}})) << "an empty name";
  // An over-long header.
  text = kCallsBegin + kCallBegin + std::string(300, 'x') + kSep + "{}" + kCallEnd;
  EXPECT_EQ(parse(text, o), (Reply{"", text, {}}));
}

TEST(OutputParser, TextAfterAMalformedSectionIsStillParsed) {
  const std::string bad = kCallsBegin + "oops";
  const std::string text = bad + " then " + kCallsBegin + v3Call("f", "{}") + kCallsEnd;
  EXPECT_EQ(parse(text, withTools()), (Reply{"", bad + " then", {{"", "f", "{}", true}}}));
}

TEST(OutputParser, StreamEndingBeforeTheNameReturnsTheTextAsContent) {
  const std::string text = "Calling." + kCallsBegin + kCallBegin + "function" + kSep + "get_wea";
  expectSplitInvariant(text, withTools(), Reply{"", text, {}});
}

TEST(OutputParser, StreamEndingInTheArgumentsKeepsTheCall) {
  const std::string text = kCallsBegin + kCallBegin + "function" + kSep + "get_weather\n```json\n{\"city\": \"Pa";
  expectSplitInvariant(text, withTools(), Reply{"", "", {{"", "get_weather", "{\"city\": \"Pa", true, true}}});
}

// A model may spell an end marker with several ordinary tokens (a grammar
// matches the marker's bytes), so max_tokens can cut the stream inside it,
// even inside one of its UTF-8 characters: the arguments are what came
// before the marker and its fence, and the call says it was cut.
TEST(OutputParser, StreamEndingInsideTheEndMarkerLeavesItOutOfTheArguments) {
  const std::string head = kCallsBegin + kCallBegin + "function" + kSep + "clock\n```json\n{\"zone\": \"x\"}";
  for (const std::string& marker : {kCallEnd, kCallsEnd}) {
    for (size_t n = 1; n < marker.size(); ++n) {
      const std::string text = head + "\n```" + marker.substr(0, n);
      SCOPED_TRACE(n);
      expectSplitInvariant(text, withTools(), Reply{"", "", {{"", "clock", "{\"zone\": \"x\"}", true, true}}});
    }
  }
  // Whole, the marker ends the call, which is not cut.
  expectSplitInvariant(head + "\n```" + kCallEnd, withTools(), Reply{"", "", {{"", "clock", "{\"zone\": \"x\"}", true}}});
}

TEST(OutputParser, StreamEndingInTheFenceLineKeepsTheCallWithNoArguments) {
  // max_tokens cut the call at "```js": the fence is not its arguments.
  for (const std::string cut : {"`", "```", "```js"}) {
    const std::string text = kCallsBegin + kCallBegin + "function" + kSep + "get_weather\n" + cut;
    expectSplitInvariant(text, withTools(), Reply{"", "", {{"", "get_weather", "", true, true}}});
  }
}

TEST(OutputParser, CallWithoutFenceOrSectionMarker) {
  // Some replies skip the section marker or the fence: still calls.
  const std::string text = kCallBegin + "function" + kSep + "f\n{\"a\": 1}" + kCallEnd;
  expectSplitInvariant(text, withTools(), Reply{"", "", {{"", "f", "{\"a\": 1}", true}}});
}

TEST(OutputParser, CallWithoutArguments) {
  const std::string text = kCallsBegin + kCallBegin + "function" + kSep + "now" + kCallEnd + kCallsEnd;
  expectSplitInvariant(text, withTools(), Reply{"", "", {{"", "now", "", true}}});
}

TEST(OutputParser, EmptySectionAndTextAfterIt) {
  EXPECT_EQ(parse(kCallsBegin + kCallsEnd, withTools()), (Reply{"", "", {}}));
  const std::string text = kCallsBegin + v3Call("f", "{}") + kCallsEnd + "\n\nDone.";
  EXPECT_EQ(parse(text, withTools()), (Reply{"", "Done.", {{"", "f", "{}", true}}}));
}

TEST(OutputParser, ParallelToolCallsFalseKeepsTheFirstCall) {
  OutputParserOptions o = withTools();
  o.max_tool_calls = 1;
  const std::string text = kCallsBegin + v3Call("a", "{\"x\": 1}") + "\n" + v3Call("b", "{}") + kCallsEnd;
  expectSplitInvariant(text, o, Reply{"", "", {{"", "a", "{\"x\": 1}", true}}});
}

TEST(OutputParser, ContentAroundADroppedCallStaysTwoPiecesWithTheirOffsets) {
  // max_tool_calls 0: the call is parsed and dropped; the content on either
  // side is not one run of the text, so it is not merged into one piece.
  OutputParserOptions o = withTools();
  o.max_tool_calls = 0;
  const std::string before = "Before";
  const std::string call = kCallsBegin + v3Call("a", "{}") + kCallsEnd;
  DeepSeekOutputParser parser(o);
  std::vector<OutputPiece> pieces;
  parser.push(before + call + "After", pieces);
  parser.finish(pieces);
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0].text, "Before");
  EXPECT_EQ(pieces[0].source_offset, 0u);
  EXPECT_EQ(pieces[1].text, "After");
  EXPECT_EQ(pieces[1].source_offset, before.size() + call.size());
}

TEST(OutputParser, SplitsAtCharacterBoundariesMatchWhole) {
  // The scheduler never splits a UTF-8 character; every such split, over a
  // reply with reasoning, CJK content and a call whose arguments hold
  // non-ASCII text.
  const std::string text = "<think>想一想</think>好的，查询天气。" + kCallsBegin +
                           v3Call("get_weather", "{\"city\": \"東京\"}") + kCallsEnd;
  const Reply expected{"想一想", "好的，查询天气。", {{"", "get_weather", "{\"city\": \"東京\"}", true}}};
  expectSplitInvariant(text, withTools(), expected);
  for (size_t a = 0; a <= text.size(); ++a) {
    if (a < text.size() && (static_cast<uint8_t>(text[a]) & 0xc0) == 0x80) continue;
    for (size_t b = a; b <= text.size(); b += 7) {
      if (b < text.size() && (static_cast<uint8_t>(text[b]) & 0xc0) == 0x80) continue;
      ASSERT_EQ(parseChunks({text.substr(0, a), text.substr(a, b - a), text.substr(b)}, withTools()), expected)
          << a << " " << b;
    }
  }
}

TEST(OutputParser, RandomFragmentsNeverBreakTheInvariants) {
  // Random concatenations of markers and text, split at random points: the
  // split parse equals the whole parse, and the pieces stay well-formed.
  const std::vector<std::string> fragments = {kCallsBegin, kCallsEnd, kCallBegin, kCallEnd, kSep, "function",
                                              "\n", "```json\n", "```", "{\"a\": 1}", "name", " ", "<think>",
                                              "</think>", "text", "<", "｜", "好"};
  std::mt19937 rng(1234);
  for (int iteration = 0; iteration < 3000; ++iteration) {
    std::string text;
    const int n = 1 + static_cast<int>(rng() % 12);
    for (int i = 0; i < n; ++i) text += fragments[rng() % fragments.size()];
    OutputParserOptions o = withTools();
    o.starts_in_reasoning = rng() % 4 == 0;
    o.max_tool_calls = rng() % 3 == 0 ? 1 : -1;
    const Reply whole = parse(text, o);
    std::vector<std::string> chunks;
    size_t pos = 0;
    while (pos < text.size()) {
      const size_t len = 1 + rng() % 9;
      chunks.push_back(text.substr(pos, len));
      pos += len;
    }
    ASSERT_EQ(parseChunks(chunks, o), whole) << text;
  }
}

}  // namespace
}  // namespace lg::proxy::openai
