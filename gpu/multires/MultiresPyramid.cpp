// Explicit instantiations of the multiresolution pyramid kernels (gpu/multires/MultiresPyramid.hpp) for
// every enabled execution space: float pipeline (float levels) and integer pipeline (int16
// levels; level 0 read from / written to the uint16 image).
#include "gpu/multires/MultiresPyramid.hpp"

#include "gpu/multires/detail/MultiresPyramidKernels.hpp"

namespace kortex::gpu::multires_detail {

#define KORTEX_INSTANTIATE_PYRAMID(SPACE)                                                           \
  template std::size_t pyramidScratchMax<SPACE>();                                                  \
  template void reduceLevel<SPACE, float, float>(SPACE const&, ConstLevel<float, SPACE::memory_space>, \
                                                 Level<float, SPACE::memory_space>, PyramidConfig const&); \
  template void reduceLevel<SPACE, std::uint16_t, std::int16_t>(                                    \
      SPACE const&, ConstLevel<std::uint16_t, SPACE::memory_space>,                                  \
      Level<std::int16_t, SPACE::memory_space>, PyramidConfig const&);                               \
  template void reduceLevel<SPACE, std::int16_t, std::int16_t>(                                     \
      SPACE const&, ConstLevel<std::int16_t, SPACE::memory_space>,                                   \
      Level<std::int16_t, SPACE::memory_space>, PyramidConfig const&);                               \
  template void laplacianLevel<SPACE, float, float>(                                                \
      SPACE const&, ConstLevel<float, SPACE::memory_space>, ConstLevel<float, SPACE::memory_space>,  \
      Level<float, SPACE::memory_space>, PyramidConfig const&,                                       \
      UnfusedBuffers<float, SPACE::memory_space> const&);                                            \
  template void laplacianLevel<SPACE, std::uint16_t, std::int16_t>(                                 \
      SPACE const&, ConstLevel<std::uint16_t, SPACE::memory_space>,                                  \
      ConstLevel<std::int16_t, SPACE::memory_space>, Level<std::int16_t, SPACE::memory_space>,       \
      PyramidConfig const&, UnfusedBuffers<std::int16_t, SPACE::memory_space> const&);               \
  template void laplacianLevel<SPACE, std::int16_t, std::int16_t>(                                  \
      SPACE const&, ConstLevel<std::int16_t, SPACE::memory_space>,                                   \
      ConstLevel<std::int16_t, SPACE::memory_space>, Level<std::int16_t, SPACE::memory_space>,       \
      PyramidConfig const&, UnfusedBuffers<std::int16_t, SPACE::memory_space> const&);               \
  template void reconstructLevel<SPACE, float, float>(                                              \
      SPACE const&, ConstLevel<float, SPACE::memory_space>, ConstLevel<float, SPACE::memory_space>,  \
      Level<float, SPACE::memory_space>, PyramidConfig const&,                                       \
      UnfusedBuffers<float, SPACE::memory_space> const&);                                            \
  template void reconstructLevel<SPACE, std::int16_t, std::int16_t>(                                \
      SPACE const&, ConstLevel<std::int16_t, SPACE::memory_space>,                                   \
      ConstLevel<std::int16_t, SPACE::memory_space>, Level<std::int16_t, SPACE::memory_space>,       \
      PyramidConfig const&, UnfusedBuffers<std::int16_t, SPACE::memory_space> const&);               \
  template void reconstructLevel<SPACE, std::int16_t, std::uint16_t>(                               \
      SPACE const&, ConstLevel<std::int16_t, SPACE::memory_space>,                                   \
      ConstLevel<std::int16_t, SPACE::memory_space>, Level<std::uint16_t, SPACE::memory_space>,      \
      PyramidConfig const&, UnfusedBuffers<std::int16_t, SPACE::memory_space> const&);               \
  template void decomposeLevel<SPACE, float, float>(                                                \
      SPACE const&, ConstLevel<float, SPACE::memory_space>, Level<float, SPACE::memory_space>,       \
      Level<float, SPACE::memory_space>, PyramidConfig const&,                                       \
      UnfusedBuffers<float, SPACE::memory_space> const&);                                            \
  template void decomposeLevel<SPACE, std::uint16_t, std::int16_t>(                                 \
      SPACE const&, ConstLevel<std::uint16_t, SPACE::memory_space>,                                  \
      Level<std::int16_t, SPACE::memory_space>, Level<std::int16_t, SPACE::memory_space>,            \
      PyramidConfig const&, UnfusedBuffers<std::int16_t, SPACE::memory_space> const&);               \
  template void decomposeLevel<SPACE, std::int16_t, std::int16_t>(                                  \
      SPACE const&, ConstLevel<std::int16_t, SPACE::memory_space>,                                   \
      Level<std::int16_t, SPACE::memory_space>, Level<std::int16_t, SPACE::memory_space>,            \
      PyramidConfig const&, UnfusedBuffers<std::int16_t, SPACE::memory_space> const&);               \
  template std::uint32_t maxValue<SPACE>(SPACE const&, ConstU16ImageView<SPACE::memory_space>);

#ifdef KOKKOS_ENABLE_SERIAL
KORTEX_INSTANTIATE_PYRAMID(Kokkos::Serial)
#endif
#ifdef KOKKOS_ENABLE_OPENMP
KORTEX_INSTANTIATE_PYRAMID(Kokkos::OpenMP)
#endif
#ifdef KOKKOS_ENABLE_THREADS
KORTEX_INSTANTIATE_PYRAMID(Kokkos::Threads)
#endif
#ifdef KOKKOS_ENABLE_CUDA
KORTEX_INSTANTIATE_PYRAMID(Kokkos::Cuda)
#endif

#undef KORTEX_INSTANTIATE_PYRAMID

}  // namespace kortex::gpu::multires_detail
