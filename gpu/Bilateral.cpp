// Kokkos bilateral filter: variant dispatch and explicit instantiation for every enabled
// execution space. Kernels: gpu/BilateralImpl.hpp.
#include "gpu/Bilateral.hpp"

#include "gpu/BilateralImpl.hpp"

namespace kortex::gpu {

template <class ExecSpace>
void bilateral(ExecSpace const& exec, ConstImageView<typename ExecSpace::memory_space> in,
               ImageView<typename ExecSpace::memory_space> out, BilateralParams const& params) {
  // Every check runs before anything is enqueued: a bad call leaves `out` untouched.
  bilateral_impl::checkInputs(in, out, params);
  switch (params.variant) {
    case BilateralVariant::Naive:
      bilateral_impl::naive(exec, in, out, params);
      return;
    case BilateralVariant::ScratchTiled:
      bilateral_impl::scratchTiled(exec, in, out, params,
                                   bilateral_impl::defaultTileFor(exec, in, params.radius));
      return;
  }
  throw InvalidArgument("bilateral: unknown variant " +
                        std::to_string(static_cast<int>(params.variant)));
}

#define KORTEX_INSTANTIATE_BILATERAL(SPACE)                                                    \
  template void bilateral<SPACE>(SPACE const&, ConstImageView<SPACE::memory_space>,             \
                                 ImageView<SPACE::memory_space>, BilateralParams const&);

#ifdef KOKKOS_ENABLE_SERIAL
KORTEX_INSTANTIATE_BILATERAL(Kokkos::Serial)
#endif
#ifdef KOKKOS_ENABLE_OPENMP
KORTEX_INSTANTIATE_BILATERAL(Kokkos::OpenMP)
#endif
#ifdef KOKKOS_ENABLE_THREADS
KORTEX_INSTANTIATE_BILATERAL(Kokkos::Threads)
#endif
#ifdef KOKKOS_ENABLE_CUDA
KORTEX_INSTANTIATE_BILATERAL(Kokkos::Cuda)
#endif

#undef KORTEX_INSTANTIATE_BILATERAL

}  // namespace kortex::gpu
