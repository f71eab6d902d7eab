#include "text/tokenizer/bpe_tokenizer.h"

#include <exception>

#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "text/tokenizer/deepseek_v3_fast.h"
#include "common/utf8.h"

namespace lg::text {
namespace {

// tokenizer.json files are tens of megabytes at most.
constexpr size_t kMaxTokenizerJsonBytes = size_t{1} << 30;

Status checkUtf8(std::string_view text, std::string_view what) {
  if (auto bad = utf8::firstInvalid(text)) {
    return invalidArgument(std::string(what) + " is not valid UTF-8 at byte offset " + std::to_string(*bad));
  }
  return Status::ok();
}

bool isCharBoundary(std::string_view text, size_t offset) {
  return offset == 0 || offset == text.size() || (static_cast<uint8_t>(text[offset]) & 0xc0) != 0x80;
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::loadFromDir(const std::string& dir) {
  const std::string path = dir + "/tokenizer.json";
  auto content = readFile(path, kMaxTokenizerJsonBytes);
  if (!content.isOk()) return content.status();
  auto tokenizer = loadFromJson(*content);
  if (!tokenizer.isOk()) return tokenizer.status().withContext("loading " + path);
  return tokenizer;
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::loadFromJson(std::string_view tokenizer_json) {
  const nlohmann::json root = nlohmann::json::parse(tokenizer_json, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return invalidArgument("tokenizer.json is not valid JSON (truncated or corrupt)");
  LG_ASSIGN_OR_RETURN(std::unique_ptr<BpeTokenizer> tokenizer, BpeTokenizer::fromJson(root));
  return std::unique_ptr<Tokenizer>(std::move(tokenizer));
}

Result<std::unique_ptr<BpeTokenizer>> BpeTokenizer::fromJson(const nlohmann::json& root,
                                                             const TokenizerOptions& options) {
  try {
    LG_ASSIGN_OR_RETURN(Parts parts, parseTokenizerJson(root));
    return std::unique_ptr<BpeTokenizer>(new BpeTokenizer(std::move(parts), options));
  } catch (const std::exception& e) {
    // The parser checks types before reading; this is the edge for anything
    // nlohmann or the allocator still throws.
    return invalidArgument(std::string("tokenizer.json: ") + e.what());
  }
}

BpeTokenizer::BpeTokenizer(Parts parts, const TokenizerOptions& options)
    : model_(std::move(parts.model)),
      pipeline_(std::move(parts.steps)),
      fast_path_(parts.deepseek_v3 && options.allow_fast_path),
      regex_units_base_(options.regex_units_base),
      regex_units_per_byte_(options.regex_units_per_byte),
      cpu_ms_base_(options.general_path_cpu_ms_base),
      cpu_ms_per_mb_(options.general_path_cpu_ms_per_mb),
      added_(std::move(parts.added)),
      decoded_(std::move(parts.decoded)),
      decoded_start_(std::move(parts.decoded_start)),
      kind_(std::move(parts.kind)),
      vocab_size_(static_cast<int32_t>(kind_.size())) {}

std::unique_ptr<PreTokenizeScratch> BpeTokenizer::acquireScratch() const {
  {
    std::lock_guard<std::mutex> lock(scratch_mutex_);
    if (!scratch_pool_.empty()) {
      auto scratch = std::move(scratch_pool_.back());
      scratch_pool_.pop_back();
      return scratch;
    }
  }
  return std::make_unique<PreTokenizeScratch>();
}

void BpeTokenizer::releaseScratch(std::unique_ptr<PreTokenizeScratch> scratch) const {
  constexpr size_t kMaxPooled = 64;
  scratch->owned.clear();
  std::lock_guard<std::mutex> lock(scratch_mutex_);
  if (scratch_pool_.size() < kMaxPooled) scratch_pool_.push_back(std::move(scratch));
}

RegexBudget BpeTokenizer::requestBudget(size_t bytes) const {
  // Saturating: absurd options must not wrap around to a small budget.
  const uint64_t per_byte =
      regex_units_per_byte_ != 0 && bytes > UINT64_MAX / regex_units_per_byte_ ? UINT64_MAX : bytes * regex_units_per_byte_;
  const uint64_t units = per_byte > UINT64_MAX - regex_units_base_ ? UINT64_MAX : per_byte + regex_units_base_;
  const long double ms = static_cast<long double>(cpu_ms_base_) +
                         static_cast<long double>(cpu_ms_per_mb_) * static_cast<long double>(bytes) / 1e6L;
  const int64_t cpu_ns = ms <= 0 ? 0 : (ms >= 9e12L ? INT64_MAX : static_cast<int64_t>(ms * 1e6L));
  // Only the general path calls a regex: skip reading the CPU clock otherwise.
  return RegexBudget(units, fast_path_ ? 0 : cpu_ns);
}

template <typename Sink>
Status BpeTokenizer::forEachPiece(std::string_view text, Sink& sink, RegexBudget& budget) const {
  if (text.empty()) return Status::ok();
  if (fast_path_) return deepSeekV3PreTokenize(text, PieceCallback(sink));
  std::unique_ptr<PreTokenizeScratch> scratch = acquireScratch();
  scratch->match.setBudget(&budget);
  const Status status = pipeline_.run(text, *scratch, PieceCallback(sink));
  scratch->match.setBudget(nullptr);
  releaseScratch(std::move(scratch));
  return status;
}

Status BpeTokenizer::encodeText(std::string_view text, std::vector<int32_t>& out, RegexBudget& budget) const {
  std::vector<int32_t> symbols;
  auto sink = [&](std::string_view piece) {
    model_->encodeWord(piece, out, symbols);
    return Status::ok();
  };
  return forEachPiece(text, sink, budget);
}

Result<std::vector<int32_t>> BpeTokenizer::encode(std::string_view text) const { return encode(text, nullptr); }

Result<std::vector<int32_t>> BpeTokenizer::encode(std::string_view text, RegexStats* stats) const {
  LG_RETURN_IF_ERROR(checkUtf8(text, "text"));
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  RegexBudget budget = requestBudget(text.size());
  const Status status = encodeText(text, ids, budget);
  if (stats != nullptr) *stats = {budget.unitsUsed(), budget.calls()};
  LG_RETURN_IF_ERROR(status);
  return ids;
}

Result<std::vector<int32_t>> BpeTokenizer::encodePrompt(const PromptText& prompt) const {
  const std::string& text = prompt.text;
  LG_RETURN_IF_ERROR(checkUtf8(text, "prompt text"));
  size_t previous_end = 0;
  for (size_t k = 0; k < prompt.trusted.size(); ++k) {
    const ByteRange& r = prompt.trusted[k];
    if (r.begin >= r.end || r.end > text.size() || (k > 0 && r.begin < previous_end)) {
      return invalidArgument("trusted range " + std::to_string(k) + " [" + std::to_string(r.begin) + ", " +
                             std::to_string(r.end) + ") is empty, unsorted, overlapping or outside the text");
    }
    if (!isCharBoundary(text, r.begin) || !isCharBoundary(text, r.end)) {
      return invalidArgument("trusted range " + std::to_string(k) + " splits a UTF-8 character");
    }
    previous_end = r.end;
  }
  std::vector<AddedTokenMatch> matches;
  added_.find(text, prompt.trusted, matches);
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  // One budget for the whole prompt, however many stretches it is cut into.
  RegexBudget budget = requestBudget(text.size());
  // Text between added tokens is one piece for pre-tokenization, whatever mix
  // of trusted and client bytes it holds, as the library treats the string.
  // The cursor follows the library's start_offset, which can move back when a
  // token's rstrip overlapped the next one.
  size_t cursor = 0;
  for (const AddedTokenMatch& m : matches) {
    if (cursor < m.start) {
      LG_RETURN_IF_ERROR(encodeText(std::string_view(text).substr(cursor, m.start - cursor), ids, budget));
    }
    ids.push_back(m.id);
    cursor = m.stop;
  }
  if (cursor < text.size()) LG_RETURN_IF_ERROR(encodeText(std::string_view(text).substr(cursor), ids, budget));
  return ids;
}

Result<std::string> BpeTokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (size_t k = 0; k < ids.size(); ++k) {
    const int32_t id = ids[k];
    if (!valid(id)) {
      return invalidArgument("token id " + std::to_string(id) + " at position " + std::to_string(k) +
                             " is not in the vocabulary");
    }
    if (skip_special && (kind_[static_cast<size_t>(id)] & kSpecial)) continue;
    bytes.append(decodedBytes(id));
  }
  std::string text;
  text.reserve(bytes.size());
  utf8::appendLossy(text, bytes);
  return text;
}

std::string BpeTokenizer::tokenBytes(int32_t id) const {
  if (!valid(id)) return {};
  return std::string(decodedBytes(id));
}

std::optional<int32_t> BpeTokenizer::addedTokenId(std::string_view content) const {
  const AddedToken* token = added_.byContent(content);
  if (!token) return std::nullopt;
  return token->id;
}

bool BpeTokenizer::isSpecial(int32_t id) const { return valid(id) && (kind_[static_cast<size_t>(id)] & kSpecial); }

Result<std::vector<std::string>> BpeTokenizer::preTokenize(std::string_view text) const {
  LG_RETURN_IF_ERROR(checkUtf8(text, "text"));
  std::vector<std::string> pieces;
  auto sink = [&](std::string_view piece) {
    pieces.emplace_back(piece);
    return Status::ok();
  };
  RegexBudget budget = requestBudget(text.size());
  LG_RETURN_IF_ERROR(forEachPiece(text, sink, budget));
  return pieces;
}

std::string StreamDecoder::push(int32_t id) {
  if (skip_special_ && tokenizer_.isSpecial(id)) return {};
  pending_ += tokenizer_.tokenBytes(id);  // empty for an unknown id
  const size_t complete = utf8::completePrefix(pending_);
  std::string out;
  utf8::appendLossy(out, std::string_view(pending_).substr(0, complete));
  pending_.erase(0, complete);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  utf8::appendLossy(out, pending_);
  pending_.clear();
  return out;
}

}  // namespace lg::text
