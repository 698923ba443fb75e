// One cached generation step of every layer and the LM head, as one TensorFlow CPU op (XlnetTfDecodeStep).
//
// The same numbers as `XLNetLayer.decode_step` for each layer, then `LMHead.transposed_logits` of the query rows
// (xlnet_tf/inference/decoding.py), to float32 rounding: the two streams of a new position (row 0: the content
// stream at t, whose key and value are written into cache slot `slot`; row 1: the query stream at t + 1) through
// the two-stream relative attention over the cache, the output projection, residual and LayerNorm, and the
// feed-forward sub-layer. Weights and the cache are T (float32, or bfloat16 for a bfloat16 model); every product
// sums in float32 and every activation between products stays float32 (a bfloat16 model's XLA step rounds them
// to bfloat16). Masks: **True = may NOT attend**; a blocked slot scores -1e30, as in XLA's step, so it weighs
// exactly 0 (its value row is not read).
//
// Why: a step at one position streams every weight once (about 30 MB per token for 4 x 256 with 8,000 words and
// a 768-slot cache) and XLA's CPU program of the step runs some 50 dependent small products, each a thread-pool
// dispatch, with the threads idle a fifth of the time (bench/speed/README.md, "Generation"). Here the step is a
// list of phases (a product, the attention, a LayerNorm), each cut into chunks that the calling thread and our
// helper threads (`Helpers`) claim in order from one counter; a chunk starts once every chunk of the phases before
// it is done
// (spinning), so the threads never wait on a pool dispatch, and no thread ever waits on a chunk nobody claimed:
// a helper that starts late only finds less to do. Products of few rows are bound by reading their weights, and a
// bfloat16 model's weights are half the bytes (its XLA step converts them back to float32 for each product).
//
// Inputs: the chosen tokens [B], their position t and the ring's mask real [B, R] (True = a real position); the op
// writes slot t % R, reads the rows' inputs (the token's embedding, the mask embedding) and builds both rows'
// windows itself (as decoding.decode_position does with TensorFlow ops, each an executor dispatch in a graph loop).
// Layouts (arranged once before a decoding loop, xlnet_tf/inference/native_step.py): every product's weight as
// [out, in] (a row per output, read contiguously: the word embedding [V, D] as it is stored); the position keys
// [H, R + 1, Dh] (row p encodes the distance R - p: slot j, at distance (t - j) mod R, reads row R - that for the
// content row and the row before for the query row). A bfloat16 weight whose rows are multiples of 16 is read 16
// values at a time, split into even and odd halves without a shuffle (`Split16`).

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#ifdef __AVX2__
#include <immintrin.h>
#endif

#include "bfloat16_bits.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace xlnet_tf {
namespace {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpInputList;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Status;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::errors::InvalidArgument;
namespace shape_inference = ::tensorflow::shape_inference;

constexpr float kMaskValue = -1e30f;  // xlnet_tf/layers/attention.py MASK_VALUE
constexpr int64_t kMaxHead = 256;     // d_head (a query row's biased copies live on the stack)

// ------------------------------------------------------------------------------------------------ arithmetic

// e^x for x <= 88 to about 1 ulp (Cephes' expf polynomial); 0 below -87.3 (TensorFlow's threads flush the
// denormals there to 0 too). Branch-free, so loops over it vectorize.
inline float Exp(float x) {
  const float clamped = std::fmin(std::fmax(x, -87.3f), 88.0f);
  // n = round(x / ln 2) by the float adder (2^23 + 2^22 leaves no fraction bits): no library call, vectorizes
  const float n = (clamped * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = clamped - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const float scaled = p * __builtin_bit_cast(float, (static_cast<int32_t>(n) + 127) << 23);
  return x < -87.3f ? 0.0f : (x == x ? scaled : x);  // a NaN stays NaN
}

// The tanh form of the gelu, 0.5 x (1 + tanh(u)) with u = sqrt(2/pi) (x + 0.044715 x^3), written x / (1 + e^-2u)
// (the same function, without the cancellation of 1 + tanh(u) for negative u).
inline float GeluTanh(float x) {
  const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  return x / (1.0f + Exp(-2.0f * u));
}

#ifdef __AVX2__
inline __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 Load8(const Eigen::bfloat16* p) {  // a bfloat16's bits above 16 zero bits are its float32
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline float Sum8(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}
// Exp for eight lanes, the same arithmetic as Exp (the compiler does not vectorize Exp's selects)
inline __m256 Exp8(__m256 x) {
  const __m256 clamped = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.0f));
  const __m256 shift = _mm256_set1_ps(12582912.0f);
  const __m256 n = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(clamped, _mm256_set1_ps(1.44269504088896341f)), shift),
                                 shift);
  const __m256 r = _mm256_add_ps(_mm256_sub_ps(clamped, _mm256_mul_ps(n, _mm256_set1_ps(0.693359375f))),
                                 _mm256_mul_ps(n, _mm256_set1_ps(2.12194440e-4f)));
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  for (const float c : {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f}) {
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(c));
  }
  p = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(p, r), r), r), _mm256_set1_ps(1.0f));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  const __m256 scaled = _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
  const __m256 under = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_LT_OQ);  // false for NaN
  const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  return _mm256_blendv_ps(_mm256_andnot_ps(under, scaled), x, nan);
}

