// Kokkos affine pre-alignment: entry points and explicit instantiation for every enabled
// execution space. Kernels: gpu/affine/detail/AffineKernels.hpp.
#include "gpu/affine/Affine.hpp"

#include "gpu/affine/detail/AffineKernels.hpp"

namespace kortex::gpu {

template <class Exec>
AffineMetric affineMetric(Exec const& exec, ConstImageView<typename Exec::memory_space> moving,
                          ConstImageView<typename Exec::memory_space> fixed, AffineTransform const& t) {
  const auto work = affine_detail::metricWorkspace(exec, fixed.extent(0), fixed.extent(1), fixed.extent(2));
  return affine_detail::metric(exec, work, moving, fixed, t);
}

template <class Exec>
std::vector<AffineMetric> affineMetrics(Exec const& exec, ConstImageView<typename Exec::memory_space> moving,
                                        ConstImageView<typename Exec::memory_space> fixed,
                                        std::vector<AffineTransform> const& ts) {
  const auto work = affine_detail::metricWorkspace(exec, fixed.extent(0), fixed.extent(1), fixed.extent(2));
  std::vector<AffineMetric> out;
  affine_detail::metricMany(exec, work, moving, fixed, ts, {}, {}, 0, out);
  return out;
}

template <class Exec>
AffineMetric affineMutualInformation(Exec const& exec, ConstImageView<typename Exec::memory_space> moving,
                                     ConstImageView<typename Exec::memory_space> fixed, AffineTransform const& t, int bins) {
  validateMiBins(bins);
  const auto work = affine_detail::metricWorkspace(exec, fixed.extent(0), fixed.extent(1), fixed.extent(2), bins);
  return affine_detail::mutualInformation(exec, work, moving, fixed, t);
}

template <class Exec>
std::vector<ImageView<typename Exec::memory_space>> affinePyramid(Exec const& exec, HostImage const& image, int levels) {
  if (levels < 1) throw InvalidArgument("affinePyramid: levels must be >= 1");
  return affine_detail::smoothedPyramids(exec, {&image}, levels, {"kortex::Affine::pyramid"}).front();
}

template <class Exec>
void resampleAffine(Exec const& exec, ConstImageView<typename Exec::memory_space> moving,
                    AffineTransform const& t, ImageView<typename Exec::memory_space> out) {
  affine_detail::resample(exec, moving, t, out);
}

template <class Exec>
AffineResult affineRegister(Exec const& exec, HostImage const& moving, HostImage const& fixed,
                            AffineParams const& params, AffineProgress const& progress, AffineMasks const& masks) {
  affine_detail::Backend<Exec> backend(exec);
  return affineOptimise(moving, fixed, params, backend, progress, masks);
}

#define KORTEX_INSTANTIATE_AFFINE(SPACE)                                                             \
  template AffineMetric affineMetric<SPACE>(SPACE const&, ConstImageView<SPACE::memory_space>,        \
                                            ConstImageView<SPACE::memory_space>, AffineTransform const&); \
  template std::vector<AffineMetric> affineMetrics<SPACE>(SPACE const&, ConstImageView<SPACE::memory_space>, \
                                                          ConstImageView<SPACE::memory_space>,            \
                                                          std::vector<AffineTransform> const&);          \
  template AffineMetric affineMutualInformation<SPACE>(SPACE const&, ConstImageView<SPACE::memory_space>, \
                                                       ConstImageView<SPACE::memory_space>, AffineTransform const&, int); \
  template std::vector<ImageView<SPACE::memory_space>> affinePyramid<SPACE>(SPACE const&, HostImage const&, int); \
  template void resampleAffine<SPACE>(SPACE const&, ConstImageView<SPACE::memory_space>,               \
                                      AffineTransform const&, ImageView<SPACE::memory_space>);         \
  template AffineResult affineRegister<SPACE>(SPACE const&, HostImage const&, HostImage const&,        \
                                              AffineParams const&, AffineProgress const&, AffineMasks const&);

#ifdef KOKKOS_ENABLE_SERIAL
KORTEX_INSTANTIATE_AFFINE(Kokkos::Serial)
#endif
#ifdef KOKKOS_ENABLE_OPENMP
KORTEX_INSTANTIATE_AFFINE(Kokkos::OpenMP)
#endif
#ifdef KOKKOS_ENABLE_THREADS
KORTEX_INSTANTIATE_AFFINE(Kokkos::Threads)
#endif
#ifdef KOKKOS_ENABLE_CUDA
KORTEX_INSTANTIATE_AFFINE(Kokkos::Cuda)
#endif

#undef KORTEX_INSTANTIATE_AFFINE

}  // namespace kortex::gpu
