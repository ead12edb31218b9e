// Kernels of greedy registration (specification: core/Greedy.hpp), one functor per pass.
#pragma once

#include <Kokkos_Core.hpp>

#include "core/Boundary.hpp"
#include "core/Compat.hpp"
#include "core/Greedy.hpp"
#include "core/Registration.hpp"
#include "gpu/Fields.hpp"

namespace kortex::gpu::greedy_detail {

// det(I - grad u) at (z, y, x), clamped central differences (core/Registration.hpp's G).
template <class Field>
KOKKOS_INLINE_FUNCTION float deformationDeterminant(Field const& u, int z, int y, int x, int nz, int ny, int nx) {
  const int xm = clampIndex(x - 1, nx), xp = clampIndex(x + 1, nx);
  const int ym = clampIndex(y - 1, ny), yp = clampIndex(y + 1, ny);
  const int zm = clampIndex(z - 1, nz), zp = clampIndex(z + 1, nz);
  float g[9];
  for (int c = 0; c < 3; ++c) {
    g[3 * c + 0] = regCentral(u(c, z, y, xm), u(c, z, y, xp));
    g[3 * c + 1] = regCentral(u(c, z, ym, x), u(c, z, yp, x));
    g[3 * c + 2] = regCentral(u(c, zm, y, x), u(c, zp, y, x));
  }
  return regDeterminant(g);
}

// F = -(W - I1) grad W.
template <class Mem>
struct ForceFunctor {
  ConstImageView<Mem> w, fixed;
  Field<Mem> f;
  KOKKOS_INLINE_FUNCTION void operator()(int z, int y, int x) const {
    float o[3];
    ::kortex::greedyForce(w, fixed, z, y, x, o);
    f(0, z, y, x) = o[0];
    f(1, z, y, x) = o[1];
    f(2, z, y, x) = o[2];
  }
};

// out = u(x + eps v) - eps v.
template <class Mem>
struct ComposeFunctor {
  ConstField<Mem> u, v;
  Field<Mem> out;
  float eps;
  KOKKOS_INLINE_FUNCTION void operator()(int z, int y, int x) const {
    float o[3];
    ::kortex::greedyCompose(u, v, eps, z, y, x, o);
    out(0, z, y, x) = o[0];
    out(1, z, y, x) = o[1];
    out(2, z, y, x) = o[2];
  }
};

// min over voxels of det(I - grad u) (clamped central differences).
template <class Mem>
struct MinJacobianFunctor {
  using value_type = float;
  ConstField<Mem> u;
  int ny, nx, nz;
  KOKKOS_INLINE_FUNCTION void operator()(int i, float& m) const {
    const int row = i / nx, x = i - row * nx, y = row % ny, z = row / ny;
    const float J = deformationDeterminant(u, z, y, x, nz, ny, nx);
    if (J < m) m = J;
  }
  KOKKOS_INLINE_FUNCTION void init(float& m) const { m = 3.4e38f; }
  KOKKOS_INLINE_FUNCTION void join(KORTEX_JOIN_VOLATILE float& d, const KORTEX_JOIN_VOLATILE float& s) const {
    if (s < d) d = s;
  }
};

// Scale-f image: trilinear sample of `blurred` at f x + (f - 1)/2.
template <class Mem>
struct DownsampleFunctor {
  ConstImageView<Mem> blurred;
  ImageView<Mem> out;
  float factor, shift;
  KOKKOS_INLINE_FUNCTION void operator()(int z, int y, int x) const {
    float g[3];
    out(z, y, x) = regSampleTrilinear(blurred, factor * x + shift, factor * y + shift, factor * z + shift, g);
  }
};

// out(x) = scale * in(a x + b) per component.
template <class Mem>
struct UpsampleFunctor {
  ConstField<Mem> in;
  Field<Mem> out;
  float a, b, scale;
  KOKKOS_INLINE_FUNCTION void operator()(int z, int y, int x) const {
    float o[3];
    greedySampleField(in, a * x + b, a * y + b, a * z + b, o);
    out(0, z, y, x) = scale * o[0];
    out(1, z, y, x) = scale * o[1];
    out(2, z, y, x) = scale * o[2];
  }
};

// ---- the registration's fused passes --------------------------------------------------------------

// max |v|^2 (reduced into a device scalar: no host synchronisation).
template <class Mem>
struct MaxNorm2Functor {
  using value_type = float;
  const float* v;
  int n;
  KOKKOS_INLINE_FUNCTION void operator()(int i, float& m) const {
    const float a = v[i], b = v[n + i], c = v[2 * n + i];
    const float s = a * a + b * b + c * c;
    if (s > m) m = s;
  }
  KOKKOS_INLINE_FUNCTION void init(float& m) const { m = 0.0f; }
  KOKKOS_INLINE_FUNCTION void join(KORTEX_JOIN_VOLATILE float& d, const KORTEX_JOIN_VOLATILE float& s) const {
    if (s > d) d = s;
  }
};

// out = u(x + eps v) - eps v with eps = delta / max |v| read from the device scalar (0 when v = 0).
template <class Mem>
struct ComposeScaledFunctor {
  ConstField<Mem> u, v;
  Field<Mem> out;
  Kokkos::View<const float, Mem> vmax2;
  float delta;
  KOKKOS_INLINE_FUNCTION void operator()(int z, int y, int x) const {
    const float m2 = vmax2();
    const float eps = m2 > 0.0f ? delta / kx::sqrt(m2) : 0.0f;
    float o[3];
    ::kortex::greedyCompose(u, v, eps, z, y, x, o);
    out(0, z, y, x) = o[0];
    out(1, z, y, x) = o[1];
    out(2, z, y, x) = o[2];
  }
};

// The candidate's checks in one pass: W(x) = I0(x - u(x)) written to `warped`, sum (W - I1)^2 and
// min det(I - grad u) (clamped central differences); also returns the step's max |v|^2 (copied
// from the device scalar, so one read-back serves both).
struct CheckSums {
  double sse;
  float minJ;
  float vmax2;
};
template <class Mem>
struct CheckFunctor {
  using value_type = CheckSums;
  ConstField<Mem> u;
  ConstImageView<Mem> moving, fixed;
  ImageView<Mem> warped;
  Kokkos::View<const float, Mem> vmax2;
  int nz, ny, nx;
  KOKKOS_INLINE_FUNCTION void operator()(int i, value_type& s) const {
    const int row = i / nx, x = i - row * nx, y = row % ny, z = row / ny;
    if (i == 0) s.vmax2 = vmax2();
    float g[3];
    const float w = regSampleTrilinear(moving, static_cast<float>(x) - u(0, z, y, x), static_cast<float>(y) - u(1, z, y, x),
                                       static_cast<float>(z) - u(2, z, y, x), g);
    warped(z, y, x) = w;
    const double d = double(w) - double(fixed(z, y, x));
    s.sse += d * d;
    const float J = deformationDeterminant(u, z, y, x, nz, ny, nx);
    if (J < s.minJ) s.minJ = J;
  }
  KOKKOS_INLINE_FUNCTION void init(value_type& s) const {
    s.sse = 0.0;
    s.minJ = 3.4e38f;
    s.vmax2 = 0.0f;
  }
  KOKKOS_INLINE_FUNCTION void join(KORTEX_JOIN_VOLATILE value_type& d, const KORTEX_JOIN_VOLATILE value_type& s) const {
    d.sse += s.sse;
    if (s.minJ < d.minJ) d.minJ = s.minJ;
    if (s.vmax2 > d.vmax2) d.vmax2 = s.vmax2;
  }
};

}  // namespace kortex::gpu::greedy_detail
