// The online-softmax step shared by the attention kernels (mla_attention.cc,
// mha_attention.cc), in their transposed layout: scores and probabilities are
// [key][query lane], so a 16-lane vector holds 16 query rows, the softmax is
// lane-wise and the causal mask is a lane compare.
#pragma once

#include <cstdint>
#include <limits>

#include "engine/cpu/simd.h"

namespace lg::engine::cpu {

// One tile of nk keys starting at position k0, for rp query lanes (a multiple
// of 16). On entry st[j * rp + r] is the score of key k0 + j for lane r; on
// exit it is its unnormalized probability exp(score - running max), 0 where
// the key is past the lane's position lane_pos[r] (padding lanes hold -1 and
// see no key). mx, sum: the running max and sum per lane, updated; corr: the
// factor by which each lane's output accumulated so far must be multiplied.
// `unmasked`: every lane sees every key of the tile (the tile lies wholly
// below the diagonal), so the mask is skipped; padding lanes then hold
// harmless finite values that are never read.
// Returns whether any factor differs from 1 (else the rescale can be skipped).
inline bool onlineSoftmaxTile(float* st, int64_t rp, int nk, int32_t k0, const int32_t* lane_pos, bool unmasked,
                              float* mx, float* sum, float* corr) {
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  bool rescale = false;
  for (int64_t g = 0; g < rp / 16; ++g) {
    const __m512i pos = _mm512_load_si512(lane_pos + 16 * g);
    __m512 tile_max = neg_inf;
    if (unmasked) {
      for (int j = 0; j < nk; ++j) tile_max = _mm512_max_ps(tile_max, _mm512_loadu_ps(st + j * rp + 16 * g));
    } else {
      for (int j = 0; j < nk; ++j) {
        const __mmask16 valid = _mm512_cmpge_epi32_mask(pos, _mm512_set1_epi32(k0 + j));
        tile_max = _mm512_mask_max_ps(tile_max, valid, tile_max, _mm512_loadu_ps(st + j * rp + 16 * g));
      }
    }
    const __m512 old_max = _mm512_loadu_ps(mx + 16 * g);
    const __m512 new_max = _mm512_max_ps(old_max, tile_max);
    const __mmask16 seen = _mm512_cmp_ps_mask(new_max, neg_inf, _CMP_GT_OQ);
    // Lanes that have seen no key yet keep a factor of 1 (and -inf - -inf is NaN).
    const __m512 c = _mm512_mask_blend_ps(seen, _mm512_set1_ps(1.0f), expNonPositive(_mm512_sub_ps(old_max, new_max)));
    const __mmask16 changed = _mm512_cmp_ps_mask(c, _mm512_set1_ps(1.0f), _CMP_NEQ_UQ);
    rescale |= changed != 0;
    __m512 s = _mm512_mul_ps(_mm512_loadu_ps(sum + 16 * g), c);
    if (unmasked) {
      for (int j = 0; j < nk; ++j) {
        const __m512 p = expNonPositive(_mm512_sub_ps(_mm512_loadu_ps(st + j * rp + 16 * g), new_max));
        _mm512_storeu_ps(st + j * rp + 16 * g, p);
        s = _mm512_add_ps(s, p);
      }
    } else {
      for (int j = 0; j < nk; ++j) {
        const __mmask16 valid = _mm512_cmpge_epi32_mask(pos, _mm512_set1_epi32(k0 + j)) & seen;
        const __m512 p =
            _mm512_maskz_mov_ps(valid, expNonPositive(_mm512_sub_ps(_mm512_loadu_ps(st + j * rp + 16 * g), new_max)));
        _mm512_storeu_ps(st + j * rp + 16 * g, p);
        s = _mm512_add_ps(s, p);
      }
    }
    _mm512_storeu_ps(sum + 16 * g, s);
    _mm512_storeu_ps(mx + 16 * g, new_max);
    _mm512_storeu_ps(corr + 16 * g, c);
  }
  return rescale;
}

// ot[col * rp + r] *= corr[r] for col < cols: the output accumulated so far,
// brought to the new running max.
inline void rescaleColumns(float* ot, int64_t cols, int64_t rp, const float* corr) {
  for (int64_t col = 0; col < cols; ++col) {
    float* o = ot + col * rp;
    for (int64_t g = 0; g < rp / 16; ++g) {
      _mm512_storeu_ps(o + 16 * g, _mm512_mul_ps(_mm512_loadu_ps(o + 16 * g), _mm512_loadu_ps(corr + 16 * g)));
    }
  }
}

}  // namespace lg::engine::cpu
