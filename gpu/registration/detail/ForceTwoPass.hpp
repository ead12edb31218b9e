// Force variant TwoPass: the stress in a field of its own instead of recomputed seven times per voxel.
//   Pass 1 (RangePolicy, one voxel per work item, x fastest): G at the voxel from global memory, W =
//     Phi'(J) cof(I - G) (regStress) written to the 9-component stress field, Phi(J) and J added to
//     the reduction. One logarithm and one division per voxel instead of seven.
//   Pass 2 (the same policy): f_reg from W at the voxel and its in-range neighbours read back from the
//     stress field (regulariserAt, Naive's assembly), the data term as Naive's,
//     f = f_data + lambda f_reg, 1/2 (T - R)^2 added to the reduction.
// The same per-voxel arithmetic as Naive (the same W, summed in the same order): the same f. The price
// is the stress field, 36 B per voxel (ForceViews::stress; allocated for the call when not given).
#pragma once

#include <Kokkos_Core.hpp>
#include <climits>

#include "gpu/registration/detail/ForceNaive.hpp"
#include "gpu/registration/detail/RegistrationKernels.hpp"

namespace kortex::gpu::registration_detail {

inline constexpr int kStressComponents = 9;

template <class Mem>
struct StressPassFunctor {
  KORTEX_REGISTRATION_ENERGY_REDUCER
  RandomField<Mem> u;
  Field<Mem> w;  // 9 components: w(3 i + j) = W_ij
  Extents e;

  KOKKOS_INLINE_FUNCTION void operator()(const int i, EnergySums& acc) const {
    int x, y, z;
    voxelOf(i, e, x, y, z);
    float wc[9];
    const float J = stressGlobal(u, e, x, y, z, wc);
    energyAddJacobian(acc, J);
    for (int k = 0; k < 9; ++k) w(k, z, y, x) = wc[k];
  }
};

template <class Mem>
struct DivergencePassFunctor {
  KORTEX_REGISTRATION_ENERGY_REDUCER
  ForceViews<Mem> v;
  RandomField<Mem> w;
  Extents e;
  float lambda;

  KOKKOS_INLINE_FUNCTION void operator()(const int i, EnergySums& acc) const {
    int x, y, z;
    voxelOf(i, e, x, y, z);
    float wc[9];
    for (int k = 0; k < 9; ++k) wc[k] = w(k, z, y, x);
    float fr[3] = {0.0f, 0.0f, 0.0f};
    // The neighbours' stresses read back: column j, entries 3 c + j.
    regulariserAt(x, y, z, e, wc, [&](int j, int step, float* out) {
      const int xx = x + (j == 0 ? step : 0), yy = y + (j == 1 ? step : 0), zz = z + (j == 2 ? step : 0);
      for (int c = 0; c < 3; ++c) out[c] = w(3 * c + j, zz, yy, xx);
    }, fr);

    float fd[3];
    dataTerm(v.moving, v.fixed, x, y, z, v.u(0, z, y, x), v.u(1, z, y, x), v.u(2, z, y, x), acc, fd);
    for (int c = 0; c < 3; ++c) v.f(c, z, y, x) = fd[c] + lambda * fr[c];
  }
};

template <class Exec>
struct ForceKernel<RegistrationVariant::TwoPass, Exec> {
  using Mem = typename Exec::memory_space;
  static constexpr bool kFusesUpdate = false;  // computeForce runs a pending update first

  static ForceLaunchInfo info(Exec const&, Extents const& e, ForceTile const&) {
    return voxelLaunchInfo<Exec>(RegistrationVariant::TwoPass, e);
  }

  static EnergySums launch(Exec const& exec, ForceViews<Mem> const& views, Extents const& e, float lambda,
                           ForceLaunchInfo const&) {
    if (e.voxels() > INT_MAX) throw InvalidArgument("registration force (TwoPass): grid too large for one launch");
    Field<Mem> w = views.stress;
    if (w.extent(0) != kStressComponents || static_cast<int>(w.extent(1)) != e.nz ||
        static_cast<int>(w.extent(2)) != e.ny || static_cast<int>(w.extent(3)) != e.nx)
      w = Field<Mem>(Kokkos::view_alloc(exec, std::string("kortex::Registration::stress"), Kokkos::WithoutInitializing),
                     kStressComponents, e.nz, e.ny, e.nx);
    const int n = static_cast<int>(e.voxels());
    EnergySums reg, data;
    // In index order (gpu/detail/Common.hpp): both passes read z neighbours.
    reduceVoxels("kortex::Registration::TwoPass::stress", exec, n, StressPassFunctor<Mem>{views.u, w, e}, reg);
    reduceVoxels("kortex::Registration::TwoPass::force", exec, n, DivergencePassFunctor<Mem>{views, w, e, lambda}, data);
    EnergySums s = reg;
    s.data = data.data;
    return s;
  }
};

}  // namespace kortex::gpu::registration_detail
