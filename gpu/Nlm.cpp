// Kokkos non-local means: the entry point and its explicit instantiations for every enabled
// execution space. The variants live in gpu/NlmNaive.hpp, gpu/NlmScratchTiled.hpp and
// gpu/NlmBoxSum.hpp.
#include "gpu/Nlm.hpp"

#include <limits>
#include <string>

#include "gpu/Common.hpp"
#include "gpu/NlmBoxSum.hpp"
#include "gpu/NlmImpl.hpp"
#include "gpu/NlmNaive.hpp"
#include "gpu/NlmScratchTiled.hpp"

namespace kortex::gpu {

template <class ExecSpace>
void nlm(ExecSpace const& exec, ConstImageView<typename ExecSpace::memory_space> in,
         ImageView<typename ExecSpace::memory_space> out, NlmParams const& params) {
  checkSameExtents(in, out, "kortex::gpu::nlm");
  const Index nz = static_cast<Index>(in.extent(0));
  const Index ny = static_cast<Index>(in.extent(1));
  const Index nx = static_cast<Index>(in.extent(2));
  params.validateFor(Geometry::fromSize(nx, ny, nz));
  // Coordinates are ints inside the kernels (linear indices are 64-bit).
  constexpr Index kMaxExtent = std::numeric_limits<int>::max() / 4;
  if (nx > kMaxExtent || ny > kMaxExtent || nz > kMaxExtent)
    throw InvalidArgument("kortex::gpu::nlm: image extent above " + std::to_string(kMaxExtent));

  const nlm_detail::Problem pb = nlm_detail::makeProblem(in, params);
  const nlm_detail::InputView<typename ExecSpace::memory_space> input = in;
  switch (params.variant) {
    case NlmVariant::Naive:
      if (pb.dim == 2)
        nlm_detail::launchNaive<2>(exec, input, out, pb);
      else
        nlm_detail::launchNaive<3>(exec, input, out, pb);
      break;
    case NlmVariant::ScratchTiled:
      if (pb.dim == 2)
        nlm_detail::launchScratchTiled<2>(exec, input, out, pb);
      else
        nlm_detail::launchScratchTiled<3>(exec, input, out, pb);
      break;
    case NlmVariant::BoxSum:
      if (pb.dim == 2)
        nlm_detail::launchBoxSum<2>(exec, input, out, pb);
      else
        nlm_detail::launchBoxSum<3>(exec, input, out, pb);
      break;
    default:
      throw InvalidArgument("kortex::gpu::nlm: unknown variant");
  }
}

#define KORTEX_INSTANTIATE_NLM(SPACE)                                                    \
  template void nlm<SPACE>(SPACE const&, ConstImageView<SPACE::memory_space>,            \
                           ImageView<SPACE::memory_space>, NlmParams const&);

#ifdef KOKKOS_ENABLE_SERIAL
KORTEX_INSTANTIATE_NLM(Kokkos::Serial)
#endif
#ifdef KOKKOS_ENABLE_OPENMP
KORTEX_INSTANTIATE_NLM(Kokkos::OpenMP)
#endif
#ifdef KOKKOS_ENABLE_THREADS
KORTEX_INSTANTIATE_NLM(Kokkos::Threads)
#endif
#ifdef KOKKOS_ENABLE_CUDA
KORTEX_INSTANTIATE_NLM(Kokkos::Cuda)
#endif

#undef KORTEX_INSTANTIATE_NLM

}  // namespace kortex::gpu
