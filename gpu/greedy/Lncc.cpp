#include "gpu/greedy/Lncc.hpp"

#include <cstddef>
#include <string>
#include <type_traits>

#include "core/Errors.hpp"
#include "gpu/detail/Common.hpp"
#include "gpu/greedy/detail/LnccKernels.hpp"

namespace kortex::gpu {

const char* toString(LnccVariant v) {
  switch (v) {
    case LnccVariant::Recompute: return "Recompute";
    case LnccVariant::Reuse: return "Reuse";
    case LnccVariant::Separable: return "Separable";
    case LnccVariant::ScratchTiled: return "ScratchTiled";
  }
  return "?";
}

int lnccWorkspaceComponents(std::array<LnccVariant, 2> variants) {
  auto any = [&](LnccVariant v) { return variants[0] == v || variants[1] == v; };
  if (any(LnccVariant::Separable)) return lncc_detail::kLnccSeparableComponents;
  return any(LnccVariant::ScratchTiled) ? lncc_detail::kLnccScratchTiledComponents : 4;
}

template <class Exec>
std::array<bool, 2> lnccReuseFits(int radius) {
  using namespace lncc_detail;
  const std::size_t maxBytes = kx::scratchSizeMax<Kokkos::TeamPolicy<Exec>>(0);
  return {LnccWindowReuseFunctor<Exec>::scratchBytes(radius) <= maxBytes,
          LnccTransposeReuseFunctor<Exec>::scratchBytes(radius) <= maxBytes};
}

template <class Exec>
std::array<LnccVariant, 2> lnccVariantsFor(int) {
  const bool device = !Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Exec::memory_space>::accessible;
  return {device ? LnccVariant::ScratchTiled : LnccVariant::Separable, LnccVariant::Separable};
}

namespace {

template <class Exec>
void checkLnccArguments(ConstImageView<typename Exec::memory_space> warped, ConstImageView<typename Exec::memory_space> fixed,
                        int radius, LnccTerms<typename Exec::memory_space> terms, Field<typename Exec::memory_space> f,
                        std::array<LnccVariant, 2> variants) {
  for (int k = 0; k < 3; ++k)
    if (warped.extent(k) != fixed.extent(k) || f.extent(k + 1) != warped.extent(k) ||
        terms.extent(k + 1) != warped.extent(k))
      throw InvalidArgument("lnccForce: the images, the force and the workspace are not on one grid");
  const int components = lnccWorkspaceComponents(variants);
  if (f.data() == nullptr || f.extent(0) != 3 || int(terms.extent(0)) < components)
    throw InvalidArgument("lnccForce: the force needs 3 components and the workspace " + std::to_string(components) +
                          " (these variants)");
  if (radius < 1 || radius > kMaxLnccRadius)
    throw InvalidArgument("lnccForce: the window radius " + std::to_string(radius) + " is not in [1, " +
                          std::to_string(kMaxLnccRadius) + "]");
  if (spansOverlap(f, warped) || spansOverlap(f, fixed)) throw InvalidArgument("lnccForce: the force overlaps an image");
  if (long(warped.extent(0)) * long(warped.extent(1)) * long(warped.extent(2)) > 2147483647L)
    throw InvalidArgument("lnccForce: more than 2^31 - 1 voxels");
}

// One pass over tiles (of one slice, or of a slab of slices for Reuse); a window pass that forms the
// coefficients reduces the energy into `energy` when given (a double*; nullptr: no reduction).
template <bool Windows, class Exec, class Functor, class Energy>
void lnccPass(Exec const& exec, const char* label, Functor const& functor, int slabs, Energy energy) {
  const int teams = functor.tilesX * functor.tilesY * slabs;
  const auto policy = lncc_detail::lnccPolicy(exec, teams, Functor::scratchBytes(functor.radius), Windows ? "windows" : "transpose");
  if constexpr (!std::is_same_v<Energy, std::nullptr_t>) {
    if (energy) {
      Kokkos::parallel_reduce(label, policy, functor, *energy);
      return;
    }
  }
  Kokkos::parallel_for(label, policy, functor);
}

// Five components of the workspace from `first` (the 2D sums of the Separable and ScratchTiled passes).
template <class Terms>
auto lnccSums(Terms const& terms, int first) {
  return Kokkos::subview(terms, Kokkos::make_pair(first, first + 5), Kokkos::ALL, Kokkos::ALL, Kokkos::ALL);
}

// The z pass of the windows (Separable and ScratchTiled): the window sums over z of the 2D sums in b,
// each window's coefficients into the terms, E = sum cc reduced into `energy` when given.
template <class Exec, class Sums>
void lnccWindowsZ(Exec const& exec, Sums const& b, LnccTerms<typename Exec::memory_space> terms, int R, double* energy) {
  const int nz = int(b.extent(1)), ny = int(b.extent(2)), nx = int(b.extent(3));
  const lncc_detail::LnccWindowZFunctor<typename Exec::memory_space, Sums> z{b, terms, R, nz, ny, nx};
  const Kokkos::RangePolicy<Exec, Kokkos::IndexType<int>> all(exec, 0, nz * ny * nx);
  if (energy)
    Kokkos::parallel_reduce("kortex::greedy::lncc_windows_z", all, z, *energy);
  else
    Kokkos::parallel_for("kortex::greedy::lncc_windows_z", all, z);
}

// The z pass of the transpose (Separable and ScratchTiled): the weighted z sums of the 2D sums in b,
// then the force.
template <class Exec, class Sums>
void lnccTransposeZ(Exec const& exec, Sums const& b, ConstImageView<typename Exec::memory_space> warped,
                    ConstImageView<typename Exec::memory_space> fixed, int R, Field<typename Exec::memory_space> f) {
  const int nz = int(b.extent(1)), ny = int(b.extent(2)), nx = int(b.extent(3));
  parallelForVoxels("kortex::greedy::lncc_transpose_z", exec, nz, ny, nx,
                    lncc_detail::LnccTransposeZFunctor<typename Exec::memory_space, Sums>{b, warped, fixed, f, R, nz, ny, nx});
}

// The Separable passes (lncc_detail, "Separable"): x and y sums through the workspace's buffers a
// and b (5 components each, after the 4 terms), then the z pass.
template <class Exec>
void lnccWindowsSeparable(Exec const& exec, ConstImageView<typename Exec::memory_space> warped,
                          ConstImageView<typename Exec::memory_space> fixed, int R,
                          LnccTerms<typename Exec::memory_space> terms, double* energy) {
  using namespace lncc_detail;
  using Mem = typename Exec::memory_space;
  const int nz = int(warped.extent(0)), ny = int(warped.extent(1)), nx = int(warped.extent(2));
  const auto a = lnccSums(terms, 4);
  const auto b = lnccSums(terms, 9);
  parallelForVoxels("kortex::greedy::lncc_windows_x", exec, nz, ny, nx,
                    LnccWindowXFunctor<Mem, decltype(a)>{warped, fixed, a, R, nx});
  parallelForVoxels("kortex::greedy::lncc_windows_y", exec, nz, ny, nx, LnccWindowYFunctor<decltype(a), decltype(b)>{a, b, R, ny});
  lnccWindowsZ(exec, b, terms, R, energy);
}

template <class Exec>
void lnccTransposeSeparable(Exec const& exec, ConstImageView<typename Exec::memory_space> warped,
                            ConstImageView<typename Exec::memory_space> fixed, int R,
                            LnccTerms<typename Exec::memory_space> terms, Field<typename Exec::memory_space> f) {
  using namespace lncc_detail;
  using Mem = typename Exec::memory_space;
  const int nz = int(warped.extent(0)), ny = int(warped.extent(1)), nx = int(warped.extent(2));
  const auto a = lnccSums(terms, 4);
  const auto b = lnccSums(terms, 9);
  parallelForVoxels("kortex::greedy::lncc_transpose_x", exec, nz, ny, nx, LnccTransposeXFunctor<Mem, decltype(a)>{terms, a, R, nx});
  parallelForVoxels("kortex::greedy::lncc_transpose_y", exec, nz, ny, nx,
                    LnccTransposeYFunctor<decltype(a), decltype(b)>{a, b, R, ny});
  lnccTransposeZ(exec, b, warped, fixed, R, f);
}

// The ScratchTiled passes (lncc_detail, "ScratchTiled"): a team per tile of a slice forms its x and
// y sums into the workspace's buffer b (5 components after the 4 terms), then Separable's z pass.
template <class Exec>
void lnccWindowsScratchTiled(Exec const& exec, ConstImageView<typename Exec::memory_space> warped,
                             ConstImageView<typename Exec::memory_space> fixed, int R, int tilesX, int tilesY,
                             LnccTerms<typename Exec::memory_space> terms, double* energy) {
  const auto b = lnccSums(terms, 4);
  lnccPass<true>(exec, "kortex::greedy::lncc_windows_xy",
                 lncc_detail::LnccWindowXYFunctor<Exec, decltype(b)>{warped, fixed, b, R, tilesX, tilesY},
                 int(warped.extent(0)), nullptr);
  lnccWindowsZ(exec, b, terms, R, energy);
}

template <class Exec>
void lnccTransposeScratchTiled(Exec const& exec, ConstImageView<typename Exec::memory_space> warped,
                               ConstImageView<typename Exec::memory_space> fixed, int R, int tilesX, int tilesY,
                               LnccTerms<typename Exec::memory_space> terms, Field<typename Exec::memory_space> f) {
  const auto b = lnccSums(terms, 4);
  lnccPass<false>(exec, "kortex::greedy::lncc_transpose_xy",
                  lncc_detail::LnccTransposeXYFunctor<Exec, decltype(b)>{terms, b, R, tilesX, tilesY},
                  int(warped.extent(0)), nullptr);
  lnccTransposeZ(exec, b, warped, fixed, R, f);
}

}  // namespace

template <class Exec>
void lnccForce(Exec const& exec, ConstImageView<typename Exec::memory_space> warped,
               ConstImageView<typename Exec::memory_space> fixed, int radius,
               LnccTerms<typename Exec::memory_space> terms, Field<typename Exec::memory_space> f,
               std::array<LnccVariant, 2> variants, double* energy, int slabZ) {
  using namespace lncc_detail;
  using Mem = typename Exec::memory_space;
  checkLnccArguments<Exec>(warped, fixed, radius, terms, f, variants);
  const int nz = int(warped.extent(0)), ny = int(warped.extent(1)), nx = int(warped.extent(2));
  const int tilesX = (nx + kTileX - 1) / kTileX, tilesY = (ny + kTileY - 1) / kTileY;
  if (slabZ < 0 || slabZ > kMaxSlabZ)
    throw InvalidArgument("lnccForce: the slab depth " + std::to_string(slabZ) + " is not in [1, " + std::to_string(kMaxSlabZ) + "]");
  if (slabZ == 0) slabZ = lnccSlabDepth(tilesX * tilesY, nz, !Kokkos::SpaceAccessibility<Kokkos::HostSpace, Mem>::accessible);
  const int slabs = (nz + slabZ - 1) / slabZ;
  if (energy) *energy = 0.0;
  if (variants[0] == LnccVariant::Separable)
    lnccWindowsSeparable(exec, warped, fixed, radius, terms, energy);
  else if (variants[0] == LnccVariant::ScratchTiled)
    lnccWindowsScratchTiled(exec, warped, fixed, radius, tilesX, tilesY, terms, energy);
  else if (variants[0] == LnccVariant::Reuse)
    lnccPass<true>(exec, "kortex::greedy::lncc_windows_reuse", LnccWindowReuseFunctor<Exec>{warped, fixed, terms, radius, tilesX, tilesY, slabZ},
                   slabs, energy);
  else
    lnccPass<true>(exec, "kortex::greedy::lncc_windows", LnccWindowFunctor<Exec>{warped, fixed, terms, radius, tilesX, tilesY}, nz, energy);
  if (variants[1] == LnccVariant::Separable)
    lnccTransposeSeparable(exec, warped, fixed, radius, terms, f);
  else if (variants[1] == LnccVariant::ScratchTiled)
    lnccTransposeScratchTiled(exec, warped, fixed, radius, tilesX, tilesY, terms, f);
  else if (variants[1] == LnccVariant::Reuse)
    lnccPass<false>(exec, "kortex::greedy::lncc_transpose_reuse",
                    LnccTransposeReuseFunctor<Exec>{warped, fixed, terms, f, radius, tilesX, tilesY, slabZ}, slabs, nullptr);
  else
    lnccPass<false>(exec, "kortex::greedy::lncc_transpose", LnccTransposeFunctor<Exec>{warped, fixed, terms, f, radius, tilesX, tilesY},
                    nz, nullptr);
}

template <class Exec>
double lnccForce(Exec const& exec, ConstImageView<typename Exec::memory_space> warped,
                 ConstImageView<typename Exec::memory_space> fixed, int radius,
                 LnccTerms<typename Exec::memory_space> terms, Field<typename Exec::memory_space> f) {
  double energy = 0.0;
  lnccForce(exec, warped, fixed, radius, terms, f, lnccVariantsFor<Exec>(radius), &energy, 0);
  return energy;
}

template <class Exec>
double lnccForce(Exec const& exec, ConstImageView<typename Exec::memory_space> warped,
                 ConstImageView<typename Exec::memory_space> fixed, int radius, Field<typename Exec::memory_space> f) {
  LnccTerms<typename Exec::memory_space> terms("kortex::greedy::lncc_terms",
                                               lnccWorkspaceComponents(lnccVariantsFor<Exec>(radius)), warped.extent(0),
                                               warped.extent(1), warped.extent(2));
  return lnccForce(exec, warped, fixed, radius, terms, f);
}

#define KORTEX_INSTANTIATE_LNCC(SPACE)                                                                          \
  template std::array<LnccVariant, 2> lnccVariantsFor<SPACE>(int);                                             \
  template std::array<bool, 2> lnccReuseFits<SPACE>(int);                                                      \
  template void lnccForce<SPACE>(SPACE const&, ConstImageView<SPACE::memory_space>,                           \
                                 ConstImageView<SPACE::memory_space>, int, LnccTerms<SPACE::memory_space>,     \
                                 Field<SPACE::memory_space>, std::array<LnccVariant, 2>, double*, int);             \
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
