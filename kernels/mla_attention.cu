#include "kernels/mla_attention.h"

#include <mma.h>

#include <algorithm>

#include "kernels/kernel_common.cuh"
#include "kernels/mla_merge.h"

namespace lg::kernels {
namespace {

constexpr int kThreads = 256;      // 8 warps
constexpr int kHeadsPerCta = 16;   // a head group: the rows of one tensor-core tile
constexpr int kTileKeys = 32;      // latent rows per tile
constexpr int kMaxKvLora = 512;
constexpr int kMaxSplits = 64;
constexpr int kOutRegs = kMaxKvLora / 16;  // o elements per thread: d = lane16 + 16 i

// Where a query's keys are and which of them this CTA handles.
struct QueryRange {
  int32_t sequence;
  int32_t begin;  // first key of this split
  int32_t end;    // one past its last
};

__device__ QueryRange queryRange(const MlaAttentionParams& p, int32_t t, int32_t chunk) {
  const int32_t ctx = p.query_position[t] + 1;
  const int32_t begin = blockIdx.z * chunk;
  return {p.query_sequence[t], begin, min(ctx, begin + chunk)};
}

template <typename T>
__device__ const T* latentRow(const MlaAttentionParams& p, int32_t sequence, int32_t key) {
  const int32_t block = p.block_tables[static_cast<int64_t>(sequence) * p.max_blocks + key / p.block_tokens];
  return static_cast<const T*>(p.pool) + static_cast<int64_t>(block) * p.block_values +
         (static_cast<int64_t>(p.layer) * p.block_tokens + key % p.block_tokens) * p.latent_dim;
}

// Smem row stride (elements) that puts consecutive rows in different banks:
// an odd number of 4-byte words.
template <typename T>
__host__ __device__ int32_t paddedStride(int32_t d) {
  const int32_t per_word = 4 / static_cast<int32_t>(sizeof(T));
  int32_t words = (d + per_word - 1) / per_word;
  if (words % 2 == 0) ++words;
  return words * per_word;
}

// Online-softmax bookkeeping of one tile, for the heads of a warp: reads the
// scores s[h][0, 32), writes the probabilities back, updates m, l and the
// factor the running output is rescaled by.
__device__ void softmaxTile(float* s, int32_t ld_s, int32_t valid, int32_t heads, float* m, float* l, float* corr) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int h = warp; h < heads; h += kThreads / 32) {
    const float v = lane < valid ? s[h * ld_s + lane] : -INFINITY;
    const float m_new = fmaxf(m[h], warpMax(v));
    const float pr = lane < valid ? __expf(v - m_new) : 0.0f;
    const float sum = warpSum(pr);
    s[h * ld_s + lane] = pr;
    if (lane == 0) {
      const float c = m[h] == -INFINITY ? 0.0f : __expf(m[h] - m_new);
      corr[h] = c;
      l[h] = l[h] * c + sum;
      m[h] = m_new;
    }
  }
}

// Writes a finished (query, head group): normalized into `out` when the
// query is not split, else the unnormalized partial with its max and sum.
__device__ void writeResult(const MlaAttentionParams& p, int32_t t, int32_t h0, int32_t heads, int32_t h, int32_t d,
                            float o, const float* m, const float* l, float* partial_o, float* partial_ml) {
  if (h >= heads || d >= p.kv_lora) return;
  const int64_t th = static_cast<int64_t>(t) * p.heads + h0 + h;
  if (gridDim.z == 1) {
    p.out[th * p.kv_lora + d] = __float2bfloat16_rn(l[h] > 0.0f ? o / l[h] : 0.0f);
    return;
  }
  const int64_t zth = static_cast<int64_t>(blockIdx.z) * p.tokens * p.heads + th;
  partial_o[zth * p.kv_lora + d] = o;
  if (d == 0) {
    partial_ml[zth * 2] = m[h];
    partial_ml[zth * 2 + 1] = l[h];
  }
}

// ------------------------------------------------------------------- SIMT

