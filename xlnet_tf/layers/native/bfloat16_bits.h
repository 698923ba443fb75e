// float32 <-> bfloat16 by their bits, for the ops of this folder: widening is exact; narrowing rounds to nearest
// even as TensorFlow's Cast does (a NaN stays a quiet NaN). Written without branches, so that loops around them
// vectorize.

#ifndef XLNET_TF_LAYERS_NATIVE_BFLOAT16_BITS_H_
#define XLNET_TF_LAYERS_NATIVE_BFLOAT16_BITS_H_

#include <cstdint>
#include <cstring>

#include "Eigen/Core"

namespace xlnet_tf {

inline float Widen(float v) { return v; }
inline float Widen(Eigen::bfloat16 v) {
  uint16_t h;
  std::memcpy(&h, &v, 2);
  return __builtin_bit_cast(float, static_cast<uint32_t>(h) << 16);
}

inline uint16_t RoundToBfloat16(float f) {
  const uint32_t u = __builtin_bit_cast(uint32_t, f);
  return (u & 0x7fffffffu) > 0x7f800000u ? static_cast<uint16_t>((u >> 16) | 0x0040u)
                                         : static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

inline void Narrow(float f, float* out) { *out = f; }
inline void Narrow(float f, Eigen::bfloat16* out) {
  const uint16_t h = RoundToBfloat16(f);
  std::memcpy(out, &h, 2);
}

}  // namespace xlnet_tf

#endif  // XLNET_TF_LAYERS_NATIVE_BFLOAT16_BITS_H_
