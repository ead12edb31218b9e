// Device arithmetic cheaper than the standard functions, shared by the Kokkos variants. Each one
// states its error; none is used by the CPU reference (written independently).
#pragma once

#include "core/Compat.hpp"

namespace kortex {

// 2^x with results below 2^-126 (the smallest normal float) flushed to +0: on CUDA one
// MUFU.EX2 (PTX ex2.approx.ftz.f32, at most 2 ulp from 2^x, the bound CUDA states for exp2f),
// instead of exp2f's scaling around it that keeps subnormal results; elsewhere the standard exp2
// with the same flush. A filter's weights sum to at least the centre's weight 1, so a flushed
// weight (< 1.2e-38) changes no float sum. NaN gives NaN, -inf gives 0.
KOKKOS_INLINE_FUNCTION float exp2Flush(float x) {
#if defined(__CUDA_ARCH__)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return x < -126.0f ? 0.0f : kx::exp2(x);
#endif
}

// e^x by the device's intrinsic: CUDA's __expf (MUFU.EX2 of x log2(e); at most 2 + floor(1.173 |x|)
// ulp, as CUDA states it), the standard exp elsewhere. The multiresolution filter's FastMath variant.
KOKKOS_INLINE_FUNCTION float fastExp(float x) {
#if defined(__CUDA_ARCH__)
  return __expf(x);
#else
  return kx::exp(x);
#endif
}

// log x by the device's intrinsic: CUDA's __logf (MUFU.LG2 of x times ln 2; at most 2^-21.41 absolute
// error for x in [0.5, 2], else 3 ulp as CUDA states it, 3.14 ulp of the exact value as tstCore measured it
// on an H200), the standard log elsewhere. x > 0 normal.
KOKKOS_INLINE_FUNCTION float fastLog(float x) {
#if defined(__CUDA_ARCH__)
  return __logf(x);
#else
  return kx::math::log(x);
#endif
}

// a / b by the device's intrinsic: CUDA's __fdividef (MUFU.RCP of b times a; at most 2 ulp for |b| in
// [2^-126, 2^126], as CUDA states it), the division elsewhere.
KOKKOS_INLINE_FUNCTION float fastDivide(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdividef(a, b);
#else
  return a / b;
#endif
}

}  // namespace kortex
