// Fluid operator L = -alpha lap - beta grad div + gamma and its solves (core/Fluid.hpp): the CPU
// reference (reference_cpu/Fluid.hpp) against manufactured solutions and analytic properties, and
// every Kokkos solver (gpu/fluid/Fluid.hpp: spectral, SOR Naive / ScratchTiled, CG Implicit /
// Explicit) against the reference and against each other on every enabled execution space.
#define BOOST_TEST_MODULE Fluid
#include <boost/test/unit_test.hpp>

#include <Eigen/Dense>

#include <complex>
#include <random>
#include <cmath>
#include <random>
#include <string>

#include "FieldTestUtils.hpp"
#include "TestUtils.hpp"
#include "core/Fluid.hpp"
#include "gpu/fluid/Fluid.hpp"
#include "reference_cpu/Fluid.hpp"

using namespace kortex;
using HostField = ref::HostField;
using test::maxAbs;
using test::maxDiff;
using test::randomField;
using test::toDevice;
using test::toHostField;

namespace {

// ---- tolerances ----------------------------------------------------------------------------------
// Relative L2 / max errors against the exact field, for the double reference: the only error is
// the float storage of F and v (2^-24 relative each, amplified by the condition number of L,
// (12 alpha + gamma) / gamma ~ 121 at the paper's values): measured 8e-8 (Serial).
constexpr double kRefExactTol = 1e-5;
// Kokkos float solves vs the exact field: float FFTs (log2 N rounding steps of 2^-24) or float
// stencil sums, times the condition number: measured 2.5e-7 on the odd grid (Serial, FFTW).
constexpr double kFloatExactTol = 5e-4;
// Kokkos float matvec vs the double reference, relative to the peak |L v|: 7-15 float products of
// O(1) numbers, a few float ulps.
constexpr double kMatvecTol = 2e-6;
// Iterative solvers run to convergence agree with the spectral solve to their residual times the
// condition number: residual <= 1e-6 (CG tolerance) x 121 ~ 1e-4.
constexpr double kSolverAgreeTol = 2e-4;
// SOR after enough sweeps: relative residual below this (SOR contracts by omega - 1 ~ 0.69 per
// sweep at the paper's values: 150 sweeps reach ~1e-24 in exact arithmetic, float stalls ~1e-6).
constexpr double kSorConvergedResidual = 1e-5;
// Symmetry x^T L y = y^T L x in double: rounding of sums of ~1e4 terms of O(1).
constexpr double kSymmetryTol = 1e-10;

FluidParams paperParams(double beta = 0.0) {
  FluidParams p;
  p.alpha = 0.01;
  p.beta = beta;
  p.gamma = 0.001;
  return p;
}

// A smooth periodic field with several modes per component.
HostField manufactured(int nz, int ny, int nx, unsigned seed = 1) {
  HostField v("v*", 3, nz, ny, nx);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> ph(0.0, 6.283);
  const double tw = 6.283185307179586;
  for (int c = 0; c < 3; ++c) {
    const double p1 = ph(rng), p2 = ph(rng), p3 = ph(rng);
    for (int z = 0; z < nz; ++z)
      for (int y = 0; y < ny; ++y)
        for (int x = 0; x < nx; ++x)
          v(c, z, y, x) = float(std::sin(tw * x / nx + p1) * std::cos(tw * 2 * y / ny + p2) +
                                0.5 * std::sin(tw * (z / double(nz) + 3.0 * x / nx) + p3) + 0.25 * (c + 1));
  }
  return v;
}

// max |a - b| / max |b|.
double relMaxError(HostField const& a, HostField const& b) { return test::maxDiff(a, b) / test::maxAbs(b); }

HostField applyRef(FluidParams const& p, HostField const& v) {
  HostField out("Lv", 3, v.extent(1), v.extent(2), v.extent(3));
  ref::fluidApply(p, v, out);
  return out;
}

}  // namespace

// ---- reference ------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(reference_operator_is_symmetric_positive_definite) {
  for (double beta : {0.0, 0.02}) {
    const FluidParams p = paperParams(beta);
    const HostField x = randomField(6, 8, 10, 3), y = randomField(6, 8, 10, 4);
    const double xy = ref::fluidBilinear(p, x, y), yx = ref::fluidBilinear(p, y, x);
    BOOST_TEST(std::fabs(xy - yx) <= kSymmetryTol * (std::fabs(xy) + 1.0), "beta " << beta << ": " << xy << " vs " << yx);
    BOOST_TEST(ref::fluidBilinear(p, x, x) > 0.0);
    // The constant field is the softest mode: x^T L x = gamma |x|^2 exactly.
    HostField one("one", 3, 6, 8, 10);
    Kokkos::deep_copy(one, 1.0f);
    BOOST_TEST(std::fabs(ref::fluidBilinear(p, one, one) - p.gamma * one.size()) <= 1e-9 * one.size());
  }
}