// Eight rows against one vector: lane k = sum_d rows[k][d] q[d] (dh a multiple of 8)
template <typename T>
inline __m256 Dot8(const T* const rows[8], const float* q, int64_t dh) {
  __m256 a[8];
  for (int k = 0; k < 8; ++k) a[k] = _mm256_setzero_ps();
  for (int64_t d = 0; d < dh; d += 8) {
    const __m256 qv = _mm256_loadu_ps(q + d);
    for (int k = 0; k < 8; ++k) a[k] = _mm256_fmadd_ps(Load8(rows[k] + d), qv, a[k]);
  }
  const __m256 s0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  const __m256 s1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(s0, s1, 0x20), _mm256_permute2f128_ps(s0, s1, 0x31));
}
#endif

// sum_i w[i] x[i] (n elements; x float32)
template <typename T>
inline float Dot(const T* w, const float* x, int64_t n) {
  int64_t i = 0;
  float total = 0.f;
#ifdef __AVX2__
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_fmadd_ps(Load8(w + i), _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(Load8(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
    a2 = _mm256_fmadd_ps(Load8(w + i + 16), _mm256_loadu_ps(x + i + 16), a2);
    a3 = _mm256_fmadd_ps(Load8(w + i + 24), _mm256_loadu_ps(x + i + 24), a3);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(Load8(w + i), _mm256_loadu_ps(x + i), a0);
  total = Sum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
#endif
  for (; i < n; ++i) total += Widen(w[i]) * x[i];
  return total;
}

// Two rows against one weight row, the weight read once: (sum_i w[i] x0[i], sum_i w[i] x1[i])
template <typename T>
inline void Dot2(const T* w, const float* x0, const float* x1, int64_t n, float* out0, float* out1) {
  int64_t i = 0;
  float s0 = 0.f, s1 = 0.f;
#ifdef __AVX2__
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), b0 = _mm256_setzero_ps(), b1 = _mm256_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    const __m256 w0 = Load8(w + i), w1 = Load8(w + i + 8);
    a0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x0 + i), a0);
    a1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x0 + i + 8), a1);
    b0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x1 + i), b0);
    b1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x1 + i + 8), b1);
  }
  s0 = Sum8(_mm256_add_ps(a0, a1));
  s1 = Sum8(_mm256_add_ps(b0, b1));
#endif
  for (; i < n; ++i) {
    const float v = Widen(w[i]);
    s0 += v * x0[i];
    s1 += v * x1[i];
  }
  *out0 = s0;
  *out1 = s1;
}

#ifdef __AVX2__
// 16 bfloat16 values as float32 without a shuffle: the even-indexed 8 (each 32-bit lane's low half moved up) and
// the odd-indexed 8 (its high half as it is). A dot product with such a row reads the other side deinterleaved the
// same way (`Deinterleave`): the same products, summed in another order.
inline void Split16(const Eigen::bfloat16* p, __m256* even, __m256* odd) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  *even = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  *odd = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
}

// out: x (n a multiple of 16) with each block of 16 as its 8 even-indexed values, then its 8 odd-indexed ones
inline void Deinterleave(const float* x, int64_t n, float* out) {
  for (int64_t b = 0; b < n; b += 16) {
    for (int i = 0; i < 8; ++i) {
      out[b + i] = x[b + 2 * i];
      out[b + 8 + i] = x[b + 2 * i + 1];
    }
  }
}

// Dot2 of a bfloat16 row against rows deinterleaved (n a multiple of 16)
inline void Dot2Split(const Eigen::bfloat16* w, const float* x0, const float* x1, int64_t n, float* out0,
                      float* out1) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), b0 = _mm256_setzero_ps(), b1 = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    __m256 even, odd;
    Split16(w + i, &even, &odd);
    a0 = _mm256_fmadd_ps(even, _mm256_loadu_ps(x0 + i), a0);
    a1 = _mm256_fmadd_ps(odd, _mm256_loadu_ps(x0 + i + 8), a1);
    b0 = _mm256_fmadd_ps(even, _mm256_loadu_ps(x1 + i), b0);
    b1 = _mm256_fmadd_ps(odd, _mm256_loadu_ps(x1 + i + 8), b1);
  }
  *out0 = Sum8(_mm256_add_ps(a0, a1));
  *out1 = Sum8(_mm256_add_ps(b0, b1));
}

inline float DotSplit(const Eigen::bfloat16* w, const float* x, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    __m256 even, odd;
    Split16(w + i, &even, &odd);
    a0 = _mm256_fmadd_ps(even, _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(odd, _mm256_loadu_ps(x + i + 8), a1);
  }
  return Sum8(_mm256_add_ps(a0, a1));
}

// Dot8 of bfloat16 rows against q deinterleaved (dh a multiple of 16)
inline __m256 Dot8Split(const Eigen::bfloat16* const rows[8], const float* q, int64_t dh) {
  __m256 a[8];
  for (int k = 0; k < 8; ++k) a[k] = _mm256_setzero_ps();
  for (int64_t d = 0; d < dh; d += 16) {
    const __m256 qe = _mm256_loadu_ps(q + d), qo = _mm256_loadu_ps(q + d + 8);
    for (int k = 0; k < 8; ++k) {
      __m256 even, odd;
      Split16(rows[k] + d, &even, &odd);
      a[k] = _mm256_fmadd_ps(odd, qo, _mm256_fmadd_ps(even, qe, a[k]));
    }
  }
  const __m256 s0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  const __m256 s1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(s0, s1, 0x20), _mm256_permute2f128_ps(s0, s1, 0x31));
}
#endif

