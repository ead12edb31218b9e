// Kokkos multiresolution filter: the one-shot entry points and MultiresPlan, explicitly
// instantiated for every enabled execution space (float and uint16 pipelines). The plan lives
// in gpu/multires/detail/MultiresDriver.hpp, the pyramid kernels in gpu/MultiresPyramid*.{hpp,cpp}, the layer
// bilateral in gpu/MultiresBilateral*.{hpp,cpp}.
#include "gpu/multires/Multires.hpp"

#include "gpu/detail/Common.hpp"
#include "gpu/multires/detail/MultiresDriver.hpp"

namespace kortex::gpu {

namespace {

// Views are checked before anything is enqueued; the plan's constructor checks what sizes its
// buffers (levels that fit, variant pair, 32-bit extents) and the integer value check runs inside
// decompose, before the first kernel that writes.
template <class InView, class OutView>
void checkCall(InView const& in, OutView const& out, MultiresParams const&, bool) {
  checkSameExtents(in, out, "kortex::gpu::multires");
  if (in.extent(0) != 1) throw InvalidArgument("kortex::gpu::multires: the filter is 2D (nz must be 1)");
}

}  // namespace

// The pyramid is freed on return, which waits for `exec` (Kokkos frees device memory after a
// fence); the explicit fence makes that visible. Use MultiresPlan to keep frames asynchronous.
template <class ExecSpace>
void multires(ExecSpace const& exec, ConstImageView<typename ExecSpace::memory_space> in,
              ImageView<typename ExecSpace::memory_space> out, MultiresParams const& params) {
  checkCall(in, out, params, false);
  MultiresPlan<ExecSpace, float> plan(exec, static_cast<Index>(in.extent(2)), static_cast<Index>(in.extent(1)),
                                      params);
  plan.run(in, out);
  exec.fence();
}

template <class ExecSpace>
void multires(ExecSpace const& exec, ConstU16ImageView<typename ExecSpace::memory_space> in,
              U16ImageView<typename ExecSpace::memory_space> out, MultiresParams const& params) {
  checkCall(in, out, params, true);
  MultiresPlan<ExecSpace, std::uint16_t> plan(exec, static_cast<Index>(in.extent(2)),
                                              static_cast<Index>(in.extent(1)), params);
  plan.run(in, out);
  exec.fence();
}

#define KORTEX_INSTANTIATE_MULTIRES(SPACE)                                                        \
  template void multires<SPACE>(SPACE const&, ConstImageView<SPACE::memory_space>,                \
                                ImageView<SPACE::memory_space>, MultiresParams const&);            \
  template void multires<SPACE>(SPACE const&, ConstU16ImageView<SPACE::memory_space>,             \
                                U16ImageView<SPACE::memory_space>, MultiresParams const&);         \
  template class MultiresPlan<SPACE, float>;                                                       \
  template class MultiresPlan<SPACE, std::uint16_t>;

#ifdef KOKKOS_ENABLE_SERIAL
KORTEX_INSTANTIATE_MULTIRES(Kokkos::Serial)
#endif
#ifdef KOKKOS_ENABLE_OPENMP
KORTEX_INSTANTIATE_MULTIRES(Kokkos::OpenMP)
#endif
#ifdef KOKKOS_ENABLE_THREADS
KORTEX_INSTANTIATE_MULTIRES(Kokkos::Threads)
#endif
#ifdef KOKKOS_ENABLE_CUDA
KORTEX_INSTANTIATE_MULTIRES(Kokkos::Cuda)
#endif

#undef KORTEX_INSTANTIATE_MULTIRES

}  // namespace kortex::gpu
