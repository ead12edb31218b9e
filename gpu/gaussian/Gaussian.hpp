// Kokkos 3D Gaussian blur (specification: core/Gaussian.hpp), clamp boundary:
//   Recursive - Young-van Vliet, one work item per line and axis, in place in `out` (cost
//               independent of sigma). Lines along y and z are processed by neighbouring work
//               items at neighbouring x (coalesced); lines along x are strided (one line per work
//               item walking along its row): the x pass is the slow one on GPUs.
//   Separable - the sampled kernel of radius ceil(3 sigma), one pass per axis through a
//               temporary image (allocated per call).
//   Fft       - the same operator through a clamp-padded real 3D FFT (gpu/detail/Spectral.hpp:
//               cuFFT under CUDA, FFTW on host spaces); plan and temporaries per call.
// `out` may be `in` (both variants). Enqueued on exec. Explicitly instantiated for every enabled execution space.
#pragma once

#include <Kokkos_Core.hpp>

#include "core/Gaussian.hpp"
#include "core/Image.hpp"

namespace kortex::gpu {

template <class Exec>
void gaussianBlur(Exec const& exec, ConstImageView<typename Exec::memory_space> in,
                  ImageView<typename Exec::memory_space> out, GaussianParams const& params);

}  // namespace kortex::gpu
