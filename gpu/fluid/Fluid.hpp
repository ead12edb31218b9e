// Kokkos solves of the fluid operator L = -alpha lap - beta grad div + gamma (specification,
// boundary rule and discretisation: core/Fluid.hpp). Entry points:
//   fluidApply     - out = L v (the implicit, matrix-free matvec of the paper's Fig 6);
//   fluidResidual  - |F - L v| / |F| (double sums; fences);
//   FluidSolver    - the workspace of one grid (FFT plans and spectrum, CG vectors, SOR ping-pong
//                    buffer, the assembled CSR matrix on demand), allocated once, with
//                    spectral (FFTW on host spaces, cuFFT under CUDA), sor (SorVariant) and
//                    cg (MatvecVariant) solves.
// Fields are (3, nz, ny, nx) in exec's memory space. Explicitly instantiated for every enabled
// execution space.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>

#include <memory>

#include "core/Fluid.hpp"
#include "core/Greedy.hpp"
#include "gpu/Fields.hpp"

namespace kortex::gpu {

template <class Exec>
void fluidApply(Exec const& exec, ConstField<typename Exec::memory_space> v,
                Field<typename Exec::memory_space> out, FluidParams const& params);

template <class Exec>
double fluidResidual(Exec const& exec, ConstField<typename Exec::memory_space> f,
                     ConstField<typename Exec::memory_space> v, FluidParams const& params);

namespace detail {
template <class Exec>
struct SpectralPlan;  // FFT plans of one grid (gpu/detail/Spectral.cpp)
}

// Bytes a FluidSolver allocates on its grid (Kokkos Views) when it runs the solves of `solver`
// (greedySolveKind): r always; the spectrum (3 complex half-spectra, nx/2 + 1 wide) for spectral
// solves; the SOR ping-pong field for ScratchTiled SOR; CG's d and q and, for the explicit matvec,
// the CSR matrix. The FFT library's own work area is not a View and is not counted.
std::int64_t fluidSolverBytes(int nz, int ny, int nx, GreedySolver solver, SorVariant sor, MatvecVariant matvec,
                              double beta);

template <class Exec>
class FluidSolver {
 public:
  using memory_space = typename Exec::memory_space;
  // Grid extents; every extent >= kFluidMinExtent (InvalidArgument).
  FluidSolver(Exec const& exec, int nz, int ny, int nx, FluidParams const& params);
  ~FluidSolver();
  FluidSolver(FluidSolver const&) = delete;
  FluidSolver& operator=(FluidSolver const&) = delete;

  // v = L^-1 f exactly (up to float rounding). Enqueued on exec.
  void spectral(ConstField<memory_space> f, Field<memory_space> v);
  // `sweeps` red-black SOR sweeps from the v passed in (beta = 0, even extents: InvalidArgument
  // otherwise). The residual is computed (one more matvec pass) only when `residual` is true.
  FluidSolveReport sor(ConstField<memory_space> f, Field<memory_space> v, int sweeps, SorVariant variant,
                       bool residual = true);
  // CG from the v passed in until |F - L v| / |F| <= tolerance or maxIterations.
  FluidSolveReport cg(ConstField<memory_space> f, Field<memory_space> v, int maxIterations, double tolerance,
                      MatvecVariant variant);
  double residual(ConstField<memory_space> f, ConstField<memory_space> v);

  // out = L v through the assembled CSR matrix (assembled on first use; the Explicit baseline).
  void applyExplicit(ConstField<memory_space> v, Field<memory_space> out);
  // Stored non-zeros of the CSR matrix (0 until assembled).
  long long csrNonZeros() const { return static_cast<long long>(csrCol_.extent(0)); }

  FluidParams const& params() const { return params_; }

 private:
  void assembleCsr();
  void requireGrid(ConstField<memory_space> a, const char* what) const;

  Exec exec_;
  int nz_, ny_, nx_;
  FluidParams params_;
  FluidOperator op_;
  std::unique_ptr<detail::SpectralPlan<Exec>> plan_;
  Kokkos::View<Kokkos::complex<float>****, Kokkos::LayoutRight, memory_space> spectrum_;
  Field<memory_space> r_, d_, q_, pong_;
  Kokkos::View<int*, memory_space> csrRow_;
  Kokkos::View<int*, memory_space> csrCol_;
  Kokkos::View<float*, memory_space> csrVal_;
};

}  // namespace kortex::gpu