// Whether a bfloat16 weight of `n` columns takes the split kernels
template <typename T>
constexpr bool Splits(int64_t n) {
#ifdef __AVX2__
  return std::is_same_v<T, Eigen::bfloat16> && n % 16 == 0;
#else
  return false;
#endif
}

// acc[i] += p * v[i]
template <typename T>
inline void Axpy(float p, const T* v, float* acc, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) acc[i] += p * Widen(v[i]);
}

// x <- LayerNorm(x + residual) over d (as the layer norm op: the mean, then the mean of squared differences)
inline void AddNorm(const float* residual, const float* gamma, const float* beta, float eps, int64_t d, float* x) {
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < d; ++i) {
    x[i] += residual[i];
    sum += x[i];
  }
  const float mean = sum / static_cast<float>(d);
  float squares = 0.f;
#pragma omp simd reduction(+ : squares)
  for (int64_t i = 0; i < d; ++i) squares += (x[i] - mean) * (x[i] - mean);
  const float rstd = 1.f / std::sqrt(squares / static_cast<float>(d) + eps);
#pragma omp simd
  for (int64_t i = 0; i < d; ++i) x[i] = (x[i] - mean) * rstd * gamma[i] + beta[i];
}

// One query row's scores over the slots of one head: (q + r_w).k_j + (q + r_r).pos[columns[j] - row] + ef, times
// `scale`; a blocked slot gets -1e30. kh [R, Dh] keys, ph [P, Dh] position keys; qw, qr the biased query.
template <typename T>
void Scores(const T* kh, const T* ph, const int32_t* columns, int row, const float* qw, const float* qr, float ef,
            float scale, const bool* blocked, int64_t slots, int64_t dh, float* s) {
  int64_t j = 0;
#ifdef __AVX2__
  if (dh % 8 == 0) {
    const __m256 bias = _mm256_set1_ps(ef), scaled = _mm256_set1_ps(scale);
    float qw_split[kMaxHead], qr_split[kMaxHead];
    if constexpr (Splits<T>(16)) {
      if (Splits<T>(dh)) {
        Deinterleave(qw, dh, qw_split);
        Deinterleave(qr, dh, qr_split);
      }
    }
    for (; j + 8 <= slots; j += 8) {
      uint64_t closed;  // eight blocked slots: no score to compute
      std::memcpy(&closed, blocked + j, 8);
      if (closed == 0x0101010101010101ull) {
        _mm256_storeu_ps(s + j, _mm256_set1_ps(kMaskValue));
        continue;
      }
      const T* keys[8];
      const T* pos[8];
      for (int k = 0; k < 8; ++k) {
        keys[k] = kh + (j + k) * dh;
        pos[k] = ph + (columns[j + k] - row) * dh;
      }
      __m256 total;
      if constexpr (Splits<T>(16)) {
        total = Splits<T>(dh) ? _mm256_add_ps(Dot8Split(keys, qw_split, dh), Dot8Split(pos, qr_split, dh))
                              : _mm256_add_ps(Dot8(keys, qw, dh), Dot8(pos, qr, dh));
      } else {
        total = _mm256_add_ps(Dot8(keys, qw, dh), Dot8(pos, qr, dh));
      }
      _mm256_storeu_ps(s + j, _mm256_mul_ps(_mm256_add_ps(total, bias), scaled));
    }
  }
#endif
  for (; j < slots; ++j) s[j] = (Dot(kh + j * dh, qw, dh) + Dot(ph + (columns[j] - row) * dh, qr, dh) + ef) * scale;
  for (j = 0; j < slots; ++j) {
    if (blocked[j]) s[j] = kMaskValue;
  }
}

