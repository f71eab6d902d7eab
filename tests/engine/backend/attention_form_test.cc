// The two attention forms against each other in the backend: a chunked
// prefill over a cached prefix, the same latents read by a backend forced to
// each form, and the auto choice inside one mixed batch.
#include <gtest/gtest.h>

#include "engine/forward_runner.h"
#include "engine/sequence_blocks.h"
#include "tests/engine/golden/golden_util.h"

namespace lg::engine::testing {
namespace {

constexpr int kBlock = 16;

std::unique_ptr<Backend> backendWith(AttentionForm form) {
  BackendOptions options;
  options.threads = 2;
  options.block_tokens = kBlock;
  options.attention_form = form;
  return makeBackend("tiny-v3", options);
}

// Logits of every new position and the number of standard-form sequence
// chunks, for `ids[prefix, end)` prefilled in chunks of `chunk` over `seq`.
struct Chunked {
  std::vector<float> logits;
  int32_t standard_chunks = 0;
};

Chunked prefillInChunks(Backend& backend, SequenceBlocks& seq, std::span<const int32_t> ids, int32_t chunk) {
  Chunked out;
  for (size_t at = static_cast<size_t>(seq.length()); at < ids.size(); at += static_cast<size_t>(chunk)) {
    const auto tokens = ids.subspan(at, std::min(ids.size() - at, static_cast<size_t>(chunk)));
    auto step = seq.step(tokens, LogitsWanted::kAll);
    EXPECT_TRUE(step.isOk()) << step.status().toString();
    ForwardBatch batch;
    batch.sequences.push_back(*step);
    auto result = backend.forward(batch);
    EXPECT_TRUE(result.isOk()) << result.status().toString();
    if (!result.isOk()) return out;
    seq.commit(static_cast<int32_t>(tokens.size()));
    out.logits.insert(out.logits.end(), result->logits.begin(), result->logits.end());
    out.standard_chunks += result->timing.standard_form_sequences;
  }
  return out;
}

TEST(AttentionFormTest, FormsAgreeOnAChunkedPrefillOverACachedPrefix) {
  const Golden g = loadGolden("tiny-v3");
  const int32_t prefix = 3 * kBlock + 5;  // ends inside a block
  const int64_t vocab = g.vocab;
  const int64_t n = static_cast<int64_t>(g.ids.size());
  ASSERT_GT(n, prefix + 60);
  // The cached prefix: computed once, exported, imported into each backend,
  // so both forms read bit-identical latents.
  auto source = backendWith(AttentionForm::kAuto);
  ASSERT_NE(source, nullptr);
  SequenceBlocks cached(*source);
  prefillInChunks(*source, cached, std::span<const int32_t>(g.ids).first(prefix), prefix);
  std::vector<uint8_t> bytes(source->latentLayout().blockBytes() * cached.blocks().size());
  ASSERT_TRUE(source->latentPool().exportBlocks(cached.blocks(), bytes).isOk());

  std::vector<Chunked> runs;
  for (const AttentionForm form : {AttentionForm::kAbsorbed, AttentionForm::kStandard}) {
    auto backend = backendWith(form);
    ASSERT_NE(backend, nullptr);
    std::vector<BlockId> blocks;
    ASSERT_TRUE(backend->blocks().allocate(static_cast<int32_t>(cached.blocks().size()), blocks).isOk());
    ASSERT_TRUE(backend->latentPool().importBlocks(blocks, bytes).isOk());
    SequenceBlocks seq(*backend);
    seq.adopt(blocks, prefix);
    // Chunks of 23: they cross block edges and start inside blocks.
    runs.push_back(prefillInChunks(*backend, seq, g.ids, 23));
  }
  const int64_t rows = n - prefix;
  ASSERT_EQ(runs[0].logits.size(), static_cast<size_t>(rows * vocab));
  ASSERT_EQ(runs[1].logits.size(), static_cast<size_t>(rows * vocab));
  const int32_t chunks = static_cast<int32_t>((rows + 22) / 23);
  EXPECT_EQ(runs[0].standard_chunks, 0);
  EXPECT_EQ(runs[1].standard_chunks, chunks);
  EXPECT_LE(maxAbsDiff(runs[0].logits, runs[1].logits, vocab, 0, rows), 1e-4);
  const std::vector<float> golden_rows(g.logits.begin() + prefix * vocab, g.logits.end());
  for (const Chunked& run : runs) EXPECT_LE(maxAbsDiff(run.logits, golden_rows, vocab, 0, rows), 1e-3);
}

TEST(AttentionFormTest, AutoMixesFormsInOneBatch) {
  const Golden g = loadGolden("tiny-v3");
  const std::span<const int32_t> ids(g.ids);
  auto backend = backendWith(AttentionForm::kAuto);
  auto reference = backendWith(AttentionForm::kAbsorbed);
  ASSERT_NE(backend, nullptr);
  ASSERT_NE(reference, nullptr);
  // A decodes one token over 70 cached positions (absorbed); B prefills 80
  // fresh tokens (standard: on tiny-v3 a fresh chunk always is).
  SequenceBlocks a(*backend), b(*backend);
  prefillInChunks(*backend, a, ids.first(70), 70);
  auto sa = a.step(ids.subspan(70, 1), LogitsWanted::kLast);
  auto sb = b.step(ids.subspan(20, 80), LogitsWanted::kAll);
  ASSERT_TRUE(sa.isOk() && sb.isOk());
  ForwardBatch batch;
  batch.sequences = {*sa, *sb};
  auto out = backend->forward(batch);
  ASSERT_TRUE(out.isOk()) << out.status().toString();
  EXPECT_EQ(out->timing.standard_form_sequences, 1);
  EXPECT_GT(out->timing.attention_flops, 0);
  // Against the absorbed form alone, sequence by sequence.
  auto ra = runForward(*reference, ids.first(71), {});
  auto rb = runForward(*reference, ids.subspan(20, 80), {});
  ASSERT_TRUE(ra.isOk() && rb.isOk());
  std::vector<float> a_row(out->row(0, 0), out->row(0, 0) + g.vocab);
  EXPECT_LE(maxAbsDiff(a_row, std::vector<float>(ra->begin() + 70 * g.vocab, ra->end()), g.vocab, 0, 1), 1e-4);
  EXPECT_LE(maxAbsDiff(std::vector<float>(out->row(1, 0), out->row(1, 0) + 80 * g.vocab), *rb, g.vocab, 0, 80), 1e-4);
}

}  // namespace
}  // namespace lg::engine::testing
