#include "gpu/detail/Spectral.hpp"

#include <fftw3.h>

#include <stdexcept>
#include <string>
#include <type_traits>

#if defined(KOKKOS_ENABLE_CUDA)
#include <cufft.h>
#endif

namespace kortex::gpu::detail {
namespace {

template <class Exec>
constexpr bool kIsCuda = false;
#if defined(KOKKOS_ENABLE_CUDA)
template <>
constexpr bool kIsCuda<Kokkos::Cuda> = true;

void cufftCheck(cufftResult r, const char* what) {
  if (r != CUFFT_SUCCESS) throw std::runtime_error(std::string("cuFFT ") + what + " failed (cufftResult " + std::to_string(int(r)) + ")");
}

// Two created handles, destroyed with the object.
struct CufftHandles {
  cufftHandle h[2] = {0, 0};
  int created = 0;
  CufftHandles() {
    for (; created < 2; ++created)
      if (cufftCreate(&h[created]) != CUFFT_SUCCESS) {
        release();
        throw std::runtime_error("cuFFT create failed");
      }
  }
  ~CufftHandles() { release(); }
  void release() {
    for (int k = 0; k < created; ++k) cufftDestroy(h[k]);
    created = 0;
  }
  CufftHandles(CufftHandles const&) = delete;
  CufftHandles& operator=(CufftHandles const&) = delete;
};
#endif

}  // namespace

template <class Exec>
SpectralPlan<Exec>::SpectralPlan(Exec const& e, int nz, int ny, int nx, Field<Mem> realProbe, Spectrum spectrum)
    : exec(e) {
  int n[3] = {nz, ny, nx};
  const int nh = nx / 2 + 1;
  const int realDist = nz * ny * nx, complexDist = nz * ny * nh;
  const int batch = static_cast<int>(spectrum.extent(0));  // components transformed together
  if constexpr (kIsCuda<Exec>) {
#if defined(KOKKOS_ENABLE_CUDA)
    CufftHandles plans;  // destroyed here if a plan fails
    std::size_t work = 0;
    cufftCheck(cufftMakePlanMany(plans.h[0], 3, n, nullptr, 1, realDist, nullptr, 1, complexDist, CUFFT_R2C, batch, &work),
               "R2C plan");
    cufftCheck(cufftMakePlanMany(plans.h[1], 3, n, nullptr, 1, complexDist, nullptr, 1, realDist, CUFFT_C2R, batch, &work),
               "C2R plan");
    for (int k = 0; k < 2; ++k) cufftCheck(cufftSetStream(plans.h[k], exec.cuda_stream()), "stream");
    handles[0] = int(plans.h[0]);
    handles[1] = int(plans.h[1]);
    plans.created = 0;  // the handles are this plan's now (destroyed by ~SpectralPlan)
#endif
  } else {
    auto* cplx = reinterpret_cast<fftwf_complex*>(spectrum.data());
    forwardPlan = fftwf_plan_many_dft_r2c(3, n, batch, realProbe.data(), nullptr, 1, realDist, cplx, nullptr, 1,
                                          complexDist, FFTW_ESTIMATE | FFTW_UNALIGNED);
    inversePlan = fftwf_plan_many_dft_c2r(3, n, batch, cplx, nullptr, 1, complexDist, realProbe.data(), nullptr, 1,
                                          realDist, FFTW_ESTIMATE | FFTW_UNALIGNED);
    if (!forwardPlan || !inversePlan) throw std::runtime_error("FFTW could not plan a real 3D FFT");
  }
}

template <class Exec>
SpectralPlan<Exec>::~SpectralPlan() {
  if constexpr (kIsCuda<Exec>) {
#if defined(KOKKOS_ENABLE_CUDA)
    cufftDestroy(cufftHandle(handles[0]));
    cufftDestroy(cufftHandle(handles[1]));
#endif
  } else {
    if (forwardPlan) fftwf_destroy_plan(static_cast<fftwf_plan>(forwardPlan));
    if (inversePlan) fftwf_destroy_plan(static_cast<fftwf_plan>(inversePlan));
  }
}

template <class Exec>
void SpectralPlan<Exec>::forward(ConstField<Mem> in, Spectrum spectrum) {
  if constexpr (kIsCuda<Exec>) {
#if defined(KOKKOS_ENABLE_CUDA)
    cufftCheck(cufftExecR2C(cufftHandle(handles[0]), const_cast<cufftReal*>(in.data()),
                            reinterpret_cast<cufftComplex*>(spectrum.data())),
               "R2C");
#endif
  } else {
    exec.fence();  // FFTW runs on the calling thread: earlier kernels must be done
    fftwf_execute_dft_r2c(static_cast<fftwf_plan>(forwardPlan), const_cast<float*>(in.data()),
                          reinterpret_cast<fftwf_complex*>(spectrum.data()));
  }
}

template <class Exec>
void SpectralPlan<Exec>::inverse(Spectrum spectrum, Field<Mem> out) {
  if constexpr (kIsCuda<Exec>) {
#if defined(KOKKOS_ENABLE_CUDA)
    cufftCheck(cufftExecC2R(cufftHandle(handles[1]), reinterpret_cast<cufftComplex*>(spectrum.data()), out.data()),
               "C2R");
#endif
  } else {
    exec.fence();
    fftwf_execute_dft_c2r(static_cast<fftwf_plan>(inversePlan), reinterpret_cast<fftwf_complex*>(spectrum.data()),
                          out.data());
  }
}

#define KORTEX_INSTANTIATE_SPECTRAL(SPACE) template struct SpectralPlan<SPACE>;
#if defined(KOKKOS_ENABLE_SERIAL)
KORTEX_INSTANTIATE_SPECTRAL(Kokkos::Serial)
#endif
#if defined(KOKKOS_ENABLE_OPENMP)
KORTEX_INSTANTIATE_SPECTRAL(Kokkos::OpenMP)
#endif
#if defined(KOKKOS_ENABLE_THREADS)
KORTEX_INSTANTIATE_SPECTRAL(Kokkos::Threads)
#endif
#if defined(KOKKOS_ENABLE_CUDA)
KORTEX_INSTANTIATE_SPECTRAL(Kokkos::Cuda)
#endif
#undef KORTEX_INSTANTIATE_SPECTRAL

}  // namespace kortex::gpu::detail
