// grammar_masks: our allowed-token masks for one JSON Schema over a tokenizer's
// vocabulary, as JSON lines, for the side-by-side comparison with xgrammar
// (bench/grammar/xgrammar_compare.mjs, bench/grammar/compare-xgrammar.sh).
//
// Usage:
//   grammar_masks --tokenizer DIR --schema FILE [--name NAME]
//                 (--prefixes FILE | --walk SEEDS [--steps N])
//                 [--dump-vocab FILE]
//
//   --prefixes FILE  one JSON array of token ids per line: the mask after
//                    feeding that prefix (a fresh matcher per prefix); a line
//                    may instead be a JSON string: text, tokenized with the
//                    tokenizer (the emitted prefix is its ids).
//   --walk SEEDS     random walks, seeds 1..SEEDS (or from --first-seed): at each step the mask, then
//                    a token drawn uniformly from it (after 24 steps, from the
//                    tokens holding one of "]} when there are some, so that
//                    walks close; a walk that may end stops with chance 1/4);
//                    at most --steps (default 120) masks per walk.
//   --prefer BYTES   after 24 steps, walks draw a token holding one of BYTES
//                    first when there is one (before the closing "]} ones).
//   --avoid BYTES    walks draw a token holding one of BYTES only when the mask
//                    has nothing else (to steer past a known difference, e.g.
//                    escapes in formats; the masks themselves are unchanged).
//   --dump-vocab F   writes {"size","eos","special":[ids],"tokens":[hex of
//                    each id's bytes, "" if not matchable]} (what the
//                    comparison builds xgrammar's TokenizerInfo from).
//
// Output, one line per mask: {"schema","seed","step","prefix":[ids],
// "can_end","count","us","mask"}: mask is base64 of the little-endian 32-bit
// words (bit i of word i/32: token i allowed), us the fillNextTokenMask time
// (after Grammar::prepare; walks reuse one matcher, as a decode does).
// The first line is {"schema","compile_ms","prepare_ms","nodes"}.
// Properties keep the schema's order (nlohmann::ordered_json), as xgrammar's.
#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "text/grammar/grammar.h"
#include "text/grammar/matcher.h"
#include "text/grammar/vocabulary.h"
#include "text/tokenizer/tokenizer.h"

using namespace lg::text;
using namespace lg::text::grammar;
using Clock = std::chrono::steady_clock;

namespace {

std::string base64(const std::vector<uint32_t>& words) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes;
  bytes.reserve(words.size() * 4);
  for (uint32_t w : words) {
    for (int k = 0; k < 4; ++k) bytes.push_back(static_cast<char>((w >> (8 * k)) & 0xff));
  }
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t v = static_cast<uint8_t>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) v |= static_cast<uint8_t>(bytes[i + 2]);
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(i + 1 < bytes.size() ? kAlphabet[(v >> 6) & 63] : '=');
    out.push_back(i + 2 < bytes.size() ? kAlphabet[v & 63] : '=');
  }
  return out;
}

std::string hex(std::string_view s) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (char c : s) {
    out.push_back(kDigits[static_cast<uint8_t>(c) >> 4]);
    out.push_back(kDigits[static_cast<uint8_t>(c) & 15]);
  }
  return out;
}

double usSince(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }

int usage() {
  std::fprintf(stderr,
               "usage: grammar_masks --tokenizer DIR --schema FILE [--name NAME] (--prefixes FILE | --walk SEEDS "
               "[--steps N]) [--dump-vocab FILE]\n");
  return 64;
}

}  // namespace