// out0 = sum_j p0[j] v_j, out1 = sum_j p1[j] v_j over vh [R, Dh] (slots of weight 0 in both skipped)
template <typename T>
void WeightedValues(const T* vh, const float* p0, const float* p1, int64_t slots, int64_t dh, float* out0,
                    float* out1) {
  int64_t first = 0;
#ifdef __AVX2__
  if constexpr (Splits<T>(16)) {
    if (Splits<T>(dh)) {  // 32 columns at a time as even and odd halves of two blocks of 16, interleaved at the end
      for (; first < dh; first += 32) {
        const int n = static_cast<int>(std::min<int64_t>(32, dh - first) / 16);
        __m256 a[4], b[4];
        for (int v = 0; v < 4; ++v) a[v] = b[v] = _mm256_setzero_ps();
        for (int64_t j = 0; j < slots; ++j) {
          if (p0[j] == 0.f && p1[j] == 0.f) continue;
          const __m256 w0 = _mm256_set1_ps(p0[j]), w1 = _mm256_set1_ps(p1[j]);
          for (int v = 0; v < n; ++v) {
            __m256 even, odd;
            Split16(vh + j * dh + first + 16 * v, &even, &odd);
            a[2 * v] = _mm256_fmadd_ps(w0, even, a[2 * v]);
            a[2 * v + 1] = _mm256_fmadd_ps(w0, odd, a[2 * v + 1]);
            b[2 * v] = _mm256_fmadd_ps(w1, even, b[2 * v]);
            b[2 * v + 1] = _mm256_fmadd_ps(w1, odd, b[2 * v + 1]);
          }
        }
        for (int v = 0; v < n; ++v) {
          for (auto [acc, out] : {std::pair{a, out0}, {b, out1}}) {
            const __m256 lo = _mm256_unpacklo_ps(acc[2 * v], acc[2 * v + 1]);
            const __m256 hi = _mm256_unpackhi_ps(acc[2 * v], acc[2 * v + 1]);
            _mm256_storeu_ps(out + first + 16 * v, _mm256_permute2f128_ps(lo, hi, 0x20));
            _mm256_storeu_ps(out + first + 16 * v + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
          }
        }
      }
      return;
    }
  }
  if (dh % 8 == 0) {
    for (; first < dh; first += 32) {  // 32 columns at a time: 8 accumulators in registers
      const int n = static_cast<int>(std::min<int64_t>(32, dh - first) / 8);
      __m256 a[4], b[4];
      for (int v = 0; v < 4; ++v) a[v] = b[v] = _mm256_setzero_ps();
      for (int64_t j = 0; j < slots; ++j) {
        if (p0[j] == 0.f && p1[j] == 0.f) continue;
        const __m256 w0 = _mm256_set1_ps(p0[j]), w1 = _mm256_set1_ps(p1[j]);
        const T* row = vh + j * dh + first;
        for (int v = 0; v < n; ++v) {
          const __m256 x = Load8(row + 8 * v);
          a[v] = _mm256_fmadd_ps(w0, x, a[v]);
          b[v] = _mm256_fmadd_ps(w1, x, b[v]);
        }
      }
      for (int v = 0; v < n; ++v) {
        _mm256_storeu_ps(out0 + first + 8 * v, a[v]);
        _mm256_storeu_ps(out1 + first + 8 * v, b[v]);
      }
    }
    return;
  }
#endif
  std::fill(out0, out0 + dh, 0.f);
  std::fill(out1, out1 + dh, 0.f);
  for (int64_t j = 0; j < slots; ++j) {
    if (p0[j] != 0.f) Axpy(p0[j], vh + j * dh, out0, dh);
    if (p1[j] != 0.f) Axpy(p1[j], vh + j * dh, out1, dh);
  }
}

// p[j] = e^(s[j] - top) for j < n; returns their sum
inline float ExpShifted(float* s, int64_t n, float top) {
  int64_t j = 0;
  float total = 0.f;
#ifdef __AVX2__
  __m256 sum = _mm256_setzero_ps();
  const __m256 m = _mm256_set1_ps(top);
  for (; j + 8 <= n; j += 8) {
    const __m256 p = Exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), m));
    _mm256_storeu_ps(s + j, p);
    sum = _mm256_add_ps(sum, p);
  }
  total = Sum8(sum);
#endif
  for (; j < n; ++j) {
    s[j] = Exp(s[j] - top);
    total += s[j];
  }
  return total;
}

// z[i] = gelu_tanh(z[i] + bias[i]) (gelu) or max(z[i] + bias[i], 0)
template <typename T>
inline void BiasActivation(bool gelu, const T* bias, int64_t n, float* z) {
  int64_t i = 0;
  if (!gelu) {
    for (; i < n; ++i) z[i] = std::max(z[i] + Widen(bias[i]), 0.f);
    return;
  }
#ifdef __AVX2__
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_add_ps(_mm256_loadu_ps(z + i), Load8(bias + i));
    const __m256 cube = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(x, x), x), _mm256_set1_ps(0.044715f));
    const __m256 u = _mm256_mul_ps(_mm256_set1_ps(0.7978845608028654f), _mm256_add_ps(x, cube));
    const __m256 e = Exp8(_mm256_mul_ps(_mm256_set1_ps(-2.0f), u));
    _mm256_storeu_ps(z + i, _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e)));
  }
#endif
  for (; i < n; ++i) z[i] = GeluTanh(z[i] + Widen(bias[i]));
}

// ------------------------------------------------------------------------------------------------ the phases

struct Phase {
  int64_t chunks;
  std::function<void(int64_t)> run;  // chunk index in [0, chunks)
};

struct Claims {
  std::atomic<int64_t> next{0};  // the next chunk to claim (all phases in one sequence)
  std::atomic<int64_t> done{0};  // chunks finished
  std::atomic<int> joined{0};     // helpers that joined
};

inline void Pause() {
#ifdef __AVX2__
  _mm_pause();
#endif
}

// Claims chunks in order until none is left; a chunk of phase p starts once `done` reaches the first chunk of p.
void Work(const std::shared_ptr<Claims>& claims, const std::vector<Phase>* phases, const std::vector<int64_t>* starts,
          int64_t total) {
  size_t p = 0;
  for (;;) {
    const int64_t c = claims->next.fetch_add(1, std::memory_order_relaxed);
    if (c >= total) return;  // `phases` may be gone from here on: touch nothing but `claims`
    while ((*starts)[p + 1] <= c) ++p;
    while (claims->done.load(std::memory_order_acquire) < (*starts)[p]) Pause();
    (*phases)[p].run(c - (*starts)[p]);
    claims->done.fetch_add(1, std::memory_order_acq_rel);
  }
}

