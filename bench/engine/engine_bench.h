// engine_bench's modes and their arguments (docs/benchmarks.md, "Engine"):
//  - default: decode at batch 1 vs the memory-bandwidth bound, prefill vs the
//    best sgemm, resident memory vs the checkpoint (engine_bench.cc);
//  - --attention-forms: prefill in the auto-chosen attention form against the
//    other form forced, fresh and as a short suffix over a cached prefix
//    (attention_forms_bench.cc);
//  - --decode-batches: decode throughput by batch size vs the bandwidth bound
//    of the bytes each step reads (decode_batches_bench.cc).
#pragma once

#include <string>
#include <vector>

#include "engine/backend.h"

namespace lg::engine::bench {

enum class Mode { kDefault, kAttentionForms, kDecodeBatches };

struct Args {
  Mode mode = Mode::kDefault;
  std::string model_dir;
  int threads = 0;
  int prefill_tokens = 8000;
  int decode_steps = 6;  // per round; 5 rounds per context
  int short_context = 256;
  AttentionForm attention_form = AttentionForm::kAuto;  // default mode only
  int suffix_tokens = 128;  // attention forms: the suffix over a cached prefix of prefill_tokens - suffix_tokens
  int repeats = 3;          // attention forms: runs of each case (the median is reported)
  std::vector<int> decode_batches = {1, 4, 16, 64};
  int decode_context = 512;  // decode batches: cached positions of each sequence
};

inline constexpr const char* kUsage =
    "usage: engine_bench --model DIR [--threads N] [--prefill-tokens N] [--decode-steps N] [--short-context N]\n"
    "                    [--attention-form auto|absorbed|standard]\n"
    "       engine_bench --model DIR --attention-forms [--prefill-tokens 8000] [--suffix-tokens 128] [--repeats 3]\n"
    "       engine_bench --model DIR --decode-batches 1,4,16,64 [--decode-context 512] [--decode-steps 6]";

int runDefault(const Args& args);
int runAttentionForms(const Args& args);
int runDecodeBatches(const Args& args);

}  // namespace lg::engine::bench
