// cuda_bench: the CUDA backend's figures on one GPU, each against a limit
// measured in the same run (docs/benchmarks.md, "CUDA backend"):
//
//   copy     device-to-device copy bandwidth (cudaMemcpy of 4 GiB): the
//            physical limit the memory-bound kernels are held against
//   mla      the MLA decode kernel at DeepSeek-V2-Lite shapes (16 heads,
//            latent 512 + rope 64, bf16 cache), batch 64, 8,192-token
//            contexts: latent bytes read per second over the copy bandwidth,
//            on the SIMT and the tensor-core path
//   e2e      DeepSeek-V2-Lite shapes (27 layers, 64 routed experts, 2048
//            hidden) with random weights made on the device from a seed:
//            time to first token of a 32,768-token prompt whose first
//            32,000 tokens are cached against uncached; decode tokens/s at
//            batch 1 and 32 against the memory-bandwidth bound; restoring
//            the 32,000 cached tokens' latents from host memory (the pool's
//            import, through pinned staging) and from RocksDB (the disk tier)
//
// Prints one JSON object per figure on stdout.
// Usage: cuda_bench [--mode copy,mla,e2e] [--seed N] [--disk-dir DIR]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cache/disk_tier.h"
#include "cache/fingerprint.h"
#include "engine/cuda/cuda_engine.h"
#include "engine/cuda/device_latent_pool.h"
#include "engine/cuda/device_weights.h"
#include "engine/forward_plan.h"
#include "kernels/mla_attention.h"
#include "kernels/random_fill.h"

namespace lg {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using engine::cuda::CudaEngine;
using engine::cuda::DeviceBuffer;
using engine::cuda::DeviceLatentPool;
using engine::cuda::DeviceWeights;

[[noreturn]] void die(const std::string& what, const Status& s) {
  std::cerr << "cuda_bench: " << what << ": " << s.toString() << "\n";
  std::exit(1);
}
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) die(what, engine::cuda::cudaStatus(e, what));
}

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// DeepSeek-V2-Lite's architecture (shared/design/mla-notes.md).
engine::ModelConfig v2Lite() {
  engine::ModelConfig c;
  c.model_type = engine::ModelType::kDeepseekV2;
  c.vocab_size = 102400;
  c.hidden_size = 2048;
  c.intermediate_size = 10944;
  c.moe_intermediate_size = 1408;
  c.num_hidden_layers = 27;
  c.num_attention_heads = 16;
  c.q_lora_rank = 0;
  c.kv_lora_rank = 512;
  c.qk_nope_head_dim = 128;
  c.qk_rope_head_dim = 64;
  c.v_head_dim = 128;
  c.n_routed_experts = 64;
  c.n_shared_experts = 2;
  c.num_experts_per_tok = 6;
  c.first_k_dense_replace = 1;
  c.topk_method = engine::TopkMethod::kGreedy;
  c.scoring_func = engine::ScoringFunc::kSoftmax;
  c.norm_topk_prob = false;
  c.routed_scaling_factor = 1.0;
  c.yarn.enabled = true;
  c.yarn.factor = 40;
  c.yarn.mscale = 0.707;
  c.yarn.mscale_all_dim = 0.707;
  c.yarn.original_max_position_embeddings = 4096;
  c.max_position_embeddings = 163840;
  return c;
}

double copyBandwidth() {
  const size_t bytes = size_t{4} << 30;
  DeviceBuffer a, b;
  if (Status s = a.ensure(bytes); !s.isOk()) die("copy buffer", s);
  if (Status s = b.ensure(bytes); !s.isOk()) die("copy buffer", s);
  check(cudaMemset(a.get(), 1, bytes), "memset");
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  check(cudaMemcpy(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice), "warm-up copy");
  std::vector<double> gbps;
  for (int i = 0; i < 5; ++i) {
    cudaEventRecord(e0);
    check(cudaMemcpy(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice), "copy");
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    gbps.push_back(2.0 * bytes / (ms * 1e-3) / 1e9);  // read + write
  }
  std::sort(gbps.begin(), gbps.end());
  std::cout << json{{"figure", "copy"}, {"bytes", bytes}, {"gbps_median", gbps[2]}, {"gbps_max", gbps.back()}}.dump() << "\n";
  return gbps[2];
}

