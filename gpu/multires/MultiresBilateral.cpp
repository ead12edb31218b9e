// Multires layer bilateral: entry points and explicit instantiation for every enabled execution
// space. Kernels: gpu/multires/detail/MultiresBilateralKernels.hpp.
#include "gpu/multires/MultiresBilateral.hpp"

#include "gpu/multires/detail/MultiresBilateralKernels.hpp"

namespace kortex::gpu::multires_detail {

// Every check runs before anything is enqueued: a refused call leaves `out` untouched.
template <class ExecSpace>
LayerTile bilateralLayer(ExecSpace const& exec, ConstLayer<typename ExecSpace::memory_space> in,
                         LayerView<typename ExecSpace::memory_space> out,
                         ConstFloatTable<typename ExecSpace::memory_space> closeness,
                         MultiresParams const& params, LayerTile tile) {
  return bilateralLayerFloat(exec, in, out, closeness, params, tile);
}

template <class ExecSpace>
LayerTile bilateralLayers(ExecSpace const& exec, std::vector<ConstLayer<typename ExecSpace::memory_space>> const& in,
                          std::vector<LayerView<typename ExecSpace::memory_space>> const& out,
                          MultiresParams const& params, LayerTile tile) {
  return bilateralLayersFloat(exec, in, out, params, tile);
}

template <class ExecSpace>
LayerTile bilateralLayer(ExecSpace const& exec, ConstIntLayer<typename ExecSpace::memory_space> in,
                         IntLayerView<typename ExecSpace::memory_space> out,
                         ConstTable<typename ExecSpace::memory_space> closenessQ,
                         ConstTable<typename ExecSpace::memory_space> similarityQ,
                         MultiresParams const& params, LayerTile tile) {
  return bilateralLayerQ(exec, in, out, closenessQ, similarityQ, params, tile,
                         SimilarityPlacement::Auto);
}

#define KORTEX_INSTANTIATE_MULTIRES_BILATERAL(SPACE)                                             \
  template LayerTile bilateralLayer<SPACE>(SPACE const&, ConstLayer<SPACE::memory_space>,       \
                                           LayerView<SPACE::memory_space>,                      \
                                           ConstFloatTable<SPACE::memory_space>,                \
                                           MultiresParams const&, LayerTile);                   \
  template LayerTile bilateralLayers<SPACE>(SPACE const&, std::vector<ConstLayer<SPACE::memory_space>> const&, \
                                            std::vector<LayerView<SPACE::memory_space>> const&,  \
                                            MultiresParams const&, LayerTile);                  \
  template LayerTile bilateralLayer<SPACE>(SPACE const&, ConstIntLayer<SPACE::memory_space>,    \
                                           IntLayerView<SPACE::memory_space>,                   \
                                           ConstTable<SPACE::memory_space>,                     \
                                           ConstTable<SPACE::memory_space>,                     \
                                           MultiresParams const&, LayerTile);

#ifdef KOKKOS_ENABLE_SERIAL
KORTEX_INSTANTIATE_MULTIRES_BILATERAL(Kokkos::Serial)
#endif
#ifdef KOKKOS_ENABLE_OPENMP
KORTEX_INSTANTIATE_MULTIRES_BILATERAL(Kokkos::OpenMP)
#endif
#ifdef KOKKOS_ENABLE_THREADS
KORTEX_INSTANTIATE_MULTIRES_BILATERAL(Kokkos::Threads)
#endif
#ifdef KOKKOS_ENABLE_CUDA
KORTEX_INSTANTIATE_MULTIRES_BILATERAL(Kokkos::Cuda)
#endif

#undef KORTEX_INSTANTIATE_MULTIRES_BILATERAL

}  // namespace kortex::gpu::multires_detail