BOOST_AUTO_TEST_CASE(reference_operator_matches_the_closed_form_on_a_plane_wave) {
  // v = (cos(theta . x), 0, 0): (L v)_x = (alpha W + gamma + beta w_x) v_x by the symbol, and
  // (L v)_y = beta s_x s_y sin-part ... checked on the x component for a wave along x and y.
  const int nz = 8, ny = 12, nx = 16;
  const FluidParams p = paperParams(0.05);
  HostField v("wave", 3, nz, ny, nx);
  const double tw = 6.283185307179586, kx = 3, ky = 2;
  const double tx = tw * kx / nx, ty = tw * ky / ny;
  for (int z = 0; z < nz; ++z)
    for (int y = 0; y < ny; ++y)
      for (int x = 0; x < nx; ++x) v(0, z, y, x) = float(std::cos(tx * x + ty * y));
  const HostField lv = applyRef(p, v);
  const double wx = 4 * std::pow(std::sin(tx / 2), 2), wy = 4 * std::pow(std::sin(ty / 2), 2);
  const double ax = p.alpha * (wx + wy) + p.gamma + p.beta * wx;  // = a_x + beta s_x^2
  const double sxsy = std::sin(tx) * std::sin(ty);
  double err = 0.0;
  for (int z = 0; z < nz; ++z)
    for (int y = 0; y < ny; ++y)
      for (int x = 0; x < nx; ++x) {
        err = std::max(err, std::fabs(lv(0, z, y, x) - ax * std::cos(tx * x + ty * y)));
        // D_y D_x of cos(.) = -s_x s_y cos(.): (L v)_y = -beta D_y D_x v_x = beta s_x s_y cos(.)
        err = std::max(err, std::fabs(lv(1, z, y, x) - p.beta * sxsy * std::cos(tx * x + ty * y)));
        err = std::max(err, double(std::fabs(lv(2, z, y, x))));
      }
  BOOST_TEST(err <= 1e-6);
}

BOOST_AUTO_TEST_CASE(reference_solvers_recover_a_manufactured_field) {
  for (double beta : {0.0, 0.03}) {
    const FluidParams p = paperParams(beta);
    const HostField vStar = manufactured(8, 12, 10);
    const HostField f = applyRef(p, vStar);
    HostField v("v", 3, 8, 12, 10);
    ref::fluidSolveSpectral(p, f, v);
    BOOST_TEST(relMaxError(v, vStar) <= kRefExactTol, "spectral, beta " << beta);
    HostField vc("vc", 3, 8, 12, 10);
    const FluidSolveReport cg = ref::fluidSolveCg(p, f, vc, 2000, 1e-9);
    BOOST_TEST(cg.residual <= 1e-6);
    BOOST_TEST(relMaxError(vc, vStar) <= kSolverAgreeTol, "CG, beta " << beta << " after " << cg.iterations);
    if (beta == 0.0) {
      HostField vs("vs", 3, 8, 12, 10);
      const FluidSolveReport sor = ref::fluidSolveSor(p, f, vs, 150);
      BOOST_TEST(sor.residual <= kSorConvergedResidual);
      BOOST_TEST(relMaxError(vs, vStar) <= kSolverAgreeTol);
    }
  }
}

// The reference keeps the scalar symbol of beta = 0 between solves (one grid and parameter set):
// a solve after another grid or other parameters is the same bits as the first, and the scalar
// solve rhs / s is what FullPivLU gives for s I (checked on random values, every rounding path).
BOOST_AUTO_TEST_CASE(reference_spectral_symbol_is_kept_per_grid_and_parameters) {
  const FluidParams p = paperParams(0.0);
  FluidParams q = p;
  q.alpha *= 2.0;
  const HostField f = applyRef(p, manufactured(8, 12, 10)), g = applyRef(p, manufactured(5, 7, 9, 9));
  HostField first("first", 3, 8, 12, 10), again("again", 3, 8, 12, 10), other("other", 3, 8, 12, 10), small("small", 3, 5, 7, 9);
  ref::fluidSolveSpectral(p, f, first);
  ref::fluidSolveSpectral(p, g, small);
  ref::fluidSolveSpectral(q, f, other);
  ref::fluidSolveSpectral(p, f, again);
  BOOST_TEST(maxDiff(first, again) == 0.0);
  BOOST_TEST(maxDiff(first, other) > 0.0);
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(-3.0, 3.0);
  int differ = 0;
  for (int k = 0; k < 20000; ++k) {
    const std::complex<double> s(std::ldexp(u(rng), int(u(rng) * 10)), u(rng) * 1e-3);
    Eigen::Vector3cd rhs;
    for (int c = 0; c < 3; ++c) rhs(c) = {u(rng), u(rng)};
    const Eigen::Vector3cd lu = (s * Eigen::Matrix3cd::Identity()).fullPivLu().solve(rhs);
    for (int c = 0; c < 3; ++c) differ += (lu(c) != rhs(c) / s);
  }
  BOOST_TEST(differ == 0);
}

