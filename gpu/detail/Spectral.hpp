// Batched real 3D FFTs of a multi-component field (forward R2C, inverse C2R, unnormalised) on one
// grid, batch = the spectrum's extent(0) (3 for the fluid solve, 1 for the spectral Gaussian):
// FFTW (single precision) on host execution spaces, cuFFT on the CUDA stream of the
// execution-space instance. Shared by the fluid solve (gpu/fluid/) and the spectral Gaussian (gpu/gaussian/);
// the library headers stay in gpu/detail/Spectral.cpp.
#pragma once

#include <Kokkos_Core.hpp>

#include "gpu/Fields.hpp"

namespace kortex::gpu::detail {

template <class Exec>
struct SpectralPlan {
  using Mem = typename Exec::memory_space;
  using Spectrum = Kokkos::View<Kokkos::complex<float>****, Kokkos::LayoutRight, Mem>;
  SpectralPlan(Exec const& exec, int nz, int ny, int nx, Field<Mem> realProbe, Spectrum spectrum);
  ~SpectralPlan();
  SpectralPlan(SpectralPlan const&) = delete;
  SpectralPlan& operator=(SpectralPlan const&) = delete;
  // spectrum (batch, nz, ny, nx/2 + 1) <- FFT(in); in is not modified.
  void forward(ConstField<Mem> in, Spectrum spectrum);
  // out <- unnormalised inverse FFT of spectrum (the spectrum is overwritten).
  void inverse(Spectrum spectrum, Field<Mem> out);

  Exec exec;
  void* forwardPlan = nullptr;
  void* inversePlan = nullptr;
  int handles[2] = {0, 0};  // cuFFT handles
};

}  // namespace kortex::gpu::detail