void mlaDecode(double copy_gbps) {
  const int B = 64, ctx = 8192, H = 16, kv = 512, D = 576, bt = 64, layers = 1;
  const int blocks_per_seq = ctx / bt;
  const int64_t block_values = int64_t{layers} * bt * D;
  DeviceBuffer pool, q, q_bf16, out, tables, qseq, qpos, workspace;
  const int64_t pool_values = int64_t{B} * blocks_per_seq * block_values;
  if (!pool.ensure(pool_values * 2).isOk() || !q.ensure(int64_t{B} * H * D * 4).isOk() ||
      !q_bf16.ensure(int64_t{B} * H * D * 2).isOk() || !out.ensure(int64_t{B} * H * kv * 2).isOk()) {
    die("mla buffers", resourceExhausted("device memory"));
  }
  kernels::RandomFillParams f;
  f.data = pool.get();
  f.count = pool_values;
  f.seed = 1;
  check(kernels::launchRandomFill(f, nullptr), "fill pool");
  f = {};
  f.data = q.get();
  f.bf16 = false;
  f.count = int64_t{B} * H * D;
  f.scale = 0.05f;
  check(kernels::launchRandomFill(f, nullptr), "fill q");
  f.data = q_bf16.get();
  f.bf16 = true;
  check(kernels::launchRandomFill(f, nullptr), "fill q");
  std::vector<int32_t> t(static_cast<size_t>(B) * blocks_per_seq), s(B), p(B, ctx - 1);
  for (int i = 0; i < B * blocks_per_seq; ++i) t[static_cast<size_t>(i)] = i;
  for (int i = 0; i < B; ++i) s[static_cast<size_t>(i)] = i;
  (void)tables.ensure(t.size() * 4);
  (void)qseq.ensure(s.size() * 4);
  (void)qpos.ensure(p.size() * 4);
  check(cudaMemcpy(tables.get(), t.data(), t.size() * 4, cudaMemcpyHostToDevice), "tables");
  check(cudaMemcpy(qseq.get(), s.data(), s.size() * 4, cudaMemcpyHostToDevice), "seq");
  check(cudaMemcpy(qpos.get(), p.data(), p.size() * 4, cudaMemcpyHostToDevice), "pos");
  const size_t ws = kernels::mlaWorkspaceBytes(B, H, kv, 16);
  (void)workspace.ensure(ws);
  const double latent_bytes = double(B) * ctx * D * 2;
  for (const kernels::MlaPath path : {kernels::MlaPath::kSimt, kernels::MlaPath::kTensorCore}) {
    kernels::MlaAttentionParams a;
    a.q = q.get<float>();
    a.q_bf16 = q_bf16.get<__nv_bfloat16>();
    a.out = out.get<__nv_bfloat16>();
    a.pool = pool.get();
    a.pool_bf16 = true;
    a.block_values = block_values;
    a.layer = 0;
    a.block_tokens = bt;
    a.kv_lora = kv;
    a.latent_dim = D;
    a.block_tables = tables.get<int32_t>();
    a.max_blocks = blocks_per_seq;
    a.query_sequence = qseq.get<int32_t>();
    a.query_position = qpos.get<int32_t>();
    a.tokens = B;
    a.heads = H;
    a.max_context = ctx;
    a.workspace = workspace.get();
    a.workspace_bytes = ws;
    a.path = path;
    check(kernels::launchMlaAttention(a, nullptr), "mla warm-up");
    check(cudaDeviceSynchronize(), "mla warm-up");
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    std::vector<double> us;
    for (int i = 0; i < 20; ++i) {
      cudaEventRecord(e0);
      check(kernels::launchMlaAttention(a, nullptr), "mla");
      cudaEventRecord(e1);
      cudaEventSynchronize(e1);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      us.push_back(ms * 1e3);
    }
    std::sort(us.begin(), us.end());
    const double gbps = latent_bytes / (us[10] * 1e-6) / 1e9;
    std::cout << json{{"figure", "mla_decode"},
                      {"path", path == kernels::MlaPath::kSimt ? "simt" : "tensor_cores"},
                      {"batch", B},
                      {"context", ctx},
                      {"heads", H},
                      {"latent_bytes", latent_bytes},
                      {"us_median", us[10]},
                      {"gbps", gbps},
                      {"x_copy_bandwidth", gbps / copy_gbps}}
                     .dump()
              << "\n";
  }
}

// One forward over `steps` of the given sequences; returns its wall time.
double forward(CudaEngine& engine, DeviceLatentPool& pool, const std::vector<engine::SequenceStep>& steps) {
  engine::ForwardBatch batch;
  batch.sequences = steps;
  auto plan = engine::planForward(batch, engine.weights().config(), pool.layout(), pool.allocator(), 163840,
                                  int64_t{1} << 20);
  if (!plan.isOk()) die("plan", plan.status());
  engine::ForwardOutput out;
  const auto t0 = Clock::now();
  if (Status s = engine.run(*plan, out); !s.isOk()) die("forward", s);
  return seconds(t0, Clock::now());
}