BOOST_AUTO_TEST_CASE(reference_odd_extents_spectral_and_cg) {
  const FluidParams p = paperParams(0.01);
  const HostField vStar = manufactured(5, 7, 9, 9);
  const HostField f = applyRef(p, vStar);
  HostField v("v", 3, 5, 7, 9), vc("vc", 3, 5, 7, 9);
  ref::fluidSolveSpectral(p, f, v);
  BOOST_TEST(relMaxError(v, vStar) <= kRefExactTol);
  ref::fluidSolveCg(p, f, vc, 2000, 1e-9);
  BOOST_TEST(relMaxError(vc, vStar) <= kSolverAgreeTol);
}

BOOST_AUTO_TEST_CASE(reference_refusals) {
  const HostField f = randomField(6, 6, 7, 1);
  HostField v("v", 3, 6, 6, 7);
  test::expectThrowWith<InvalidArgument>([&] { ref::fluidSolveSor(paperParams(), f, v, 3); }, {"even extents"});
  const HostField g = randomField(6, 6, 6, 1);
  HostField w("w", 3, 6, 6, 6);
  test::expectThrowWith<InvalidArgument>([&] { ref::fluidSolveSor(paperParams(0.1), g, w, 3); }, {"beta = 0"});
  HostField small("s", 3, 3, 6, 6);
  test::expectThrowWith<InvalidArgument>([&] { ref::fluidSolveSpectral(paperParams(), small, small); }, {">= 4"});
}

BOOST_AUTO_TEST_CASE(params_validation) {
  FluidParams p;
  p.alpha = 0.0;
  test::expectThrowWith<InvalidArgument>([&] { p.validate(); }, {"alpha"});
  p = FluidParams{};
  p.gamma = -1.0;
  test::expectThrowWith<InvalidArgument>([&] { p.validate(); }, {"gamma"});
  p = FluidParams{};
  p.beta = -0.1;
  test::expectThrowWith<InvalidArgument>([&] { p.validate(); }, {"beta"});
  p = FluidParams{};
  p.alpha = std::nan("");
  test::expectThrowWith<InvalidArgument>([&] { p.validate(); }, {"alpha"});
  BOOST_TEST(sorOmega(paperParams()) > 1.6);
  BOOST_TEST(sorOmega(paperParams()) < 1.8);
}

// ---- Kokkos, every execution space ----------------------------------------------------------------

