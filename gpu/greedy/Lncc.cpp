#include "gpu/greedy/Lncc.hpp"

#include <string>

#include "core/Errors.hpp"
#include "gpu/detail/Common.hpp"
#include "gpu/greedy/detail/LnccKernels.hpp"

namespace kortex::gpu {

template <class Exec>
double lnccForce(Exec const& exec, ConstImageView<typename Exec::memory_space> warped,
                 ConstImageView<typename Exec::memory_space> fixed, int radius,
                 LnccTerms<typename Exec::memory_space> terms, Field<typename Exec::memory_space> f) {
  using namespace lncc_detail;
  for (int k = 0; k < 3; ++k)
    if (warped.extent(k) != fixed.extent(k) || f.extent(k + 1) != warped.extent(k) ||
        terms.extent(k + 1) != warped.extent(k))
      throw InvalidArgument("lnccForce: the images, the force and the workspace are not on one grid");
  if (f.data() == nullptr || f.extent(0) != 3 || terms.extent(0) != 4)
    throw InvalidArgument("lnccForce: the force needs 3 components and the workspace 4");
  if (radius < 1 || radius > kMaxLnccRadius)
    throw InvalidArgument("lnccForce: the window radius " + std::to_string(radius) + " is not in [1, " +
                          std::to_string(kMaxLnccRadius) + "]");
  if (spansOverlap(f, warped) || spansOverlap(f, fixed)) throw InvalidArgument("lnccForce: the force overlaps an image");
  const int nz = int(warped.extent(0)), ny = int(warped.extent(1)), nx = int(warped.extent(2));
  const long voxels = long(nz) * ny * nx;
  if (voxels > 2147483647L) throw InvalidArgument("lnccForce: more than 2^31 - 1 voxels");
  const int tilesX = (nx + kTileX - 1) / kTileX, tilesY = (ny + kTileY - 1) / kTileY, teams = tilesX * tilesY * nz;
  double energy = 0.0;
  Kokkos::parallel_reduce("kortex::greedy::lncc_windows",
                          lnccPolicy(exec, teams, LnccWindowFunctor<Exec>::scratchBytes(radius), "windows"),
                          LnccWindowFunctor<Exec>{warped, fixed, terms, radius, tilesX, tilesY}, energy);
  Kokkos::parallel_for("kortex::greedy::lncc_transpose",
                       lnccPolicy(exec, teams, LnccTransposeFunctor<Exec>::scratchBytes(radius), "transpose"),
                       LnccTransposeFunctor<Exec>{warped, fixed, terms, f, radius, tilesX, tilesY});
  return energy;
}

template <class Exec>
double lnccForce(Exec const& exec, ConstImageView<typename Exec::memory_space> warped,
                 ConstImageView<typename Exec::memory_space> fixed, int radius, Field<typename Exec::memory_space> f) {
  LnccTerms<typename Exec::memory_space> terms("kortex::greedy::lncc_terms", 4, warped.extent(0), warped.extent(1),
                                               warped.extent(2));
  return lnccForce(exec, warped, fixed, radius, terms, f);
}

#define KORTEX_INSTANTIATE_LNCC(SPACE)                                                                          \
  template double lnccForce<SPACE>(SPACE const&, ConstImageView<SPACE::memory_space>,                         \
                                   ConstImageView<SPACE::memory_space>, int, LnccTerms<SPACE::memory_space>,   \
                                   Field<SPACE::memory_space>);                                                \
  template double lnccForce<SPACE>(SPACE const&, ConstImageView<SPACE::memory_space>,                         \
                                   ConstImageView<SPACE::memory_space>, int, Field<SPACE::memory_space>);

#ifdef KOKKOS_ENABLE_SERIAL
KORTEX_INSTANTIATE_LNCC(Kokkos::Serial)
#endif
#ifdef KOKKOS_ENABLE_OPENMP
KORTEX_INSTANTIATE_LNCC(Kokkos::OpenMP)
#endif
#ifdef KOKKOS_ENABLE_THREADS
KORTEX_INSTANTIATE_LNCC(Kokkos::Threads)
#endif
#ifdef KOKKOS_ENABLE_CUDA
KORTEX_INSTANTIATE_LNCC(Kokkos::Cuda)
#endif

#undef KORTEX_INSTANTIATE_LNCC

}  // namespace kortex::gpu
