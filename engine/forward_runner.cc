#include "engine/forward_runner.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <string>

#include "engine/sequence_blocks.h"

namespace lg::engine {

Result<std::vector<float>> runForward(Backend& backend, std::span<const int32_t> ids, const ForwardRunOptions& options,
                                      ForwardRunStats* stats) {
  SequenceBlocks seq(backend);
  return runForwardFrom(backend, seq, ids, options, stats);
}

Result<std::vector<float>> runForwardFrom(Backend& backend, SequenceBlocks& seq, std::span<const int32_t> ids,
                                          const ForwardRunOptions& options, ForwardRunStats* stats) {
  if (ids.empty()) return invalidArgument("forward: empty input (no token ids)");
  if (options.chunk < 0) return invalidArgument("forward: chunk must be positive");
  const int64_t n = static_cast<int64_t>(ids.size());
  const int64_t cached = seq.length();
  if (cached >= n) {
    return invalidArgument("forward: the sequence already holds " + std::to_string(cached) + " of the " +
                           std::to_string(n) + " positions; at least one must be computed");
  }
  if (options.decode_from > n) {
    return invalidArgument("forward: decode_from " + std::to_string(options.decode_from) + " exceeds the " +
                           std::to_string(n) + " input tokens");
  }
  if (n > backend.maxContext()) {
    return outOfRange("forward: " + std::to_string(n) + " tokens exceed the maximum context of " +
                      std::to_string(backend.maxContext()));
  }
  const int64_t vocab = backend.config().vocab_size;
  const bool one_call = cached == 0 && options.decode_from < 0 && (options.chunk == 0 || options.chunk >= n) &&
                        n <= backend.maxBatchTokens();
  std::vector<float> logits;
  if (!one_call) {
    logits.resize(static_cast<size_t>(n * vocab));
    // Rows of positions that were never computed are NaN, never zeros that
    // could pass for logits.
    std::fill(logits.begin(), logits.begin() + cached * vocab, std::numeric_limits<float>::quiet_NaN());
  }
  ForwardRunStats local;
  ForwardRunStats& st = stats ? *stats : local;
  st = ForwardRunStats{};
  st.tokens = n;
  st.cached_tokens = cached;
  const int64_t prefill_end = std::max(cached, options.decode_from >= 0 ? int64_t{options.decode_from} : n);
  int64_t chunk = options.chunk > 0 ? options.chunk : n;
  chunk = std::min<int64_t>(chunk, backend.maxBatchTokens());
  using Clock = std::chrono::steady_clock;
  double attention_seconds = 0;
  auto step = [&](int64_t begin, int64_t end) -> Status {
    LG_ASSIGN_OR_RETURN(SequenceStep s, seq.step(ids.subspan(static_cast<size_t>(begin), static_cast<size_t>(end - begin)),
                                                 LogitsWanted::kAll));
    ForwardBatch batch;
    batch.sequences.push_back(s);
    LG_ASSIGN_OR_RETURN(ForwardOutput out, backend.forward(batch));
    if (begin == 0 && end == n) {
      logits = std::move(out.logits);  // one call: no second [n, vocab] copy
    } else {
      std::memcpy(logits.data() + begin * vocab, out.logits.data(),
                  static_cast<size_t>((end - begin) * vocab) * sizeof(float));
    }
    seq.commit(static_cast<int32_t>(end - begin));
    st.computed_tokens += end - begin;
    attention_seconds += out.timing.attention_seconds;
    return Status::ok();
  };
  auto t0 = Clock::now();
  for (int64_t begin = cached; begin < prefill_end; begin += chunk) {
    LG_RETURN_IF_ERROR(step(begin, std::min(prefill_end, begin + chunk)));
    ++st.prefill_calls;
  }
  st.prefill_attention_seconds = attention_seconds;
  auto t1 = Clock::now();
  for (int64_t pos = prefill_end; pos < n; ++pos) {
    LG_RETURN_IF_ERROR(step(pos, pos + 1));
    ++st.decode_steps;
  }
  auto t2 = Clock::now();
  st.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
  st.decode_seconds = std::chrono::duration<double>(t2 - t1).count();
  return logits;
}

}  // namespace lg::engine