int main(int argc, char** argv) {
  std::string tokenizer_dir, schema_path, name, prefixes_path, dump_path, avoid, prefer;
  int first_seed = 1;
  int seeds = 0, max_steps = 120;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage();
    const std::string v = argv[++i];
    if (a == "--tokenizer") tokenizer_dir = v;
    else if (a == "--schema") schema_path = v;
    else if (a == "--name") name = v;
    else if (a == "--prefixes") prefixes_path = v;
    else if (a == "--walk") seeds = std::stoi(v);
    else if (a == "--steps") max_steps = std::stoi(v);
    else if (a == "--first-seed") first_seed = std::stoi(v);
    else if (a == "--dump-vocab") dump_path = v;
    else if (a == "--avoid") avoid = v;
    else if (a == "--prefer") prefer = v;
    else return usage();
  }
  if (tokenizer_dir.empty() || schema_path.empty() || (prefixes_path.empty() && seeds <= 0)) return usage();
  if (name.empty()) name = schema_path;

  auto tok = Tokenizer::loadFromDir(tokenizer_dir);
  if (!tok.isOk()) {
    std::fprintf(stderr, "tokenizer: %s\n", tok.status().toString().c_str());
    return 1;
  }
  const Tokenizer& tokenizer = *tok.value();
  auto vocab = Vocabulary::fromTokenizer(tokenizer);

  if (!dump_path.empty()) {
    nlohmann::json d;
    d["size"] = vocab->size();
    d["eos"] = tokenizer.addedTokenId("<｜end▁of▁sentence｜>").value_or(-1);
    nlohmann::json special = nlohmann::json::array(), tokens = nlohmann::json::array();
    for (int32_t id = 0; id < vocab->size(); ++id) {
      if (tokenizer.isSpecial(id)) special.push_back(id);
      tokens.push_back(hex(vocab->bytes(id)));
    }
    d["special"] = std::move(special);
    d["tokens"] = std::move(tokens);
    std::ofstream(dump_path) << d.dump() << "\n";
  }

  auto schema_text = lg::readFile(schema_path);
  if (!schema_text.isOk()) {
    std::fprintf(stderr, "schema: %s\n", schema_text.status().toString().c_str());
    return 1;
  }
  const auto schema = nlohmann::ordered_json::parse(*schema_text);
  auto t0 = Clock::now();
  auto compiled = Grammar::fromJsonSchema(schema);
  const double compile_ms = usSince(t0) / 1000;
  if (auto* e = std::get_if<GrammarError>(&compiled)) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), e->toString().c_str());
    return 1;
  }
  auto grammar = std::get<std::shared_ptr<const Grammar>>(compiled);
  t0 = Clock::now();
  grammar->prepare(vocab);
  const double prepare_ms = usSince(t0) / 1000;
  std::cout << nlohmann::json{{"schema", name},
                              {"compile_ms", compile_ms},
                              {"prepare_ms", prepare_ms},
                              {"nodes", grammar->automaton().nodes.size()}}
                   .dump()
            << "\n";

  std::vector<uint32_t> mask(vocab->maskWords());
  auto emit = [&](int seed, int step, const std::vector<int32_t>& prefix, const Matcher& m, double us) {
    size_t count = 0;
    for (uint32_t w : mask) count += static_cast<size_t>(std::popcount(w));
    std::cout << nlohmann::json{{"schema", name}, {"seed", seed},   {"step", step},         {"prefix", prefix},
                                {"can_end", m.canEnd()}, {"count", count}, {"us", us}, {"mask", base64(mask)}}
                     .dump()
              << "\n";
  };

  if (!prefixes_path.empty()) {
    std::ifstream in(prefixes_path);
    std::string line;
    int n = 0;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      const auto parsed = nlohmann::json::parse(line);
      std::vector<int32_t> prefix;
      if (parsed.is_string()) {
        auto ids = tokenizer.encode(parsed.get<std::string>());
        if (!ids.isOk()) {
          std::fprintf(stderr, "prefix %d: %s\n", n, ids.status().toString().c_str());
          return 1;
        }
        prefix = *ids;
      } else {
        prefix = parsed.get<std::vector<int32_t>>();
      }
      Matcher m(grammar, vocab);
      for (int32_t id : prefix) {
        if (!m.accept(id)) {
          std::fprintf(stderr, "prefix %d: token %d not allowed\n", n, id);
          return 2;
        }
      }
      t0 = Clock::now();
      m.fillNextTokenMask(mask);
      emit(0, n++, prefix, m, usSince(t0));
    }
    return 0;
  }

  std::vector<int32_t> ids, closing;
  for (int seed = first_seed; seed < first_seed + seeds; ++seed) {
    std::mt19937 rng(static_cast<uint32_t>(seed));
    Matcher m(grammar, vocab);
    std::vector<int32_t> prefix;
    for (int step = 0; step < max_steps && !m.mustEnd(); ++step) {
      t0 = Clock::now();
      m.fillNextTokenMask(mask);
      const double us = usSince(t0);
      emit(seed, step, prefix, m, us);
      ids.clear();
      for (size_t w = 0; w < mask.size(); ++w) {
        for (uint32_t bits = mask[w]; bits != 0; bits &= bits - 1) {
          ids.push_back(static_cast<int32_t>(w * 32 + static_cast<size_t>(std::countr_zero(bits))));
        }
      }
      if (ids.empty() || (m.canEnd() && rng() % 4 == 0)) break;
      if (!avoid.empty()) {
        closing.clear();
        for (int32_t id : ids) {
          if (vocab->bytes(id).find_first_of(avoid) == std::string_view::npos) closing.push_back(id);
        }
        if (!closing.empty()) ids.swap(closing);
      }
      if (step > 24 && !prefer.empty()) {
        closing.clear();
        for (int32_t id : ids) {
          if (vocab->bytes(id).find_first_of(prefer) != std::string_view::npos) closing.push_back(id);
        }
        if (!closing.empty()) ids.swap(closing);
      }
      if (step > 24) {
        closing.clear();
        for (int32_t id : ids) {
          if (vocab->bytes(id).find_first_of("\"]}") != std::string_view::npos) closing.push_back(id);
        }
        if (!closing.empty()) ids.swap(closing);
      }
      const int32_t next = ids[rng() % ids.size()];
      if (!m.accept(next)) {
        std::fprintf(stderr, "%s seed %d: token %d in the mask but not accepted\n", name.c_str(), seed, next);
        return 2;
      }
      prefix.push_back(next);
    }
  }
  return 0;
}