BOOST_AUTO_TEST_CASE_TEMPLATE(kokkos_matvec_matches_reference, Space, test::ExecutionSpaces) {
  Space exec;
  for (double beta : {0.0, 0.04}) {
    const FluidParams p = paperParams(beta);
    const HostField v = randomField(6, 8, 12, 7);
    auto dv = toDevice<Space>(v);
    gpu::Field<typename Space::memory_space> out("out", 3, 6, 8, 12);
    gpu::fluidApply(exec, dv, out, p);
    const HostField got = toHostField(out), want = applyRef(p, v);
    BOOST_TEST(relMaxError(got, want) <= kMatvecTol, "implicit, beta " << beta);
    gpu::FluidSolver<Space> solver(exec, 6, 8, 12, p);
    gpu::Field<typename Space::memory_space> out2("out2", 3, 6, 8, 12);
    solver.applyExplicit(dv, out2);
    BOOST_TEST(solver.csrNonZeros() == 3LL * 6 * 8 * 12 * fluidCsrRowNonZeros(beta));
    BOOST_TEST(relMaxError(toHostField(out2), want) <= kMatvecTol, "explicit CSR, beta " << beta);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(kokkos_solvers_recover_a_manufactured_field, Space, test::ExecutionSpaces) {
  Space exec;
  using Mem = typename Space::memory_space;
  const int nz = 8, ny = 12, nx = 16;
  for (double beta : {0.0, 0.03}) {
    const FluidParams p = paperParams(beta);
    const HostField vStar = manufactured(nz, ny, nx, 5);
    const HostField f = applyRef(p, vStar);
    auto df = toDevice<Space>(f);
    gpu::FluidSolver<Space> solver(exec, nz, ny, nx, p);
    gpu::Field<Mem> v("v", 3, nz, ny, nx);
    solver.spectral(df, v);
    const HostField spectral = toHostField(v);
    BOOST_TEST(relMaxError(spectral, vStar) <= kFloatExactTol, "spectral, beta " << beta);
    BOOST_TEST(solver.residual(df, v) <= 1e-5);
    for (MatvecVariant mv : {MatvecVariant::Implicit, MatvecVariant::Explicit}) {
      Kokkos::deep_copy(v, 0.0f);
      const FluidSolveReport r = solver.cg(df, v, 1000, 1e-6, mv);
      BOOST_TEST(r.residual <= 2e-6, "CG " << mv << " residual " << r.residual << " after " << r.iterations);
      BOOST_TEST(r.iterations > 1);
      BOOST_TEST(relMaxError(toHostField(v), spectral) <= kSolverAgreeTol, "CG " << mv << ", beta " << beta);
    }
    if (beta == 0.0) {
      for (SorVariant sv : {SorVariant::Naive, SorVariant::ScratchTiled}) {
        Kokkos::deep_copy(v, 0.0f);
        const FluidSolveReport r = solver.sor(df, v, 151, sv);  // odd: exercises the ping-pong copy
        BOOST_TEST(r.iterations == 151);
        BOOST_TEST(r.residual <= kSorConvergedResidual, "SOR " << sv << " residual " << r.residual);
        BOOST_TEST(relMaxError(toHostField(v), spectral) <= kSolverAgreeTol, "SOR " << sv);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(kokkos_sor_variants_do_the_same_sweeps, Space, test::ExecutionSpaces) {
  // Grids that are not multiples of the 32 x 8 tile, and a few sweeps from a random start, so that
  // the colour order and the wrap matter: both variants and the reference agree to rounding.
  Space exec;
  using Mem = typename Space::memory_space;
  const FluidParams p = paperParams();
  for (auto ext : {std::array<int, 3>{6, 10, 40}, std::array<int, 3>{4, 18, 36}, std::array<int, 3>{38, 6, 10}}) {  // the last: 3 z chunks
    const int nz = ext[0], ny = ext[1], nx = ext[2];
    const HostField f = randomField(nz, ny, nx, 11), v0 = randomField(nz, ny, nx, 12);
    HostField want("want", 3, nz, ny, nx);
    Kokkos::deep_copy(want, v0);
    ref::fluidSolveSor(p, f, want, 3);
    gpu::FluidSolver<Space> solver(exec, nz, ny, nx, p);
    auto df = toDevice<Space>(f);
    HostField got[2];
    int i = 0;
    for (SorVariant sv : {SorVariant::Naive, SorVariant::ScratchTiled}) {
      auto v = toDevice<Space>(v0);
      solver.sor(df, v, 3, sv, false);
      got[i] = toHostField(v);
      // Float sweeps vs the double reference: 3 sweeps of float updates, relative to the peak.
      BOOST_TEST(relMaxError(got[i], want) <= 1e-5, "SOR " << sv << " on " << nz << "x" << ny << "x" << nx);
      ++i;
    }
    // Same float operations in the same order: at most FMA-contraction differences.
    BOOST_TEST(relMaxError(got[1], got[0]) <= 1e-6);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(kokkos_odd_extents_and_refusals, Space, test::ExecutionSpaces) {
  Space exec;
  using Mem = typename Space::memory_space;
  const FluidParams p = paperParams(0.02);
  const HostField vStar = manufactured(5, 7, 9, 2);
  const HostField f = applyRef(p, vStar);
  auto df = toDevice<Space>(f);
  gpu::FluidSolver<Space> solver(exec, 5, 7, 9, p);
  gpu::Field<Mem> v("v", 3, 5, 7, 9);
  solver.spectral(df, v);
  BOOST_TEST(relMaxError(toHostField(v), vStar) <= kFloatExactTol);
  test::expectThrowWith<InvalidArgument>([&] { solver.sor(df, v, 2, SorVariant::Naive); }, {"beta = 0"});
  gpu::FluidSolver<Space> odd(exec, 5, 7, 9, paperParams());
  test::expectThrowWith<InvalidArgument>([&] { odd.sor(df, v, 2, SorVariant::ScratchTiled); }, {"even extents"});
  gpu::Field<Mem> wrong("wrong", 3, 5, 7, 10);
  test::expectThrowWith<InvalidArgument>([&] { solver.spectral(df, wrong); }, {"grid"});
  test::expectThrowWith<InvalidArgument>([&] { gpu::FluidSolver<Space>(exec, 3, 8, 8, p); }, {">= 4"});
  test::expectThrowWith<InvalidArgument>([&] { solver.spectral(df, gpu::Field<Mem>(df.data(), 3, 5, 7, 9)); },
                                         {"overlaps"});
}
