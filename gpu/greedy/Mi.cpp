// The Kokkos MI force: entry points and explicit instantiation (kernels: detail/MiKernels.hpp).
#include "gpu/greedy/Mi.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "core/Compat.hpp"
#include "core/Errors.hpp"
#include "core/MutualInformation.hpp"
#include "gpu/detail/Common.hpp"
#include "gpu/greedy/detail/MiKernels.hpp"

namespace kortex::gpu {

std::int64_t miWorkspaceBytes(int bins) {
  return std::int64_t(bins) * bins * std::int64_t(sizeof(unsigned long long) + sizeof(double));
}

template <class Exec>
MiWorkspace<typename Exec::memory_space> miWorkspace(Exec const& exec, int bins) {
  validateMiBins(bins);
  MiWorkspace<typename Exec::memory_space> w;
  w.bins = bins;
  w.hist = decltype(w.hist)(Kokkos::view_alloc(exec, std::string("kortex::greedy::mi_histogram")), std::size_t(bins) * bins);
  w.logRatio = decltype(w.logRatio)(Kokkos::view_alloc(exec, std::string("kortex::greedy::mi_log_ratio")),
                                    std::size_t(bins) * bins);
  return w;
}

template <class Exec>
void miForce(Exec const& exec, ConstImageView<typename Exec::memory_space> warped,
             ConstImageView<typename Exec::memory_space> fixed, MiWorkspace<typename Exec::memory_space> const& work,
             Field<typename Exec::memory_space> f) {
  using Mem = typename Exec::memory_space;
  using Policy = Kokkos::TeamPolicy<Exec>;
  using namespace mi_detail;
  for (int k = 0; k < 3; ++k)
    if (warped.extent(k) != fixed.extent(k) || f.extent(k + 1) != warped.extent(k))
      throw InvalidArgument("miForce: the images and the force are not on one grid");
  if (f.data() == nullptr || f.extent(0) != 3) throw InvalidArgument("miForce: the force needs 3 components");
  if (spansOverlap(f, warped) || spansOverlap(f, fixed)) throw InvalidArgument("miForce: the force overlaps an image");
  validateMiBins(work.bins);
  if (work.hist.extent(0) != std::size_t(work.bins) * work.bins || work.logRatio.extent(0) != work.hist.extent(0))
    throw InvalidArgument("miForce: the workspace is not of " + std::to_string(work.bins) + " bins");
  const int nz = int(warped.extent(0)), ny = int(warped.extent(1)), nx = int(warped.extent(2));
  const long voxels = long(nz) * ny * nx;
  if (voxels > 2147483647L) throw InvalidArgument("miForce: more than 2^31 - 1 voxels");
  const int B = work.bins;
  const std::size_t maxScratch = kx::scratchSizeMax<Policy>(0);
  const bool device = !Kokkos::SpaceAccessibility<Kokkos::HostSpace, Mem>::accessible;
  const bool useScratch = device && HistogramFunctor<Exec>::scratchBytes(B) <= maxScratch;
  Kokkos::deep_copy(exec, work.hist, 0ull);
  const HistogramFunctor<Exec> h{warped, fixed, work.hist, B, nx, ny, voxels, useScratch};
  const int teams = int((voxels + kVoxelsPerTeam - 1) / kVoxelsPerTeam);
  Policy hp(exec, teams, Kokkos::AUTO);
  if (useScratch) hp.set_scratch_size(0, Kokkos::PerTeam(HistogramFunctor<Exec>::scratchBytes(B)));
  Kokkos::parallel_for("kortex::greedy::mi_histogram", hp, h);
  if (RatiosFunctor<Exec>::scratchBytes(B) > maxScratch)
    throw InvalidArgument("miForce: the ratios' team scratch exceeds the back end's");
  Kokkos::parallel_for("kortex::greedy::mi_ratios",
                       Policy(exec, 1, Kokkos::AUTO).set_scratch_size(0, Kokkos::PerTeam(RatiosFunctor<Exec>::scratchBytes(B))),
                       RatiosFunctor<Exec>{work.hist, work.logRatio, B});
  parallelForVoxels("kortex::greedy::mi_force", exec, nz, ny, nx,
                    ForceFunctor<Mem>{warped, fixed, work.logRatio, f, double(B - 4) / double(voxels), B, nz, ny, nx});
}

template <class Exec>
double miForce(Exec const& exec, ConstImageView<typename Exec::memory_space> warped,
               ConstImageView<typename Exec::memory_space> fixed, int bins, Field<typename Exec::memory_space> f) {
  const auto work = miWorkspace(exec, bins);
  miForce(exec, warped, fixed, work, f);
  const auto hist = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), work.hist);
  unsigned long long total = 0;
  for (std::size_t c = 0; c < hist.extent(0); ++c) total += hist(c);
  std::vector<double> p(hist.extent(0)), logRatio;
  for (std::size_t c = 0; c < p.size(); ++c) p[c] = double(hist(c)) / double(total);
  return miFromHistogram(p, bins, logRatio);
}

#define KORTEX_INSTANTIATE_MI(SPACE)                                                                          \
  template MiWorkspace<SPACE::memory_space> miWorkspace<SPACE>(SPACE const&, int);                           \
  template void miForce<SPACE>(SPACE const&, ConstImageView<SPACE::memory_space>,                            \
                               ConstImageView<SPACE::memory_space>, MiWorkspace<SPACE::memory_space> const&, \
                               Field<SPACE::memory_space>);                                                  \
  template double miForce<SPACE>(SPACE const&, ConstImageView<SPACE::memory_space>,                          \
                                 ConstImageView<SPACE::memory_space>, int, Field<SPACE::memory_space>);

#ifdef KOKKOS_ENABLE_SERIAL
KORTEX_INSTANTIATE_MI(Kokkos::Serial)
#endif
#ifdef KOKKOS_ENABLE_OPENMP
KORTEX_INSTANTIATE_MI(Kokkos::OpenMP)
#endif
#ifdef KOKKOS_ENABLE_THREADS
KORTEX_INSTANTIATE_MI(Kokkos::Threads)
#endif
#ifdef KOKKOS_ENABLE_CUDA
KORTEX_INSTANTIATE_MI(Kokkos::Cuda)
#endif

#undef KORTEX_INSTANTIATE_MI

}  // namespace kortex::gpu
