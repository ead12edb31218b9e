#include "gpu/imageops/Inverse.hpp"

#include <cstdint>

#include "core/Compat.hpp"
#include "core/Errors.hpp"

namespace kortex::gpu {
namespace {

struct InverseReduction {
  double maxResidual;
  long unconverged;
};

// One moving voxel per work item: the Newton solve of core/Inverse.hpp, its residual reduced.
template <class Mem>
struct InvertFunctor {
  using value_type = InverseReduction;
  ConstField<Mem> u;
  Field<Mem> preimage;
  AffineCoeffs m;
  int mx, my, maxIterations;
  double tolerance;

  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t i, value_type& acc) const {
    const int x = int(i % mx), y = int((i / mx) % my), z = int(i / (std::int64_t(mx) * my));
    const double q[3] = {double(x), double(y), double(z)};
    double s[3], p[3];
    affineMap(m, q, s);
    const double r = inversePoint(u, s, maxIterations, tolerance, p);
    for (int a = 0; a < 3; ++a) preimage(a, z, y, x) = static_cast<float>(p[a]);
    if (r > acc.maxResidual) acc.maxResidual = r;
    if (!(r <= tolerance)) acc.unconverged += 1;
  }
  KOKKOS_INLINE_FUNCTION void init(value_type& v) const {
    v.maxResidual = 0.0;
    v.unconverged = 0;
  }
  KOKKOS_INLINE_FUNCTION void join(KORTEX_JOIN_VOLATILE value_type& d, const KORTEX_JOIN_VOLATILE value_type& s) const {
    if (s.maxResidual > d.maxResidual) d.maxResidual = s.maxResidual;
    d.unconverged += s.unconverged;
  }
};

}  // namespace

template <class Exec>
InverseStats invertMap(Exec const& exec, ConstField<typename Exec::memory_space> u, AffineTransform const& movingToS,
                       Field<typename Exec::memory_space> preimage, InverseParams const& params) {
  using Mem = typename Exec::memory_space;
  if (u.data() == nullptr || u.extent(0) != 3 || u.size() == 0)
    throw InvalidArgument("invertMap: the displacement must be a non-empty 3-component field");
  if (preimage.data() == nullptr || preimage.extent(0) != 3 || preimage.size() == 0)
    throw InvalidArgument("invertMap: the preimage must be a non-empty 3-component field");
  for (int k = 1; k < 4; ++k)
    if (u.extent(k) > std::size_t(1) << 30 || preimage.extent(k) > std::size_t(1) << 30)
      throw InvalidArgument("invertMap: extents too large");
  const InvertFunctor<Mem> f{u, preimage, affineCoeffs(movingToS), int(preimage.extent(3)), int(preimage.extent(2)),
                             params.maxIterations, params.tolerance};
  const std::int64_t n = std::int64_t(preimage.extent(1)) * std::int64_t(preimage.extent(2)) * std::int64_t(preimage.extent(3));
  InverseReduction r{0.0, 0};
  Kokkos::parallel_reduce("kortex::imageops::invert_map", Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>(exec, 0, n),
                          f, r);
  exec.fence();
  InverseStats stats;
  stats.maxResidual = r.maxResidual;
  stats.unconverged = r.unconverged;
  stats.points = long(n);
  return stats;
}

#define KORTEX_INSTANTIATE_INVERSE(SPACE)                                                                          \
  template InverseStats invertMap<SPACE>(SPACE const&, ConstField<SPACE::memory_space>, AffineTransform const&, \
                                         Field<SPACE::memory_space>, InverseParams const&);

#ifdef KOKKOS_ENABLE_SERIAL
KORTEX_INSTANTIATE_INVERSE(Kokkos::Serial)
#endif
#ifdef KOKKOS_ENABLE_OPENMP
KORTEX_INSTANTIATE_INVERSE(Kokkos::OpenMP)
#endif
#ifdef KOKKOS_ENABLE_THREADS
KORTEX_INSTANTIATE_INVERSE(Kokkos::Threads)
#endif
#ifdef KOKKOS_ENABLE_CUDA
KORTEX_INSTANTIATE_INVERSE(Kokkos::Cuda)
#endif

#undef KORTEX_INSTANTIATE_INVERSE

}  // namespace kortex::gpu