// Grid (tokens, head groups, splits). fp32 arithmetic on the fp32 query and
// the pool's rows (widened).
template <typename T>
__global__ void __launch_bounds__(kThreads) mlaSimtKernel(MlaAttentionParams p, int32_t chunk, float* partial_o,
                                                          float* partial_ml) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int32_t D = p.latent_dim;
  const int32_t ld_tile = paddedStride<T>(D);
  float* q_s = reinterpret_cast<float*>(smem);                      // [16][D]
  float* s = q_s + kHeadsPerCta * D;                                // [16][33]
  float* m = s + kHeadsPerCta * 33;                                 // [16]
  float* l = m + kHeadsPerCta;
  float* corr = l + kHeadsPerCta;
  const T** rows = reinterpret_cast<const T**>(corr + kHeadsPerCta);  // [32]
  T* tile = reinterpret_cast<T*>(rows + kTileKeys);                 // [32][ld_tile]

  const int32_t t = blockIdx.x;
  const int32_t h0 = blockIdx.y * kHeadsPerCta;
  const int32_t heads = min(kHeadsPerCta, p.heads - h0);
  const QueryRange range = queryRange(p, t, chunk);
  for (int i = threadIdx.x; i < kHeadsPerCta * D; i += kThreads) {
    const int h = i / D;
    q_s[i] = h < heads ? p.q[(static_cast<int64_t>(t) * p.heads + h0 + h) * D + i % D] : 0.0f;
  }
  if (threadIdx.x < kHeadsPerCta) {
    m[threadIdx.x] = -INFINITY;
    l[threadIdx.x] = 0.0f;
    corr[threadIdx.x] = 1.0f;  // padding heads keep it: their rows stay zero
  }
  float o[kOutRegs];
#pragma unroll
  for (int i = 0; i < kOutRegs; ++i) o[i] = 0.0f;
  const int oh = threadIdx.x / 16, od = threadIdx.x % 16;  // this thread's output head and first dim
  const int sr = threadIdx.x % 32, sh = threadIdx.x / 32;   // this thread's score row and first head

  for (int32_t k0 = range.begin; k0 < range.end; k0 += kTileKeys) {
    const int32_t valid = min(kTileKeys, range.end - k0);
    __syncthreads();  // the previous tile is no longer read
    if (threadIdx.x < valid) rows[threadIdx.x] = latentRow<T>(p, range.sequence, k0 + threadIdx.x);
    __syncthreads();
    for (int i = threadIdx.x; i < valid * D; i += kThreads) tile[(i / D) * ld_tile + i % D] = rows[i / D][i % D];
    __syncthreads();
    for (int h = sh; h < kHeadsPerCta; h += kThreads / 32) {
      float dot = -INFINITY;
      if (sr < valid && h < heads) {
        dot = 0.0f;
        const float* qh = q_s + h * D;
        const T* kr = tile + sr * ld_tile;
        for (int32_t d = 0; d < D; ++d) dot += qh[d] * toFloat(kr[d]);
      }
      s[h * 33 + sr] = dot;
    }
    __syncthreads();
    softmaxTile(s, 33, valid, heads, m, l, corr);
    __syncthreads();
    if (oh < heads) {
      const float c = corr[oh];
#pragma unroll
      for (int i = 0; i < kOutRegs; ++i) o[i] *= c;
      for (int32_t r = 0; r < valid; ++r) {
        const float pr = s[oh * 33 + r];
        const T* vr = tile + r * ld_tile;
#pragma unroll
        for (int i = 0; i < kOutRegs; ++i) {
          const int d = od + 16 * i;
          if (d < p.kv_lora) o[i] += pr * toFloat(vr[d]);
        }
      }
    }
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < kOutRegs; ++i) writeResult(p, t, h0, heads, oh, od + 16 * i, o[i], m, l, partial_o, partial_ml);
}

size_t simtSmemBytes(int32_t D, bool bf16) {
  const size_t tile = bf16 ? sizeof(__nv_bfloat16) * kTileKeys * paddedStride<__nv_bfloat16>(D)
                           : sizeof(float) * kTileKeys * paddedStride<float>(D);
  return sizeof(float) * (kHeadsPerCta * D + kHeadsPerCta * 33 + 3 * kHeadsPerCta) + sizeof(void*) * kTileKeys + tile;
}

// ------------------------------------------------------------ tensor cores

namespace wmma = nvcuda::wmma;
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major>;
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major>;
using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

