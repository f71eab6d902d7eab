// TextStream: turns one request's generated tokens into the text a client may
// see so far. It never splits a UTF-8 character across events (the
// tokenizer's StreamDecoder holds partial characters back) and holds back
// any tail that could still become one of the request's stop strings; when a
// stop string completes, the visible text ends right before it.
//
// Invariant: released text never contains the start of a possible match, so
// every match begins inside the held-back text.
//
// Thread-safety: one per request, used by the engine thread only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "text/tokenizer/tokenizer.h"

namespace lg::serving {

class TextStream {
 public:
  TextStream(const text::Tokenizer& tokenizer, std::vector<std::string> stop_strings);

  struct Piece {
    std::string text;      // released now
    bool stopped = false;  // a stop string matched: nothing more will be released
  };
  Piece push(int32_t token);
  // End of generation: releases what was held back (a partial UTF-8
  // character becomes U+FFFD, as in the tokenizer's decode).
  std::string finish();

 private:
  text::StreamDecoder decoder_;
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace lg::serving
