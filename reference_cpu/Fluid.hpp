// CPU reference of the fluid operator and its solves (specification: core/Fluid.hpp): double
// arithmetic, FFTW (double) for the spectral solve, OpenMP loops, written independently of the
// Kokkos code: the operator is assembled from its stencil table, and the spectral symbol is the
// discrete Fourier transform of that table, inverted as a 3x3 matrix (Eigen), not the closed form
// core/Fluid.hpp gives. Fields are (3, nz, ny, nx), component 0 = x. Every extent >= 4.
#pragma once

#include <memory>

#include "core/Fluid.hpp"
#include "core/Image.hpp"

namespace kortex::ref {

using HostField = Kokkos::View<float****, Kokkos::LayoutRight, Kokkos::HostSpace>;
using ConstHostField = Kokkos::View<const float****, Kokkos::LayoutRight, Kokkos::HostSpace>;

// out = L v.
void fluidApply(FluidParams const& p, ConstHostField v, HostField out);
// |F - L v|_2 / |F|_2 (0 when F = 0 and L v = 0).
double fluidResidual(FluidParams const& p, ConstHostField f, ConstHostField v);
// x^T L y (double), for the symmetry / positivity tests.
double fluidBilinear(FluidParams const& p, ConstHostField x, ConstHostField y);

// v = L^-1 F exactly (FFT, 3x3 symbol per frequency).
void fluidSolveSpectral(FluidParams const& p, ConstHostField f, HostField v);
// The spectral solve's FFTW buffers and plans, kept for the last grid and thread count by a caller that
// solves many times on one grid (a scale of the greedy registration): the same plans on the same
// buffers, so the same results as fresh ones, without the allocations' page faults and the planning.
class SpectralWorkspace {
 public:
  SpectralWorkspace();
  ~SpectralWorkspace();
  SpectralWorkspace(SpectralWorkspace&&) noexcept;
  SpectralWorkspace& operator=(SpectralWorkspace&&) noexcept;
  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  friend void fluidSolveSpectral(FluidParams const&, ConstHostField, HostField, SpectralWorkspace&);
};
void fluidSolveSpectral(FluidParams const& p, ConstHostField f, HostField v, SpectralWorkspace& workspace);
// `sweeps` red-black SOR sweeps from the v passed in (beta must be 0, every extent even); the
// report carries the relative residual at the end when `residual` (one more operator pass; else -1).
FluidSolveReport fluidSolveSor(FluidParams const& p, ConstHostField f, HostField v, int sweeps, bool residual = true);
// CG from the v passed in until the relative residual <= tolerance or maxIterations; the report's
// residual is recomputed from the final v when `residual` (else -1).
FluidSolveReport fluidSolveCg(FluidParams const& p, ConstHostField f, HostField v, int maxIterations,
                              double tolerance, bool residual = true);

}  // namespace kortex::ref
