#include "gpu/fluid/Fluid.hpp"

#include <cmath>
#include <string>

#include "core/Errors.hpp"
#include "gpu/detail/Common.hpp"
#include "gpu/fluid/detail/FluidKernels.hpp"
#include "gpu/detail/Spectral.hpp"

namespace kortex::gpu {

std::int64_t fluidSolverBytes(int nz, int ny, int nx, GreedySolver solver, SorVariant sor, MatvecVariant matvec,
                              double beta) {
  const std::int64_t field = 3 * std::int64_t(nz) * ny * nx * std::int64_t(sizeof(float));
  std::int64_t bytes = field;  // r
  bool spectral = false, usesSor = false, usesCg = false;
  for (bool first : {true, false}) {
    const GreedySolveKind k = greedySolveKind(solver, first);
    spectral = spectral || k == GreedySolveKind::Spectral;
    usesSor = usesSor || k == GreedySolveKind::SorCold || k == GreedySolveKind::SorWarm;
    usesCg = usesCg || k == GreedySolveKind::Cg;
  }
  if (spectral) bytes += 3 * std::int64_t(nz) * ny * (nx / 2 + 1) * 2 * std::int64_t(sizeof(float));  // spectrum
  if (usesSor && sor == SorVariant::ScratchTiled) bytes += field;                                      // sor_pong
  if (usesCg) {
    bytes += 2 * field;  // cg_d, cg_q
    if (matvec == MatvecVariant::Explicit) {
      const std::int64_t rows = 3 * std::int64_t(nz) * ny * nx, nnz = rows * fluidCsrRowNonZeros(beta);
      bytes += (rows + 1) * std::int64_t(sizeof(int)) + nnz * std::int64_t(sizeof(int) + sizeof(float));  // csr row, col, val
    }
  }
  return bytes;
}
namespace {

using namespace fluid_detail;

template <class View>
void requireFieldShape(View const& v, const char* who, const char* what) {
  if (v.data() == nullptr) throw InvalidArgument(std::string(who) + ": the " + what + " is not allocated");
  if (v.extent(0) != 3) throw InvalidArgument(std::string(who) + ": the " + what + " needs 3 components");
  for (int a = 1; a < 4; ++a)
    if (v.extent(a) < std::size_t(kFluidMinExtent))
      throw InvalidArgument(std::string(who) + ": every extent of the " + what + " must be >= " +
                            std::to_string(kFluidMinExtent));
}

template <class A, class B>
void requireSameShape(A const& a, B const& b, const char* who) {
  for (int k = 0; k < 4; ++k)
    if (a.extent(k) != b.extent(k)) throw InvalidArgument(std::string(who) + ": fields of different extents");
}

template <class Mem>
Kokkos::View<float*, Mem, Kokkos::MemoryUnmanaged> flat(Field<Mem> const& f) {
  return Kokkos::View<float*, Mem, Kokkos::MemoryUnmanaged>(f.data(), f.size());
}
template <class Mem>
Kokkos::View<const float*, Mem, Kokkos::MemoryUnmanaged> flat(ConstField<Mem> const& f) {
  return Kokkos::View<const float*, Mem, Kokkos::MemoryUnmanaged>(f.data(), f.size());
}

template <class Exec>
double dot(Exec const& exec, ConstField<typename Exec::memory_space> a, ConstField<typename Exec::memory_space> b) {
  auto fa = flat(a);
  auto fb = flat(b);
  double s = 0.0;
  Kokkos::parallel_reduce(
      "kortex::fluid::dot", Kokkos::RangePolicy<Exec, Kokkos::IndexType<long>>(exec, 0, long(fa.extent(0))),
      KOKKOS_LAMBDA(long i, double& acc) { acc += double(fa(i)) * double(fb(i)); }, s);
  return s;
}

}  // namespace

template <class Exec>
void fluidApply(Exec const& exec, ConstField<typename Exec::memory_space> v, Field<typename Exec::memory_space> out,
                FluidParams const& params) {
  using Mem = typename Exec::memory_space;
  requireFieldShape(v, "fluidApply", "input field");
  requireSameShape(v, out, "fluidApply");
  if (spansOverlap(v, out)) throw InvalidArgument("fluidApply: the output overlaps the input");
  parallelForVoxels("kortex::fluid::apply", exec, int(v.extent(1)), int(v.extent(2)), int(v.extent(3)),
                    ApplyFunctor<Mem>{v, out, makeFluidOperator(params)});
}

template <class Exec>
double fluidResidual(Exec const& exec, ConstField<typename Exec::memory_space> f,
                     ConstField<typename Exec::memory_space> v, FluidParams const& params) {
  using Mem = typename Exec::memory_space;
  requireFieldShape(v, "fluidResidual", "field");
  requireSameShape(f, v, "fluidResidual");
  ResidualSums sums{0.0, 0.0};
  const long n = long(v.extent(1)) * long(v.extent(2)) * long(v.extent(3));
  if (n > 2147483647L) throw InvalidArgument("fluidResidual: more than 2^31 - 1 voxels");
  Kokkos::parallel_reduce("kortex::fluid::residual", Kokkos::RangePolicy<Exec, Kokkos::IndexType<int>>(exec, 0, int(n)),
                          ResidualFunctor<Mem>{f, v, makeFluidOperator(params)}, sums);
  return relativeResidual(sums);
}

template <class Exec>
FluidSolver<Exec>::FluidSolver(Exec const& exec, int nz, int ny, int nx, FluidParams const& params)
    : exec_(exec), nz_(nz), ny_(ny), nx_(nx), params_(params), op_(makeFluidOperator(params)) {
  if (nz < kFluidMinExtent || ny < kFluidMinExtent || nx < kFluidMinExtent)
    throw InvalidArgument("fluid solver: every extent must be >= " + std::to_string(kFluidMinExtent));
  r_ = Field<memory_space>("kortex::fluid::r", 3, nz, ny, nx);
}

template <class Exec>
FluidSolver<Exec>::~FluidSolver() = default;

template <class Exec>
void FluidSolver<Exec>::requireGrid(ConstField<memory_space> a, const char* what) const {
  if (a.data() == nullptr) throw InvalidArgument(std::string("fluid solver: the ") + what + " is not allocated");
  if (a.extent(0) != 3 || int(a.extent(1)) != nz_ || int(a.extent(2)) != ny_ || int(a.extent(3)) != nx_)
    throw InvalidArgument(std::string("fluid solver: the ") + what + " is not on the solver's grid");
}

template <class Exec>
void FluidSolver<Exec>::spectral(ConstField<memory_space> f, Field<memory_space> v) {
  requireGrid(f, "right-hand side");
  requireGrid(v, "solution");
  if (spansOverlap(f, v)) throw InvalidArgument("fluid solver: the solution overlaps the right-hand side");
  const int nh = nx_ / 2 + 1;
  if (!plan_) {
    spectrum_ = decltype(spectrum_)("kortex::fluid::spectrum", 3, nz_, ny_, nh);
    plan_ = std::make_unique<detail::SpectralPlan<Exec>>(exec_, nz_, ny_, nx_, v, spectrum_);
  }
  plan_->forward(f, spectrum_);
  const float scale = 1.0f / (float(nz_) * float(ny_) * float(nx_));
  parallelForVoxels("kortex::fluid::symbol", exec_, nz_, ny_, nh,
                    SymbolFunctor<memory_space>{spectrum_, op_, nz_, ny_, nx_, scale});
  plan_->inverse(spectrum_, v);
}

template <class Exec>
FluidSolveReport FluidSolver<Exec>::sor(ConstField<memory_space> f, Field<memory_space> v, int sweeps,
                                        SorVariant variant, bool residual) {
  requireGrid(f, "right-hand side");
  requireGrid(v, "solution");
  if (spansOverlap(f, v)) throw InvalidArgument("fluid solver: the solution overlaps the right-hand side");
  if (const std::string why = sorUnsuitable(params_, nz_, ny_, nx_); !why.empty()) throw InvalidArgument(why);
  if (sweeps < 0) throw InvalidArgument("SOR sweep count must be >= 0");
  const float omega = float(sorOmega(params_));
  if (variant == SorVariant::Naive) {
    for (int s = 0; s < sweeps; ++s)
      for (int colour = 0; colour < 2; ++colour)
        parallelForVoxels("kortex::fluid::sor_naive", exec_, nz_, ny_, nx_ / 2,
                          SorNaiveFunctor<memory_space>{f, v, op_, omega, colour});
  } else {
    using F = SorTiledFunctor<Exec>;
    using Policy = Kokkos::TeamPolicy<Exec>;
    const std::size_t bytes = F::scratchBytes();
    const int tilesX = (nx_ + F::kTileX - 1) / F::kTileX, tilesY = (ny_ + F::kTileY - 1) / F::kTileY;
    const int teams = tilesX * tilesY * ((nz_ + F::kChunkZ - 1) / F::kChunkZ);
    Policy probe(exec_, teams, Kokkos::AUTO);
    const std::size_t maxBytes = probe.scratch_size_max(0);
    if (bytes > maxBytes)
      throw InvalidArgument("block SOR: its tile needs " + std::to_string(bytes) + " B of team scratch, the back end offers " +
                            std::to_string(maxBytes) + " B");
    if (pong_.extent(0) == 0) pong_ = Field<memory_space>("kortex::fluid::sor_pong", 3, nz_, ny_, nx_);
    Field<memory_space> a = v, b = pong_;
    for (int s = 0; s < sweeps; ++s) {
      Kokkos::parallel_for("kortex::fluid::sor_tiled",
                           Policy(exec_, teams, Kokkos::AUTO).set_scratch_size(0, Kokkos::PerTeam(bytes)),
                           F{f, a, b, op_, omega, tilesX, tilesY});
      std::swap(a, b);
    }
    if (a.data() != v.data()) Kokkos::deep_copy(exec_, v, a);  // odd sweep count
  }
  FluidSolveReport rep;
  rep.iterations = sweeps;
  if (residual) rep.residual = this->residual(f, v);
  return rep;
}

template <class Exec>
double FluidSolver<Exec>::residual(ConstField<memory_space> f, ConstField<memory_space> v) {
  return fluidResidual(exec_, f, v, params_);
}

template <class Exec>
void FluidSolver<Exec>::assembleCsr() {
  const int perRow = fluidCsrRowNonZeros(params_.beta);
  const long rows = 3L * nz_ * ny_ * nx_;
  if (rows * perRow > 2147483647L) throw InvalidArgument("explicit CSR matvec: the matrix exceeds 2^31 entries");
  csrRow_ = Kokkos::View<int*, memory_space>("kortex::fluid::csr_row", rows + 1);
  csrCol_ = Kokkos::View<int*, memory_space>("kortex::fluid::csr_col", rows * perRow);
  csrVal_ = Kokkos::View<float*, memory_space>("kortex::fluid::csr_val", rows * perRow);
  Kokkos::parallel_for("kortex::fluid::csr_assemble", Kokkos::RangePolicy<Exec>(exec_, 0, int(rows)),
                       CsrAssembleFunctor<memory_space>{csrRow_, csrCol_, csrVal_, op_, nz_, ny_, nx_, perRow});
}

template <class Exec>
void FluidSolver<Exec>::applyExplicit(ConstField<memory_space> v, Field<memory_space> out) {
  requireGrid(v, "input field");
  requireGrid(out, "output field");
  if (spansOverlap(v, out)) throw InvalidArgument("fluid solver: the output overlaps the input");
  if (csrCol_.extent(0) == 0) assembleCsr();
  const int rows = 3 * nz_ * ny_ * nx_;
  Kokkos::parallel_for("kortex::fluid::csr_spmv", Kokkos::RangePolicy<Exec>(exec_, 0, rows),
                       CsrSpmvFunctor<memory_space>{csrRow_, csrCol_, csrVal_, flat(v), flat(out)});
}

template <class Exec>
FluidSolveReport FluidSolver<Exec>::cg(ConstField<memory_space> f, Field<memory_space> v, int maxIterations,
                                       double tolerance, MatvecVariant variant) {
  requireGrid(f, "right-hand side");
  requireGrid(v, "solution");
  if (spansOverlap(f, v)) throw InvalidArgument("fluid solver: the solution overlaps the right-hand side");
  if (d_.extent(0) == 0) {
    d_ = Field<memory_space>("kortex::fluid::cg_d", 3, nz_, ny_, nx_);
    q_ = Field<memory_space>("kortex::fluid::cg_q", 3, nz_, ny_, nx_);
  }
  auto matvec = [&](ConstField<memory_space> in, Field<memory_space> out) {
    if (variant == MatvecVariant::Explicit)
      applyExplicit(in, out);
    else
      fluidApply(exec_, in, out, params_);
  };
  auto x = flat(v);
  auto r = flat(r_);
  auto d = flat(d_);
  auto q = flat(q_);
  auto b = flat(f);
  const long n = long(x.extent(0));
  using Policy = Kokkos::RangePolicy<Exec, Kokkos::IndexType<long>>;
  matvec(v, q_);
  Kokkos::parallel_for("kortex::fluid::cg_init", Policy(exec_, 0, n), KOKKOS_LAMBDA(long i) {
    const float ri = b(i) - q(i);
    r(i) = ri;
    d(i) = ri;
  });
  const double ff = dot(exec_, f, f);
  double rr = dot<Exec>(exec_, r_, r_);
  auto relative = [ff](double rr2) { return ff > 0.0 ? std::sqrt(rr2 / ff) : std::sqrt(rr2); };
  FluidSolveReport rep;
  while (rep.iterations < maxIterations && relative(rr) > tolerance) {
    matvec(d_, q_);
    const double dq = dot<Exec>(exec_, d_, q_);
    if (!(dq > 0.0)) break;  // d = 0 (exact solution) or lost positivity to rounding
    const float alpha = float(rr / dq);
    double rrNew = 0.0;
    Kokkos::parallel_reduce(
        "kortex::fluid::cg_update", Policy(exec_, 0, n),
        KOKKOS_LAMBDA(long i, double& acc) {
          x(i) += alpha * d(i);
          const float ri = r(i) - alpha * q(i);
          r(i) = ri;
          acc += double(ri) * double(ri);
        },
        rrNew);
    const float beta = float(rrNew / rr);
    rr = rrNew;
    Kokkos::parallel_for("kortex::fluid::cg_direction", Policy(exec_, 0, n),
                         KOKKOS_LAMBDA(long i) { d(i) = r(i) + beta * d(i); });
    ++rep.iterations;
  }
  rep.residual = residual(f, v);
  return rep;
}

#define KORTEX_INSTANTIATE_FLUID(SPACE)                                                                    \
  template void fluidApply<SPACE>(SPACE const&, ConstField<SPACE::memory_space>, Field<SPACE::memory_space>, \
                                  FluidParams const&);                                                     \
  template double fluidResidual<SPACE>(SPACE const&, ConstField<SPACE::memory_space>,                     \
                                       ConstField<SPACE::memory_space>, FluidParams const&);              \
  template class FluidSolver<SPACE>;

#ifdef KOKKOS_ENABLE_SERIAL
KORTEX_INSTANTIATE_FLUID(Kokkos::Serial)
#endif
#ifdef KOKKOS_ENABLE_OPENMP
KORTEX_INSTANTIATE_FLUID(Kokkos::OpenMP)
#endif
#ifdef KOKKOS_ENABLE_THREADS
KORTEX_INSTANTIATE_FLUID(Kokkos::Threads)
#endif
#ifdef KOKKOS_ENABLE_CUDA
KORTEX_INSTANTIATE_FLUID(Kokkos::Cuda)
#endif

#undef KORTEX_INSTANTIATE_FLUID

}  // namespace kortex::gpu
