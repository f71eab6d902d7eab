#include "serving/text_stream.h"

#include <algorithm>

namespace lg::serving {

TextStream::TextStream(const text::Tokenizer& tokenizer, std::vector<std::string> stop_strings)
    : decoder_(tokenizer, /*skip_special=*/false), stops_(std::move(stop_strings)) {}

TextStream::Piece TextStream::push(int32_t token) {
  Piece piece;
  if (stopped_) {
    piece.stopped = true;
    return piece;
  }
  held_ += decoder_.push(token);
  // The earliest complete match ends the text.
  size_t first = std::string::npos;
  for (const std::string& stop : stops_) first = std::min(first, held_.find(stop));
  if (first != std::string::npos) {
    piece.text = held_.substr(0, first);
    piece.stopped = stopped_ = true;
    held_.clear();
    return piece;
  }
  // Hold back the longest tail that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const std::string& stop : stops_) {
    for (size_t n = std::min(stop.size() - 1, held_.size()); n > keep; --n) {
      if (held_.compare(held_.size() - n, n, stop, 0, n) == 0) {
        keep = n;
        break;
      }
    }
  }
  piece.text = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return piece;
}

std::string TextStream::finish() {
  if (stopped_) return {};
  std::string rest = std::move(held_) + decoder_.flush();
  held_.clear();
  // A stop string can only complete with the flushed bytes if they are
  // U+FFFD replacements; check anyway so the contract holds.
  size_t first = std::string::npos;
  for (const std::string& stop : stops_) first = std::min(first, rest.find(stop));
  if (first != std::string::npos) rest.resize(first);
  stopped_ = true;
  return rest;
}

}  // namespace lg::serving
