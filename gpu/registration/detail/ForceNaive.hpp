// Force variant Naive: RangePolicy, one voxel per work item (flat index, x fastest: consecutive
// threads read consecutive addresses), everything from global memory through the read-only
// (RandomAccess) path. For voxel y the work item evaluates the stress W = Phi'(J) cof(I - G) at
// y and at its in-range neighbours y +- e_j (G there needs u at y +- 2 e_j, clamped), assembles
// f_reg_i = sum_j D_j^T W_ij (adjointCentral), samples the moving image at y - u(y)
// (regSampleTrilinear) for the data term, writes f = f_data + lambda f_reg and adds 1/2 (T-R)^2,
// Phi(J(y)) and J(y) to the reduction. Seven stress evaluations per voxel: the baseline the
// scratch variants improve on.
#pragma once

#include <Kokkos_Core.hpp>
#include <cstdint>

#include "gpu/registration/detail/RegistrationKernels.hpp"

namespace kortex::gpu::registration_detail {

// W at grid point (x, y, z) from global memory; returns J.
template <class UView>
KOKKOS_INLINE_FUNCTION float stressGlobal(UView const& u, Extents const& e, int x, int y, int z,
                                          float* w) {
  float g[9];
  gradientGlobal(u, e, x, y, z, g);
  return regStress(g, w);
}

// f_reg at (x, y, z): sum_j D_j^T W_.j (adjointCentral) from W at the voxel (wc, 9 entries) and column j
// of W at its in-range neighbours, column(j, step, out3) giving the voxel shifted by step along axis j
// (out-of-range neighbours count as zero); axes x, y, z in turn. The voxel-wise variants' one assembly.
template <class Column>
KOKKOS_INLINE_FUNCTION void regulariserAt(int x, int y, int z, Extents const& e, const float* wc, Column const& column,
                                          float* fr) {
  const int p[3] = {x, y, z}, n[3] = {e.nx, e.ny, e.nz};
  for (int j = 0; j < 3; ++j) {
    float wm[3] = {0.0f, 0.0f, 0.0f}, wp[3] = {0.0f, 0.0f, 0.0f};
    if (p[j] > 0) column(j, -1, wm);
    if (p[j] < n[j] - 1) column(j, 1, wp);
    for (int c = 0; c < 3; ++c) fr[c] += adjointCentral(wm[c], wc[3 * c + j], wp[c], p[j], n[j]);
  }
}

// Launch description of a variant with one voxel per work item (RangePolicy, no scratch).
template <class Exec>
ForceLaunchInfo voxelLaunchInfo(RegistrationVariant v, Extents const& e) {
  ForceLaunchInfo i;
  i.variant = v;
  i.tileX = i.tileY = i.chunk = 1;
  i.teamSize = 0;
  i.scratchBytes = 0;
  i.scratchMax = kx::scratchSizeMax<Kokkos::TeamPolicy<Exec>>(0);
  i.teams = e.voxels();
  return i;
}

template <class Mem>
struct NaiveForceFunctor {
  KORTEX_REGISTRATION_ENERGY_REDUCER
  ForceViews<Mem> v;
  Extents e;
  float lambda;

  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t i, EnergySums& acc) const {
    int x, y, z;
    voxelOf(i, e, x, y, z);
    float wc[9];
    const float J = stressGlobal(v.u, e, x, y, z, wc);
    energyAddJacobian(acc, J);

    float fr[3] = {0.0f, 0.0f, 0.0f};
    // The neighbours' stresses recomputed from u.
    regulariserAt(x, y, z, e, wc, [&](int j, int step, float* out) {
      float w[9];
      stressGlobal(v.u, e, x + (j == 0 ? step : 0), y + (j == 1 ? step : 0), z + (j == 2 ? step : 0), w);
      for (int c = 0; c < 3; ++c) out[c] = w[3 * c + j];
    }, fr);

    float fd[3];
    dataTerm(v.moving, v.fixed, x, y, z, v.u(0, z, y, x), v.u(1, z, y, x), v.u(2, z, y, x), acc,
             fd);
    for (int c = 0; c < 3; ++c) v.f(c, z, y, x) = fd[c] + lambda * fr[c];
  }
};

template <class Exec>
struct ForceKernel<RegistrationVariant::Naive, Exec> {
  using Mem = typename Exec::memory_space;
  static constexpr bool kFusesUpdate = false;  // computeForce runs a pending update first

  static ForceLaunchInfo info(Exec const&, Extents const& e, ForceTile const&) {
    return voxelLaunchInfo<Exec>(RegistrationVariant::Naive, e);
  }

  static EnergySums launch(Exec const& exec, ForceViews<Mem> const& views, Extents const& e,
                           float lambda, ForceLaunchInfo const&) {
    static_assert(sizeof(NaiveForceFunctor<Mem>) <= 512, "force functor closure above 512 B");
    EnergySums s;
    Kokkos::parallel_reduce(
        "kortex::Registration::Naive::force",
        Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>(exec, 0, e.voxels()),
        NaiveForceFunctor<Mem>{views, e, lambda}, s);
    return s;
  }
};

}  // namespace kortex::gpu::registration_detail
