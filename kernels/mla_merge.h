// The log-sum-exp merge of split attention partials, shared by the merge
// kernel (mla_attention.cu) and host code (the CPU tests check it against an
// unsplit softmax). A partial z holds, for one (query, head), the max m_z of
// its scores, the sum l_z of e^(s - m_z) over its keys and the unnormalized
// output o_z = sum e^(s - m_z) v. An empty partial has m_z = -inf, l_z = 0.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define LG_HOST_DEVICE __host__ __device__
#else
#define LG_HOST_DEVICE
#endif

namespace lg::kernels {

// The weight of each partial's o_z in the merged output: e^(m_z - m) / l with
// m = max m_z and l = sum l_z e^(m_z - m). Returns false when every partial
// is empty (then the weights are zero).
LG_HOST_DEVICE inline bool mlaMergeWeights(const float* m, const float* l, int32_t n, int64_t stride, float* w) {
  float mx = -INFINITY;
  for (int32_t z = 0; z < n; ++z) mx = fmaxf(mx, m[z * stride]);
  if (mx == -INFINITY) {
    for (int32_t z = 0; z < n; ++z) w[z] = 0.0f;
    return false;
  }
  float total = 0.0f;
  for (int32_t z = 0; z < n; ++z) {
    w[z] = l[z * stride] > 0.0f ? expf(m[z * stride] - mx) : 0.0f;
    total += l[z * stride] * w[z];
  }
  for (int32_t z = 0; z < n; ++z) w[z] /= total;
  return true;
}

}  // namespace lg::kernels