void endToEnd(double copy_gbps, uint64_t seed, const std::string& disk_dir) {
  const engine::ModelConfig c = v2Lite();
  const int bt = 64;
  engine::LatentLayout layout{c.num_hidden_layers, bt, c.kv_lora_rank, c.latentDim(), engine::LatentDType::kBF16};
  const int32_t num_blocks = 4096;  // 262,144 tokens
  auto pool = DeviceLatentPool::create(layout, num_blocks, "cuda-bf16");
  if (!pool.isOk()) die("pool", pool.status());
  engine::cuda::Stream stream;
  (void)stream.create();
  const auto w0 = Clock::now();
  auto weights = DeviceWeights::random(c, seed, stream.get());
  if (!weights.isOk()) die("weights", weights.status());
  const double weight_bytes = static_cast<double>((*weights)->deviceBytes());
  std::cout << json{{"figure", "weights"}, {"bytes", weight_bytes}, {"seconds", seconds(w0, Clock::now())}}.dump() << "\n";
  engine::cuda::CudaEngineOptions eo;
  eo.copy_logits = false;
  auto engine = CudaEngine::create(std::move(weights).value(), **pool, eo);
  if (!engine.isOk()) die("engine", engine.status());
  auto& blocks = (*pool)->allocator();
  auto alloc = [&](int n) {
    std::vector<engine::BlockId> v;
    if (Status s = blocks.allocate(n, v); !s.isOk()) die("blocks", s);
    return v;
  };
  const int prompt = 32768, cached = 32000, chunk = 16384;
  std::vector<int32_t> ids(prompt);
  for (int i = 0; i < prompt; ++i) ids[static_cast<size_t>(i)] = (i * 7919 + 17) % c.vocab_size;
  // Uncached: the whole prompt in chunks, to the last chunk's logits.
  auto cold = alloc(prompt / bt);
  double uncached_s = 0;
  for (int pos = 0; pos < prompt; pos += chunk) {
    const int n = std::min(chunk, prompt - pos);
    uncached_s += forward(**engine, **pool, {{cold, pos, std::span<const int32_t>(ids).subspan(pos, n),
                                              pos + n == prompt ? engine::LogitsWanted::kLast : engine::LogitsWanted::kNone}});
  }
  // Cached: a second sequence shares the first 500 blocks (32,000 tokens) and computes the rest.
  auto warm = std::vector<engine::BlockId>(cold.begin(), cold.begin() + cached / bt);
  for (engine::BlockId b : warm) blocks.retain(b);
  auto tail = alloc((prompt - cached) / bt);
  warm.insert(warm.end(), tail.begin(), tail.end());
  const double cached_s = forward(**engine, **pool, {{warm, cached, std::span<const int32_t>(ids).subspan(cached),
                                                      engine::LogitsWanted::kLast}});
  std::cout << json{{"figure", "ttft"},
                    {"prompt_tokens", prompt},
                    {"cached_tokens", cached},
                    {"uncached_s", uncached_s},
                    {"cached_s", cached_s},
                    {"speedup", uncached_s / cached_s}}
                   .dump()
            << "\n";

  // Decode at batch 1 and 32, contexts of 1,024 tokens, 16 steps each.
  for (const int batch : {1, 32}) {
    const int ctx = 1024, steps = 16;
    std::vector<std::vector<engine::BlockId>> tables;
    std::vector<engine::SequenceStep> prefill;
    for (int b = 0; b < batch; ++b) tables.push_back(alloc((ctx + steps) / bt + 1));
    for (int b = 0; b < batch; ++b) {
      prefill.push_back({tables[static_cast<size_t>(b)], 0, std::span<const int32_t>(ids).subspan(b * 7, ctx),
                         engine::LogitsWanted::kNone});
    }
    forward(**engine, **pool, prefill);
    std::vector<int32_t> next(batch);
    for (int b = 0; b < batch; ++b) next[static_cast<size_t>(b)] = (b * 131) % c.vocab_size;
    double total = 0;
    for (int s = 0; s < steps; ++s) {
      std::vector<engine::SequenceStep> step;
      for (int b = 0; b < batch; ++b) {
        step.push_back({tables[static_cast<size_t>(b)], ctx + s, std::span<const int32_t>(&next[static_cast<size_t>(b)], 1),
                        engine::LogitsWanted::kLast});
      }
      total += forward(**engine, **pool, step);
    }
    const double tokens_per_s = batch * steps / total;
    // The bound: every weight a step reads once (the routed experts the
    // batch can touch: at batch 1 its six, at 32 the expected distinct
    // count of 64 x (1 - (1 - 6/64)^32)) plus the latents, at copy bandwidth.
    const double H = c.num_attention_heads, hidden = c.hidden_size;
    const double attn = (H * c.qHeadDim() * hidden + c.latentDim() * hidden +
                         H * (c.qk_nope_head_dim + c.v_head_dim) * c.kv_lora_rank + hidden * H * c.v_head_dim) * 2;
    const double expert = 3.0 * c.moe_intermediate_size * hidden * 2;
    const double touched = batch == 1 ? 6 : 64 * (1 - std::pow(1 - 6.0 / 64, batch));
    const double moe_layer = attn + touched * expert + 2 * expert + c.n_routed_experts * hidden * 4.0;
    const double dense_layer = attn + 3.0 * c.intermediate_size * hidden * 2;
    const double step_bytes = dense_layer + (c.num_hidden_layers - 1) * moe_layer + c.vocab_size * hidden * 2.0 +
                              batch * (ctx + steps / 2.0) * layout.tokenBytes();
    const double bound_steps_per_s = copy_gbps * 1e9 / step_bytes;
    std::cout << json{{"figure", "decode"},
                      {"batch", batch},
                      {"context", ctx},
                      {"tokens_per_s", tokens_per_s},
                      {"step_ms", total / steps * 1e3},
                      {"bytes_per_step", step_bytes},
                      {"bound_tokens_per_s", bound_steps_per_s * batch},
                      {"x_bound", tokens_per_s / (bound_steps_per_s * batch)}}
                     .dump()
              << "\n";
  }

  // Restores of the 500 cached blocks: from host memory (the pool's import)
  // and from the disk tier (RocksDB read, then the import).
  const int n = cached / bt;
  std::vector<engine::BlockId> src(cold.begin(), cold.begin() + n);
  std::vector<uint8_t> bytes(static_cast<size_t>(n) * layout.blockBytes());
  if (Status s = (*pool)->exportBlocks(src, bytes); !s.isOk()) die("export", s);
  auto fresh = alloc(n);
  const auto h0 = Clock::now();
  if (Status s = (*pool)->importBlocks(fresh, bytes); !s.isOk()) die("import", s);
  const double host_s = seconds(h0, Clock::now());
  json restore{{"figure", "restore"}, {"blocks", n}, {"bytes", bytes.size()}, {"host_s", host_s},
               {"host_gbps", bytes.size() / host_s / 1e9}};
  if (!disk_dir.empty()) {
    cache::DiskTierOptions o;
    o.path = disk_dir;
    auto disk = cache::DiskTier::open(o);
    if (!disk.isOk()) die("disk tier", disk.status());
    std::vector<std::pair<cache::Digest, std::string>> values;
    std::vector<cache::Digest> keys;
    for (int i = 0; i < n; ++i) {
      cache::Digest k = cache::sha256("block " + std::to_string(i));
      keys.push_back(k);
      values.emplace_back(k, std::string(reinterpret_cast<const char*>(bytes.data()) + size_t(i) * layout.blockBytes(),
                                         layout.blockBytes()));
    }
    if (Status s = (*disk)->putBatch(values); !s.isOk()) die("disk write", s);
    if (Status s = (*disk)->flush(); !s.isOk()) die("disk flush", s);
    const auto d0 = Clock::now();
    auto read = (*disk)->multiGet(keys);
    std::vector<uint8_t> back;
    back.reserve(bytes.size());
    for (const auto& v : read) {
      if (!v) die("disk read", dataLoss("a block is missing"));
      back.insert(back.end(), v->begin(), v->end());
    }
    if (Status s = (*pool)->importBlocks(fresh, back); !s.isOk()) die("import", s);
    const double disk_s = seconds(d0, Clock::now());
    restore["disk_s"] = disk_s;
    restore["disk_gbps"] = bytes.size() / disk_s / 1e9;
    restore["disk_matches"] = back == bytes;
  }
  std::cout << restore.dump() << "\n";
}

}  // namespace
}  // namespace lg

int main(int argc, char** argv) {
  CLI::App app{"CUDA backend benchmarks (docs/benchmarks.md)"};
  std::string modes = "copy,mla,e2e";
  uint64_t seed = 42;
  std::string disk_dir;
  app.add_option("--mode", modes, "copy, mla, e2e (comma-separated)");
  app.add_option("--seed", seed, "seed of the random weights");
  app.add_option("--disk-dir", disk_dir, "a directory for the disk tier's RocksDB (empty: no disk restore)");
  CLI11_PARSE(app, argc, argv);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::cerr << "cuda_bench: no GPU\n";
    return 77;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::cout << nlohmann::json{{"figure", "device"}, {"name", prop.name}, {"sms", prop.multiProcessorCount},
                              {"memory_bytes", prop.totalGlobalMem}}
                   .dump()
            << "\n";
  const double copy = lg::copyBandwidth();
  if (modes.find("mla") != std::string::npos) lg::mlaDecode(copy);
  if (modes.find("e2e") != std::string::npos) {
    if (!disk_dir.empty()) std::filesystem::create_directories(disk_dir);
    lg::endToEnd(copy, seed, disk_dir);
  }
  return 0;
}