constexpr int kLdP = kTileKeys + 8;  // bf16 probabilities [16][40]

struct TcLayout {
  int32_t ld_tile;  // bf16 elements per smem latent row
  size_t q, tile, s_part, p, o, state, total;  // byte offsets (32-byte aligned)
};

__host__ __device__ size_t align32(size_t n) { return (n + 31) & ~size_t{31}; }

__host__ __device__ TcLayout tcLayout(int32_t D, int32_t kv_lora) {
  TcLayout L{};
  L.ld_tile = D + 8;
  L.q = 0;
  L.tile = align32(L.q + sizeof(__nv_bfloat16) * kHeadsPerCta * D);
  L.s_part = align32(L.tile + sizeof(__nv_bfloat16) * kTileKeys * L.ld_tile);
  L.p = align32(L.s_part + sizeof(float) * 8 * 256);  // each warp's partial 16x16 scores
  L.o = align32(L.p + sizeof(__nv_bfloat16) * kHeadsPerCta * kLdP);
  L.state = align32(L.o + sizeof(float) * kHeadsPerCta * kv_lora);
  L.total = align32(L.state + sizeof(float) * (kHeadsPerCta * 33 + 3 * kHeadsPerCta));
  return L;
}

// Grid (tokens, head groups, splits). A tile's scores are Q [16 x D] times
// K^T [D x 32] (two 16-column halves, each split over 4 warps' share of D),
// its output update P [16 x 32] times V [32 x kv_lora] into the fp32 output
// kept in shared memory (rescaled there by the softmax correction first,
// since an accumulator fragment's element order is opaque).
__global__ void __launch_bounds__(kThreads) mlaTensorCoreKernel(MlaAttentionParams p, int32_t chunk,
                                                                 float* partial_o, float* partial_ml) {
  extern __shared__ __align__(32) unsigned char smem[];
  const int32_t D = p.latent_dim, kv = p.kv_lora;
  const TcLayout L = tcLayout(D, kv);
  __nv_bfloat16* q_s = reinterpret_cast<__nv_bfloat16*>(smem + L.q);
  __nv_bfloat16* tile = reinterpret_cast<__nv_bfloat16*>(smem + L.tile);
  float* s_part = reinterpret_cast<float*>(smem + L.s_part);
  __nv_bfloat16* prob = reinterpret_cast<__nv_bfloat16*>(smem + L.p);
  float* o_s = reinterpret_cast<float*>(smem + L.o);
  float* s = reinterpret_cast<float*>(smem + L.state);  // [16][33] fp32 scores, then probabilities
  float* m = s + kHeadsPerCta * 33;
  float* l = m + kHeadsPerCta;
  float* corr = l + kHeadsPerCta;
  const int warp = threadIdx.x >> 5;

  const int32_t t = blockIdx.x;
  const int32_t h0 = blockIdx.y * kHeadsPerCta;
  const int32_t heads = min(kHeadsPerCta, p.heads - h0);
  const QueryRange range = queryRange(p, t, chunk);
  for (int i = threadIdx.x; i < kHeadsPerCta * D; i += kThreads) {
    const int h = i / D;
    q_s[i] = h < heads ? p.q_bf16[(static_cast<int64_t>(t) * p.heads + h0 + h) * D + i % D] : __float2bfloat16_rn(0.0f);
  }
  for (int i = threadIdx.x; i < kHeadsPerCta * kv; i += kThreads) o_s[i] = 0.0f;
  if (threadIdx.x < kHeadsPerCta) {
    m[threadIdx.x] = -INFINITY;
    l[threadIdx.x] = 0.0f;
    corr[threadIdx.x] = 1.0f;  // padding heads keep it: their rows stay zero
  }
  const int32_t vec_per_row = D / 8;  // 16-byte vectors of a latent row

  for (int32_t k0 = range.begin; k0 < range.end; k0 += kTileKeys) {
    const int32_t valid = min(kTileKeys, range.end - k0);
    __syncthreads();  // the previous tile and probabilities are no longer read
    for (int i = threadIdx.x; i < kTileKeys * vec_per_row; i += kThreads) {
      const int r = i / vec_per_row, v = i % vec_per_row;
      uint4 value = make_uint4(0, 0, 0, 0);  // rows past the range are zeros (never NaN bits)
      if (r < valid) value = reinterpret_cast<const uint4*>(latentRow<__nv_bfloat16>(p, range.sequence, k0 + r))[v];
      reinterpret_cast<uint4*>(tile + r * L.ld_tile)[v] = value;
    }
    __syncthreads();
    {
      // Warps 0-3: score columns 0-15, warps 4-7: 16-31; each a quarter of D.
      const int half = warp / 4, part = warp % 4;
      FragC acc;
      wmma::fill_fragment(acc, 0.0f);
      for (int32_t k = part * 16; k < D; k += 64) {
        FragA a;
        FragBCol b;
        wmma::load_matrix_sync(a, q_s + k, D);
        wmma::load_matrix_sync(b, tile + half * 16 * L.ld_tile + k, L.ld_tile);
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(s_part + warp * 256, acc, 16, wmma::mem_row_major);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < kHeadsPerCta * kTileKeys; i += kThreads) {
      const int h = i / kTileKeys, c = i % kTileKeys, half = c / 16;
      float sum = 0.0f;
      for (int part = 0; part < 4; ++part) sum += s_part[(half * 4 + part) * 256 + h * 16 + c % 16];
      s[h * 33 + c] = sum;
    }
    __syncthreads();
    softmaxTile(s, 33, valid, heads, m, l, corr);
    __syncthreads();
    for (int i = threadIdx.x; i < kHeadsPerCta * kLdP; i += kThreads) {
      const int h = i / kLdP, c = i % kLdP;
      prob[i] = __float2bfloat16_rn(h < heads && c < kTileKeys ? s[h * 33 + c] : 0.0f);
    }
    for (int i = threadIdx.x; i < kHeadsPerCta * kv; i += kThreads) o_s[i] *= corr[i / kv];
    __syncthreads();
    for (int32_t c = warp; c < kv / 16; c += kThreads / 32) {
      FragC acc;
      wmma::load_matrix_sync(acc, o_s + c * 16, kv, wmma::mem_row_major);
      for (int kk = 0; kk < kTileKeys; kk += 16) {
        FragA a;
        FragBRow b;
        wmma::load_matrix_sync(a, prob + kk, kLdP);
        wmma::load_matrix_sync(b, tile + kk * L.ld_tile + c * 16, L.ld_tile);
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(o_s + c * 16, acc, kv, wmma::mem_row_major);
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kHeadsPerCta * kv; i += kThreads) {
    writeResult(p, t, h0, heads, i / kv, i % kv, o_s[i], m, l, partial_o, partial_ml);
  }
}

// ----------------------------------------------------------------- merge

// Grid (tokens * heads); combines the splits' partials (mla_merge.h).
__global__ void mlaMergeKernel(MlaAttentionParams p, int32_t splits, const float* partial_o, const float* partial_ml) {
  __shared__ float w[kMaxSplits];
  const int64_t th = blockIdx.x;
  const int64_t stride = static_cast<int64_t>(p.tokens) * p.heads;
  if (threadIdx.x == 0) mlaMergeWeights(partial_ml + th * 2, partial_ml + th * 2 + 1, splits, stride * 2, w);
  __syncthreads();
  for (int d = threadIdx.x; d < p.kv_lora; d += blockDim.x) {
    float o = 0.0f;
    for (int z = 0; z < splits; ++z) {
      if (w[z] != 0.0f) o += w[z] * partial_o[(z * stride + th) * p.kv_lora + d];
    }
    p.out[th * p.kv_lora + d] = __float2bfloat16_rn(o);
  }
}

int smCount() {
  static int count = [] {
    int device = 0, n = 0;
    if (cudaGetDevice(&device) != cudaSuccess || cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
      return 0;
    }
    return n;
  }();
  return count;
}

bool tensorCoreCapable(const MlaAttentionParams& p) {
  return p.pool_bf16 && p.q_bf16 != nullptr && p.latent_dim % 16 == 0 && p.kv_lora % 16 == 0;
}

}  // namespace

size_t mlaWorkspaceBytes(int32_t tokens, int32_t heads, int32_t kv_lora, int32_t splits) {
  if (splits <= 1) return 0;
  const size_t th = static_cast<size_t>(tokens) * heads * splits;
  return th * (static_cast<size_t>(kv_lora) + 2) * sizeof(float);
}

int32_t mlaDefaultSplits(int32_t tokens, int32_t heads, int32_t max_context) {
  const int64_t base = static_cast<int64_t>(std::max(tokens, 1)) * ((heads + kHeadsPerCta - 1) / kHeadsPerCta);
  const int64_t want = std::max<int64_t>(1, (2 * std::max(smCount(), 1) + base - 1) / base);
  return static_cast<int32_t>(std::clamp<int64_t>(std::min<int64_t>(want, (max_context + 511) / 512), 1, kMaxSplits));
}

MlaPath mlaChosenPath(const MlaAttentionParams& p) {
  if (p.path != MlaPath::kAuto) return p.path;
  return tensorCoreCapable(p) ? MlaPath::kTensorCore : MlaPath::kSimt;
}

cudaError_t launchMlaAttention(const MlaAttentionParams& p, cudaStream_t stream) {
  if (p.tokens <= 0) return cudaSuccess;
  if (p.kv_lora > kMaxKvLora || p.latent_dim % 8 != 0 || p.latent_dim > 640 || p.heads <= 0 || p.max_context <= 0) {
    return cudaErrorInvalidValue;
  }
  const MlaPath path = mlaChosenPath(p);
  if (path == MlaPath::kTensorCore && !tensorCoreCapable(p)) return cudaErrorInvalidValue;
  if (path == MlaPath::kSimt && p.q == nullptr) return cudaErrorInvalidValue;
  const int32_t groups = (p.heads + kHeadsPerCta - 1) / kHeadsPerCta;
  int32_t splits = p.splits > 0 ? p.splits : mlaDefaultSplits(p.tokens, p.heads, p.max_context);
  splits = std::clamp(splits, 1, kMaxSplits);
  while (splits > 1 && (p.workspace == nullptr || mlaWorkspaceBytes(p.tokens, p.heads, p.kv_lora, splits) > p.workspace_bytes)) {
    --splits;
  }
  // Every split gets whole tiles.
  int32_t chunk = (p.max_context + splits - 1) / splits;
  chunk = (chunk + kTileKeys - 1) / kTileKeys * kTileKeys;
  splits = (p.max_context + chunk - 1) / chunk;
  float* partial_o = static_cast<float*>(p.workspace);
  float* partial_ml = splits > 1 ? partial_o + static_cast<size_t>(p.tokens) * p.heads * splits * p.kv_lora : nullptr;
  const dim3 grid(static_cast<unsigned>(p.tokens), static_cast<unsigned>(groups), static_cast<unsigned>(splits));
  cudaError_t e = cudaSuccess;
  if (path == MlaPath::kTensorCore) {
    const size_t bytes = tcLayout(p.latent_dim, p.kv_lora).total;
    e = cudaFuncSetAttribute(mlaTensorCoreKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
    if (e != cudaSuccess) return e;
    mlaTensorCoreKernel<<<grid, kThreads, bytes, stream>>>(p, chunk, partial_o, partial_ml);
  } else if (p.pool_bf16) {
    const size_t bytes = simtSmemBytes(p.latent_dim, true);
    e = cudaFuncSetAttribute(mlaSimtKernel<__nv_bfloat16>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
    if (e != cudaSuccess) return e;
    mlaSimtKernel<__nv_bfloat16><<<grid, kThreads, bytes, stream>>>(p, chunk, partial_o, partial_ml);
  } else {
    const size_t bytes = simtSmemBytes(p.latent_dim, false);
    e = cudaFuncSetAttribute(mlaSimtKernel<float>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
    if (e != cudaSuccess) return e;
    mlaSimtKernel<float><<<grid, kThreads, bytes, stream>>>(p, chunk, partial_o, partial_ml);
  }
  if ((e = cudaGetLastError()) != cudaSuccess || splits == 1) return e;
  mlaMergeKernel<<<static_cast<unsigned>(static_cast<int64_t>(p.tokens) * p.heads), 128, 0, stream>>>(p, splits, partial_o,
                                                                                                      partial_ml);
  return cudaGetLastError();
}

}  // namespace lg::kernels