// What a helper needs to join a step's work. `claims` outlives the step; `phases` and `starts` are the caller's,
// read by a helper only while a chunk is left to claim (the caller waits for every claimed chunk).
struct Job {
  std::shared_ptr<Claims> claims;
  const std::vector<Phase>* phases = nullptr;
  const std::vector<int64_t>* starts = nullptr;
  int64_t total = 0;
  int admitted = 0;
};

// Threads of our own that join each step. TensorFlow's intra-op pool sleeps between the steps of a decoding loop
// (a helper scheduled there started ~400 us late, measured with 2 inter-op threads), and handing a helper to the
// op's inter-op runner took ~150 us per step on average, as if the runner ran it inline at times (the caller then
// doing the step alone). A helper spins for a new job for kSpin after each one (a loop's next step comes
// 0.1-0.2 ms after the last), then sleeps until the next.
class Helpers {
 public:
  static Helpers& Get() {
    static Helpers* helpers = new Helpers();  // never destroyed: its threads are detached and live with the process
    return *helpers;
  }

  // Starts threads up to `n`, hands them `job` and returns.
  void Publish(int n, Job job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (; threads_ < n; ++threads_) std::thread([this] { Loop(); }).detach();
      job_ = std::move(job);
      generation_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
  }

 private:
  static constexpr std::chrono::microseconds kSpin{2000};

