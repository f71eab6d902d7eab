// The CUDA backend against the CPU reference, op by op and as a whole, in the
// spirit of llama.cpp's test-backend-ops (docs/cuda.md, "Parity"). Every test
// needs a GPU and skips cleanly without one; scripts/device-check.sh runs
// them on the H200.
//
// Tolerances. The CPU backend is fp32 throughout; the CUDA backend reads bf16
// GEMM inputs (activations rounded to bf16, 8 bits of mantissa) with fp32
// accumulation and keeps the residual stream, norms, softmax and routing in
// fp32. Per op the bound is a few bf16 roundings of the output's scale
// (stated per test); for whole models it is kLogitTolerance on the logits,
// and greedy tokens must agree wherever the reference's top-two margin
// exceeds twice that.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "common/bfloat16.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/host_latent_pool.h"
#include "engine/cpu/mla_attention.h"
#include "engine/cpu/moe.h"
#include "engine/cpu/ops.h"
#include "engine/cpu/thread_pool.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/cuda_engine.h"
#include "engine/forward_runner.h"
#include "engine/model/dtype.h"
#include "engine/model/presets.h"
#include "engine/model/rope.h"
#include "kernels/fp8_dequant.h"
#include "kernels/latent_store.h"
#include "kernels/mla_attention.h"
#include "kernels/moe_dispatch.h"
#include "kernels/moe_gemv.h"
#include "kernels/moe_routing.h"
#include "kernels/rms_norm.h"
#include "kernels/rope.h"
#include "kernels/sampling.h"
#include "kernels/silu_mul.h"
#include "tests/engine/golden/golden_util.h"
#include "tests/support/temp_dir.h"

