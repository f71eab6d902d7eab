#include "engine/forward_runner.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "engine/sequence_blocks.h"

namespace lg::engine {

Result<std::vector<float>> runForward(Backend& backend, std::span<const int32_t> ids, const ForwardRunOptions& options,
                                      ForwardRunStats* stats) {
  if (ids.empty()) return invalidArgument("forward: empty input (no token ids)");
  if (options.chunk < 0) return invalidArgument("forward: chunk must be positive");
  const int64_t n = static_cast<int64_t>(ids.size());
  if (options.decode_from > n) {
    return invalidArgument("forward: decode_from " + std::to_string(options.decode_from) + " exceeds the " +
                           std::to_string(n) + " input tokens");
  }
  if (n > backend.maxContext()) {
    return outOfRange("forward: " + std::to_string(n) + " tokens exceed the maximum context of " +
                      std::to_string(backend.maxContext()));
  }
  const int64_t vocab = backend.config().vocab_size;
  const bool one_call = options.decode_from < 0 && (options.chunk == 0 || options.chunk >= n) && n <= backend.maxBatchTokens();
  std::vector<float> logits;
  if (!one_call) logits.resize(static_cast<size_t>(n * vocab));
  ForwardRunStats local;
  ForwardRunStats& st = stats ? *stats : local;
  st = ForwardRunStats{};
  st.tokens = n;
  SequenceBlocks seq(backend);
  const int64_t prefill_end = options.decode_from >= 0 ? options.decode_from : n;
  int64_t chunk = options.chunk > 0 ? options.chunk : n;
  chunk = std::min<int64_t>(chunk, backend.maxBatchTokens());
  using Clock = std::chrono::steady_clock;
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
    return Status::ok();
  };
  auto t0 = Clock::now();
  for (int64_t begin = 0; begin < prefill_end; begin += chunk) {
    LG_RETURN_IF_ERROR(step(begin, std::min(prefill_end, begin + chunk)));
    ++st.prefill_calls;
  }
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