  void Loop() {
    uint64_t seen = generation_.load(std::memory_order_acquire);
    for (;;) {
      const auto deadline = std::chrono::steady_clock::now() + kSpin;
      for (int i = 0; generation_.load(std::memory_order_acquire) == seen; ++i) {
        if (i % 64 == 0 && std::chrono::steady_clock::now() > deadline) {
          std::unique_lock<std::mutex> lock(mu_);
          cv_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
          break;
        }
        Pause();
      }
      Job job;
      {
        std::lock_guard<std::mutex> lock(mu_);
        job = job_;
        seen = generation_.load(std::memory_order_acquire);
      }
      if (job.claims && job.claims->joined.fetch_add(1, std::memory_order_relaxed) < job.admitted) {
        Work(job.claims, job.phases, job.starts, job.total);
      }
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> generation_{0};
  Job job_;
  int threads_ = 0;
};

void RunPhases(OpKernelContext* ctx, const std::vector<Phase>& phases) {
  std::vector<int64_t> starts(1, 0);
  for (const Phase& phase : phases) starts.push_back(starts.back() + phase.chunks);
  const int64_t total = starts.back();
  auto claims = std::make_shared<Claims>();
  // as many threads as TensorFlow's intra-op pool has, the caller one of them
  const int helpers = std::max(0, std::min(ctx->device()->tensorflow_cpu_worker_threads()->num_threads - 1, 7));
  if (helpers > 0) Helpers::Get().Publish(helpers, Job{claims, &phases, &starts, total, helpers});
  Work(claims, &phases, &starts, total);
  while (claims->done.load(std::memory_order_acquire) < total) Pause();
}

// Output rows per chunk of a product reading `in` weights per row: about 32 KB of weights per chunk.
inline int64_t RowsPerChunk(int64_t in, int64_t bytes) { return std::max<int64_t>(1, (32 << 10) / (in * bytes)); }

// Outputs [first, last) of rows x [rows, in] (row stride x_stride) times w [out, in] into y [rows, out]: two rows
// per weight row read by dot2(w, x0, x1, n, &y0, &y1), an odd last row by dot(w, x, n).
template <typename T, typename Dot2Fn, typename DotFn>
void RowProducts(const T* w, int64_t first, int64_t last, int64_t out, int64_t in, const float* x, int64_t rows,
                 int64_t x_stride, float* y, Dot2Fn dot2, DotFn dot) {
  for (int64_t o = first; o < last; ++o) {
    const T* row = w + o * in;
    int64_t r = 0;
    for (; r + 2 <= rows; r += 2) {
      dot2(row, x + r * x_stride, x + (r + 1) * x_stride, in, &y[r * out + o], &y[(r + 1) * out + o]);
    }
    for (; r < rows; ++r) y[r * out + o] = dot(row, x + r * x_stride, in);
  }
}

// A product of `rows` rows (x: rows x in, row stride `in`) with w [out, in] into y (rows x out), as chunks of
// output rows appended to `phases`; `finish(first, count)` runs on each chunk's outputs after them.
template <typename T>
void AddProduct(std::vector<Phase>* phases, const T* w, int64_t out, int64_t in, const float* x, int64_t rows,
                int64_t x_stride, float* y, std::function<void(int64_t, int64_t)> finish = nullptr) {
  const int64_t per = RowsPerChunk(in, sizeof(T));
  phases->push_back(Phase{(out + per - 1) / per, [=](int64_t chunk) {
    const int64_t first = chunk * per, last = std::min(out, first + per);
    bool done = false;
#ifdef __AVX2__
    if constexpr (Splits<T>(16)) {
      if (Splits<T>(in)) {  // x deinterleaved once per chunk
        thread_local std::vector<float> split;
        split.resize(rows * in);
        for (int64_t r = 0; r < rows; ++r) Deinterleave(x + r * x_stride, in, &split[r * in]);
        RowProducts(w, first, last, out, in, split.data(), rows, in, y, [](auto... a) { Dot2Split(a...); },
                    [](auto... a) { return DotSplit(a...); });
        done = true;
      }
    }
#endif
    if (!done) {
      RowProducts(w, first, last, out, in, x, rows, x_stride, y, [](auto... a) { Dot2(a...); },
                  [](auto... a) { return Dot(a...); });
    }
    if (finish) finish(first, last - first);
  }});
}

// ------------------------------------------------------------------------------------------------ the op

template <typename T>
class DecodeStepOp : public OpKernel {
 public:
  explicit DecodeStepOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("N", &layers_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("scale", &scale_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("epsilon", &epsilon_));
    std::string activation;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("activation", &activation));
    gelu_ = activation == "gelu";
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& token_t = ctx->input(0);
    const Tensor& position_t = ctx->input(1);
    const Tensor& real_t = ctx->input(2);
    const Tensor& embedding = ctx->input(ctx->num_inputs() - 3);
    const Tensor& mask_emb = ctx->input(ctx->num_inputs() - 2);
    const Tensor& logit_bias = ctx->input(ctx->num_inputs() - 1);
    OP_REQUIRES(ctx, token_t.dims() == 1 && position_t.dims() == 0 && real_t.dims() == 2 &&
                         real_t.dim_size(0) == token_t.dim_size(0) && embedding.dims() == 2,
                InvalidArgument("XlnetTfDecodeStep: token [B], a scalar position, real [B, R] and embedding [V, D] "
                                "expected"));
    const int64_t batch = token_t.dim_size(0), d = embedding.dim_size(1);
    OpInputList keys, values, qkv, position_keys, attention_biases, output, ff_in, ff_in_bias, ff_out, ff_out_bias,
        norms;
    for (auto [name, list] : {std::pair{"keys", &keys}, {"values", &values}, {"qkv", &qkv},
                              {"position_keys", &position_keys}, {"attention_biases", &attention_biases},
                              {"output", &output}, {"ff_in", &ff_in}, {"ff_in_bias", &ff_in_bias},
                              {"ff_out", &ff_out}, {"ff_out_bias", &ff_out_bias}, {"norms", &norms}}) {
      OP_REQUIRES_OK(ctx, ctx->input_list(name, list));
    }

    const Tensor& k0 = keys[0];
    OP_REQUIRES(ctx, k0.dims() == 4 && k0.dim_size(0) == batch,
                InvalidArgument("XlnetTfDecodeStep: keys must be [B, H, R, Dh]"));
    const int64_t heads = k0.dim_size(1), slots = k0.dim_size(2), dh = k0.dim_size(3), width = heads * dh;
    const int64_t inner = ff_in[0].dim_size(0), vocab = embedding.dim_size(0);
    const int64_t positions = position_keys[0].dims() == 3 ? position_keys[0].dim_size(1) : 0;
    OP_REQUIRES(ctx, dh <= kMaxHead, InvalidArgument("XlnetTfDecodeStep: d_head up to ", kMaxHead));
    for (int l = 0; l < layers_; ++l) {
      const std::vector<std::pair<const Tensor*, TensorShape>> expected = {
          {&keys[l], TensorShape({batch, heads, slots, dh})}, {&values[l], TensorShape({batch, heads, slots, dh})},
          {&qkv[l], TensorShape({3 * width, d})}, {&position_keys[l], TensorShape({heads, positions, dh})},
          {&attention_biases[l], TensorShape({4, heads, dh})}, {&output[l], TensorShape({d, width})},
          {&ff_in[l], TensorShape({inner, d})}, {&ff_in_bias[l], TensorShape({inner})},
          {&ff_out[l], TensorShape({d, inner})}, {&ff_out_bias[l], TensorShape({d})},
          {&norms[l], TensorShape({4, d})}};
      for (const auto& [tensor, shape] : expected) {
        OP_REQUIRES(ctx, tensor->shape() == shape,
                    InvalidArgument("XlnetTfDecodeStep: layer ", l, ": a tensor of shape ",
                                    tensor->shape().DebugString(), " where ", shape.DebugString(), " belongs"));
      }
    }
    OP_REQUIRES(ctx, logit_bias.dims() == 1 && logit_bias.dim_size(0) == vocab && mask_emb.NumElements() == d &&
                         real_t.dim_size(1) == slots && positions == slots + 1,
                InvalidArgument("XlnetTfDecodeStep: logit_bias [V], mask_emb [D], real [B, R] and R + 1 position "
                                "keys expected"));
    const int32_t* token = token_t.flat<int32_t>().data();
    for (int64_t b = 0; b < batch; ++b) {
      OP_REQUIRES(ctx, 0 <= token[b] && token[b] < vocab,
                  InvalidArgument("XlnetTfDecodeStep: token[", b, "] = ", token[b], " outside [0, ", vocab, ")"));
    }
    const int64_t t = position_t.scalar<int32_t>()();
    OP_REQUIRES(ctx, t >= 0, InvalidArgument("XlnetTfDecodeStep: position ", t, " < 0"));
    // position t in slot t % R (now real); the content row sees every real slot, the query row (t + 1) not the
    // slot of position t + 1 - R; slot j holds distance (t - j) mod R, row R - distance of the position keys
    const int64_t slot = t % slots, next = (t + 1) % slots;
    Tensor* real_out_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, real_t.shape(), &real_out_t));
    bool* real_out = real_out_t->flat<bool>().data();
    std::memcpy(real_out, real_t.flat<bool>().data(), batch * slots * sizeof(bool));
    std::vector<char> content_mask(batch * slots), query_mask(batch * slots);
    bool* content_blocked = reinterpret_cast<bool*>(content_mask.data());
    bool* query_blocked = reinterpret_cast<bool*>(query_mask.data());
    for (int64_t b = 0; b < batch; ++b) {
      real_out[b * slots + slot] = true;
      for (int64_t j = 0; j < slots; ++j) {
        content_blocked[b * slots + j] = !real_out[b * slots + j];
        query_blocked[b * slots + j] = content_blocked[b * slots + j] || j == next;
      }
    }
    std::vector<int32_t> column_rows(slots);
    for (int64_t j = 0; j < slots; ++j) {
      column_rows[j] = static_cast<int32_t>(slots - ((t - j) % slots + slots) % slots);
    }
    const int32_t* columns = column_rows.data();