namespace lg::engine {
namespace {

constexpr double kLogitTolerance = 0.1;

// Device memory of a host vector, copied back on request.
template <typename T>
class Dev {
 public:
  explicit Dev(const std::vector<T>& host) : n_(host.size()) {
    EXPECT_EQ(cudaMalloc(&p_, std::max<size_t>(n_, 1) * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  explicit Dev(size_t n) : Dev(std::vector<T>(n)) {}
  ~Dev() { cudaFree(p_); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  T* get() const { return static_cast<T*>(p_); }
  std::vector<T> host() const {
    std::vector<T> out(n_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(out.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }

 private:
  void* p_ = nullptr;
  size_t n_;
};

std::vector<float> randomFloats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

std::vector<uint16_t> toBf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = floatToBf16(v[i]);
  return out;
}
std::vector<float> fromBf16(const std::vector<uint16_t>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16ToFloat(v[i]);
  return out;
}
// Values as bf16 would hold them (so both sides start from the same inputs).
std::vector<float> roundedToBf16(std::vector<float> v) {
  for (float& x : v) x = bf16ToFloat(floatToBf16(x));
  return v;
}

double maxAbs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}
double maxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
  return m;
}

class CudaOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cudaDeviceCount() == 0) GTEST_SKIP() << "no GPU here: the CUDA parity suite runs where one is (scripts/device-check.sh)";
  }
};

TEST_F(CudaOpsTest, RmsNormMatchesTheCpu) {
  const int rows = 7, cols = 2048 + 24;
  const auto x = randomFloats(static_cast<size_t>(rows) * cols, 1, 3.0f);
  const auto w = randomFloats(cols, 2);
  Dev<float> dx(x), dw(w), dy(x.size());
  Dev<uint16_t> dyb(x.size());
  kernels::RmsNormParams p;
  p.x = dx.get();
  p.x_stride = cols;
  p.weight = dw.get();
  p.y_f32 = dy.get();
  p.y_bf16 = reinterpret_cast<__nv_bfloat16*>(dyb.get());
  p.y_stride = cols;
  p.rows = rows;
  p.cols = cols;
  ASSERT_EQ(kernels::launchRmsNorm(p, nullptr), cudaSuccess);
  std::vector<float> ref(x.size());
  for (int r = 0; r < rows; ++r) cpu::rmsNorm(x.data() + r * cols, w.data(), ref.data() + r * cols, cols, 1e-6f);
  EXPECT_LE(maxDiff(dy.host(), ref), 1e-5 * maxAbs(ref));
  EXPECT_LE(maxDiff(fromBf16(dyb.host()), ref), maxAbs(ref) / 128);  // one bf16 rounding
}

TEST_F(CudaOpsTest, RopeQueryRotatesAdjacentPairsAndScales) {
  const int T = 5, H = 3, nope = 128, rope = 64, kv = 512, D = kv + rope, qhd = nope + rope, half = rope / 2;
  const auto q = roundedToBf16(randomFloats(static_cast<size_t>(T) * H * qhd, 3));
  const auto q_cat0 = randomFloats(static_cast<size_t>(T) * H * D, 4);
  ModelConfig c;
  c.qk_rope_head_dim = rope;
  c.rope_theta = 10000;
  const RopeParams rp = computeRope(c);
  std::vector<float> cos(static_cast<size_t>(T) * half), sin(static_cast<size_t>(T) * half);
  for (int t = 0; t < T; ++t) ropeCosSin(rp, 1000 + 37 * t, cos.data() + t * half, sin.data() + t * half);
  Dev<uint16_t> dq(toBf16(q));
  Dev<float> dcat(q_cat0), dcos(cos), dsin(sin);
  Dev<uint16_t> dcat_bf16(q_cat0.size());
  kernels::RopeQueryParams p;
  p.src = reinterpret_cast<const __nv_bfloat16*>(dq.get());
  p.src_head_stride = qhd;
  p.src_offset = nope;
  p.dst = dcat.get();
  p.dst_bf16 = reinterpret_cast<__nv_bfloat16*>(dcat_bf16.get());
  p.dst_head_stride = D;
  p.dst_offset = kv;
  p.dst_width = D;
  p.cos = dcos.get();
  p.sin = dsin.get();
  p.half = half;
  p.tokens = T;
  p.heads = H;
  p.scale = 0.1147f;
  ASSERT_EQ(kernels::launchRopeQuery(p, nullptr), cudaSuccess);
  std::vector<float> ref = q_cat0;
  for (int t = 0; t < T; ++t) {
    for (int h = 0; h < H; ++h) {
      float* dst = ref.data() + (static_cast<size_t>(t) * H + h) * D;
      std::copy_n(q.data() + (static_cast<size_t>(t) * H + h) * qhd + nope, rope, dst + kv);
      applyRope(dst + kv, cos.data() + t * half, sin.data() + t * half, half);
      for (int j = 0; j < D; ++j) dst[j] *= p.scale;
    }
  }
  EXPECT_LE(maxDiff(dcat.host(), ref), 1e-6);
  EXPECT_LE(maxDiff(fromBf16(dcat_bf16.host()), ref), maxAbs(ref) / 128);
}

// The pool's contents after a store, against normalizing and rotating on the host.
TEST_F(CudaOpsTest, LatentStoreWritesNormedCkvAndRotatedKpe) {
  const int T = 9, kv = 512, rope = 64, D = kv + rope, half = rope / 2, layers = 3, bt = 16, blocks = 4, layer = 1;
  const auto kv_a = randomFloats(static_cast<size_t>(T) * D, 5, 2.0f);
  const auto w = randomFloats(kv, 6);
  std::vector<float> cos(static_cast<size_t>(T) * half), sin(static_cast<size_t>(T) * half);
  ModelConfig c;
  c.qk_rope_head_dim = rope;
  const RopeParams rp = computeRope(c);
  for (int t = 0; t < T; ++t) ropeCosSin(rp, t, cos.data() + t * half, sin.data() + t * half);
  std::vector<int32_t> block(T), slot(T);
  for (int t = 0; t < T; ++t) {
    block[static_cast<size_t>(t)] = (t * 7) % blocks;
    slot[static_cast<size_t>(t)] = (t * 5) % bt;
  }
  const size_t block_values = static_cast<size_t>(layers) * bt * D;
  for (const bool bf16 : {true, false}) {
    SCOPED_TRACE(bf16 ? "bf16 pool" : "f32 pool");
    Dev<float> dkv(kv_a), dw(w), dcos(cos), dsin(sin), pool_f32(bf16 ? 1 : blocks * block_values);
    Dev<uint16_t> pool_bf16(bf16 ? blocks * block_values : 1);
    Dev<int32_t> dblock(block), dslot(slot);
    kernels::LatentStoreParams p;
    p.kv_a = dkv.get();
    p.kv_a_stride = D;
    p.norm_weight = dw.get();
    p.cos = dcos.get();
    p.sin = dsin.get();
    p.half = half;
    p.write_block = dblock.get();
    p.write_slot = dslot.get();
    p.pool = bf16 ? static_cast<void*>(pool_bf16.get()) : static_cast<void*>(pool_f32.get());
    p.pool_bf16 = bf16;
    p.block_values = static_cast<int64_t>(block_values);
    p.layer = layer;
    p.block_tokens = bt;
    p.kv_lora = kv;
    p.latent_dim = D;
    p.tokens = T;
    ASSERT_EQ(kernels::launchLatentStore(p, nullptr), cudaSuccess);
    const std::vector<float> got = bf16 ? fromBf16(pool_bf16.host()) : pool_f32.host();
    for (int t = 0; t < T; ++t) {
      std::vector<float> ref(kv_a.begin() + t * D, kv_a.begin() + (t + 1) * D);
      cpu::rmsNorm(ref.data(), w.data(), ref.data(), kv, 1e-6f);
      applyRope(ref.data() + kv, cos.data() + t * half, sin.data() + t * half, half);
      const float* row = got.data() + block[static_cast<size_t>(t)] * block_values +
                         (static_cast<size_t>(layer) * bt + slot[static_cast<size_t>(t)]) * D;
      EXPECT_LE(maxDiff(std::vector<float>(row, row + D), ref), bf16 ? maxAbs(ref) / 128 : 1e-5 * maxAbs(ref)) << t;
    }
  }
}

// Absorbed attention on both paths and with several splits against the CPU
// kernel over the same latents: a decode step over a long context, a
// prefill chunk over a cached prefix, and a fresh prompt, with 16 and 20
// heads (a partial second head group).
TEST_F(CudaOpsTest, MlaAttentionMatchesTheCpuOnBothPathsAndAnySplit) {
  const int kv = 512, rope = 64, D = kv + rope, layers = 2, layer = 1;
  struct Seq {
    int cached, queries;
  };
  const std::vector<Seq> seqs = {{1500, 1}, {200, 37}, {0, 50}};
  for (const int bt : {64, 16}) {
    for (const int H : {16, 20}) {
      LatentLayout layout{layers, bt, kv, D, LatentDType::kF32};
      int total_blocks = 0;
      for (const Seq& s : seqs) total_blocks += (s.cached + s.queries + bt - 1) / bt;
      // Each sequence's blocks scattered over the pool: a permutation of its ids.
      std::vector<std::vector<BlockId>> tables;
      int next = 0;
      for (const Seq& s : seqs) {
        std::vector<BlockId> t;
        for (int i = 0; i < (s.cached + s.queries + bt - 1) / bt; ++i) {
          t.push_back(static_cast<BlockId>((int64_t{next++} * 7919) % total_blocks));
        }
        tables.push_back(t);
      }
      // Latents rounded to bf16 so the bf16 pool holds exactly the same values.
      const size_t block_values = layout.blockValues();
      const auto latents = roundedToBf16(randomFloats(block_values * total_blocks, 7));
      auto host_pool = HostLatentPool::create(layout, total_blocks, "test");
      ASSERT_TRUE(host_pool.isOk());
      std::memcpy((*host_pool)->data(), latents.data(), latents.size() * sizeof(float));
      int T = 0;
      for (const Seq& s : seqs) T += s.queries;
      const auto q = roundedToBf16(randomFloats(static_cast<size_t>(T) * H * D, 8, 0.05f));
      // CPU reference.
      ThreadPool threads(2);
      std::vector<float> ref(static_cast<size_t>(T) * H * kv);
      std::vector<cpu::AttentionSequence> cpu_seqs;
      int first = 0;
      for (size_t i = 0; i < seqs.size(); ++i) {
        cpu_seqs.push_back({q.data() + size_t(first) * H * D, ref.data() + size_t(first) * H * kv, seqs[i].queries,
                            seqs[i].cached, std::span<const BlockId>(tables[i])});
        first += seqs[i].queries;
      }
      cpu::mlaAttention(threads, cpu::LatentPoolView{(*host_pool)->data(), layout}, layer, H, cpu_seqs);
      // Device inputs.
      int max_blocks = 0;
      for (const auto& t : tables) max_blocks = std::max(max_blocks, static_cast<int>(t.size()));
      std::vector<int32_t> table_flat(seqs.size() * max_blocks, 0), qseq, qpos;
      for (size_t i = 0; i < seqs.size(); ++i) {
        std::copy(tables[i].begin(), tables[i].end(), table_flat.begin() + i * max_blocks);
        for (int j = 0; j < seqs[i].queries; ++j) {
          qseq.push_back(static_cast<int32_t>(i));
          qpos.push_back(seqs[i].cached + j);
        }
      }
      Dev<float> dpool_f32(latents), dq(q);
      Dev<uint16_t> dpool_bf16(toBf16(latents)), dq_bf16(toBf16(q)), dout(static_cast<size_t>(T) * H * kv);
      Dev<int32_t> dtables(table_flat), dqseq(qseq), dqpos(qpos);
      Dev<uint8_t> workspace(kernels::mlaWorkspaceBytes(T, H, kv, 16));
      for (const kernels::MlaPath path : {kernels::MlaPath::kSimt, kernels::MlaPath::kTensorCore}) {
        for (const int splits : {1, 3, 7}) {
          SCOPED_TRACE(::testing::Message() << "block_tokens " << bt << ", heads " << H << ", "
                                            << (path == kernels::MlaPath::kSimt ? "SIMT" : "tensor cores") << ", splits "
                                            << splits);
          for (const bool bf16_pool : {false, true}) {
            if (path == kernels::MlaPath::kTensorCore && !bf16_pool) continue;
            kernels::MlaAttentionParams p;
            p.q = dq.get();
            p.q_bf16 = reinterpret_cast<const __nv_bfloat16*>(dq_bf16.get());
            p.out = reinterpret_cast<__nv_bfloat16*>(dout.get());
            p.pool = bf16_pool ? static_cast<const void*>(dpool_bf16.get()) : static_cast<const void*>(dpool_f32.get());
            p.pool_bf16 = bf16_pool;
            p.block_values = static_cast<int64_t>(block_values);
            p.layer = layer;
            p.block_tokens = bt;
            p.kv_lora = kv;
            p.latent_dim = D;
            p.block_tables = dtables.get();
            p.max_blocks = max_blocks;
            p.query_sequence = dqseq.get();
            p.query_position = dqpos.get();
            p.tokens = T;
            p.heads = H;
            p.max_context = 1501;
            p.workspace = workspace.get();
            p.workspace_bytes = kernels::mlaWorkspaceBytes(T, H, kv, 16);
            p.splits = splits;
            p.path = path;
            ASSERT_EQ(kernels::launchMlaAttention(p, nullptr), cudaSuccess);
            const auto got = fromBf16(dout.host());
            // bf16 output; the tensor-core path also rounds the probabilities to bf16.
            const double tol = maxAbs(ref) * (path == kernels::MlaPath::kSimt ? 1.0 / 128 : 1.0 / 32);
            EXPECT_LE(maxDiff(got, ref), tol) << (bf16_pool ? "bf16 pool" : "f32 pool");
          }
        }
      }
    }
  }
}

// Routing on the device picks the CPU's experts with its weights, for the
// three methods at real models' shapes.
TEST_F(CudaOpsTest, MoeRoutingMatchesTheCpuForEveryMethod) {
  struct Case {
    const char* name;
    int experts, k, groups, keep;
    TopkMethod method;
    ScoringFunc scoring;
    bool norm;
    double scale;
    ModelType type;
  };
  const Case cases[] = {
      {"V2-Lite greedy", 64, 6, 1, 1, TopkMethod::kGreedy, ScoringFunc::kSoftmax, false, 1.0, ModelType::kDeepseekV2},
      {"V2 group-limited", 160, 6, 8, 3, TopkMethod::kGroupLimitedGreedy, ScoringFunc::kSoftmax, false, 16.0,
       ModelType::kDeepseekV2},
      {"V3 noaux_tc", 256, 8, 8, 4, TopkMethod::kNoauxTc, ScoringFunc::kSigmoid, true, 2.5, ModelType::kDeepseekV3},
  };
  const int T = 300;
  for (const Case& cs : cases) {
    SCOPED_TRACE(cs.name);
    ModelConfig c;
    c.model_type = cs.type;
    c.n_routed_experts = cs.experts;
    c.num_experts_per_tok = cs.k;
    c.n_group = cs.groups;
    c.topk_group = cs.keep;
    c.topk_method = cs.method;
    c.scoring_func = cs.scoring;
    c.norm_topk_prob = cs.norm;
    c.routed_scaling_factor = cs.scale;
    const auto logits = randomFloats(static_cast<size_t>(T) * cs.experts, 9, 4.0f);
    const auto bias = randomFloats(cs.experts, 10, 0.1f);
    Dev<float> dl(logits), db(bias), dw(static_cast<size_t>(T) * cs.k);
    Dev<int32_t> de(static_cast<size_t>(T) * cs.k);
    // The engine's own mapping of the config, as a MoE layer routes.
    kernels::MoeRoutingParams p = cuda::moeRoutingParams(c);
    p.logits = dl.get();
    p.bias = cs.method == TopkMethod::kNoauxTc ? db.get() : nullptr;
    p.experts = de.get();
    p.weights = dw.get();
    p.tokens = T;
    ASSERT_EQ(kernels::launchMoeRouting(p, nullptr), cudaSuccess);
    const auto experts = de.host();
    const auto weights = dw.host();
    for (int t = 0; t < T; ++t) {
      std::vector<int32_t> e(static_cast<size_t>(cs.k));
      std::vector<float> w(static_cast<size_t>(cs.k));
      cpu::routeToken(c, logits.data() + t * cs.experts, p.bias ? bias.data() : nullptr, e.data(), w.data());
      for (int i = 0; i < cs.k; ++i) {
        EXPECT_EQ(experts[static_cast<size_t>(t * cs.k + i)], e[static_cast<size_t>(i)]) << "token " << t << " slot " << i;
        EXPECT_NEAR(weights[static_cast<size_t>(t * cs.k + i)], w[static_cast<size_t>(i)], 1e-5 * cs.scale);
      }
    }
  }
}

// The decode path's expert GEMVs (bf16 and FP8 experts) and the prefill
// path's sort, gather and combine, against loops on the host.
TEST_F(CudaOpsTest, ExpertGemvsAndTheSortedPathMatchHostLoops) {
  const int T = 6, k = 3, E = 8, hidden = 256, inter = 128;
  const auto h = roundedToBf16(randomFloats(static_cast<size_t>(T) * hidden, 11));
  std::vector<int32_t> experts(static_cast<size_t>(T) * k);
  for (size_t a = 0; a < experts.size(); ++a) experts[a] = static_cast<int32_t>((a * 5 + a / k) % E);
  const auto weights = randomFloats(experts.size(), 12, 1.0f);
  for (const bool fp8 : {false, true}) {
    SCOPED_TRACE(fp8 ? "FP8 experts" : "bf16 experts");
    // Expert matrices: bf16 values, or FP8 values with 128 x 128 block scales.
    std::vector<std::vector<float>> dense(static_cast<size_t>(E) * 3);  // the exact values both sides use
    std::vector<std::unique_ptr<Dev<uint16_t>>> bf;
    std::vector<std::unique_ptr<Dev<uint8_t>>> f8;
    std::vector<std::unique_ptr<Dev<float>>> scales;
    std::vector<kernels::ExpertMlp> table(E);
    for (int e = 0; e < E; ++e) {
      for (int m = 0; m < 3; ++m) {
        const int rows = m == 2 ? hidden : inter, cols = m == 2 ? inter : hidden;
        kernels::DeviceMatrix dm;
        dm.rows = rows;
        dm.cols = cols;
        dm.ld = cols;
        std::vector<float> values = randomFloats(size_t(rows) * cols, 100 + e * 3 + m, 0.1f);
        if (!fp8) {
          values = roundedToBf16(values);
          bf.push_back(std::make_unique<Dev<uint16_t>>(toBf16(values)));
          dm.data = bf.back()->get();
        } else {
          // Codes from the E4M3 range (integers 0..255 avoiding NaN codes), one scale per block.
          std::vector<uint8_t> codes(values.size());
          std::vector<float> sc(size_t((rows + 127) / 128) * ((cols + 127) / 128));
          for (size_t i = 0; i < sc.size(); ++i) sc[i] = 0.01f * static_cast<float>(i + 1);
          for (size_t i = 0; i < codes.size(); ++i) {
            uint8_t cd = static_cast<uint8_t>((i * 37 + e * 11 + m) % 256);
            if ((cd & 0x7f) == 0x7f) cd = static_cast<uint8_t>(cd - 1);
            codes[i] = cd;
            const int64_t r = static_cast<int64_t>(i) / cols, col = static_cast<int64_t>(i) % cols;
            values[i] = fp8e4m3ToFloat(cd) * sc[static_cast<size_t>((r / 128) * ((cols + 127) / 128) + col / 128)];
          }
          f8.push_back(std::make_unique<Dev<uint8_t>>(codes));
          scales.push_back(std::make_unique<Dev<float>>(sc));
          dm.data = f8.back()->get();
          dm.type = kernels::WeightType::kFp8E4M3;
          dm.scales = scales.back()->get();
          dm.scale_ld = (cols + 127) / 128;
        }
        dense[static_cast<size_t>(e * 3 + m)] = values;
        (m == 0 ? table[static_cast<size_t>(e)].gate : m == 1 ? table[static_cast<size_t>(e)].up : table[static_cast<size_t>(e)].down) = dm;
      }
    }
    // Host reference: per assignment down(silu(gate h) * up h).
    std::vector<float> ref(experts.size() * hidden);
    for (size_t a = 0; a < experts.size(); ++a) {
      const int e = experts[a];
      const float* x = h.data() + (a / k) * hidden;
      std::vector<float> act(inter);
      for (int r = 0; r < inter; ++r) {
        double g = 0, u = 0;
        for (int j = 0; j < hidden; ++j) {
          g += dense[static_cast<size_t>(e * 3)][size_t(r) * hidden + j] * x[j];
          u += dense[static_cast<size_t>(e * 3 + 1)][size_t(r) * hidden + j] * x[j];
        }
        act[static_cast<size_t>(r)] = static_cast<float>(g / (1 + std::exp(-g)) * u);
      }
      for (int r = 0; r < hidden; ++r) {
        double d = 0;
        for (int j = 0; j < inter; ++j) d += dense[static_cast<size_t>(e * 3 + 2)][size_t(r) * inter + j] * act[static_cast<size_t>(j)];
        ref[a * hidden + r] = static_cast<float>(d);
      }
    }
    Dev<uint16_t> dh(toBf16(h));
    Dev<int32_t> de(experts);
    Dev<kernels::ExpertMlp> dtable(table);
    Dev<float> dact(experts.size() * inter), dout(experts.size() * hidden);
    kernels::MoeGemvParams p;
    p.h = reinterpret_cast<const __nv_bfloat16*>(dh.get());
    p.experts = de.get();
    p.table = dtable.get();
    p.act = dact.get();
    p.expert_out = dout.get();
    p.tokens = T;
    p.k = k;
    p.hidden = hidden;
    p.inter = inter;
    ASSERT_EQ(kernels::launchMoeGemv(p, nullptr), cudaSuccess);
    EXPECT_LE(maxDiff(dout.host(), ref), 1e-4 * maxAbs(ref) + 1e-6);
    // Combined into a residual stream, in slot order.
    const auto x0 = randomFloats(static_cast<size_t>(T) * hidden, 13);
    Dev<float> dx(x0), dw(weights);
    kernels::MoeCombineParams cp;
    cp.expert_out = dout.get();
    cp.weights = dw.get();
    cp.x = dx.get();
    cp.tokens = T;
    cp.k = k;
    cp.hidden = hidden;
    ASSERT_EQ(kernels::launchMoeCombine(cp, nullptr), cudaSuccess);
    std::vector<float> xref = x0;
    for (int t = 0; t < T; ++t) {
      for (int i = 0; i < k; ++i) {
        for (int j = 0; j < hidden; ++j) xref[size_t(t) * hidden + j] += weights[size_t(t) * k + i] * ref[(size_t(t) * k + i) * hidden + j];
      }
    }
    EXPECT_LE(maxDiff(dx.host(), xref), 1e-4 * maxAbs(xref));
  }
  // The sort: counts, offsets, a stable order and its inverse, and the gather.
  Dev<int32_t> de(experts), dsort(2 * E + 1 + 2 * experts.size());
  kernels::MoeSortParams sp;
  sp.experts = de.get();
  sp.assignments = static_cast<int32_t>(experts.size());
  sp.num_experts = E;
  sp.counts = dsort.get();
  sp.offsets = dsort.get() + E;
  sp.order = dsort.get() + 2 * E + 1;
  sp.row_of = sp.order + experts.size();
  ASSERT_EQ(kernels::launchMoeSort(sp, nullptr), cudaSuccess);
  const auto sorted = dsort.host();
  std::vector<int32_t> want_order;
  for (int e = 0; e < E; ++e) {
    EXPECT_EQ(sorted[static_cast<size_t>(E + e)], static_cast<int32_t>(want_order.size()));
    for (size_t a = 0; a < experts.size(); ++a) {
      if (experts[a] == e) want_order.push_back(static_cast<int32_t>(a));
    }
    EXPECT_EQ(sorted[static_cast<size_t>(e)], static_cast<int32_t>(want_order.size()) - sorted[static_cast<size_t>(E + e)]);
  }
  for (size_t r = 0; r < want_order.size(); ++r) {
    EXPECT_EQ(sorted[2 * E + 1 + r], want_order[r]);
    EXPECT_EQ(sorted[2 * E + 1 + experts.size() + static_cast<size_t>(want_order[r])], static_cast<int32_t>(r));
  }
  Dev<uint16_t> dh(toBf16(h)), dg(experts.size() * hidden);
  kernels::MoeGatherParams gp;
  gp.h = reinterpret_cast<const __nv_bfloat16*>(dh.get());
  gp.order = sp.order;
  gp.gathered = reinterpret_cast<__nv_bfloat16*>(dg.get());
  gp.rows = static_cast<int32_t>(experts.size());
  gp.k = k;
  gp.hidden = hidden;
  ASSERT_EQ(kernels::launchMoeGather(gp, nullptr), cudaSuccess);
  const auto gathered = fromBf16(dg.host());
  for (size_t r = 0; r < want_order.size(); ++r) {
    const size_t token = static_cast<size_t>(want_order[r]) / k;
    EXPECT_TRUE(std::equal(gathered.begin() + r * hidden, gathered.begin() + (r + 1) * hidden, h.begin() + token * hidden));
  }
}

TEST_F(CudaOpsTest, SiluMulAndGreedySamplingMatchTheHost) {
  const int rows = 4, width = 300, vocab = 50000;
  const auto gu = randomFloats(static_cast<size_t>(rows) * 2 * width, 14, 6.0f);
  Dev<float> dgu(gu);
  Dev<uint16_t> dout(static_cast<size_t>(rows) * width);
  kernels::SiluMulParams p{dgu.get(), reinterpret_cast<__nv_bfloat16*>(dout.get()), rows, width};
  ASSERT_EQ(kernels::launchSiluMul(p, nullptr), cudaSuccess);
  const auto got = fromBf16(dout.host());
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < width; ++c) {
      const float g = gu[size_t(r) * 2 * width + c], u = gu[size_t(r) * 2 * width + width + c];
      const float want = g / (1 + std::exp(-g)) * u;
      EXPECT_NEAR(got[size_t(r) * width + c], want, std::fabs(want) / 128 + 1e-6);
    }
  }
  auto logits = randomFloats(static_cast<size_t>(rows) * vocab, 15);
  logits[123] = 9;  // row 0's best
  logits[static_cast<size_t>(vocab) + 4999] = logits[static_cast<size_t>(vocab) + 5000] = 9;  // a tie: the lower id wins
  Dev<float> dl(logits);
  Dev<int32_t> ds(rows);
  kernels::SamplingParams sp;
  sp.logits = dl.get();
  sp.ld = vocab;
  sp.rows = rows;
  sp.vocab = vocab;
  sp.out = ds.get();
  ASSERT_EQ(kernels::launchSampling(sp, nullptr), cudaSuccess);
  const auto ids = ds.host();
  for (int r = 0; r < rows; ++r) {
    const float* row = logits.data() + size_t(r) * vocab;
    EXPECT_EQ(ids[static_cast<size_t>(r)], std::max_element(row, row + vocab) - row) << r;
  }
  EXPECT_EQ(ids[1], 4999);
}

