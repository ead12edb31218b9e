#include "gpu/imageops/Resample.hpp"

#include <cstdint>
#include <string>

#include "core/Errors.hpp"
#include "gpu/detail/Common.hpp"
#include "gpu/imageops/detail/Resample.hpp"

namespace kortex::gpu {

namespace {

template <class Exec, ApplyInterpolation Interp>
void launch(Exec const& exec, ConstImageView<typename Exec::memory_space> input, PackedFieldsOf<Exec> fields,
            ApplyChainCoeffs const& chain, ImageView<typename Exec::memory_space> out, const char* label) {
  const int nz = int(out.extent(0)), ny = int(out.extent(1)), nx = int(out.extent(2));
  Kokkos::parallel_for(label, Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>(exec, 0, std::int64_t(nz) * ny * nx),
                       imageops_detail::ResampleFunctor<typename Exec::memory_space, Interp>{
                           input, fields.data(), chain, out, nx, ny});
}

}  // namespace

template <class Exec>
void resample(Exec const& exec, ConstImageView<typename Exec::memory_space> input, PackedFieldsOf<Exec> fields,
              ApplyChainCoeffs const& chain, ApplyInterpolation interpolation,
              ImageView<typename Exec::memory_space> out) {
  if (input.data() == nullptr || out.data() == nullptr) throw InvalidArgument("resample: image not allocated");
  if (out.size() == 0) throw InvalidArgument("resample: the output is empty");
  for (int k = 0; k < 3; ++k) {
    if (input.extent(k) < 2) throw InvalidArgument("resample: the input needs at least 2 voxels along every axis");
    if (input.extent(k) > std::size_t(2147483647 / 4) || out.extent(k) > std::size_t(2147483647 / 4))
      throw InvalidArgument("resample: extents too large for 32-bit indexing");
  }
  if (chain.count < 0 || chain.count > kMaxApplyTransforms) throw InvalidArgument("resample: invalid chain length");
  std::int64_t needed = 0;
  for (int k = 0; k < chain.count; ++k)
    if (chain.step[k].kind == 1) {
      const std::int64_t end = chain.step[k].offset + 3 * std::int64_t(chain.step[k].n[0]) * chain.step[k].n[1] * chain.step[k].n[2];
      needed = end > needed ? end : needed;
    }
  if (std::int64_t(fields.size()) < needed) throw InvalidArgument("resample: the packed field buffer is smaller than the chain's fields");
  if (spansOverlap(out, input) || (fields.size() > 0 && spansOverlap(out, fields)))
    throw InvalidArgument("resample: the output overlaps an input");
  switch (interpolation) {
    case ApplyInterpolation::Linear:
      launch<Exec, ApplyInterpolation::Linear>(exec, input, fields, chain, out, "kortex::imageops::resample_linear");
      break;
    case ApplyInterpolation::Nearest:
      launch<Exec, ApplyInterpolation::Nearest>(exec, input, fields, chain, out, "kortex::imageops::resample_nearest");
      break;
    case ApplyInterpolation::Label:
      launch<Exec, ApplyInterpolation::Label>(exec, input, fields, chain, out, "kortex::imageops::resample_label");
      break;
  }
}

#define KORTEX_INSTANTIATE_RESAMPLE(SPACE)                                                                      \
  template void resample<SPACE>(SPACE const&, ConstImageView<SPACE::memory_space>, PackedFieldsOf<SPACE>, \
                                ApplyChainCoeffs const&, ApplyInterpolation, ImageView<SPACE::memory_space>);

#ifdef KOKKOS_ENABLE_SERIAL
KORTEX_INSTANTIATE_RESAMPLE(Kokkos::Serial)
#endif
#ifdef KOKKOS_ENABLE_OPENMP
KORTEX_INSTANTIATE_RESAMPLE(Kokkos::OpenMP)
#endif
#ifdef KOKKOS_ENABLE_THREADS
KORTEX_INSTANTIATE_RESAMPLE(Kokkos::Threads)
#endif
#ifdef KOKKOS_ENABLE_CUDA
KORTEX_INSTANTIATE_RESAMPLE(Kokkos::Cuda)
#endif

#undef KORTEX_INSTANTIATE_RESAMPLE

}  // namespace kortex::gpu