    // the caches, written in place where TensorFlow hands over their buffers (else copied once)
    std::vector<T*> cache_k(layers_), cache_v(layers_);
    for (int l = 0; l < layers_; ++l) {
      for (int which = 0; which < 2; ++which) {
        const int input = 3 + which * layers_ + l, out = 2 + which * layers_ + l;
        Tensor* tensor = nullptr;
        int forwarded = -1;
        OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({input}, out, k0.shape(), &tensor, &forwarded));
        if (forwarded < 0) {
          std::memcpy(tensor->flat<T>().data(), ctx->input(input).flat<T>().data(), k0.NumElements() * sizeof(T));
        }
        (which ? cache_v : cache_k)[l] = tensor->flat<T>().data();
      }
    }
    Tensor* logits_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({batch, vocab}), &logits_t));
    float* logits = logits_t->flat<float>().data();

    // float32 activations: x the streams [2B, D], projections [2B, 3W], attention [2B, W], y [2B, D], u [2B, F]
    const int64_t rows = 2 * batch;
    std::vector<float> x(rows * d);  // row 2b: token b's embedding, row 2b + 1: the mask embedding
    for (int64_t b = 0; b < batch; ++b) {
      const T* word = embedding.flat<T>().data() + token[b] * d;
      for (int64_t i = 0; i < d; ++i) {
        x[2 * b * d + i] = Widen(word[i]);
        x[(2 * b + 1) * d + i] = Widen(mask_emb.flat<T>()(i));
      }
    }
    std::vector<float> projected(rows * 3 * width), attended(rows * width), y(rows * d), u(rows * inner);
    std::vector<float> scores(batch * heads * 2 * slots);
    const float eps = epsilon_, scale = scale_;
    const bool gelu = gelu_;

    std::vector<Phase> phases;
    for (int l = 0; l < layers_; ++l) {
      const T* w_qkv = qkv[l].flat<T>().data();
      const T* pos = position_keys[l].flat<T>().data();
      const T* biases = attention_biases[l].flat<T>().data();
      const float* norm = norms[l].flat<float>().data();
      T* lk = cache_k[l];
      T* lv = cache_v[l];
      AddProduct(&phases, w_qkv, 3 * width, d, x.data(), rows, d, projected.data());
      // the attention of both rows of one (example, head): the content row's key and value into the slot first
      phases.push_back(Phase{batch * heads, [=, &projected, &attended, &scores](int64_t chunk) {
        const int64_t b = chunk / heads, h = chunk % heads;
        const float* q_rows[2] = {&projected[(2 * b) * 3 * width + h * dh],
                                  &projected[(2 * b + 1) * 3 * width + h * dh]};
        const float* k_new = &projected[(2 * b) * 3 * width + width + h * dh];
        const float* v_new = &projected[(2 * b) * 3 * width + 2 * width + h * dh];
        T* kh = lk + (b * heads + h) * slots * dh;
        T* vh = lv + (b * heads + h) * slots * dh;
        for (int64_t i = 0; i < dh; ++i) {
          Narrow(k_new[i], &kh[slot * dh + i]);
          Narrow(v_new[i], &vh[slot * dh + i]);
        }
        const T* r_w = biases + h * dh;
        const T* r_r = biases + (heads + h) * dh;
        const T* r_s = biases + (2 * heads + h) * dh;
        const T* seg = biases + (3 * heads + h) * dh;
        const T* ph = pos + h * positions * dh;
        float qw[2][kMaxHead], qr[2][kMaxHead], ef[2];
        float* out[2] = {&attended[(2 * b) * width + h * dh], &attended[(2 * b + 1) * width + h * dh]};
        float* s[2] = {&scores[chunk * 2 * slots], &scores[chunk * 2 * slots + slots]};
        const bool* blocked[2] = {content_blocked + b * slots, query_blocked + b * slots};
        for (int row = 0; row < 2; ++row) {
          float e = 0.f;
          for (int64_t i = 0; i < dh; ++i) {
            qw[row][i] = q_rows[row][i] + Widen(r_w[i]);
            qr[row][i] = q_rows[row][i] + Widen(r_r[i]);
            e += (q_rows[row][i] + Widen(r_s[i])) * Widen(seg[i]);
          }
          ef[row] = e;
        }
        for (int row = 0; row < 2; ++row) {
          Scores(kh, ph, columns, row, qw[row], qr[row], ef[row], scale, blocked[row], slots, dh, s[row]);
          float top = kMaskValue;
          for (int64_t j = 0; j < slots; ++j) top = std::max(top, s[row][j]);
          float* sr = s[row];
          const float total = ExpShifted(sr, slots, top);  // a blocked slot's -1e30: exactly 0
          const float inv = 1.f / total;
#pragma omp simd
          for (int64_t j = 0; j < slots; ++j) sr[j] *= inv;
        }
        WeightedValues(vh, s[0], s[1], slots, dh, out[0], out[1]);
      }});
      AddProduct(&phases, output[l].flat<T>().data(), d, width, attended.data(), rows, width, y.data());
      phases.push_back(Phase{rows, [=, &x, &y](int64_t r) {
        AddNorm(&x[r * d], norm, norm + d, eps, d, &y[r * d]);
        std::copy(&y[r * d], &y[r * d] + d, &x[r * d]);
      }});
      const T* b1 = ff_in_bias[l].flat<T>().data();
      AddProduct(&phases, ff_in[l].flat<T>().data(), inner, d, x.data(), rows, d, u.data(),
                 [=, &u](int64_t first, int64_t count) {
                   for (int64_t r = 0; r < rows; ++r) BiasActivation(gelu, b1 + first, count, &u[r * inner + first]);
                 });
      const T* b2 = ff_out_bias[l].flat<T>().data();
      AddProduct(&phases, ff_out[l].flat<T>().data(), d, inner, u.data(), rows, inner, y.data());
      phases.push_back(Phase{rows, [=, &x, &y](int64_t r) {
        for (int64_t i = 0; i < d; ++i) y[r * d + i] += Widen(b2[i]);
        AddNorm(&x[r * d], norm + 2 * d, norm + 3 * d, eps, d, &y[r * d]);
        std::copy(&y[r * d], &y[r * d] + d, &x[r * d]);
      }});
    }
    // the LM head on the query rows (1, 3, ...): logits [B, V]
    const float* bias = logit_bias.flat<float>().data();
    AddProduct(&phases, embedding.flat<T>().data(), vocab, d, x.data() + d, batch, 2 * d, logits,
               [=](int64_t first, int64_t count) {
                 for (int64_t b = 0; b < batch; ++b) {
                   for (int64_t i = first; i < first + count; ++i) logits[b * vocab + i] += bias[i];
                 }
               });
    RunPhases(ctx, phases);
  }

 private:
  int layers_ = 0;
  float scale_ = 1.f, epsilon_ = 1e-12f;
  bool gelu_ = true;
};