// ------------------------------------------------------- whole models

using testing::Golden;
using testing::loadGolden;
using testing::maxAbsDiff;

std::unique_ptr<Backend> cudaBackend(const std::string& dir, LatentDType dtype, int block_tokens = 64) {
  auto model = Model::load(dir);
  EXPECT_TRUE(model.isOk()) << model.status().toString();
  if (!model.isOk()) return nullptr;
  BackendOptions o;
  o.block_tokens = block_tokens;
  o.latent_dtype = dtype;
  o.num_blocks = 64;
  o.max_context = 1024;
  auto backend = createCudaBackend(std::move(model).value(), o);
  EXPECT_TRUE(backend.isOk()) << backend.status().toString();
  return backend.isOk() ? std::move(backend).value() : nullptr;
}

// Greedy tokens agree where the reference's top-two margin exceeds 2 x tol.
void expectGreedyAgreement(const std::vector<float>& ref, const std::vector<float>& got, int64_t vocab, double tol,
                           const std::string& what) {
  const int64_t rows = static_cast<int64_t>(ref.size()) / vocab;
  int64_t checked = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* a = ref.data() + r * vocab;
    const float* b = got.data() + r * vocab;
    std::vector<float> sorted(a, a + vocab);
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
    if (sorted[0] - sorted[1] <= 2 * tol) continue;
    ++checked;
    EXPECT_EQ(std::max_element(b, b + vocab) - b, std::max_element(a, a + vocab) - a) << what << " row " << r;
  }
  std::printf("[ parity ] %s: greedy tokens compared at %lld of %lld positions\n", what.c_str(),
              static_cast<long long>(checked), static_cast<long long>(rows));
}

class CudaGoldenTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (cudaDeviceCount() == 0) GTEST_SKIP() << "no GPU here: the CUDA parity suite runs where one is (scripts/device-check.sh)";
  }
};

TEST_P(CudaGoldenTest, LogitsMatchTheGoldensInEveryMode) {
  const std::string& name = GetParam();
  Golden g = loadGolden(name);
  ASSERT_FALSE(g.ids.empty());
  const int64_t n = static_cast<int64_t>(g.ids.size());
  for (const LatentDType dtype : {LatentDType::kBF16, LatentDType::kF32}) {
    auto backend = cudaBackend(testing::fixtureDir(name), dtype);
    ASSERT_NE(backend, nullptr);
    struct Mode {
      const char* name;
      int32_t chunk;
      bool decode;
    } modes[] = {{"full", 0, false}, {"chunk7", 7, false}, {"decode", 0, true}};
    for (const Mode& m : modes) {
      ForwardRunOptions o;
      o.chunk = m.chunk;
      o.decode_from = m.decode ? static_cast<int32_t>(g.prompt_len) : -1;
      auto logits = runForward(*backend, g.ids, o);
      ASSERT_TRUE(logits.isOk()) << logits.status().toString();
      const double err = maxAbsDiff(*logits, g.logits, g.vocab, 0, n);
      std::printf("[ parity ] %-12s cuda %s latents %-7s max |err| vs golden = %.3g\n", name.c_str(),
                  dtype == LatentDType::kBF16 ? "bf16" : "f32", m.name, err);
      EXPECT_LE(err, kLogitTolerance) << name << " " << m.name;
      expectGreedyAgreement(g.logits, *logits, g.vocab, kLogitTolerance, name + " " + m.name);
    }
    EXPECT_EQ(backend->blocks().numUsed(), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaGoldenTest, ::testing::Values("tiny-v2", "tiny-v3", "tiny-v3-fp8"));

// The bench preset (random weights, real tokenizer-sized vocabulary) on both
// backends: a 300-token prompt in chunks, then decode steps.
TEST_F(CudaOpsTest, TheBenchPresetMatchesTheCpuBackend) {
  test::TempDir dir("lg_cuda_parity");
  auto config = presetConfig("bench");
  ASSERT_TRUE(config.isOk());
  config->num_hidden_layers = 4;
  ASSERT_TRUE(writeRandomCheckpoint(*config, dir.path(), presetInitOptions("bench")).isOk());
  std::vector<int32_t> ids;
  for (int i = 0; i < 300; ++i) ids.push_back((i * 7919 + 13) % config->vocab_size);
  ForwardRunOptions o;
  o.chunk = 128;
  o.decode_from = 290;
  auto cpu_model = Model::load(dir.path());
  ASSERT_TRUE(cpu_model.isOk());
  BackendOptions co;
  co.num_blocks = 16;
  co.max_context = 1024;
  auto cpu = createCpuBackend(std::move(cpu_model).value(), co);
  ASSERT_TRUE(cpu.isOk());
  auto ref = runForward(**cpu, ids, o);
  ASSERT_TRUE(ref.isOk());
  auto gpu = cudaBackend(dir.path(), LatentDType::kBF16);
  ASSERT_NE(gpu, nullptr);
  auto got = runForward(*gpu, ids, o);
  ASSERT_TRUE(got.isOk()) << got.status().toString();
  const double err = maxAbsDiff(*got, *ref, config->vocab_size, 0, static_cast<int64_t>(ids.size()));
  std::printf("[ parity ] bench preset (4 layers) cuda vs cpu: max |err| = %.3g (logit scale %.3g)\n", err, maxAbs(*ref));
  EXPECT_LE(err, kLogitTolerance);
  expectGreedyAgreement(*ref, *got, config->vocab_size, kLogitTolerance, "bench preset");
}

}  // namespace
}  // namespace lg::engine