REGISTER_OP("XlnetTfDecodeStep")
    .Input("token: int32")
    .Input("position: int32")
    .Input("real: bool")
    .Input("keys: N * T")
    .Input("values: N * T")
    .Input("qkv: N * T")
    .Input("position_keys: N * T")
    .Input("attention_biases: N * T")
    .Input("output: N * T")
    .Input("ff_in: N * T")
    .Input("ff_in_bias: N * T")
    .Input("ff_out: N * T")
    .Input("ff_out_bias: N * T")
    .Input("norms: N * float")
    .Input("embedding: T")
    .Input("mask_emb: T")
    .Input("logit_bias: float")
    .Output("logits: float")
    .Output("real_out: bool")
    .Output("keys_out: N * T")
    .Output("values_out: N * T")
    .Attr("N: int >= 1")
    .Attr("T: {float, bfloat16}")
    .Attr("scale: float")
    .Attr("epsilon: float")
    .Attr("activation: {'gelu', 'relu'}")
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      int n;
      TF_RETURN_IF_ERROR(c->GetAttr("N", &n));
      shape_inference::ShapeHandle token, embedding;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 1, &token));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(c->num_inputs() - 3), 2, &embedding));
      c->set_output(0, c->Matrix(c->Dim(token, 0), c->Dim(embedding, 0)));
      c->set_output(1, c->input(2));
      for (int i = 0; i < 2 * n; ++i) c->set_output(2 + i, c->input(3 + i));
      return Status();
    });

REGISTER_KERNEL_BUILDER(Name("XlnetTfDecodeStep").Device(DEVICE_CPU).TypeConstraint<float>("T"),
                        DecodeStepOp<float>);
REGISTER_KERNEL_BUILDER(Name("XlnetTfDecodeStep").Device(DEVICE_CPU).TypeConstraint<Eigen::bfloat16>("T"),
                        DecodeStepOp<Eigen::bfloat16>);

}  // namespace
}  // namespace xlnet_tf
